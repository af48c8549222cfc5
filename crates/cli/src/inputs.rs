//! Input tensors for the CLI: from files, or seeded random data.

use ferrolite::{DType, Error, IoInfo, Result, Session, Tensor};
use std::path::Path;

/// Reads a tensor from `.npy` or an ONNX TensorProto `.pb` file.
pub fn read_tensor(path: &Path) -> Result<Tensor> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => ferrolite::onnx::npy::read_npy_file(path),
        _ => Ok(ferrolite::onnx::model::read_tensor_file(path)?.1),
    }
}

/// Parses `1x3x224x224` (or `1,3,224,224`); an empty string or `scalar` is rank 0.
pub fn parse_dims(s: &str) -> Result<Vec<usize>> {
    if s.is_empty() || s == "scalar" {
        return Ok(Vec::new());
    }
    s.split(['x', ','])
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .map_err(|_| Error::Other(format!("'{s}' is not a shape like 1x3x224x224")))
        })
        .collect()
}

/// Splits `NAME=VALUE`.
pub fn split_named(s: &str) -> Option<(&str, &str)> {
    s.split_once('=')
}

fn find_input<'a>(session: &'a Session, name: &str) -> Result<&'a IoInfo> {
    session
        .inputs()
        .iter()
        .find(|i| i.name == name)
        .ok_or_else(|| Error::Input {
            name: name.to_string(),
            message: "the model has no such input".into(),
        })
}

/// Input shapes from `NAME=DIMS` arguments, declared shapes otherwise (symbolic dims = 1).
pub fn shapes_for(session: &Session, shape_args: &[String]) -> Result<Vec<Vec<usize>>> {
    let mut shapes = session.default_shapes();
    for arg in shape_args {
        let (name, dims) = split_named(arg)
            .ok_or_else(|| Error::Other(format!("--shape '{arg}' is not NAME=DIMS")))?;
        find_input(session, name)?;
        let i = session
            .inputs()
            .iter()
            .position(|x| x.name == name)
            .unwrap_or_default();
        shapes[i] = parse_dims(dims)?;
    }
    Ok(shapes)
}

/// A small deterministic generator (xorshift64*), so random inputs repeat across runs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Random data: floats uniform in [-1, 1), integers in [0, 10), bools fair.
pub fn random_tensor(dtype: DType, shape: &[usize], rng: &mut Rng) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n)
        .map(|_| {
            if dtype.is_float() {
                rng.next_f64() * 2.0 - 1.0
            } else if dtype == DType::Bool {
                (rng.next_u64() & 1) as f64
            } else {
                (rng.next_u64() % 10) as f64
            }
        })
        .collect();
    Tensor::from_vec(shape, values)?.cast(dtype)
}

/// Inputs for `run`: files named on the command line, random data for the rest.
pub fn collect_inputs(
    session: &Session,
    input_args: &[String],
    shape_args: &[String],
    seed: u64,
) -> Result<Vec<(String, Tensor, String)>> {
    let shapes = shapes_for(session, shape_args)?;
    let mut given: Vec<(String, Tensor)> = Vec::new();
    for arg in input_args {
        let (name, file) = match split_named(arg) {
            Some((n, f)) => {
                find_input(session, n)?;
                (n.to_string(), f)
            }
            None => {
                // A bare file goes to the first input not given yet.
                let next = session
                    .inputs()
                    .iter()
                    .find(|i| !given.iter().any(|(n, _)| *n == i.name))
                    .ok_or_else(|| Error::Other(format!("no input left for '{arg}'")))?;
                (next.name.clone(), arg.as_str())
            }
        };
        given.push((name, read_tensor(Path::new(file))?));
    }
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for (info, shape) in session.inputs().iter().zip(shapes) {
        match given.iter().position(|(n, _)| *n == info.name) {
            Some(p) => {
                let (n, t) = given.remove(p);
                out.push((n, t, "file".to_string()));
            }
            None => out.push((
                info.name.clone(),
                random_tensor(info.dtype, &shape, &mut rng)?,
                format!("random (seed {seed})"),
            )),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_parse() {
        assert_eq!(parse_dims("1x3x224x224").unwrap(), vec![1, 3, 224, 224]);
        assert_eq!(parse_dims("2,5").unwrap(), vec![2, 5]);
        assert_eq!(parse_dims("scalar").unwrap(), Vec::<usize>::new());
        assert!(parse_dims("1xa").is_err());
    }

    #[test]
    fn random_is_seeded() {
        let a = random_tensor(DType::F32, &[4], &mut Rng::new(3)).unwrap();
        let b = random_tensor(DType::F32, &[4], &mut Rng::new(3)).unwrap();
        assert_eq!(a.to_f64_vec(), b.to_f64_vec());
        assert!(a.to_f64_vec().iter().all(|v| (-1.0..1.0).contains(v)));
    }
}
