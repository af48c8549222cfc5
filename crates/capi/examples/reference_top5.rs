//! Prepares the C example's check for a model-zoo case: writes the case's input as raw float32
//! and prints the reference top-5 class indices.
//!
//!     cargo run --release -p ferrolite-capi --example reference_top5 -- CASE_DIR OUT.f32

use ferrolite::onnx::model::read_tensor_file;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [case, out] = args.as_slice() else {
        return Err("usage: reference_top5 CASE_DIR OUT.f32".into());
    };
    let set = PathBuf::from(case).join("test_data_set_0");
    let (_, input) = read_tensor_file(&set.join("input_0.pb"))?;
    std::fs::write(out, input.as_slice::<f32>().map(bytemuck_bytes)?)?;
    let (_, scores) = read_tensor_file(&set.join("output_0.pb"))?;
    let s = scores.to_f64_vec();
    let mut idx: Vec<usize> = (0..s.len()).collect();
    idx.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
    let top: Vec<String> = idx.iter().take(5).map(|i| i.to_string()).collect();
    println!("{}", top.join(" "));
    Ok(())
}

fn bytemuck_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
