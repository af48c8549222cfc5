//! Prepacked weights that outlive a process: the transformed copies of weights kernels make at
//! prerun (GEMM panels, blocked convolution weights, Winograd-transformed filters) go through
//! [`take`], so that an optimized model (`ferrolite opt`, docs/format.md) can store them and a
//! later load can use them straight from its memory map instead of packing again.
//!
//! While a plan is built, [`crate::plan::Plan::build`] names the node and the registry names the
//! kernel being tried; each buffer a kernel takes is the next of that (node, kernel) pair.
//! Under [`record`], the buffers made are kept; under [`replay`], a stored buffer is handed
//! back when its description (the dims that decide the layout), dtype and length match, and
//! otherwise the kernel packs as usual. Outside both, [`take`] just packs.
//!
//! Only numeric payloads (weights, biases, scales) may be taken this way, never indices or
//! offsets that a kernel trusts: a stored buffer comes from a file, and wrong numbers there
//! may give wrong results but must not reach memory out of bounds.

use crate::{DType, Elem, Tensor};
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

/// Where one prepacked buffer belongs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PackKey {
    /// The node's name.
    pub node: String,
    /// The registry entry (kernel) that made it.
    pub kernel: String,
    /// Its place among the buffers that kernel took for that node.
    pub seq: u32,
}

/// One prepacked buffer with what identifies its layout.
#[derive(Clone, Debug)]
pub struct PackedRecord {
    pub key: PackKey,
    /// The dims that decide the layout (a kernel's own choice of numbers).
    pub desc: Vec<u64>,
    /// The values, as a 1-D tensor.
    pub tensor: Tensor,
}

enum Mode {
    Record(Vec<PackedRecord>),
    /// The stored buffers, and how many of them were taken.
    Replay(HashMap<PackKey, PackedRecord>, usize),
}

struct Context {
    mode: Mode,
    node: String,
    kernel: String,
    seq: u32,
}

thread_local! {
    static CONTEXT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

fn with_context<R>(f: impl FnOnce(&mut Context) -> R) -> Option<R> {
    CONTEXT.with(|c| c.borrow_mut().as_mut().map(f))
}

/// Runs `f` with `mode` active on this thread, restoring what was there before.
fn scoped<R>(mode: Mode, f: impl FnOnce() -> R) -> (R, Mode) {
    let fresh = Context {
        mode,
        node: String::new(),
        kernel: String::new(),
        seq: 0,
    };
    // The outer context comes back when this returns, or if `f` unwinds.
    struct Restore(Option<Context>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CONTEXT.with(|c| *c.borrow_mut() = outer);
        }
    }
    let restore = Restore(CONTEXT.with(|c| c.borrow_mut().replace(fresh)));
    let r = f();
    let ours = CONTEXT.with(|c| c.borrow_mut().take());
    drop(restore);
    (r, ours.map_or(Mode::Record(Vec::new()), |c| c.mode))
}

/// Runs `f` with no context, then puts this thread's back.
fn suspended<R>(f: impl FnOnce() -> R) -> R {
    scoped_none(f)
}

fn scoped_none<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Context>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CONTEXT.with(|c| *c.borrow_mut() = outer);
        }
    }
    let _restore = Restore(CONTEXT.with(|c| c.borrow_mut().take()));
    f()
}

/// Runs `f` (a plan build) and returns the prepacked buffers its kernels made.
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Vec<PackedRecord>) {
    match scoped(Mode::Record(Vec::new()), f) {
        (r, Mode::Record(records)) => (r, records),
        (r, Mode::Replay(..)) => (r, Vec::new()),
    }
}

/// Runs `f` (a plan build) with `records` answering the kernels' [`take`]s; also returns how
/// many of them were taken (the others were packed again: another layout, or not asked for).
pub fn replay<R>(records: &[PackedRecord], f: impl FnOnce() -> R) -> (R, usize) {
    let map = records.iter().map(|r| (r.key.clone(), r.clone())).collect();
    match scoped(Mode::Replay(map, 0), f) {
        (r, Mode::Replay(_, used)) => (r, used),
        (r, Mode::Record(_)) => (r, 0),
    }
}

/// Whether a [`record`] or [`replay`] is active on this thread: outside them, kernels pack
/// as usual and need not prepare for a stored copy.
pub fn active() -> bool {
    CONTEXT.with(|c| c.borrow().is_some())
}

/// The node whose kernel is chosen next (called by the plan builder).
pub fn set_node(name: &str) {
    with_context(|c| {
        c.node.clear();
        c.node.push_str(name);
        c.kernel.clear();
        c.seq = 0;
    });
}

/// The kernel tried next for the current node (called by the registry).
pub fn set_kernel(name: &str) {
    with_context(|c| {
        c.kernel.clear();
        c.kernel.push_str(name);
        c.seq = 0;
    });
}

