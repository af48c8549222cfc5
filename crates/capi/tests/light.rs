//! What the light C library (`--no-default-features`: no frontends, no passes) can do: load an
//! optimized model (`ferrolite opt`) and run it, and refuse an ONNX file with a clear error.
//! It runs in the full build too. scripts/light-build runs it on the light one.

use ferrolite_c::ferrolite_status::*;
use ferrolite_c::*;
use std::ffi::{CStr, CString};
use std::ptr::{null, null_mut};

fn last_error() -> String {
    // SAFETY: ferrolite_last_error never returns NULL and the string lives until the next error.
    unsafe { CStr::from_ptr(ferrolite_last_error()) }
        .to_string_lossy()
        .into_owned()
}

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[test]
fn runs_an_optimized_model_and_names_what_it_lacks() {
    assert_eq!(init_ferrolite(), FERROLITE_OK);
    // The fixture: ppocr_cls optimized for the portable kernels and input 1x3x48x192.
    let flm = CString::new(format!("{ROOT}/tests/optimized/ppocr_cls-v1.flm")).unwrap();
    let mut g = null_mut();
    assert_eq!(
        create_graph(flm.as_ptr(), &mut g),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    let opts = ferrolite_options {
        num_thread: 1,
        precision: ferrolite_precision::FERROLITE_PRECISION_FP32 as i32,
        disabled_passes: null(),
    };
    assert_eq!(
        prerun_graph_multithread(g, &opts),
        FERROLITE_OK,
        "{}",
        last_error()
    );
    let (mut x, mut y) = (null_mut(), null_mut());
    assert_eq!(get_graph_input_tensor(g, 0, &mut x), FERROLITE_OK);
    assert_eq!(get_graph_output_tensor(g, 0, &mut y), FERROLITE_OK);
    let data: Vec<u8> = (0..3 * 48 * 192)
        .flat_map(|i| (((i % 17) as f32) / 17.0).to_ne_bytes())
        .collect();
    assert_eq!(set_tensor_data(x, data.as_ptr(), data.len()), FERROLITE_OK);
    assert_eq!(run_graph(g, 1), FERROLITE_OK, "{}", last_error());
    let mut out = [0u8; 8];
    assert_eq!(get_tensor_data(y, out.as_mut_ptr(), 8), FERROLITE_OK);
    let p: Vec<f32> = out
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    // Two class probabilities from a softmax.
    assert!((p[0] + p[1] - 1.0).abs() < 1e-5, "{p:?}");
    assert!(p.iter().all(|&v| (0.0..=1.0).contains(&v)), "{p:?}");
    assert_eq!(destroy_graph(g), FERROLITE_OK);

    let onnx = CString::new(format!("{ROOT}/models/ppocr_cls/model.onnx")).unwrap();
    let mut g = null_mut();
    let status = create_graph(onnx.as_ptr(), &mut g);
    if cfg!(feature = "onnx") {
        assert_eq!(status, FERROLITE_OK, "{}", last_error());
        assert_eq!(destroy_graph(g), FERROLITE_OK);
    } else {
        assert_eq!(status, FERROLITE_ERR_MODEL);
        assert!(
            last_error().contains("no ONNX frontend"),
            "{}",
            last_error()
        );
    }
    assert_eq!(release_ferrolite(), FERROLITE_OK);
}
