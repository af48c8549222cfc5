//! The `ferrolite` Python module: an onnxruntime-like face over `ferrolite::Session`.
//!
//! Arrays cross the boundary through NumPy itself (`numpy.asarray(x, dtype=..., order="C")`
//! and `numpy.frombuffer`), which converts any dtype and any memory layout, and keeps the
//! extension free of NumPy's C ABI: one abi3 wheel works with every NumPy.

use ferrolite::{DType, Dim, IoInfo, SessionOptions, Tensor};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::sync::Arc;

create_exception!(
    ferrolite,
    FerroliteError,
    PyRuntimeError,
    "An error reported by the engine (bad model, bad input, failed run)."
);

fn engine_err(e: ferrolite::Error) -> PyErr {
    FerroliteError::new_err(e.to_string())
}

/// NumPy's name for a dtype; bf16 has none (it is exchanged as float32).
fn numpy_name(d: DType) -> &'static str {
    match d {
        DType::F32 | DType::BF16 => "float32",
        DType::F64 => "float64",
        DType::F16 => "float16",
        DType::I8 => "int8",
        DType::U8 => "uint8",
        DType::I16 => "int16",
        DType::U16 => "uint16",
        DType::I32 => "int32",
        DType::U32 => "uint32",
        DType::I64 => "int64",
        DType::U64 => "uint64",
        DType::Bool => "bool",
        // Low-precision storage types travel as their raw bytes.
        DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F8E8M0
        | DType::F4E2M1 => "uint8",
        DType::I4 => "int8",
        DType::U4 => "uint8",
        // Strings travel as NumPy object arrays of `str`; sequences as lists, optionals as
        // `None` or their value (see `to_value` and `to_python`).
        DType::String => "object",
        DType::Sequence => "sequence",
        DType::Optional => "optional",
    }
}

/// The engine dtype of a NumPy dtype name (the element type of a sequence item or an
/// optional's value, which the model's declaration does not fix here).
fn dtype_of_numpy(name: &str) -> Option<DType> {
    Some(match name {
        "float32" => DType::F32,
        "float64" => DType::F64,
        "float16" => DType::F16,
        "int8" => DType::I8,
        "uint8" => DType::U8,
        "int16" => DType::I16,
        "uint16" => DType::U16,
        "int32" => DType::I32,
        "uint32" => DType::U32,
        "int64" => DType::I64,
        "uint64" => DType::U64,
        "bool" => DType::Bool,
        "object" => DType::String,
        n if n.starts_with("<U") || n.starts_with("str") => DType::String,
        _ => return None,
    })
}

/// A model input or output: name, NumPy dtype name, and shape (ints; strings for symbolic
/// dimensions; None for unknown ones; the whole shape is None when the model does not say).
#[pyclass(frozen, get_all, module = "ferrolite")]
struct NodeArg {
    name: String,
    dtype: String,
    shape: PyObject,
}

#[pymethods]
impl NodeArg {
    /// The onnxruntime-style type string, e.g. "tensor(float)".
    #[getter(r#type)]
    fn onnx_type(&self) -> String {
        let t = match self.dtype.as_str() {
            "float32" => "float",
            "float64" => "double",
            "bool" => "bool",
            "bfloat16" => "bfloat16",
            "object" => "string",
            "sequence" => return "seq(tensor)".into(),
            "optional" => return "optional".into(),
            other => other,
        };
        format!("tensor({t})")
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let shape = self.shape.bind(py).repr()?.to_string();
        Ok(format!(
            "NodeArg(name={:?}, dtype={:?}, shape={shape})",
            self.name, self.dtype
        ))
    }
}

