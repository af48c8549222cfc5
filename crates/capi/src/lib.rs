//! The ferrolite C API, with Tengine's graph lifecycle:
//!
//! ```c
//! init_ferrolite();
//! ferrolite_graph *g; create_graph("model.onnx", &g);
//! ferrolite_tensor *x; get_graph_input_tensor(g, 0, &x);
//! set_tensor_shape(x, dims, 4);
//! ferrolite_options opt = {.num_thread = 2, .precision = FERROLITE_PRECISION_FP32};
//! prerun_graph_multithread(g, &opt);
//! set_tensor_data(x, pixels, bytes);      /* or set_tensor_buffer(x, pixels, bytes) */
//! run_graph(g, 1);
//! ferrolite_tensor *y; get_graph_output_tensor(g, 0, &y);
//! get_tensor_data(y, out, out_bytes);
//! postrun_graph(g); destroy_graph(g); release_ferrolite();
//! ```
//!
//! Every function returns a [`ferrolite_status`]; on failure [`ferrolite_last_error`] gives the
//! message (per thread). Handles are typed and opaque. The library never dereferences a handle:
//! handles are keys into a registry of live graphs and tensors, so a destroyed or foreign handle
//! is reported as [`ferrolite_status::FERROLITE_ERR_INVALID_HANDLE`] instead of crashing. No panic
//! crosses the boundary: each call runs under `catch_unwind`.
//!
//! See docs/c-api.md for the lifetime rules.

#![allow(non_camel_case_types)]

use ferrolite::{DType, Dim, Format, IoInfo, Session, SessionOptions, Tensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};

/// A loaded model and its run state. Opaque; created by [`create_graph`].
pub struct ferrolite_graph {
    // Non-zero size so that every handle has its own address.
    _id: u8,
}

/// An input or output tensor of a graph. Opaque; owned by its graph and valid until
/// [`destroy_graph`].
pub struct ferrolite_tensor {
    _id: u8,
}

/// The result of every call. `FERROLITE_OK` is 0; on anything else [`ferrolite_last_error`]
/// describes what went wrong.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferrolite_status {
    FERROLITE_OK = 0,
    /// A required pointer argument was NULL.
    FERROLITE_ERR_NULL_POINTER = 1,
    /// The graph or tensor handle is not live (destroyed, or never created by this library).
    FERROLITE_ERR_INVALID_HANDLE = 2,
    /// An argument is out of range: an index, a shape, a format name, an option.
    FERROLITE_ERR_INVALID_ARGUMENT = 3,
    /// The call is not allowed in this state (e.g. run before prerun, create before init).
    FERROLITE_ERR_WRONG_STATE = 4,
    /// A buffer's byte size does not match the tensor's.
    FERROLITE_ERR_BUFFER_SIZE = 5,
    /// The model could not be read or decoded.
    FERROLITE_ERR_MODEL = 6,
    /// Preparing or running the graph failed.
    FERROLITE_ERR_RUNTIME = 7,
    /// An internal error (a caught panic). The graph may be unusable; destroy it.
    FERROLITE_ERR_INTERNAL = 8,
}

/// Element types, as reported by [`get_tensor_data_type`].
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferrolite_dtype {
    FERROLITE_DT_FP32 = 0,
    FERROLITE_DT_FP64 = 1,
    FERROLITE_DT_FP16 = 2,
    FERROLITE_DT_BF16 = 3,
    FERROLITE_DT_INT8 = 4,
    FERROLITE_DT_UINT8 = 5,
    FERROLITE_DT_INT16 = 6,
    FERROLITE_DT_UINT16 = 7,
    FERROLITE_DT_INT32 = 8,
    FERROLITE_DT_UINT32 = 9,
    FERROLITE_DT_INT64 = 10,
    FERROLITE_DT_UINT64 = 11,
    /// One byte per element, 0 or 1.
    FERROLITE_DT_BOOL = 12,
    /// Low-precision storage types, one byte per element (the bit pattern; int4/uint4 as the
    /// extended value).
    FERROLITE_DT_FP8E4M3FN = 13,
    FERROLITE_DT_FP8E4M3FNUZ = 14,
    FERROLITE_DT_FP8E5M2 = 15,
    FERROLITE_DT_FP8E5M2FNUZ = 16,
    FERROLITE_DT_FP8E8M0 = 17,
    FERROLITE_DT_FP4E2M1 = 18,
    FERROLITE_DT_INT4 = 19,
    FERROLITE_DT_UINT4 = 20,
    /// Values the C API names but does not exchange as bytes: a string tensor, a sequence of
    /// tensors, an optional. Reading or writing their data fails with
    /// `FERROLITE_ERR_INVALID_ARGUMENT`; use the Rust API for models with such inputs or outputs.
    FERROLITE_DT_STRING = 21,
    FERROLITE_DT_SEQUENCE = 22,
    FERROLITE_DT_OPTIONAL = 23,
}

/// Compute precision for [`prerun_graph_multithread`].
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ferrolite_precision {
    /// fp32 with the fastest kernels (Winograd F(4x4, 3x3) on larger 3x3 convolutions).
    FERROLITE_PRECISION_FP32 = 0,
    /// fp32 with kernels within a few ulps of the direct sum (no Winograd F(4x4, 3x3)): for deep
    /// networks whose outputs must stay close to a reference.
    FERROLITE_PRECISION_FP32_ACCURATE = 1,
}

