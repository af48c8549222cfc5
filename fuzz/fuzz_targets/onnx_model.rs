//! ONNX model bytes: load, prerun, one run on small zero inputs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferrolite_fuzz::exercise::onnx(data);
});