fn node_arg(py: Python<'_>, info: &IoInfo) -> PyResult<NodeArg> {
    let shape: PyObject = match &info.shape {
        None => py.None(),
        Some(dims) => {
            let items: Vec<PyObject> = dims
                .iter()
                .map(|d| -> PyResult<PyObject> {
                    Ok(match d {
                        Dim::Fixed(n) => n.into_pyobject(py)?.into_any().unbind(),
                        Dim::Symbolic(s) if s.is_empty() => py.None(),
                        Dim::Symbolic(s) => s.into_pyobject(py)?.into_any().unbind(),
                    })
                })
                .collect::<PyResult<_>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
    };
    Ok(NodeArg {
        name: info.name.clone(),
        dtype: if info.dtype == DType::BF16 {
            "bfloat16".into()
        } else {
            numpy_name(info.dtype).into()
        },
        shape,
    })
}

/// Converts a Python value to an engine value of the declared `dtype`: an array-like for a
/// tensor (strings included), a list of array-likes for a sequence, `None` or a value for an
/// optional.
fn to_value(py: Python<'_>, value: &Bound<'_, PyAny>, dtype: DType) -> PyResult<Tensor> {
    match dtype {
        DType::Sequence => {
            let items = value
                .downcast::<PyList>()
                .map_err(|_| PyTypeError::new_err("a sequence input takes a list of arrays"))?;
            let items = items
                .iter()
                .map(|item| to_tensor_as_is(py, &item))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(Tensor::from_sequence(items))
        }
        DType::Optional => {
            if value.is_none() {
                Ok(Tensor::from_optional(None))
            } else if value.is_instance_of::<PyList>() {
                Ok(Tensor::from_optional(Some(to_value(
                    py,
                    value,
                    DType::Sequence,
                )?)))
            } else {
                Ok(Tensor::from_optional(Some(to_tensor_as_is(py, value)?)))
            }
        }
        DType::String => to_strings(py, value),
        _ => to_tensor(py, value, dtype),
    }
}

/// An array-like as a tensor of its own NumPy dtype (a sequence item or an optional's value).
fn to_tensor_as_is(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let arr = py.import("numpy")?.call_method1("asarray", (value,))?;
    let name: String = arr.getattr("dtype")?.getattr("name")?.extract()?;
    let name = if arr.getattr("dtype")?.getattr("kind")?.extract::<String>()? == "U" {
        "object".to_string()
    } else {
        name
    };
    let dtype = dtype_of_numpy(&name).ok_or_else(|| {
        PyTypeError::new_err(format!("arrays of NumPy dtype {name} are not supported"))
    })?;
    to_value(py, &arr, dtype)
}

/// A string tensor from an array-like of `str` (or `bytes`, read as UTF-8).
fn to_strings(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let np = py.import("numpy")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", "object")?;
    let arr = np.call_method("asarray", (value,), Some(&kwargs))?;
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let items = arr.call_method0("ravel")?.call_method0("tolist")?;
    let mut values = Vec::new();
    for item in items.downcast::<PyList>()?.iter() {
        if let Ok(b) = item.downcast::<PyBytes>() {
            let s = std::str::from_utf8(b.as_bytes())
                .map_err(|_| PyValueError::new_err("a bytes element is not UTF-8"))?;
            values.push(s.to_string());
        } else {
            values.push(item.extract::<String>().map_err(|_| {
                PyTypeError::new_err("a string tensor's elements must be str or bytes")
            })?);
        }
    }
    Tensor::from_strings(&shape, values).map_err(engine_err)
}

/// An engine value as Python: a NumPy array for a tensor (an object array of `str` for
/// strings), a list of arrays for a sequence, `None` or the value for an optional.
fn to_python(py: Python<'_>, t: &Tensor) -> PyResult<PyObject> {
    match t.dtype() {
        DType::Sequence => {
            let items = t
                .sequence()
                .map_err(engine_err)?
                .iter()
                .map(|item| to_python(py, item))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(PyList::new(py, items)?.into_any().unbind())
        }
        DType::Optional => match t.optional().map_err(engine_err)? {
            None => Ok(py.None()),
            Some(v) => to_python(py, v),
        },
        DType::String => {
            let np = py.import("numpy")?;
            let list = PyList::new(py, t.strings().map_err(engine_err)?)?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("dtype", "object")?;
            let arr = np.call_method("array", (list,), Some(&kwargs))?;
            Ok(arr.call_method1("reshape", (t.shape().to_vec(),))?.unbind())
        }
        _ => to_numpy(py, t),
    }
}

/// Converts any array-like to an engine tensor of `dtype` (copying and converting as needed).
fn to_tensor(py: Python<'_>, value: &Bound<'_, PyAny>, dtype: DType) -> PyResult<Tensor> {
    let np = py.import("numpy")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", numpy_name(dtype))?;
    kwargs.set_item("order", "C")?;
    let arr = np.call_method("asarray", (value,), Some(&kwargs))?;
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    let bytes_obj = arr.call_method0("tobytes")?;
    let bytes = bytes_obj.downcast::<PyBytes>()?.as_bytes();
    let t = Tensor::from_bytes(numpy_dtype_of(dtype), &shape, bytes).map_err(engine_err)?;
    if dtype == DType::BF16 {
        t.cast(DType::BF16).map_err(engine_err)
    } else {
        Ok(t)
    }
}

/// The dtype NumPy holds for an engine dtype.
fn numpy_dtype_of(d: DType) -> DType {
    if d == DType::BF16 {
        DType::F32
    } else {
        d
    }
}

/// Converts an engine tensor to a new (writable, C-contiguous) NumPy array.
fn to_numpy(py: Python<'_>, t: &Tensor) -> PyResult<PyObject> {
    let t = if t.dtype() == DType::BF16 {
        t.cast(DType::F32).map_err(engine_err)?
    } else {
        t.clone()
    };
    let np = py.import("numpy")?;
    let bytes = PyBytes::new(py, t.bytes());
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", numpy_name(t.dtype()))?;
    let flat = np.call_method("frombuffer", (bytes,), Some(&kwargs))?;
    // frombuffer gives a read-only view of the bytes object; copy into an owned array.
    let arr = flat
        .call_method1("reshape", (t.shape().to_vec(),))?
        .call_method0("copy")?;
    Ok(arr.unbind())
}

/// A loaded model: `Session(path_or_bytes, threads=0, disabled_passes=None, device="cpu",
/// isa=None, max_memory=None, precision="fast")`.
///
/// `threads=0` uses one worker per core. `device="gpu"` runs the subgraphs the GPU supports on
/// it (a module built with the `gpu` feature) and the rest on the CPU; `"fake"`,
/// `"fake:ops=Conv+Relu"`, `"fake:fail=run"` select the test suite's fake device. A subgraph the
/// device cannot compile or run falls back to the CPU; `warnings` lists those. `isa="portable"`
/// (or `"avx2"`, `"avx512"`; `"neon"`, `"neon-dot"` on aarch64) forces the CPU kernels'
/// instruction set (default: `FERROLITE_ISA`, else the best the CPU has). `max_memory` (bytes)
/// caps what a run's plan may need: weights, the arena of intermediates and prepacked weights;
/// a plan over it raises before allocating.
/// `precision="accurate"` picks f32 kernels within a few ulps of the direct sum (no Winograd
/// F(4x4, 3x3)) for deep networks whose outputs must stay close to a reference. A session can be used from several Python threads at once; the GIL is
/// released while the engine runs.
#[pyclass(frozen, module = "ferrolite")]
struct Session {
    inner: Arc<ferrolite::Session>,
}

#[pymethods]
impl Session {
    #[new]
    // One argument per keyword of the Python constructor.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (path_or_bytes, threads = 0, disabled_passes = None, device = "cpu", isa = None, max_memory = None, precision = "fast"))]
    fn new(
        py: Python<'_>,
        path_or_bytes: &Bound<'_, PyAny>,
        threads: usize,
        disabled_passes: Option<Vec<String>>,
        device: &str,
        isa: Option<String>,
        max_memory: Option<u64>,
        precision: &str,
    ) -> PyResult<Session> {
        let precision: ferrolite::Precision = precision.parse().map_err(PyValueError::new_err)?;
        let device: ferrolite::DeviceOption = device
            .parse()
            .map_err(|e: ferrolite::Error| PyValueError::new_err(e.to_string()))?;
        let options = SessionOptions {
            threads,
            disabled_passes: disabled_passes.unwrap_or_default(),
            device,
            isa,
            max_memory,
            precision,
            ..SessionOptions::default()
        };
        let session = if let Ok(b) = path_or_bytes.downcast::<PyBytes>() {
            let bytes = b.as_bytes().to_vec();
            py.allow_threads(|| ferrolite::Session::from_bytes(&bytes, options))
        } else {
            let path: std::path::PathBuf = path_or_bytes.extract().map_err(|_| {
                PyTypeError::new_err("Session() takes a path (str or os.PathLike) or bytes")
            })?;
            py.allow_threads(|| ferrolite::Session::from_path(&path, options))
        }
        .map_err(engine_err)?;
        Ok(Session {
            inner: Arc::new(session),
        })
    }

    /// The model inputs (list of NodeArg).
    #[getter]
    fn inputs(&self, py: Python<'_>) -> PyResult<Vec<NodeArg>> {
        self.inner
            .inputs()
            .iter()
            .map(|i| node_arg(py, i))
            .collect()
    }

    /// The model outputs (list of NodeArg).
    #[getter]
    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<NodeArg>> {
        self.inner
            .outputs()
            .iter()
            .map(|i| node_arg(py, i))
            .collect()
    }

    /// Device fallbacks so far: each names a subgraph the device could not compile or run,
    /// which then ran on the CPU.
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings()
    }

    /// Number of kernel worker threads.
    #[getter]
    fn threads(&self) -> usize {
        self.inner.threads()
    }

    /// Runs the model: `run(output_names or None, {"input name": array_like})` returns a list
    /// of NumPy arrays (all outputs in model order, or the named ones in the order asked).
    /// Inputs are converted to the model's dtype and made contiguous as needed. String tensors
    /// are object arrays of `str`; a sequence input or output is a list of arrays; an optional
    /// one is `None` or its value.
    #[pyo3(signature = (output_names, feeds))]
    fn run(
        &self,
        py: Python<'_>,
        output_names: Option<Vec<String>>,
        feeds: &Bound<'_, PyDict>,
    ) -> PyResult<Vec<PyObject>> {
        let mut inputs: Vec<(String, Tensor)> = Vec::with_capacity(feeds.len());
        for (k, v) in feeds.iter() {
            let name: String = k
                .extract()
                .map_err(|_| PyTypeError::new_err("feed names must be strings"))?;
            let Some(info) = self.inner.input(&name) else {
                let known: Vec<&str> = self
                    .inner
                    .inputs()
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect();
                return Err(FerroliteError::new_err(format!(
                    "input '{name}': the model has no such input (inputs: {})",
                    known.join(", ")
                )));
            };
            let t = to_value(py, &v, info.dtype).map_err(|e| {
                if e.is_instance_of::<FerroliteError>(py) {
                    e
                } else {
                    FerroliteError::new_err(format!(
                        "input '{name}': cannot convert to {}: {e}",
                        numpy_name(info.dtype)
                    ))
                }
            })?;
            inputs.push((name, t));
        }
        let session = self.inner.clone();
        let result = py.allow_threads(move || -> ferrolite::Result<Vec<Tensor>> {
            let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
            match &output_names {
                None => Ok(session
                    .run_refs(&refs)?
                    .into_vec()
                    .into_iter()
                    .map(|(_, t)| t)
                    .collect()),
                Some(names) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    session.run_for(&refs, &names)
                }
            }
        });
        let tensors = result.map_err(engine_err)?;
        tensors.iter().map(|t| to_python(py, t)).collect()
    }

    fn __repr__(&self) -> String {
        let names = |v: &[IoInfo]| {
            v.iter()
                .map(|i| i.name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "Session(inputs=[{}], outputs=[{}])",
            names(self.inner.inputs()),
            names(self.inner.outputs())
        )
    }
}

/// Reads a serialized ONNX TensorProto (.pb) file: returns `(name, ndarray)`.
#[pyfunction]
fn read_tensor_pb(py: Python<'_>, path: std::path::PathBuf) -> PyResult<(String, PyObject)> {
    let (name, t) = ferrolite::onnx::model::read_tensor_file(&path).map_err(engine_err)?;
    Ok((name, to_python(py, &t)?))
}

/// ferrolite: a neural-network inference engine for edge devices.
#[pymodule]
#[pyo3(name = "ferrolite")]
fn ferrolite_py(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    m.add_class::<NodeArg>()?;
    m.add("FerroliteError", m.py().get_type::<FerroliteError>())?;
    m.add_function(wrap_pyfunction!(read_tensor_pb, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