/// Options for [`prerun_graph_multithread`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ferrolite_options {
    /// Kernel worker threads; 0 means one per core.
    pub num_thread: i32,
    /// A `ferrolite_precision` value.
    pub precision: i32,
    /// Optional comma-separated names of optimisation passes to skip; may be NULL.
    pub disabled_passes: *const c_char,
}

/// The most dimensions a shape may have.
pub const FERROLITE_MAX_SHAPE_DIM_NUM: usize = 8;

type Status = ferrolite_status;
use ferrolite_status::*;

/// An error for the caller: a status and a message.
struct Fail(Status, String);

type FResult<T> = std::result::Result<T, Fail>;

fn fail<T>(status: Status, msg: impl Into<String>) -> FResult<T> {
    Err(Fail(status, msg.into()))
}

fn engine(status: Status) -> impl Fn(ferrolite::Error) -> Fail {
    move |e| Fail(status, e.to_string())
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: &str) {
    // Interior NULs would cut the message short in C; replace them.
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs a call body: converts errors and panics into a status and the thread's last error.
fn ffi(body: impl FnOnce() -> FResult<()>) -> Status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => FERROLITE_OK,
        Ok(Err(Fail(status, msg))) => {
            set_last_error(&msg);
            status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("internal error: {what}"));
            FERROLITE_ERR_INTERNAL
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The registry of live handles.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Io {
    Input(usize),
    Output(usize),
}

/// Where a tensor's data comes from (inputs) or goes to (outputs) besides the graph's copy.
#[derive(Clone, Copy, Debug)]
struct Bound {
    /// Address and byte length of the caller's buffer (see [`set_tensor_buffer`]).
    addr: usize,
    len: usize,
}

struct TensorState {
    info: IoInfo,
    name: CString,
    /// Current shape: set by the caller (inputs), or known after prerun / run (outputs).
    shape: Option<Vec<usize>>,
    dtype: DType,
    /// Input data set by copy, or an output's result.
    data: Option<Tensor>,
    bound: Option<Bound>,
    handle: Option<Box<ferrolite_tensor>>,
}

struct GraphState {
    model: ferrolite::Model,
    session: Option<Arc<Session>>,
    /// Input shapes the session was prepared for.
    prepared: bool,
    /// Where prerun places the graph (see [`set_graph_device`]).
    device: ferrolite::DeviceOption,
    /// The memory cap prerun applies (see [`set_graph_memory_limit`]).
    max_memory: Option<u64>,
    inputs: Vec<TensorState>,
    outputs: Vec<TensorState>,
}

type GraphRef = Arc<Mutex<GraphState>>;

#[derive(Default)]
struct Registry {
    initialized: usize,
    graphs: HashMap<usize, (Box<ferrolite_graph>, GraphRef)>,
    tensors: HashMap<usize, (GraphRef, Io)>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    // A panic while holding the lock leaves consistent maps (every update is one insert or
    // remove), so a poisoned lock is still usable.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut guard = registry();
    f(guard.get_or_insert_with(Registry::default))
}

/// Frees the registry's tables once nothing is initialised or alive, so that a program that
/// releases everything leaves no allocation behind (leak checkers stay quiet).
fn free_registry_if_unused() {
    let mut guard = registry();
    if let Some(r) = guard.as_ref() {
        if r.initialized == 0 && r.graphs.is_empty() && r.tensors.is_empty() {
            *guard = None;
        }
    }
}

fn lock(g: &GraphRef) -> MutexGuard<'_, GraphState> {
    g.lock().unwrap_or_else(|e| e.into_inner())
}

fn graph_ref(graph: *const ferrolite_graph) -> FResult<GraphRef> {
    if graph.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, "graph is NULL");
    }
    with_registry(|r| r.graphs.get(&(graph as usize)).map(|(_, g)| g.clone())).map_or_else(
        || {
            fail(
                FERROLITE_ERR_INVALID_HANDLE,
                "invalid graph handle (destroyed, or not created by create_graph)",
            )
        },
        Ok,
    )
}

fn tensor_ref(tensor: *const ferrolite_tensor) -> FResult<(GraphRef, Io)> {
    if tensor.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, "tensor is NULL");
    }
    with_registry(|r| r.tensors.get(&(tensor as usize)).cloned()).map_or_else(
        || {
            fail(
                FERROLITE_ERR_INVALID_HANDLE,
                "invalid tensor handle (its graph was destroyed, or it was not obtained from it)",
            )
        },
        Ok,
    )
}

impl GraphState {
    fn tensor(&mut self, io: Io) -> &mut TensorState {
        match io {
            Io::Input(i) => &mut self.inputs[i],
            Io::Output(i) => &mut self.outputs[i],
        }
    }
}

/// Returns the handle of a graph's tensor, creating it on first use.
fn tensor_handle(graph: &GraphRef, io: Io) -> *mut ferrolite_tensor {
    let mut g = lock(graph);
    let t = g.tensor(io);
    if let Some(h) = &t.handle {
        return &**h as *const ferrolite_tensor as *mut ferrolite_tensor;
    }
    let h = Box::new(ferrolite_tensor { _id: 0 });
    let ptr = &*h as *const ferrolite_tensor as *mut ferrolite_tensor;
    t.handle = Some(h);
    drop(g);
    with_registry(|r| r.tensors.insert(ptr as usize, (graph.clone(), io)));
    ptr
}

