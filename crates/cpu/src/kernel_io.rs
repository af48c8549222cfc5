//! A kernel's access to its tensors: inputs and outputs checked against the shapes it was
//! built for, and the in-place stepping of the element-wise kernels. How work spreads over
//! threads is [`crate::split`]'s.

use ferrolite_core::plan::KernelRequest;
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};

/// Shape of input `i` when it is present and f32; else the reason a kernel passes.
pub(crate) fn f32_shape<'a>(req: &KernelRequest<'a>, i: usize) -> Result<&'a [usize], String> {
    match req.inputs.get(i) {
        Some(Some(x)) if x.dtype == DType::F32 => Ok(x.shape),
        Some(Some(x)) => Err(format!("needs input {i} as f32, not {}", x.dtype)),
        _ => Err(format!("needs input {i}")),
    }
}

/// Input `i` as f32, checked against the shape the kernel was built for.
pub(crate) fn input<'a>(
    inputs: &[Option<&'a Tensor>],
    i: usize,
    shape: &[usize],
) -> OpResult<&'a [f32]> {
    let t = ferrolite_core::op::required(inputs, i)?;
    op_ensure!(
        t.shape() == shape,
        "input {i} has shape {:?}, the kernel was built for {shape:?}",
        t.shape()
    );
    Ok(t.as_slice::<f32>()?)
}

/// Output `i` as f32, checked against the planned element count.
pub(crate) fn output(outputs: &mut [Tensor], i: usize, numel: usize) -> OpResult<&mut [f32]> {
    let t = outputs
        .get_mut(i)
        .ok_or_else(|| OpError(format!("output {i} is missing")))?;
    let s = t.as_mut_slice::<f32>()?;
    op_ensure!(
        s.len() == numel,
        "output {i} has {} elements, the kernel was built for {numel}",
        s.len()
    );
    Ok(s)
}

/// Input `i` as bytes (an 8-bit tensor), checked against the shape the kernel was built for.
pub(crate) fn input_bytes<'a>(
    inputs: &[Option<&'a Tensor>],
    i: usize,
    shape: &[usize],
) -> OpResult<&'a [u8]> {
    let t = ferrolite_core::op::required(inputs, i)?;
    op_ensure!(
        t.shape() == shape,
        "input {i} has shape {:?}, the kernel was built for {shape:?}",
        t.shape()
    );
    Ok(t.bytes())
}

/// Output `i` as bytes (an 8-bit tensor), checked against the planned element count.
pub(crate) fn output_bytes(outputs: &mut [Tensor], i: usize, numel: usize) -> OpResult<&mut [u8]> {
    let t = outputs
        .get_mut(i)
        .ok_or_else(|| OpError(format!("output {i} is missing")))?;
    op_ensure!(
        t.byte_len() == numel,
        "output {i} has {} bytes, the kernel was built for {numel}",
        t.byte_len()
    );
    Ok(t.bytes_mut())
}

/// Elements per step when a kernel runs over its own output (in place).
pub(crate) const IN_PLACE_STEP: usize = 512;

/// Calls `f(start, src, dst)` over `y` in steps of [`IN_PLACE_STEP`], `src` a copy of the step's
/// elements: a kernel running in place keeps separate source and destination slices, and the
/// copy stays in L1.
pub(crate) fn in_place_steps(y: &mut [f32], mut f: impl FnMut(usize, &[f32], &mut [f32])) {
    let mut tmp = [0f32; IN_PLACE_STEP];
    for (k, dst) in y.chunks_mut(IN_PLACE_STEP).enumerate() {
        let src = &mut tmp[..dst.len()];
        src.copy_from_slice(dst);
        f(k * IN_PLACE_STEP, src, dst);
    }
}
