//! Shared helpers for the f32 kernels of the cheap ops (elementwise, pooling, softmax,
//! reductions, normalisations, data movement).

use ferrolite_core::plan::KernelRequest;
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};
use rayon::prelude::*;

/// Below this many output elements a kernel stays on the calling thread.
pub(crate) const PAR_MIN: usize = 1 << 14;

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

/// Calls `f(start, chunk)` over `out` split in chunks (multiples of `align` elements), in
/// parallel when `out` is large; `work` scales the size threshold (cost per element).
pub(crate) fn for_chunks<T: Send, F>(out: &mut [T], align: usize, work: usize, f: F)
where
    F: Fn(usize, &mut [T]) + Sync,
{
    let n = out.len();
    let threads = rayon::current_num_threads();
    let align = align.max(1);
    if threads <= 1 || n.saturating_mul(work.max(1)) < PAR_MIN || n <= align {
        f(0, out);
        return;
    }
    let min_chunk = (PAR_MIN / 4 / work.max(1)).max(1);
    let chunk = n.div_ceil(threads * 4).max(min_chunk).div_ceil(align) * align;
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, c)| f(i * chunk, c));
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

/// Like [`for_chunks`] but fallible.
pub(crate) fn try_for_chunks<F>(out: &mut [f32], align: usize, work: usize, f: F) -> OpResult<()>
where
    F: Fn(usize, &mut [f32]) -> OpResult<()> + Sync,
{
    let err = std::sync::Mutex::new(None);
    for_chunks(out, align, work, |s, c| {
        if let Err(e) = f(s, c) {
            if let Ok(mut g) = err.lock() {
                *g = Some(e);
            }
        }
    });
    match err.into_inner().ok().flatten() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