// ---------------------------------------------------------------------------------------------
// Pointer helpers: the only places user memory is touched.

fn c_str<'a>(p: *const c_char, what: &str) -> FResult<&'a str> {
    if p.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, format!("{what} is NULL"));
    }
    // SAFETY: the caller passes a NUL-terminated string that stays valid during the call (the
    // documented contract of every `const char *` parameter); NULL was excluded above.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| {
        Fail(
            FERROLITE_ERR_INVALID_ARGUMENT,
            format!("{what} is not UTF-8"),
        )
    })
}

fn write_out<T>(out: *mut T, value: T, what: &str) -> FResult<()> {
    if out.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, format!("{what} is NULL"));
    }
    // SAFETY: `out` is non-NULL and, per the API contract, points to writable memory for one `T`
    // (an out-parameter the caller owns). `write` does not read or drop the old value.
    unsafe { out.write(value) };
    Ok(())
}

fn read_options(p: *const ferrolite_options) -> FResult<ferrolite_options> {
    if p.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, "options is NULL");
    }
    // SAFETY: non-NULL, and per the contract points to a readable `ferrolite_options` (a plain
    // #[repr(C)] struct of integers and a pointer: any bit pattern is valid).
    Ok(unsafe { p.read() })
}

fn in_bytes<'a>(p: *const u8, len: usize, what: &str) -> FResult<&'a [u8]> {
    if p.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, format!("{what} is NULL"));
    }
    if len > isize::MAX as usize {
        return fail(FERROLITE_ERR_BUFFER_SIZE, format!("{what}: size too large"));
    }
    // SAFETY: the caller guarantees `p` points to `len` readable bytes for the duration of the
    // call (or, for a bound buffer, until it is unbound: see set_tensor_buffer); non-NULL and
    // size checked above.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

fn out_bytes<'a>(p: *mut u8, len: usize, what: &str) -> FResult<&'a mut [u8]> {
    if p.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, format!("{what} is NULL"));
    }
    if len > isize::MAX as usize {
        return fail(FERROLITE_ERR_BUFFER_SIZE, format!("{what}: size too large"));
    }
    // SAFETY: the caller guarantees `p` points to `len` writable bytes that nothing else
    // accesses during the call (or, for a bound buffer, during run_graph); non-NULL and size
    // checked above.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

// ---------------------------------------------------------------------------------------------
// Library lifecycle.

/// Initialises the library. Call once before [`create_graph`]; calls nest (each needs a
/// [`release_ferrolite`]).
#[no_mangle]
pub extern "C" fn init_ferrolite() -> ferrolite_status {
    ffi(|| {
        with_registry(|r| r.initialized += 1);
        Ok(())
    })
}

/// Releases the library (after the matching [`init_ferrolite`]). Graphs still alive stay valid
/// until destroyed, but no new graph can be created once every init is released.
#[no_mangle]
pub extern "C" fn release_ferrolite() -> ferrolite_status {
    ffi(|| {
        with_registry(|r| {
            if r.initialized == 0 {
                return fail(
                    FERROLITE_ERR_WRONG_STATE,
                    "release_ferrolite without init_ferrolite",
                );
            }
            r.initialized -= 1;
            Ok(())
        })?;
        free_registry_if_unused();
        Ok(())
    })
}

/// The message of the last failed call on this thread ("" if none). The string is owned by the
/// library and valid until the next failing call on this thread. Never NULL.
#[no_mangle]
pub extern "C" fn ferrolite_last_error() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"internal error".as_ptr())
}

/// The library version, e.g. "0.1.0". Static string, never NULL.
#[no_mangle]
pub extern "C" fn ferrolite_version() -> *const c_char {
    static VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    VERSION.as_ptr()
}

// ---------------------------------------------------------------------------------------------
// Graphs.

fn new_graph(model: ferrolite::Model, out: *mut *mut ferrolite_graph) -> FResult<()> {
    if out.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, "graph out-pointer is NULL");
    }
    // Metadata comes from a session with default options; prerun builds the real one.
    let probe = Session::from_model(model.clone(), SessionOptions::default().with_threads(1))
        .map_err(engine(FERROLITE_ERR_MODEL))?;
    let state = |info: &IoInfo, fixed: bool| -> FResult<TensorState> {
        let shape = match &info.shape {
            Some(dims) if fixed && dims.iter().all(|d| matches!(d, Dim::Fixed(_))) => {
                Some(info.default_shape())
            }
            _ => None,
        };
        Ok(TensorState {
            name: CString::new(info.name.replace('\0', " ")).unwrap_or_default(),
            info: info.clone(),
            shape,
            dtype: info.dtype,
            data: None,
            bound: None,
            handle: None,
        })
    };
    let inputs = probe
        .inputs()
        .iter()
        .map(|i| state(i, true))
        .collect::<FResult<Vec<_>>>()?;
    let outputs = probe
        .outputs()
        .iter()
        .map(|i| state(i, false))
        .collect::<FResult<Vec<_>>>()?;
    drop(probe);
    let g: GraphRef = Arc::new(Mutex::new(GraphState {
        model,
        session: None,
        prepared: false,
        device: ferrolite::DeviceOption::Cpu,
        max_memory: None,
        inputs,
        outputs,
    }));
    let handle = Box::new(ferrolite_graph { _id: 0 });
    let ptr = &*handle as *const ferrolite_graph as *mut ferrolite_graph;
    with_registry(|r| r.graphs.insert(ptr as usize, (handle, g)));
    write_out(out, ptr, "graph out-pointer")
}

