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
    let flm = CString::new(format!("{ROOT}/tests/optimized/ppocr_cls-v2.flm")).unwrap();
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

/// A build tailored to other ops (scripts/light-build sets FERROLITE_OPS to the fixture's) loads
/// no model that needs an op it left out, and says which op.
#[test]
fn a_model_needing_an_op_left_out_is_refused_by_name() {
    use ferrolite::core::ops::codec::built;
    use ferrolite::core::ops::misc::det::Det;
    use ferrolite::core::{format, DType, DeclaredType, Dim, Graph};

    let mut g = Graph::new();
    let x = g.add_value("x");
    g.value_mut(x).declared = Some(DeclaredType {
        dtype: DType::F32,
        shape: Some(vec![Dim::Fixed(2), Dim::Fixed(2)]),
    });
    g.inputs.push(x);
    let y = g
        .add_op("det", std::sync::Arc::new(Det), vec![Some(x)], 1)
        .unwrap();
    g.outputs.push(y[0]);
    let info = format::ModelInfo {
        source_format: "onnx".into(),
        producer: "light test".into(),
        opsets: vec![],
        metadata: vec![],
    };
    let bytes = format::write(&g, &info, None, "light test").unwrap();
    let path = std::env::temp_dir().join(format!("ferrolite-light-{}.flm", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let c_path = CString::new(path.to_str().unwrap()).unwrap();

    assert_eq!(init_ferrolite(), FERROLITE_OK);
    let mut g = null_mut();
    let status = create_graph(c_path.as_ptr(), &mut g);
    let error = last_error();
    std::fs::remove_file(&path).unwrap();
    if built("Det") {
        assert_eq!(status, FERROLITE_OK, "{error}");
        assert_eq!(destroy_graph(g), FERROLITE_OK);
    } else {
        assert_eq!(status, FERROLITE_ERR_MODEL);
        assert!(error.contains("'Det' is not in this build"), "{error}");
    }
    assert_eq!(release_ferrolite(), FERROLITE_OK);
}