/// Drops what the kernels passed over for `node` made while they were tried: only the picked
/// kernel's buffers are worth storing.
pub fn keep_only(node: &str, picked: Option<&str>) {
    with_context(|c| {
        if let Mode::Record(records) = &mut c.mode {
            records.retain(|r| r.key.node != node || Some(r.key.kernel.as_str()) == picked);
        }
    });
}

/// A prepacked buffer of `len` values whose layout `desc` determines: the stored one when a
/// [`replay`] has it, else `pack()`.
pub fn take<T: Elem>(desc: &[usize], len: usize, pack: impl FnOnce() -> Vec<T>) -> Packed<T> {
    let all = try_take_all(desc, &[len], || {
        Ok::<_, std::convert::Infallible>(vec![pack()])
    });
    match all {
        Ok(mut v) => v.pop().unwrap_or_default(),
        Err(never) => match never {},
    }
}

/// [`take`] for buffers made together (one pass over the weights fills them all), by a
/// packing that may fail: all stored ones when a [`replay`] has every one of them, else
/// `pack()` makes them all.
pub fn try_take_all<T: Elem, E>(
    desc: &[usize],
    lens: &[usize],
    pack: impl FnOnce() -> Result<Vec<Vec<T>>, E>,
) -> Result<Vec<Packed<T>>, E> {
    let desc: Vec<u64> = desc.iter().map(|&d| d as u64).collect();
    let found = with_context(|c| {
        let first = c.seq;
        c.seq += lens.len() as u32;
        let keys: Vec<PackKey> = (0..lens.len() as u32)
            .map(|i| PackKey {
                node: c.node.clone(),
                kernel: c.kernel.clone(),
                seq: first + i,
            })
            .collect();
        let hits: Option<Vec<Tensor>> = match &c.mode {
            Mode::Replay(map, _) => keys
                .iter()
                .zip(lens)
                .map(|(key, &len)| {
                    let r = map.get(key)?;
                    let t = &r.tensor;
                    let fits = r.desc == desc
                        && t.dtype() == T::DTYPE
                        && t.numel() == len
                        && t.rank() == 1;
                    fits.then(|| t.clone())
                })
                .collect(),
            Mode::Record(_) => None,
        };
        if let (Some(h), Mode::Replay(_, used)) = (&hits, &mut c.mode) {
            *used += h.len();
        }
        (keys, hits)
    });
    let keys = match found {
        None => return Ok(pack()?.into_iter().map(Packed::from_vec).collect()),
        Some((_, Some(stored))) => return Ok(stored.into_iter().map(Packed::shared).collect()),
        Some((keys, None)) => keys,
    };
    // Takes nested inside `pack` (a GEMM packing inside a kernel's own) belong to it.
    let made = suspended(pack)?;
    with_context(|c| {
        if let Mode::Record(records) = &mut c.mode {
            for (key, values) in keys.into_iter().zip(&made) {
                if let Ok(tensor) = Tensor::from_slice(&[values.len()], values) {
                    records.push(PackedRecord {
                        key,
                        desc: desc.clone(),
                        tensor,
                    });
                }
            }
        }
    });
    Ok(made.into_iter().map(Packed::from_vec).collect())
}

/// A kernel's prepacked values: its own, or a stored buffer viewed in place (a memory map).
/// Reads like a slice; writing copies a stored buffer first.
pub struct Packed<T: Elem> {
    data: PackedData<T>,
}

enum PackedData<T: Elem> {
    /// Its own 1-D tensor of dtype `T`: 64-byte aligned, as a stored buffer is. A `Vec` from
    /// the allocator is not (a large one starts 16 bytes into its page), and kernels reading
    /// 64-byte vectors from it then split every load across two cache lines: 5 to 15% of a
    /// fully connected layer at 1 thread on AVX-512.
    Own(Tensor, PhantomData<T>),
    /// Where an aligned copy could not be made (the tensor size limit): the vector itself.
    Unaligned(Vec<T>),
    /// A 1-D tensor of dtype `T` (checked when made), read in place from a stored model.
    Stored(Tensor, PhantomData<T>),
}

impl<T: Elem> Packed<T> {
    pub fn from_vec(v: Vec<T>) -> Packed<T> {
        let data = match Tensor::from_slice(&[v.len()], &v) {
            Ok(t) => PackedData::Own(t, PhantomData),
            Err(_) => PackedData::Unaligned(v),
        };
        Packed { data }
    }

    /// `len` zeros, to be filled with [`Packed::as_mut_slice`].
    pub fn zeros(len: usize) -> Packed<T> {
        let data = match Tensor::zeros(T::DTYPE, &[len]) {
            Ok(t) => PackedData::Own(t, PhantomData),
            Err(_) => PackedData::Unaligned(vec![T::default(); len]),
        };
        Packed { data }
    }