fn check_initialized() -> FResult<()> {
    if with_registry(|r| r.initialized) == 0 {
        return fail(
            FERROLITE_ERR_WRONG_STATE,
            "call init_ferrolite before creating a graph",
        );
    }
    Ok(())
}

/// Loads a model file or folder: ONNX (external tensor data is read from the file's folder), or
/// a Paddle model folder / `.pdmodel` file with its parameters beside it. On success `*graph`
/// receives the new graph.
#[no_mangle]
pub extern "C" fn create_graph(
    model_path: *const c_char,
    graph: *mut *mut ferrolite_graph,
) -> ferrolite_status {
    ffi(|| {
        check_initialized()?;
        let path = std::path::PathBuf::from(c_str(model_path, "model_path")?);
        let model = ferrolite::load_path(&path).map_err(engine(FERROLITE_ERR_MODEL))?;
        new_graph(model, graph)
    })
}

/// Loads a model from memory. `format` names it ("onnx"; Paddle models load from files only),
/// or is NULL or "" to detect it. The
/// bytes are only read during the call.
#[no_mangle]
pub extern "C" fn create_graph_from_memory(
    format: *const c_char,
    data: *const u8,
    size: usize,
    graph: *mut *mut ferrolite_graph,
) -> ferrolite_status {
    ffi(|| {
        check_initialized()?;
        let format = if format.is_null() {
            None
        } else {
            match c_str(format, "format")? {
                "" => None,
                name => {
                    Some(Format::from_name(name).map_err(engine(FERROLITE_ERR_INVALID_ARGUMENT))?)
                }
            }
        };
        let bytes = in_bytes(data, size, "data")?;
        let format = match format {
            Some(f) => f,
            None => Format::detect(bytes).map_err(engine(FERROLITE_ERR_MODEL))?,
        };
        let model =
            ferrolite::load_model_as(format, bytes, None).map_err(engine(FERROLITE_ERR_MODEL))?;
        new_graph(model, graph)
    })
}

/// Destroys a graph and every tensor handle obtained from it. Bound buffers are no longer
/// referenced after this returns. The handle must not be used again (calls with it fail with
/// `FERROLITE_ERR_INVALID_HANDLE`).
#[no_mangle]
pub extern "C" fn destroy_graph(graph: *mut ferrolite_graph) -> ferrolite_status {
    ffi(|| {
        let g = graph_ref(graph)?;
        let removed = with_registry(|r| {
            r.tensors.retain(|_, (owner, _)| !Arc::ptr_eq(owner, &g));
            r.graphs.remove(&(graph as usize))
        });
        // Drop the graph (and its session) outside the registry lock.
        drop(removed);
        free_registry_if_unused();
        Ok(())
    })
}

/// Number of graph inputs.
#[no_mangle]
pub extern "C" fn get_graph_input_node_number(
    graph: *const ferrolite_graph,
    number: *mut i32,
) -> ferrolite_status {
    ffi(|| {
        let g = graph_ref(graph)?;
        let n = lock(&g).inputs.len() as i32;
        write_out(number, n, "number")
    })
}

/// Number of graph outputs.
#[no_mangle]
pub extern "C" fn get_graph_output_node_number(
    graph: *const ferrolite_graph,
    number: *mut i32,
) -> ferrolite_status {
    ffi(|| {
        let g = graph_ref(graph)?;
        let n = lock(&g).outputs.len() as i32;
        write_out(number, n, "number")
    })
}

fn io_tensor(
    graph: *const ferrolite_graph,
    index: i32,
    input: bool,
    tensor: *mut *mut ferrolite_tensor,
) -> FResult<()> {
    let g = graph_ref(graph)?;
    let n = {
        let s = lock(&g);
        if input {
            s.inputs.len()
        } else {
            s.outputs.len()
        }
    };
    let kind = if input { "input" } else { "output" };
    let i = usize::try_from(index)
        .ok()
        .filter(|&i| i < n)
        .ok_or_else(|| {
            Fail(
                FERROLITE_ERR_INVALID_ARGUMENT,
                format!("{kind} index {index} out of range (the graph has {n})"),
            )
        })?;
    let io = if input { Io::Input(i) } else { Io::Output(i) };
    if tensor.is_null() {
        return fail(FERROLITE_ERR_NULL_POINTER, "tensor out-pointer is NULL");
    }
    write_out(tensor, tensor_handle(&g, io), "tensor out-pointer")
}

/// The input tensor at `index` (0-based).
#[no_mangle]
pub extern "C" fn get_graph_input_tensor(
    graph: *const ferrolite_graph,
    index: i32,
    tensor: *mut *mut ferrolite_tensor,
) -> ferrolite_status {
    ffi(|| io_tensor(graph, index, true, tensor))
}

/// The output tensor at `index` (0-based).
#[no_mangle]
pub extern "C" fn get_graph_output_tensor(
    graph: *const ferrolite_graph,
    index: i32,
    tensor: *mut *mut ferrolite_tensor,
) -> ferrolite_status {
    ffi(|| io_tensor(graph, index, false, tensor))
}

