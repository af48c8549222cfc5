/*
 * classify.c: run an image classifier through the ferrolite C API and print the top-5 classes.
 *
 *   classify MODEL.onnx [INPUT.f32]
 *
 * INPUT.f32 holds the input tensor as raw little-endian float32 values (NCHW). Without it, a
 * deterministic input is generated. Inputs with symbolic dimensions get 1x3x224x224.
 * Build and run: scripts/c-example (see docs/c-api.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferrolite.h"

#define CHECK(call)                                                                   \
    do {                                                                              \
        ferrolite_status st_ = (call);                                                \
        if (st_ != FERROLITE_OK) {                                                    \
            fprintf(stderr, "%s failed (%d): %s\n", #call, (int)st_, ferrolite_last_error()); \
            goto fail;                                                                \
        }                                                                             \
    } while (0)

static int read_file(const char *path, float *dst, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len < 0 || (size_t)len != bytes) {
        fprintf(stderr, "%s: %ld bytes, the input needs %zu\n", path, len, bytes);
        fclose(f);
        return -1;
    }
    size_t got = fread(dst, 1, bytes, f);
    fclose(f);
    return got == bytes ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s MODEL.onnx [INPUT.f32]\n", argv[0]);
        return 2;
    }
    int rc = 1;
    int initialized = 0;
    ferrolite_graph *graph = NULL;
    float *input = NULL, *scores = NULL;

    CHECK(init_ferrolite());
    initialized = 1;
    printf("ferrolite %s\n", ferrolite_version());
    CHECK(create_graph(argv[1], &graph));

    int n_in = 0, n_out = 0;
    CHECK(get_graph_input_node_number(graph, &n_in));
    CHECK(get_graph_output_node_number(graph, &n_out));
    if (n_in != 1 || n_out < 1) {
        fprintf(stderr, "expected one input and at least one output, got %d and %d\n", n_in, n_out);
        goto fail;
    }

    ferrolite_tensor *x = NULL;
    CHECK(get_graph_input_tensor(graph, 0, &x));
    const char *x_name = NULL;
    CHECK(get_tensor_name(x, &x_name));
    ferrolite_dtype dtype;
    CHECK(get_tensor_data_type(x, &dtype));
    if (dtype != FERROLITE_DT_FP32) {
        fprintf(stderr, "input '%s' is not float32\n", x_name);
        goto fail;
    }
    int dims[FERROLITE_MAX_SHAPE_DIM_NUM];
    int rank = 0;
    if (get_tensor_shape(x, dims, FERROLITE_MAX_SHAPE_DIM_NUM, &rank) != FERROLITE_OK) {
        /* Symbolic dimensions (e.g. the batch): pick the usual ImageNet shape. */
        int nchw[4] = {1, 3, 224, 224};
        CHECK(set_tensor_shape(x, nchw, 4));
        CHECK(get_tensor_shape(x, dims, FERROLITE_MAX_SHAPE_DIM_NUM, &rank));
    }
    printf("input '%s' shape [", x_name);
    for (int i = 0; i < rank; i++) printf(i ? ",%d" : "%d", dims[i]);
    printf("]\n");

    ferrolite_options opts = {.num_thread = 2, .precision = FERROLITE_PRECISION_FP32, .disabled_passes = NULL};
    CHECK(prerun_graph_multithread(graph, &opts));

    size_t in_bytes = 0;
    CHECK(get_tensor_buffer_size(x, &in_bytes));
    input = malloc(in_bytes);
    if (!input) goto fail;
    size_t n = in_bytes / sizeof(float);
    if (argc == 3) {
        if (read_file(argv[2], input, in_bytes) != 0) goto fail;
    } else {
        for (size_t i = 0; i < n; i++) input[i] = (float)((i * 7919u) % 255u) / 127.5f - 1.0f;
    }
    /* Zero-copy binding: the engine reads `input` at each run until it is unbound. */
    CHECK(set_tensor_buffer(x, (uint8_t *)input, in_bytes));

    CHECK(run_graph(graph, 1));

    ferrolite_tensor *y = NULL;
    CHECK(get_graph_output_tensor(graph, 0, &y));
    const char *y_name = NULL;
    CHECK(get_tensor_name(y, &y_name));
    size_t out_bytes = 0;
    CHECK(get_tensor_buffer_size(y, &out_bytes));
    scores = malloc(out_bytes);
    if (!scores) goto fail;
    CHECK(get_tensor_data(y, (uint8_t *)scores, out_bytes));
    size_t classes = out_bytes / sizeof(float);
    printf("output '%s': %zu scores\n", y_name, classes);

    printf("top-5:\n");
    int taken[5] = {-1, -1, -1, -1, -1};
    for (int k = 0; k < 5 && (size_t)k < classes; k++) {
        int best = -1;
        for (size_t c = 0; c < classes; c++) {
            int used = 0;
            for (int j = 0; j < k; j++) used |= taken[j] == (int)c;
            if (!used && (best < 0 || scores[c] > scores[best])) best = (int)c;
        }
        taken[k] = best;
        printf("  %d class %d score %.6f\n", k + 1, best, scores[best]);
    }

    CHECK(postrun_graph(graph));
    rc = 0;
fail:
    if (graph) destroy_graph(graph);
    if (initialized) release_ferrolite();
    free(input);
    free(scores);
    return rc;
}
