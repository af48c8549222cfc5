//! Structure-aware ONNX fuzzing: inputs are whole models (the corpus starts from valid zoo and
//! conformance models), and the mutator edits them as models, not bytes: attributes, dims,
//! dtypes, initializer sizes, node order, cycles (`ferrolite_fuzz::mutate`). Inputs that do
//! not decode fall back to libFuzzer's byte mutations.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferrolite_fuzz::exercise::onnx(data);
});

libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    match ferrolite_fuzz::mutate(&data[..size], seed) {
        Some(bytes) if bytes.len() <= max_size => {
            data[..bytes.len()].copy_from_slice(&bytes);
            bytes.len()
        }
        _ => libfuzzer_sys::fuzzer_mutate(data, size, max_size),
    }
});