/// The input or output tensor with this name.
#[no_mangle]
pub extern "C" fn get_graph_tensor(
    graph: *const ferrolite_graph,
    name: *const c_char,
    tensor: *mut *mut ferrolite_tensor,
) -> ferrolite_status {
    ffi(|| {
        let g = graph_ref(graph)?;
        let name = c_str(name, "name")?;
        let io = {
            let s = lock(&g);
            if let Some(i) = s.inputs.iter().position(|t| t.info.name == name) {
                Io::Input(i)
            } else if let Some(i) = s.outputs.iter().position(|t| t.info.name == name) {
                Io::Output(i)
            } else {
                let all: Vec<&str> = s
                    .inputs
                    .iter()
                    .chain(&s.outputs)
                    .map(|t| t.info.name.as_str())
                    .collect();
                return fail(
                    FERROLITE_ERR_INVALID_ARGUMENT,
                    format!(
                        "no input or output named '{name}' (have: {})",
                        all.join(", ")
                    ),
                );
            }
        };
        if tensor.is_null() {
            return fail(FERROLITE_ERR_NULL_POINTER, "tensor out-pointer is NULL");
        }
        write_out(tensor, tensor_handle(&g, io), "tensor out-pointer")
    })
}

/// The tensor's name. The string is owned by the graph and valid until [`destroy_graph`].
#[no_mangle]
pub extern "C" fn get_tensor_name(
    tensor: *const ferrolite_tensor,
    name: *mut *const c_char,
) -> ferrolite_status {
    ffi(|| {
        let (g, io) = tensor_ref(tensor)?;
        // The CString's heap buffer does not move while the graph lives.
        let p = lock(&g).tensor(io).name.as_ptr();
        write_out(name, p, "name out-pointer")
    })
}

fn dtype_code(d: DType) -> ferrolite_dtype {
    use ferrolite_dtype::*;
    match d {
        DType::F32 => FERROLITE_DT_FP32,
        DType::F64 => FERROLITE_DT_FP64,
        DType::F16 => FERROLITE_DT_FP16,
        DType::BF16 => FERROLITE_DT_BF16,
        DType::I8 => FERROLITE_DT_INT8,
        DType::U8 => FERROLITE_DT_UINT8,
        DType::I16 => FERROLITE_DT_INT16,
        DType::U16 => FERROLITE_DT_UINT16,
        DType::I32 => FERROLITE_DT_INT32,
        DType::U32 => FERROLITE_DT_UINT32,
        DType::I64 => FERROLITE_DT_INT64,
        DType::U64 => FERROLITE_DT_UINT64,
        DType::Bool => FERROLITE_DT_BOOL,
        DType::F8E4M3FN => FERROLITE_DT_FP8E4M3FN,
        DType::F8E4M3FNUZ => FERROLITE_DT_FP8E4M3FNUZ,
        DType::F8E5M2 => FERROLITE_DT_FP8E5M2,
        DType::F8E5M2FNUZ => FERROLITE_DT_FP8E5M2FNUZ,
        DType::F8E8M0 => FERROLITE_DT_FP8E8M0,
        DType::F4E2M1 => FERROLITE_DT_FP4E2M1,
        DType::I4 => FERROLITE_DT_INT4,
        DType::U4 => FERROLITE_DT_UINT4,
        DType::String => FERROLITE_DT_STRING,
        DType::Sequence => FERROLITE_DT_SEQUENCE,
        DType::Optional => FERROLITE_DT_OPTIONAL,
    }
}

/// The tensor's element type.
#[no_mangle]
pub extern "C" fn get_tensor_data_type(
    tensor: *const ferrolite_tensor,
    dtype: *mut ferrolite_dtype,
) -> ferrolite_status {
    ffi(|| {
        let (g, io) = tensor_ref(tensor)?;
        let d = lock(&g).tensor(io).dtype;
        write_out(dtype, dtype_code(d), "dtype out-pointer")
    })
}

/// Sets an input's shape. Needed for inputs with symbolic dimensions; fixed dimensions must match
/// the model. Changing a shape after prerun requires [`prerun_graph_multithread`] again.
#[no_mangle]
pub extern "C" fn set_tensor_shape(
    tensor: *mut ferrolite_tensor,
    dims: *const i32,
    dim_num: i32,
) -> ferrolite_status {
    ffi(|| {
        let (g, io) = tensor_ref(tensor)?;
        let Io::Input(_) = io else {
            return fail(
                FERROLITE_ERR_INVALID_ARGUMENT,
                "set_tensor_shape applies to inputs; output shapes follow from prerun",
            );
        };
        let n = usize::try_from(dim_num)
            .ok()
            .filter(|&n| n <= FERROLITE_MAX_SHAPE_DIM_NUM)
            .ok_or_else(|| {
                Fail(
                    FERROLITE_ERR_INVALID_ARGUMENT,
                    format!("dim_num {dim_num} must be 0..={FERROLITE_MAX_SHAPE_DIM_NUM}"),
                )
            })?;
        let shape: Vec<usize> = if n == 0 {
            Vec::new()
        } else {
            let bytes = in_bytes(dims as *const u8, n * 4, "dims")?;
            bytes
                .chunks_exact(4)
                .map(|c| {
                    let d = i32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
                    usize::try_from(d).map_err(|_| {
                        Fail(
                            FERROLITE_ERR_INVALID_ARGUMENT,
                            format!("dimension {d} is negative"),
                        )
                    })
                })
                .collect::<FResult<_>>()?
        };
        let mut s = lock(&g);
        let t = s.tensor(io);
        t.info
            .check_shape(&shape)
            .map_err(engine(FERROLITE_ERR_INVALID_ARGUMENT))?;
        if t.shape.as_deref() != Some(shape.as_slice()) {
            // Data or a bound buffer of the old size would no longer fit.
            t.data = None;
            t.bound = None;
            t.shape = Some(shape);
            s.prepared = false;
            for o in &mut s.outputs {
                o.shape = None;
                o.data = None;
                o.bound = None;
            }
        }
        Ok(())
    })
}

