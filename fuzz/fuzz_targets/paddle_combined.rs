//! A Paddle program and its combined parameters, packed as
//! `ferrolite_fuzz::exercise::packed_paddle::split_combined` reads them.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((program, params)) = ferrolite_fuzz::exercise::packed_paddle::split_combined(data) {
        let _ = ferrolite_fuzz::exercise::paddle_combined(program, params);
    }
});
