//! The C API called as C would: lifecycle, metadata, data in and out, and every misuse giving
//! an error code and a message instead of a crash.

use ferrolite_c::ferrolite_status::*;
use ferrolite_c::*;
use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

const MODEL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../models/ppocr_cls/model.onnx"
);

fn last_error() -> String {
    // SAFETY: ferrolite_last_error never returns NULL and the string lives until the next error.
    unsafe { CStr::from_ptr(ferrolite_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn assert_err(status: ferrolite_status, want: ferrolite_status, needle: &str) {
    assert_eq!(status, want, "message: {}", last_error());
    let msg = last_error();
    assert!(
        msg.contains(needle),
        "message {msg:?} should mention {needle:?}"
    );
}

fn create() -> *mut ferrolite_graph {
    assert_eq!(init_ferrolite(), FERROLITE_OK);
    let path = CString::new(MODEL).unwrap();
    let mut g = null_mut();
    assert_eq!(
        create_graph(path.as_ptr(), &mut g),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    assert!(!g.is_null());
    g
}

fn input(g: *mut ferrolite_graph) -> *mut ferrolite_tensor {
    let mut t = null_mut();
    assert_eq!(get_graph_input_tensor(g, 0, &mut t), FERROLITE_OK);
    t
}

fn output(g: *mut ferrolite_graph) -> *mut ferrolite_tensor {
    let mut t = null_mut();
    assert_eq!(get_graph_output_tensor(g, 0, &mut t), FERROLITE_OK);
    t
}

fn finish(g: *mut ferrolite_graph) {
    assert_eq!(destroy_graph(g), FERROLITE_OK);
    assert_eq!(release_ferrolite(), FERROLITE_OK);
}

fn bytes_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The Rust API's answer for the same input.
fn reference(shape: &[usize], data: &[f32]) -> Vec<f32> {
    let s = ferrolite::Session::from_path(MODEL, ferrolite::SessionOptions::default()).unwrap();
    let v = ferrolite::TensorView::from_slice(shape, data).unwrap();
    let out = s.run_views(&[("x", v)]).unwrap();
    let v = out
        .iter()
        .next()
        .unwrap()
        .1
        .as_slice::<f32>()
        .unwrap()
        .to_vec();
    v
}

#[test]
fn full_lifecycle_matches_the_rust_api() {
    let g = create();
    let (mut n_in, mut n_out) = (0, 0);
    assert_eq!(get_graph_input_node_number(g, &mut n_in), FERROLITE_OK);
    assert_eq!(get_graph_output_node_number(g, &mut n_out), FERROLITE_OK);
    assert_eq!((n_in, n_out), (1, 1));
    let x = input(g);
    let mut name: *const c_char = null();
    assert_eq!(get_tensor_name(x, &mut name), FERROLITE_OK);
    // SAFETY: the name is owned by the graph, alive until destroy_graph.
    assert_eq!(unsafe { CStr::from_ptr(name) }.to_str().unwrap(), "x");
    let mut by_name = null_mut();
    assert_eq!(get_graph_tensor(g, name, &mut by_name), FERROLITE_OK);
    assert_eq!(by_name, x, "the same tensor has one handle");
    let mut dt = ferrolite_dtype::FERROLITE_DT_INT8;
    assert_eq!(get_tensor_data_type(x, &mut dt), FERROLITE_OK);
    assert_eq!(dt, ferrolite_dtype::FERROLITE_DT_FP32);

    // Symbolic H and W: the shape is unknown until set.
    let mut dims = [0i32; 8];
    let mut rank = 0;
    assert_err(
        get_tensor_shape(x, dims.as_mut_ptr(), 8, &mut rank),
        FERROLITE_ERR_WRONG_STATE,
        "not known",
    );
    assert_eq!(
        set_tensor_shape(x, [1, 3, 48, 96].as_ptr(), 4),
        FERROLITE_OK
    );
    assert_eq!(
        get_tensor_shape(x, dims.as_mut_ptr(), 8, &mut rank),
        FERROLITE_OK
    );
    assert_eq!(&dims[..rank as usize], &[1, 3, 48, 96]);

    let opts = ferrolite_options {
        num_thread: 2,
        precision: ferrolite_precision::FERROLITE_PRECISION_FP32 as i32,
        disabled_passes: null(),
    };
    assert_eq!(
        prerun_graph_multithread(g, &opts),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    let y = output(g);
    assert_eq!(
        get_tensor_shape(y, dims.as_mut_ptr(), 8, &mut rank),
        FERROLITE_OK
    );
    assert_eq!(&dims[..rank as usize], &[1, 2]);

    let data: Vec<f32> = (0..3 * 48 * 96)
        .map(|i| ((i % 13) as f32 - 6.0) / 6.0)
        .collect();
    let want = reference(&[1, 3, 48, 96], &data);

    // Copy in, copy out.
    let inb = bytes_of(&data);
    assert_eq!(set_tensor_data(x, inb.as_ptr(), inb.len()), FERROLITE_OK);
    assert_eq!(run_graph(g, 1), FERROLITE_OK, "{}", last_error());
    let mut out = vec![0u8; 8];
    assert_eq!(
        get_tensor_data(y, out.as_mut_ptr(), out.len()),
        FERROLITE_OK
    );
    assert_eq!(floats(&out), want);

    // Bound buffers: the input is read at run time, the output written at run time.
    let mut inbuf = bytes_of(&vec![0.0f32; data.len()]);
    let mut outbuf = vec![0u8; 8];
    assert_eq!(
        set_tensor_buffer(x, inbuf.as_mut_ptr(), inbuf.len()),
        FERROLITE_OK
    );
    assert_eq!(
        set_tensor_buffer(y, outbuf.as_mut_ptr(), outbuf.len()),
        FERROLITE_OK
    );
    inbuf.copy_from_slice(&inb); // written after binding: the run must see it
    assert_eq!(run_graph(g, 1), FERROLITE_OK, "{}", last_error());
    assert_eq!(floats(&outbuf), want);

    assert_eq!(postrun_graph(g), FERROLITE_OK);
    assert_err(run_graph(g, 1), FERROLITE_ERR_WRONG_STATE, "prerun");
    finish(g);
}

/// Runs the classifier on `device` through the C API and returns its scores.
fn run_on(device: &str, data: &[f32]) -> Vec<f32> {
    let g = create();
    let dev = CString::new(device).unwrap();
    assert_eq!(
        set_graph_device(g, dev.as_ptr()),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    let x = input(g);
    assert_eq!(
        set_tensor_shape(x, [1, 3, 48, 96].as_ptr(), 4),
        FERROLITE_OK
    );
    assert_eq!(
        prerun_graph_multithread(g, null()),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    let inb = bytes_of(data);
    assert_eq!(set_tensor_data(x, inb.as_ptr(), inb.len()), FERROLITE_OK);
    assert_eq!(run_graph(g, 1), FERROLITE_OK, "{}", last_error());
    let mut out = vec![0u8; 8];
    assert_eq!(
        get_tensor_data(output(g), out.as_mut_ptr(), out.len()),
        FERROLITE_OK
    );
    finish(g);
    floats(&out)
}

#[test]
fn device_option_places_the_graph_and_falls_back() {
    let data: Vec<f32> = (0..3 * 48 * 96)
        .map(|i| ((i % 7) as f32 - 3.0) / 3.0)
        .collect();
    let want = reference(&[1, 3, 48, 96], &data);
    let close = |got: &[f32]| got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-4);
    for device in [
        "cpu",
        "fake",
        "fake:ops=Conv+Relu",
        "fake:fail=run",
        "fake:fail=compile",
    ] {
        let got = run_on(device, &data);
        assert!(close(&got), "{device}: {got:?} vs {want:?}");
    }
    let g = create();
    let bad = CString::new("tpu").unwrap();
    assert_err(
        set_graph_device(g, bad.as_ptr()),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "unknown device",
    );
    assert_err(
        set_graph_device(g, null()),
        FERROLITE_ERR_NULL_POINTER,
        "device",
    );
    finish(g);
}

#[test]
fn from_memory_with_named_or_detected_format() {
    assert_eq!(init_ferrolite(), FERROLITE_OK);
    let bytes = std::fs::read(MODEL).unwrap();
    for fmt in [None, Some("onnx"), Some("")] {
        let f = fmt.map(|f| CString::new(f).unwrap());
        let mut g = null_mut();
        let st = create_graph_from_memory(
            f.as_ref().map_or(null(), |f| f.as_ptr()),
            bytes.as_ptr(),
            bytes.len(),
            &mut g,
        );
        assert_eq!(st, FERROLITE_OK, "{fmt:?}: {}", last_error());
        assert_eq!(destroy_graph(g), FERROLITE_OK);
    }
    let paddle = CString::new("paddle").unwrap();
    let mut g = null_mut();
    assert_err(
        create_graph_from_memory(paddle.as_ptr(), bytes.as_ptr(), bytes.len(), &mut g),
        FERROLITE_ERR_MODEL,
        "not from one buffer",
    );
    assert_err(
        create_graph_from_memory(null(), b"garbage".as_ptr(), 7, &mut g),
        FERROLITE_ERR_MODEL,
        "format",
    );
    let onnx = CString::new("onnx").unwrap();
    assert_err(
        create_graph_from_memory(onnx.as_ptr(), b"\x08garbage".as_ptr(), 8, &mut g),
        FERROLITE_ERR_MODEL,
        "",
    );
    assert!(g.is_null(), "no graph on failure");
    assert_eq!(release_ferrolite(), FERROLITE_OK);
}

/// ferrolite's optimized format (`ferrolite opt`), from a file and from memory, detected by its
/// magic: the same outputs as the source model, bit for bit.
#[test]
fn optimized_models_load_from_file_and_memory() {
    assert_eq!(init_ferrolite(), FERROLITE_OK);
    let flm = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/optimized/ppocr_cls-v2.flm"
    );
    let bytes = std::fs::read(flm).unwrap();
    let data: Vec<f32> = (0..3 * 48 * 192)
        .map(|i| ((i % 11) as f32) / 11.0)
        .collect();
    // The source model on the kernels the file was written for.
    let source = ferrolite::Session::from_path(
        MODEL,
        ferrolite::SessionOptions::default().with_isa("portable"),
    )
    .unwrap();
    let v = ferrolite::TensorView::from_slice(&[1, 3, 48, 192], &data).unwrap();
    let want: Vec<f32> = source
        .run_views(&[("x", v)])
        .unwrap()
        .iter()
        .next()
        .unwrap()
        .1
        .as_slice::<f32>()
        .unwrap()
        .to_vec();
    let name = CString::new(flm).unwrap();
    let ferrolite_format = CString::new("ferrolite").unwrap();
    for from_memory in [false, true] {
        let mut g = null_mut();
        let st = if from_memory {
            create_graph_from_memory(
                ferrolite_format.as_ptr(),
                bytes.as_ptr(),
                bytes.len(),
                &mut g,
            )
        } else {
            create_graph(name.as_ptr(), &mut g)
        };
        assert_eq!(st, FERROLITE_OK, "{}", last_error());
        let opts = ferrolite_options {
            num_thread: 1,
            precision: ferrolite_precision::FERROLITE_PRECISION_FP32 as i32,
            disabled_passes: null(),
        };
        // The input's shape is the one the file was optimized for.
        assert_eq!(
            prerun_graph_multithread(g, &opts),
            FERROLITE_OK,
            "{}",
            last_error()
        );
        let inb = bytes_of(&data);
        assert_eq!(
            set_tensor_data(input(g), inb.as_ptr(), inb.len()),
            FERROLITE_OK
        );
        assert_eq!(run_graph(g, 1), FERROLITE_OK, "{}", last_error());
        let mut out = vec![0u8; 8];
        assert_eq!(
            get_tensor_data(output(g), out.as_mut_ptr(), 8),
            FERROLITE_OK
        );
        assert_eq!(floats(&out), want, "from memory: {from_memory}");
        assert_eq!(destroy_graph(g), FERROLITE_OK);
    }
    let mut g = null_mut();
    assert_err(
        create_graph_from_memory(null(), bytes.as_ptr(), 200, &mut g),
        FERROLITE_ERR_MODEL,
        "outside the file",
    );
    assert_eq!(release_ferrolite(), FERROLITE_OK);
}

#[test]
fn wrong_order_is_an_error() {
    let g = create();
    let x = input(g);
    let y = output(g);
    assert_err(run_graph(g, 1), FERROLITE_ERR_WRONG_STATE, "before prerun");
    assert_err(postrun_graph(g), FERROLITE_ERR_WRONG_STATE, "before prerun");
    // Prerun needs the symbolic dims set.
    assert_err(
        prerun_graph_multithread(g, null()),
        FERROLITE_ERR_WRONG_STATE,
        "set_tensor_shape",
    );
    assert_eq!(
        set_tensor_shape(x, [1, 3, 48, 64].as_ptr(), 4),
        FERROLITE_OK
    );
    assert_eq!(prerun_graph_multithread(g, null()), FERROLITE_OK);
    // Run without input data.
    assert_err(run_graph(g, 1), FERROLITE_ERR_WRONG_STATE, "no data");
    // Output data before any run.
    let mut out = [0u8; 8];
    assert_err(
        get_tensor_data(y, out.as_mut_ptr(), 8),
        FERROLITE_ERR_WRONG_STATE,
        "no data",
    );
    // A shape change invalidates the prerun.
    assert_eq!(
        set_tensor_shape(x, [1, 3, 48, 32].as_ptr(), 4),
        FERROLITE_OK
    );
    let data = bytes_of(&vec![0.5f32; 3 * 48 * 32]);
    assert_eq!(set_tensor_data(x, data.as_ptr(), data.len()), FERROLITE_OK);
    assert_err(run_graph(g, 1), FERROLITE_ERR_WRONG_STATE, "prerun");
    // Data into an output.
    assert_err(
        set_tensor_data(y, out.as_ptr(), 8),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "output",
    );
    finish(g);

    // Destroyed graph and its tensors.
    assert_err(
        run_graph(g, 1),
        FERROLITE_ERR_INVALID_HANDLE,
        "invalid graph",
    );
    assert_err(
        destroy_graph(g),
        FERROLITE_ERR_INVALID_HANDLE,
        "invalid graph",
    );
    let mut n = 0;
    assert_err(
        get_graph_input_node_number(g, &mut n),
        FERROLITE_ERR_INVALID_HANDLE,
        "invalid graph",
    );
    assert_err(
        set_tensor_shape(x, [1].as_ptr(), 1),
        FERROLITE_ERR_INVALID_HANDLE,
        "invalid tensor",
    );
    // A pointer that never was a handle.
    let mut fake = 0u64;
    assert_err(
        run_graph(&mut fake as *mut u64 as *mut ferrolite_graph, 1),
        FERROLITE_ERR_INVALID_HANDLE,
        "invalid graph",
    );
}

#[test]
fn null_pointers_are_errors() {
    let g = create();
    let x = input(g);
    let mut n = 0;
    assert_err(
        get_graph_input_node_number(null(), &mut n),
        FERROLITE_ERR_NULL_POINTER,
        "graph is NULL",
    );
    assert_err(
        get_graph_input_node_number(g, null_mut()),
        FERROLITE_ERR_NULL_POINTER,
        "NULL",
    );
    assert_err(
        create_graph(null(), null_mut()),
        FERROLITE_ERR_NULL_POINTER,
        "NULL",
    );
    let path = CString::new(MODEL).unwrap();
    assert_err(
        create_graph(path.as_ptr(), null_mut()),
        FERROLITE_ERR_NULL_POINTER,
        "NULL",
    );
    assert_err(
        get_graph_input_tensor(g, 0, null_mut()),
        FERROLITE_ERR_NULL_POINTER,
        "NULL",
    );
    assert_err(
        get_graph_tensor(g, null(), null_mut()),
        FERROLITE_ERR_NULL_POINTER,
        "name is NULL",
    );
    assert_err(
        get_tensor_name(null(), null_mut()),
        FERROLITE_ERR_NULL_POINTER,
        "tensor is NULL",
    );
    assert_err(
        set_tensor_shape(x, null(), 4),
        FERROLITE_ERR_NULL_POINTER,
        "dims is NULL",
    );
    assert_eq!(
        set_tensor_shape(x, [1, 3, 48, 16].as_ptr(), 4),
        FERROLITE_OK
    );
    assert_err(
        set_tensor_data(x, null(), 3 * 48 * 16 * 4),
        FERROLITE_ERR_NULL_POINTER,
        "data is NULL",
    );
    assert_err(
        set_tensor_buffer(x, null_mut(), 3 * 48 * 16 * 4),
        FERROLITE_ERR_NULL_POINTER,
        "buffer is NULL",
    );
    assert_err(run_graph(null_mut(), 1), FERROLITE_ERR_NULL_POINTER, "NULL");
    let mut dt = ferrolite_dtype::FERROLITE_DT_FP32;
    assert_err(
        get_tensor_data_type(null(), &mut dt),
        FERROLITE_ERR_NULL_POINTER,
        "NULL",
    );
    finish(g);
}

#[test]
fn wrong_sizes_and_arguments_are_errors() {
    let g = create();
    let x = input(g);
    let mut t = null_mut();
    assert_err(
        get_graph_input_tensor(g, 1, &mut t),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "out of range",
    );
    assert_err(
        get_graph_output_tensor(g, -1, &mut t),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "out of range",
    );
    let bad = CString::new("nope").unwrap();
    assert_err(
        get_graph_tensor(g, bad.as_ptr(), &mut t),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "no input or output named 'nope'",
    );
    // Wrong rank, a wrong fixed dim, negative dims, too many dims.
    assert_err(
        set_tensor_shape(x, [1, 3, 48].as_ptr(), 3),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "rank",
    );
    assert_err(
        set_tensor_shape(x, [1, 4, 48, 16].as_ptr(), 4),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "dimension 1",
    );
    assert_err(
        set_tensor_shape(x, [1, 3, -48, 16].as_ptr(), 4),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "negative",
    );
    assert_err(
        set_tensor_shape(x, [1; 9].as_ptr(), 9),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "dim_num",
    );
    // Sizes before the shape is known.
    let buf = [0u8; 16];
    assert_err(
        set_tensor_data(x, buf.as_ptr(), 16),
        FERROLITE_ERR_WRONG_STATE,
        "not known",
    );
    assert_eq!(
        set_tensor_shape(x, [1, 3, 48, 16].as_ptr(), 4),
        FERROLITE_OK
    );
    let mut size = 0usize;
    assert_eq!(get_tensor_buffer_size(x, &mut size), FERROLITE_OK);
    assert_eq!(size, 3 * 48 * 16 * 4);
    let mut big = vec![0u8; size + 4];
    assert_err(
        set_tensor_data(x, big.as_ptr(), size + 4),
        FERROLITE_ERR_BUFFER_SIZE,
        "bytes",
    );
    assert_err(
        set_tensor_buffer(x, big.as_mut_ptr(), size - 4),
        FERROLITE_ERR_BUFFER_SIZE,
        "bytes",
    );
    let mut dims = [0i32; 2];
    let mut rank = 0;
    assert_err(
        get_tensor_shape(x, dims.as_mut_ptr(), 2, &mut rank),
        FERROLITE_ERR_BUFFER_SIZE,
        "max_dim",
    );
    // Options.
    let mut opts = ferrolite_options {
        num_thread: 1,
        precision: 3,
        disabled_passes: null(),
    };
    assert_err(
        prerun_graph_multithread(g, &opts),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "precision",
    );
    opts.precision = 0;
    opts.num_thread = -2;
    assert_err(
        prerun_graph_multithread(g, &opts),
        FERROLITE_ERR_INVALID_ARGUMENT,
        "negative",
    );
    let passes = CString::new("dead-code, remove-identity").unwrap();
    opts.num_thread = 1;
    opts.disabled_passes = passes.as_ptr();
    assert_eq!(
        prerun_graph_multithread(g, &opts),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    let y = output(g);
    let mut small = [0u8; 4];
    assert_err(
        get_tensor_data(y, small.as_mut_ptr(), 4),
        FERROLITE_ERR_BUFFER_SIZE,
        "8 bytes",
    );
    finish(g);
}

#[test]
fn create_needs_init_and_missing_files_are_errors() {
    // Other tests may hold an init concurrently; use a thread-local view of the count only
    // through the API: with an init held, a missing file is a model error.
    assert_eq!(init_ferrolite(), FERROLITE_OK);
    let path = CString::new("/nonexistent/model.onnx").unwrap();
    let mut g = null_mut();
    assert_err(
        create_graph(path.as_ptr(), &mut g),
        FERROLITE_ERR_MODEL,
        "/nonexistent/model.onnx",
    );
    assert_eq!(release_ferrolite(), FERROLITE_OK);
}

#[test]
fn last_error_is_per_thread() {
    assert_eq!(run_graph(null_mut(), 1), FERROLITE_ERR_NULL_POINTER);
    let here = last_error();
    std::thread::spawn(|| assert_eq!(last_error(), ""))
        .join()
        .unwrap();
    assert_eq!(last_error(), here);
    // SAFETY: static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(ferrolite_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn memory_limit_refuses_prerun_until_lifted() {
    let g = create();
    let x = input(g);
    assert_eq!(
        set_tensor_shape(x, [1, 3, 48, 96].as_ptr(), 4),
        FERROLITE_OK
    );
    assert_eq!(set_graph_memory_limit(g, 100_000), FERROLITE_OK);
    assert_err(
        prerun_graph_multithread(g, null()),
        FERROLITE_ERR_RUNTIME,
        "memory limit",
    );
    assert_eq!(run_graph(g, 1), FERROLITE_ERR_WRONG_STATE);
    assert_eq!(set_graph_memory_limit(g, 0), FERROLITE_OK);
    assert_eq!(
        prerun_graph_multithread(g, null()),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    assert_err(
        set_graph_memory_limit(null_mut(), 1),
        FERROLITE_ERR_NULL_POINTER,
        "graph",
    );
    finish(g);
}

/// Runs per thread of the C soak: `FERROLITE_SOAK_RUNS` (default 200).
fn soak_runs(default: usize) -> usize {
    std::env::var("FERROLITE_SOAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn graphs_on_eight_threads_match_the_rust_api_bit_for_bit() {
    // Two widths and two inputs per width; every answer computed once, up front.
    let widths = [32usize, 96];
    let inputs: Vec<Vec<Vec<f32>>> = widths
        .iter()
        .map(|&w| {
            (0..2)
                .map(|k| {
                    (0..3 * 48 * w)
                        .map(|i| ((i * (7 + k)) % 23) as f32 / 11.0 - 1.0)
                        .collect()
                })
                .collect()
        })
        .collect();
    let answers: Vec<Vec<Vec<f32>>> = widths
        .iter()
        .zip(&inputs)
        .map(|(&w, per)| per.iter().map(|d| reference(&[1, 3, 48, w], d)).collect())
        .collect();
    let runs = soak_runs(200);
    std::thread::scope(|s| {
        for t in 0..8usize {
            let (inputs, answers) = (&inputs, &answers);
            s.spawn(move || {
                let g = create();
                let x = input(g);
                let mut prepared_width = None;
                for r in 0..runs {
                    // The width changes every 25 runs, so prerun is redone while others run.
                    let wi = (t + r / 25) % widths.len();
                    if prepared_width != Some(wi) {
                        let shape = [1, 3, 48, widths[wi] as i32];
                        assert_eq!(set_tensor_shape(x, shape.as_ptr(), 4), FERROLITE_OK);
                        assert_eq!(
                            prerun_graph_multithread(g, null()),
                            FERROLITE_OK,
                            "{}",
                            last_error()
                        );
                        prepared_width = Some(wi);
                    }
                    let k = (t + r) % 2;
                    let inb = bytes_of(&inputs[wi][k]);
                    assert_eq!(set_tensor_data(x, inb.as_ptr(), inb.len()), FERROLITE_OK);
                    assert_eq!(run_graph(g, 1), FERROLITE_OK, "{}", last_error());
                    let mut out = vec![0u8; 8];
                    assert_eq!(
                        get_tensor_data(output(g), out.as_mut_ptr(), out.len()),
                        FERROLITE_OK
                    );
                    let got = floats(&out);
                    let want = &answers[wi][k];
                    assert!(
                        got.iter()
                            .zip(want)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "thread {t} run {r}: {got:?} vs {want:?}"
                    );
                }
                finish(g);
            });
        }
    });
}

/// A graph of a model in tests/models (written by crates/ferrolite/tests/control_flow.rs).
fn open_fixture(name: &str) -> *mut ferrolite_graph {
    let path = format!("{}/../../tests/models/{name}", env!("CARGO_MANIFEST_DIR"));
    let path = CString::new(path).unwrap();
    assert_eq!(init_ferrolite(), FERROLITE_OK);
    let mut g = null_mut();
    assert_eq!(
        create_graph(path.as_ptr(), &mut g),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    g
}

/// An If inside a Loop whose trip count depends on the data (tests/models/loop_if.onnx, written
/// by crates/ferrolite/tests/control_flow.rs): the scan output's length is known after the run.
#[test]
fn a_loop_with_a_data_dependent_trip_count_runs() {
    let g = open_fixture("loop_if.onnx");
    let tensor = |name: &str| {
        let name = CString::new(name).unwrap();
        let mut t = null_mut();
        assert_eq!(get_graph_tensor(g, name.as_ptr(), &mut t), FERROLITE_OK);
        t
    };
    let (x, flag, limit) = (tensor("x"), tensor("flag"), tensor("limit"));
    let (sum, iterations) = (tensor("sum"), tensor("iterations"));
    let mut dt = ferrolite_dtype::FERROLITE_DT_FP32;
    assert_eq!(get_tensor_data_type(flag, &mut dt), FERROLITE_OK);
    assert_eq!(dt, ferrolite_dtype::FERROLITE_DT_BOOL);
    let opts = ferrolite_options {
        num_thread: 1,
        precision: ferrolite_precision::FERROLITE_PRECISION_FP32_ACCURATE as i32,
        disabled_passes: null(),
    };
    assert_eq!(
        prerun_graph_multithread(g, &opts),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    let xb = bytes_of(&[1.5, -2.0]);
    assert_eq!(set_tensor_data(x, xb.as_ptr(), xb.len()), FERROLITE_OK);
    for (f, lim, want_sum, n) in [
        (1u8, 10.0f32, [4.5f32, -6.0], 3usize),
        (0, 20.0, [-9.0, 12.0], 6),
    ] {
        assert_eq!(set_tensor_data(flag, &f, 1), FERROLITE_OK);
        let lb = bytes_of(&[lim]);
        assert_eq!(set_tensor_data(limit, lb.as_ptr(), lb.len()), FERROLITE_OK);
        assert_eq!(run_graph(g, 1), FERROLITE_OK, "{}", last_error());
        let mut out = vec![0u8; 8];
        assert_eq!(
            get_tensor_data(sum, out.as_mut_ptr(), out.len()),
            FERROLITE_OK
        );
        assert_eq!(floats(&out), want_sum);
        let (mut dims, mut rank) = ([0i32; 4], 0);
        assert_eq!(
            get_tensor_shape(iterations, dims.as_mut_ptr(), 4, &mut rank),
            FERROLITE_OK,
            "{}",
            last_error()
        );
        assert_eq!(&dims[..rank as usize], &[n as i32]);
        let mut out = vec![0u8; 8 * n];
        assert_eq!(
            get_tensor_data(iterations, out.as_mut_ptr(), out.len()),
            FERROLITE_OK,
            "{}",
            last_error()
        );
        let got: Vec<i64> = out
            .chunks_exact(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, (0..n as i64).collect::<Vec<_>>());
    }
    finish(g);
}

/// A model that takes and gives sequences (tests/models/sequences.onnx) loads; the C API names
/// their type and refuses to exchange them as bytes, saying why.
#[test]
fn sequences_are_named_and_refused_clearly() {
    let g = open_fixture("sequences.onnx");
    for name in ["items", "pieces"] {
        let c = CString::new(name).unwrap();
        let mut t = null_mut();
        assert_eq!(get_graph_tensor(g, c.as_ptr(), &mut t), FERROLITE_OK);
        let mut dt = ferrolite_dtype::FERROLITE_DT_FP32;
        assert_eq!(get_tensor_data_type(t, &mut dt), FERROLITE_OK);
        assert_eq!(dt, ferrolite_dtype::FERROLITE_DT_SEQUENCE, "{name}");
        let mut b = [0u8; 8];
        let status = if name == "items" {
            set_tensor_data(t, b.as_ptr(), b.len())
        } else {
            get_tensor_data(t, b.as_mut_ptr(), b.len())
        };
        assert_err(
            status,
            FERROLITE_ERR_INVALID_ARGUMENT,
            &format!("'{name}' is a sequence value"),
        );
    }
    finish(g);
}