/// The tensor's shape: up to `max_dim` dimensions are written to `dims`, the rank to `*dim_num`.
/// An output's shape is known after prerun (or, for data-dependent shapes, after run).
#[no_mangle]
pub extern "C" fn get_tensor_shape(
    tensor: *const ferrolite_tensor,
    dims: *mut i32,
    max_dim: i32,
    dim_num: *mut i32,
) -> ferrolite_status {
    ffi(|| {
        let (g, io) = tensor_ref(tensor)?;
        let shape = {
            let mut s = lock(&g);
            let t = s.tensor(io);
            match &t.shape {
                Some(shape) => shape.clone(),
                None => {
                    return fail(
                        FERROLITE_ERR_WRONG_STATE,
                        format!(
                            "the shape of '{}' is not known yet (set it, or prerun the graph)",
                            t.info.name
                        ),
                    )
                }
            }
        };
        let max = usize::try_from(max_dim).unwrap_or(0);
        if shape.len() > max {
            return fail(
                FERROLITE_ERR_BUFFER_SIZE,
                format!(
                    "the shape has {} dimensions, max_dim is {max_dim}",
                    shape.len()
                ),
            );
        }
        let mut raw = Vec::with_capacity(shape.len() * 4);
        for &d in &shape {
            let d = i32::try_from(d).map_err(|_| {
                Fail(
                    FERROLITE_ERR_RUNTIME,
                    format!("dimension {d} exceeds int32"),
                )
            })?;
            raw.extend_from_slice(&d.to_ne_bytes());
        }
        if !raw.is_empty() {
            out_bytes(dims as *mut u8, raw.len(), "dims")?.copy_from_slice(&raw);
        }
        write_out(dim_num, shape.len() as i32, "dim_num")
    })
}

fn byte_size(t: &TensorState) -> FResult<usize> {
    if !t.dtype.is_bytes() {
        return fail(
            FERROLITE_ERR_INVALID_ARGUMENT,
            format!(
                "'{}' is a {} value: the C API exchanges tensors of bytes only (use the Rust API)",
                t.info.name, t.dtype
            ),
        );
    }
    let shape = t.shape.as_ref().ok_or_else(|| {
        Fail(
            FERROLITE_ERR_WRONG_STATE,
            format!(
                "the shape of '{}' is not known yet (set it, or prerun the graph)",
                t.info.name
            ),
        )
    })?;
    shape
        .iter()
        .try_fold(t.dtype.size(), |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            Fail(
                FERROLITE_ERR_INVALID_ARGUMENT,
                "tensor size overflows".into(),
            )
        })
}

/// The tensor's size in bytes (elements times element size), once its shape is known.
#[no_mangle]
pub extern "C" fn get_tensor_buffer_size(
    tensor: *const ferrolite_tensor,
    size: *mut usize,
) -> ferrolite_status {
    ffi(|| {
        let (g, io) = tensor_ref(tensor)?;
        let n = byte_size(lock(&g).tensor(io))?;
        write_out(size, n, "size out-pointer")
    })
}

fn check_size(t: &TensorState, size: usize) -> FResult<()> {
    let need = byte_size(t)?;
    if size != need {
        return fail(
            FERROLITE_ERR_BUFFER_SIZE,
            format!(
                "'{}' is {} {:?}: {need} bytes, the buffer has {size}",
                t.info.name,
                t.dtype,
                t.shape.as_deref().unwrap_or(&[])
            ),
        );
    }
    Ok(())
}

/// Copies `size` bytes into an input (size must equal its byte size). Replaces a bound buffer.
#[no_mangle]
pub extern "C" fn set_tensor_data(
    tensor: *mut ferrolite_tensor,
    data: *const u8,
    size: usize,
) -> ferrolite_status {
    ffi(|| {
        let (g, io) = tensor_ref(tensor)?;
        let mut s = lock(&g);
        let t = s.tensor(io);
        let Io::Input(_) = io else {
            return fail(
                FERROLITE_ERR_INVALID_ARGUMENT,
                format!("'{}' is an output; only inputs take data", t.info.name),
            );
        };
        check_size(t, size)?;
        let bytes = in_bytes(data, size, "data")?;
        let shape = t.shape.clone().unwrap_or_default();
        t.data = Some(
            Tensor::from_bytes(t.dtype, &shape, bytes)
                .map_err(engine(FERROLITE_ERR_INVALID_ARGUMENT))?,
        );
        t.bound = None;
        Ok(())
    })
}

