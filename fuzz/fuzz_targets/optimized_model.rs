//! ferrolite's optimized format (`ferrolite opt`): load, prerun (which checks the stored graph
//! and adopts the stored prepacked weights), one run on small zero inputs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ferrolite::exercise::optimized(data);
});