    fn shared(t: Tensor) -> Packed<T> {
        debug_assert_eq!(t.dtype(), T::DTYPE);
        Packed {
            data: PackedData::Stored(t, PhantomData),
        }
    }

    pub fn as_slice(&self) -> &[T] {
        match &self.data {
            // The dtype was checked against T when the tensor was made or taken.
            PackedData::Own(t, _) | PackedData::Stored(t, _) => t.as_slice::<T>().unwrap_or(&[]),
            PackedData::Unaligned(v) => v,
        }
    }

    /// The values to write, copying a stored buffer first.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        if let PackedData::Stored(t, _) = &self.data {
            let copy = t.as_slice::<T>().unwrap_or(&[]).to_vec();
            *self = Packed::from_vec(copy);
        }
        match &mut self.data {
            PackedData::Own(t, _) => t.as_mut_slice::<T>().unwrap_or(&mut []),
            PackedData::Unaligned(v) => v,
            PackedData::Stored(..) => &mut [],
        }
    }

    /// The values as a vector of their own (a copy, unless they could not be aligned).
    pub fn into_vec(self) -> Vec<T> {
        match self.data {
            PackedData::Unaligned(v) => v,
            PackedData::Own(t, _) | PackedData::Stored(t, _) => {
                t.as_slice::<T>().unwrap_or(&[]).to_vec()
            }
        }
    }

    /// Whether the values are a stored buffer used in place.
    pub fn is_stored(&self) -> bool {
        matches!(self.data, PackedData::Stored(..))
    }

    /// Bytes of the values.
    pub fn bytes(&self) -> usize {
        size_of_val(self.as_slice())
    }

    pub fn dtype(&self) -> DType {
        T::DTYPE
    }
}

impl<T: Elem> Deref for Packed<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Elem> Clone for Packed<T> {
    fn clone(&self) -> Self {
        match &self.data {
            PackedData::Own(t, _) => Packed {
                data: PackedData::Own(t.clone(), PhantomData),
            },
            PackedData::Unaligned(v) => Packed::from_vec(v.clone()),
            PackedData::Stored(t, _) => Packed::shared(t.clone()),
        }
    }
}

impl<T: Elem> PartialEq for Packed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Elem> fmt::Debug for Packed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Packed<{}>[{}{}]",
            T::DTYPE,
            self.len(),
            if self.is_stored() { ", stored" } else { "" }
        )
    }
}

impl<T: Elem> Default for Packed<T> {
    fn default() -> Self {
        Packed::from_vec(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(node: &str, kernel: &str) -> (Packed<f32>, Packed<i32>) {
        set_node(node);
        set_kernel(kernel);
        let a = take(&[4], 4, || vec![1.0f32, 2.0, 3.0, 4.0]);
        let b = take(&[2, 1], 2, || vec![7i32, 8]);
        (a, b)
    }

    #[test]
    fn recorded_buffers_come_back_in_place() {
        // Outside a record or replay: just packed.
        let (a, _) = build("n", "k");
        assert!(!a.is_stored());
        let (_, records) = record(|| {
            build("n", "k");
            // A kernel passed over for the same node: its buffers are dropped.
            set_kernel("other");
            take(&[1], 1, || vec![0.5f32]);
            keep_only("n", Some("k"));
        });
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].key.seq, 1);
        let packed_again = std::cell::Cell::new(0);
        let ((a, b), used) = replay(&records, || {
            set_node("n");
            set_kernel("k");
            let a = take(&[4], 4, || {
                packed_again.set(packed_again.get() + 1);
                vec![0.0f32; 4]
            });
            // Another layout for the second buffer: packed again, not taken.
            let b = take(&[2, 2], 2, || {
                packed_again.set(packed_again.get() + 1);
                vec![9i32, 9]
            });
            (a, b)
        });
        assert!(a.is_stored());
        assert_eq!(&a[..], &[1.0, 2.0, 3.0, 4.0]);
        assert!(!b.is_stored());
        assert_eq!(&b[..], &[9, 9]);
        assert_eq!(packed_again.get(), 1);
        assert_eq!(used, 1);
        // Writing copies.
        let mut w = a.clone();
        w.as_mut_slice()[0] = -1.0;
        assert_eq!(a[0], 1.0);
        assert_eq!(w[0], -1.0);
        // The context is gone afterwards.
        let (a, _) = build("n", "k");
        assert!(!a.is_stored());
    }

    #[test]
    fn a_stored_buffer_of_another_dtype_or_length_is_not_taken() {
        let (_, records) = record(|| build("n", "k"));
        replay(&records, || {
            set_node("n");
            set_kernel("k");
            let a: Packed<i32> = take(&[4], 4, || vec![0; 4]);
            assert!(!a.is_stored(), "dtype differs");
            let b: Packed<i32> = take(&[2, 1], 3, || vec![0; 3]);
            assert!(!b.is_stored(), "length differs");
        });
    }
}
