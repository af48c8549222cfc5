//! A model's inputs and outputs as declared ([`IoInfo`]), and what runs take and give:
//! [`Outputs`] and borrowed [`TensorView`]s.

use ferrolite_core::tensor::checked_numel;
use ferrolite_core::{DType, Dim, Elem, Error, Result, Tensor};

/// A model input or output as the model declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoInfo {
    /// The name to pass inputs by and to find outputs by.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Declared dims (symbolic ones by name); `None` if the model does not say.
    pub shape: Option<Vec<Dim>>,
}

impl IoInfo {
    /// The declared shape with symbolic dims set to 1 (a shape to try when none is given).
    pub fn default_shape(&self) -> Vec<usize> {
        match &self.shape {
            Some(dims) => dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Symbolic(_) => 1,
                })
                .collect(),
            None => Vec::new(),
        }
    }

    /// Checks a concrete shape against the declaration (rank and fixed dims).
    pub fn check_shape(&self, shape: &[usize]) -> Result<()> {
        let Some(dims) = &self.shape else {
            return Ok(());
        };
        let err = |message: String| Error::Input {
            name: self.name.clone(),
            message,
        };
        if dims.len() != shape.len() {
            return Err(err(format!(
                "expected rank {} ({}), got shape {:?}",
                dims.len(),
                dims_str(dims),
                shape
            )));
        }
        for (i, (d, &s)) in dims.iter().zip(shape).enumerate() {
            if let Dim::Fixed(n) = d {
                if *n != s {
                    return Err(err(format!(
                        "dimension {i} must be {n} ({}), got shape {:?}",
                        dims_str(dims),
                        shape
                    )));
                }
            }
        }
        Ok(())
    }
}

/// `[N,3,224,224]`-style rendering of declared dims.
pub fn dims_str(dims: &[Dim]) -> String {
    let d: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", d.join(","))
}

/// The outputs of a run, in model order, by name.
#[derive(Clone, Debug)]
pub struct Outputs(pub Vec<(String, Tensor)>);

impl Outputs {
    /// The output with this name.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// The output with this name, or an error naming the outputs there are.
    pub fn require(&self, name: &str) -> Result<&Tensor> {
        self.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.0.iter().map(|(n, _)| n.as_str()).collect();
            Error::Other(format!(
                "no output named '{name}' (outputs: {})",
                known.join(", ")
            ))
        })
    }

    /// (name, tensor) pairs in model order.
    pub fn iter(&self) -> impl Iterator<Item = &(String, Tensor)> {
        self.0.iter()
    }

    /// Number of outputs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no outputs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Takes the (name, tensor) pairs.
    pub fn into_vec(self) -> Vec<(String, Tensor)> {
        self.0
    }
}

impl std::ops::Index<&str> for Outputs {
    type Output = Tensor;

    /// Panics when there is no such output; use [`Outputs::get`] to handle that case.
    fn index(&self, name: &str) -> &Tensor {
        match self.get(name) {
            Some(t) => t,
            None => panic!("no output named '{name}'"),
        }
    }
}

/// A borrowed input: dtype, shape and little-endian element bytes owned by the caller.
///
/// Engine tensors are 64-byte aligned and reference counted, so a view is copied once into an
/// engine tensor when the run starts (one `memcpy`, no conversion). To avoid even that copy, build
/// a [`Tensor`] once and reuse it across runs: [`Session::run`](super::Session::run) and
/// [`Session::run_refs`](super::Session::run_refs) pass tensors to the kernels without copying.
///
/// ```
/// use ferrolite::{DType, TensorView};
/// let pixels = vec![0.5f32; 6];
/// let v = TensorView::from_slice(&[1, 2, 3], &pixels).unwrap();
/// assert_eq!(v.dtype(), DType::F32);
/// assert_eq!(v.shape(), &[1, 2, 3]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    dtype: DType,
    shape: &'a [usize],
    bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// A view of typed elements; checks that `shape` holds `data.len()` elements.
    pub fn from_slice<T: Elem>(shape: &'a [usize], data: &'a [T]) -> Result<TensorView<'a>> {
        TensorView::from_bytes(T::DTYPE, shape, bytemuck_bytes(data))
    }

    /// A view of raw little-endian bytes; checks the byte count against dtype and shape.
    pub fn from_bytes(dtype: DType, shape: &'a [usize], bytes: &'a [u8]) -> Result<TensorView<'a>> {
        let need = checked_numel(shape)?
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::Tensor(format!("shape {shape:?} is too large")))?;
        if need != bytes.len() {
            return Err(Error::Tensor(format!(
                "{dtype} tensor of shape {shape:?} needs {need} bytes, got {}",
                bytes.len()
            )));
        }
        Ok(TensorView {
            dtype,
            shape,
            bytes,
        })
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Dimensions.
    pub fn shape(&self) -> &'a [usize] {
        self.shape
    }

    /// The element bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Copies the view into an engine tensor.
    pub fn to_tensor(&self) -> Result<Tensor> {
        Tensor::from_bytes(self.dtype, self.shape, self.bytes)
    }
}

fn bytemuck_bytes<T: Elem>(data: &[T]) -> &[u8] {
    bytemuck::cast_slice(data)
}
