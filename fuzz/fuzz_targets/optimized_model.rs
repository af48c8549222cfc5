//! ferrolite's optimized format (`ferrolite opt`): load, prerun (which checks the stored graph
//! and adopts the stored prepacked weights), one run on small zero inputs. The graph section's
//! checksum is made right first, so that mutations of the graph reach its decoder.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut file = data.to_vec();
    ferrolite::core::format::reseal(&mut file);
    let _ = ferrolite_fuzz::exercise::optimized(&file);
});