/// Copies a tensor's data out: an output after [`run_graph`], or an input's current data.
/// `size` must equal its byte size.
#[no_mangle]
pub extern "C" fn get_tensor_data(
    tensor: *const ferrolite_tensor,
    data: *mut u8,
    size: usize,
) -> ferrolite_status {
    ffi(|| {
        let (g, io) = tensor_ref(tensor)?;
        let mut s = lock(&g);
        let t = s.tensor(io);
        check_size(t, size)?;
        let dst = out_bytes(data, size, "data")?;
        if let Some(d) = &t.data {
            dst.copy_from_slice(d.bytes());
            return Ok(());
        }
        if let Some(b) = t.bound {
            if matches!(io, Io::Input(_)) && b.len == size {
                dst.copy_from_slice(in_bytes(b.addr as *const u8, b.len, "bound buffer")?);
                return Ok(());
            }
        }
        fail(
            FERROLITE_ERR_WRONG_STATE,
            format!(
                "'{}' has no data yet (set it, or run the graph)",
                t.info.name
            ),
        )
    })
}

/// Binds a caller-owned buffer of exactly the tensor's byte size (checked) to a tensor, without
/// copying at bind time.
///
/// * Input: the engine reads the buffer at each [`run_graph`] (the buffer's current contents are
///   used; write new data into it between runs).
/// * Output: each [`run_graph`] writes the result into the buffer.
///
/// The buffer must stay valid, and must not be freed, until the tensor is unbound: by another
/// `set_tensor_buffer` (NULL with size 0 unbinds), [`set_tensor_data`], a shape change,
/// [`postrun_graph`] or [`destroy_graph`]. Output binding requires a known output shape
/// (after prerun).
#[no_mangle]
pub extern "C" fn set_tensor_buffer(
    tensor: *mut ferrolite_tensor,
    buffer: *mut u8,
    size: usize,
) -> ferrolite_status {
    ffi(|| {
        let (g, io) = tensor_ref(tensor)?;
        let mut s = lock(&g);
        let t = s.tensor(io);
        if buffer.is_null() && size == 0 {
            t.bound = None;
            return Ok(());
        }
        if buffer.is_null() {
            return fail(FERROLITE_ERR_NULL_POINTER, "buffer is NULL");
        }
        check_size(t, size)?;
        t.bound = Some(Bound {
            addr: buffer as usize,
            len: size,
        });
        if let Io::Input(_) = io {
            t.data = None;
        }
        Ok(())
    })
}

/// Chooses where the next prerun places the graph: `"cpu"` (the default), `"gpu"` (the
/// subgraphs the GPU supports run there, the rest on the CPU; needs a library built with the
/// `gpu` feature) or the test suite's fake device (`"fake"`, `"fake:ops=Conv+Relu"`). A device
/// that fails to compile or run a subgraph hands it back to the CPU with a warning on standard
/// error; the graph's outputs are the same. Call [`prerun_graph_multithread`] again afterwards.
#[no_mangle]
pub extern "C" fn set_graph_device(
    graph: *mut ferrolite_graph,
    device: *const c_char,
) -> ferrolite_status {
    ffi(|| {
        let g = graph_ref(graph)?;
        let name = c_str(device, "device")?;
        let option: ferrolite::DeviceOption = name
            .parse()
            .map_err(engine(FERROLITE_ERR_INVALID_ARGUMENT))?;
        let mut s = lock(&g);
        s.device = option;
        s.session = None;
        s.prepared = false;
        Ok(())
    })
}

/// Caps the memory the next prerun may plan for the graph: its weights, the arena of
/// intermediate tensors and the prepacked weights, in bytes; 0 removes the cap. A plan over it
/// makes [`prerun_graph_multithread`] fail (`FERROLITE_ERR_RUNTIME`, the message starting with
/// "memory limit") before the arena is allocated. Call prerun again afterwards.
#[no_mangle]
pub extern "C" fn set_graph_memory_limit(
    graph: *mut ferrolite_graph,
    bytes: u64,
) -> ferrolite_status {
    ffi(|| {
        let g = graph_ref(graph)?;
        let mut s = lock(&g);
        s.max_memory = (bytes > 0).then_some(bytes);
        s.session = None;
        s.prepared = false;
        Ok(())
    })
}

