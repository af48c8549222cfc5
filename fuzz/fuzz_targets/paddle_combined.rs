//! A Paddle program and its combined parameters: the input is a little-endian u32 program
//! length, the program, then the parameters (see `ferrolite_fuzz::split_combined`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((program, params)) = ferrolite_fuzz::split_combined(data) {
        let _ = ferrolite::exercise::paddle_combined(program, params);
    }
});
