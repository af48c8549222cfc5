//! Input files as the CLI reads them: `.npy`, or a serialized ONNX TensorProto.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferrolite_fuzz::exercise::tensor_file(data);
});