/// Prepares the graph for the current input shapes: shape inference, optimisation passes and
/// kernel selection. `options` may be NULL (defaults: one thread per core, fp32).
#[no_mangle]
pub extern "C" fn prerun_graph_multithread(
    graph: *mut ferrolite_graph,
    options: *const ferrolite_options,
) -> ferrolite_status {
    ffi(|| {
        let g = graph_ref(graph)?;
        let mut opts = SessionOptions::default();
        if !options.is_null() {
            let o = read_options(options)?;
            opts.precision = match o.precision {
                p if p == ferrolite_precision::FERROLITE_PRECISION_FP32 as i32 => {
                    ferrolite::Precision::Fast
                }
                p if p == ferrolite_precision::FERROLITE_PRECISION_FP32_ACCURATE as i32 => {
                    ferrolite::Precision::Accurate
                }
                p => {
                    return fail(
                        FERROLITE_ERR_INVALID_ARGUMENT,
                        format!(
                            "precision {p} is not supported (FERROLITE_PRECISION_FP32 or \
                             FERROLITE_PRECISION_FP32_ACCURATE)"
                        ),
                    )
                }
            };
            opts.threads = usize::try_from(o.num_thread).map_err(|_| {
                Fail(
                    FERROLITE_ERR_INVALID_ARGUMENT,
                    format!("num_thread {} is negative", o.num_thread),
                )
            })?;
            if !o.disabled_passes.is_null() {
                let list = c_str(o.disabled_passes, "disabled_passes")?;
                opts.disabled_passes = list
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(String::from)
                    .collect();
            }
        }
        let mut s = lock(&g);
        opts.device = s.device.clone();
        opts.max_memory = s.max_memory;
        let shapes: Vec<Vec<usize>> = s
            .inputs
            .iter()
            .map(|t| {
                t.shape.clone().ok_or_else(|| {
                    Fail(
                        FERROLITE_ERR_WRONG_STATE,
                        format!(
                            "input '{}' has symbolic dimensions {}: call set_tensor_shape first",
                            t.info.name,
                            t.info
                                .shape
                                .as_deref()
                                .map(ferrolite::session::dims_str)
                                .unwrap_or_default()
                        ),
                    )
                })
            })
            .collect::<FResult<_>>()?;
        let session =
            Session::from_model(s.model.clone(), opts).map_err(engine(FERROLITE_ERR_RUNTIME))?;
        let prepared = session
            .prerun(&shapes)
            .map_err(engine(FERROLITE_ERR_RUNTIME))?;
        for (o, ty) in s.outputs.iter_mut().zip(prepared.output_types()) {
            if let Some(ty) = ty {
                o.dtype = ty.dtype;
                if o.shape.as_deref() != Some(ty.shape.as_slice()) {
                    o.bound = None;
                }
                o.shape = Some(ty.shape);
            }
            o.data = None;
        }
        s.session = Some(Arc::new(session));
        s.prepared = true;
        Ok(())
    })
}

/// Runs the graph (blocking) on the inputs' data or bound buffers. `block` is accepted for
/// Tengine compatibility; runs always block. Outputs are then read with [`get_tensor_data`] or
/// land in their bound buffers.
#[no_mangle]
pub extern "C" fn run_graph(graph: *mut ferrolite_graph, block: i32) -> ferrolite_status {
    let _ = block;
    ffi(|| {
        let g = graph_ref(graph)?;
        let mut s = lock(&g);
        let session =
            match (&s.session, s.prepared) {
                (Some(sess), true) => sess.clone(),
                _ => return fail(
                    FERROLITE_ERR_WRONG_STATE,
                    "run_graph before prerun_graph_multithread (or after a shape change / postrun)",
                ),
            };
        let mut inputs: Vec<Tensor> = Vec::with_capacity(s.inputs.len());
        for t in &s.inputs {
            let shape = t.shape.clone().unwrap_or_default();
            if let Some(d) = &t.data {
                inputs.push(d.clone());
            } else if let Some(b) = t.bound {
                check_size(t, b.len)?;
                let bytes = in_bytes(b.addr as *const u8, b.len, "bound input buffer")?;
                inputs.push(
                    Tensor::from_bytes(t.dtype, &shape, bytes)
                        .map_err(engine(FERROLITE_ERR_RUNTIME))?,
                );
            } else {
                return fail(
                    FERROLITE_ERR_WRONG_STATE,
                    format!(
                        "input '{}' has no data (set_tensor_data or set_tensor_buffer)",
                        t.info.name
                    ),
                );
            }
        }
        let named: Vec<(&str, &Tensor)> = s
            .inputs
            .iter()
            .zip(&inputs)
            .map(|(t, x)| (t.info.name.as_str(), x))
            .collect();
        let outputs = session
            .run_refs(&named)
            .map_err(engine(FERROLITE_ERR_RUNTIME))?
            .into_vec();
        for (o, (_, result)) in s.outputs.iter_mut().zip(outputs) {
            o.dtype = result.dtype();
            if o.shape.as_deref() != Some(result.shape()) {
                o.shape = Some(result.shape().to_vec());
            }
            if let Some(b) = o.bound {
                if b.len != result.byte_len() {
                    o.bound = None;
                    o.data = Some(result);
                    return fail(
                        FERROLITE_ERR_BUFFER_SIZE,
                        format!(
                            "output '{}' came out with shape {:?} and no longer fits its bound \
                             buffer of {} bytes (unbound; read it with get_tensor_data)",
                            o.info.name,
                            o.shape.as_deref().unwrap_or(&[]),
                            b.len
                        ),
                    );
                }
                out_bytes(b.addr as *mut u8, b.len, "bound output buffer")?
                    .copy_from_slice(result.bytes());
            }
            o.data = Some(result);
        }
        Ok(())
    })
}

/// Releases what prerun and run built (plans, buffers, results, bound buffers). The graph can
/// be prerun again.
#[no_mangle]
pub extern "C" fn postrun_graph(graph: *mut ferrolite_graph) -> ferrolite_status {
    ffi(|| {
        let g = graph_ref(graph)?;
        let mut s = lock(&g);
        if !s.prepared {
            return fail(
                FERROLITE_ERR_WRONG_STATE,
                "postrun_graph before prerun_graph_multithread",
            );
        }
        let s = &mut *s;
        s.session = None;
        s.prepared = false;
        for t in s.inputs.iter_mut().chain(s.outputs.iter_mut()) {
            t.bound = None;
            t.data = None;
        }
        Ok(())
    })
}
