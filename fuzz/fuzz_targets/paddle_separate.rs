//! A Paddle program and one parameter file per variable, packed as
//! `ferrolite_fuzz::exercise::packed_paddle::split_separate` reads them.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((program, files)) = ferrolite_fuzz::exercise::packed_paddle::split_separate(data) {
        let _ = ferrolite_fuzz::exercise::paddle_separate(program, &files);
    }
});
