//! Prepacked weights that outlive a process: the transformed copies of weights kernels make at
//! prerun (GEMM panels, blocked convolution weights, Winograd-transformed filters) go through
//! [`Prepacks::take`], so that an optimized model (`ferrolite opt`, docs/format.md) can store
//! them and a later load can use them straight from its memory map instead of packing again.
//!
//! A plan build carries one [`Prepacks`] in every [`crate::plan::KernelRequest`]: the plan
//! builder names the node and the registry names the kernel being tried, and each buffer a
//! kernel takes is the next of that (node, kernel) pair. A [`Prepacks::recording`] keeps the
//! buffers made; a [`Prepacks::replaying`] hands a stored buffer back when its description
//! (the dims that decide the layout), dtype and length match, and otherwise the kernel packs
//! as usual. [`Prepacks::none`] just packs.
//!
//! Only numeric payloads (weights, biases, scales) may be taken this way, never indices or
//! offsets that a kernel trusts: a stored buffer comes from a file, and wrong numbers there
//! may give wrong results but must not reach memory out of bounds.

use crate::{DType, Elem, Tensor};
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::{Mutex, MutexGuard};

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
    /// Pack, keep nothing.
    Off,
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

/// The prepacked buffers of one plan build: what its kernels' takes record, or the stored
/// buffers that answer them. Shared by reference through the build's kernel requests.
pub struct Prepacks {
    context: Mutex<Context>,
}

/// The [`Prepacks`] of builds that neither record nor replay.
static NONE: Prepacks = Prepacks::new(Mode::Off);

impl Prepacks {
    const fn new(mode: Mode) -> Prepacks {
        Prepacks {
            context: Mutex::new(Context {
                mode,
                node: String::new(),
                kernel: String::new(),
                seq: 0,
            }),
        }
    }

    /// Builds that pack as usual and keep nothing.
    pub fn none() -> &'static Prepacks {
        &NONE
    }

    /// A build whose kernels' buffers are kept ([`Prepacks::into_records`]).
    pub fn recording() -> Prepacks {
        Prepacks::new(Mode::Record(Vec::new()))
    }

    /// A build whose kernels get `records` where they match ([`Prepacks::used`] counts them).
    pub fn replaying(records: &[PackedRecord]) -> Prepacks {
        let map = records.iter().map(|r| (r.key.clone(), r.clone())).collect();
        Prepacks::new(Mode::Replay(map, 0))
    }

    fn lock(&self) -> MutexGuard<'_, Context> {
        // A build that panicked holding it leaves nothing half-written that matters here.
        self.context.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The buffers recorded (none unless [`Prepacks::recording`]).
    pub fn into_records(self) -> Vec<PackedRecord> {
        let context = self.context.into_inner().unwrap_or_else(|e| e.into_inner());
        match context.mode {
            Mode::Record(records) => records,
            _ => Vec::new(),
        }
    }

    /// How many stored buffers were taken (the others were packed again: another layout, or
    /// not asked for).
    pub fn used(&self) -> usize {
        match self.lock().mode {
            Mode::Replay(_, used) => used,
            _ => 0,
        }
    }

    /// Whether this build records or replays: otherwise kernels pack as usual and need not
    /// prepare for a stored copy.
    pub fn active(&self) -> bool {
        !matches!(self.lock().mode, Mode::Off)
    }

    /// The node whose kernel is chosen next (called by the plan builder).
    pub fn set_node(&self, name: &str) {
        let mut c = self.lock();
        if matches!(c.mode, Mode::Off) {
            return;
        }
        c.node.clear();
        c.node.push_str(name);
        c.kernel.clear();
        c.seq = 0;
    }

    /// The kernel tried next for the current node (called by the registry).
    pub fn set_kernel(&self, name: &str) {
        let mut c = self.lock();
        if matches!(c.mode, Mode::Off) {
            return;
        }
        c.kernel.clear();
        c.kernel.push_str(name);
        c.seq = 0;
    }

    /// Drops what the kernels passed over for `node` made while they were tried: only the
    /// picked kernel's buffers are worth storing.
    pub fn keep_only(&self, node: &str, picked: Option<&str>) {
        if let Mode::Record(records) = &mut self.lock().mode {
            records.retain(|r| r.key.node != node || Some(r.key.kernel.as_str()) == picked);
        }
    }

    /// A prepacked buffer of `len` values whose layout `desc` determines: the stored one when
    /// replaying has it, else `pack()`.
    pub fn take<T: Elem>(
        &self,
        desc: &[usize],
        len: usize,
        pack: impl FnOnce() -> Vec<T>,
    ) -> Packed<T> {
        let all = self.try_take_all(desc, &[len], || {
            Ok::<_, std::convert::Infallible>(vec![pack()])
        });
        match all {
            Ok(mut v) => v.pop().unwrap_or_default(),
            Err(never) => match never {},
        }
    }

    /// [`Prepacks::take`] for buffers made together (one pass over the weights fills them
    /// all), by a packing that may fail: all stored ones when replaying has every one of them,
    /// else `pack()` makes them all. A packing that takes buffers of its own (a GEMM's inside
    /// a kernel's) does so through [`Prepacks::none`]: they belong to this one.
    pub fn try_take_all<T: Elem, E>(
        &self,
        desc: &[usize],
        lens: &[usize],
        pack: impl FnOnce() -> Result<Vec<Vec<T>>, E>,
    ) -> Result<Vec<Packed<T>>, E> {
        let desc: Vec<u64> = desc.iter().map(|&d| d as u64).collect();
        let keys = {
            let mut c = self.lock();
            if matches!(c.mode, Mode::Off) {
                drop(c);
                return Ok(pack()?.into_iter().map(Packed::from_vec).collect());
            }
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
                _ => None,
            };
            if let Some(stored) = hits {
                if let Mode::Replay(_, used) = &mut c.mode {
                    *used += stored.len();
                }
                return Ok(stored.into_iter().map(Packed::shared).collect());
            }
            keys
        };
        // Packed without the lock held: a packing may spread over threads.
        let made = pack()?;
        if let Mode::Record(records) = &mut self.lock().mode {
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
        Ok(made.into_iter().map(Packed::from_vec).collect())
    }
}

impl fmt::Debug for Prepacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.lock();
        let mode = match &c.mode {
            Mode::Off => "none".to_string(),
            Mode::Record(r) => format!("recording, {} buffers", r.len()),
            Mode::Replay(m, used) => format!("replaying, {used} of {} taken", m.len()),
        };
        write!(f, "Prepacks({mode})")
    }
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

    fn build(packs: &Prepacks, node: &str, kernel: &str) -> (Packed<f32>, Packed<i32>) {
        packs.set_node(node);
        packs.set_kernel(kernel);
        let a = packs.take(&[4], 4, || vec![1.0f32, 2.0, 3.0, 4.0]);
        let b = packs.take(&[2, 1], 2, || vec![7i32, 8]);
        (a, b)
    }

    #[test]
    fn recorded_buffers_come_back_in_place() {
        // Neither recording nor replaying: just packed.
        let (a, _) = build(Prepacks::none(), "n", "k");
        assert!(!a.is_stored());
        assert!(!Prepacks::none().active());
        let recording = Prepacks::recording();
        build(&recording, "n", "k");
        // A kernel passed over for the same node: its buffers are dropped.
        recording.set_kernel("other");
        recording.take(&[1], 1, || vec![0.5f32]);
        recording.keep_only("n", Some("k"));
        let records = recording.into_records();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].key.seq, 1);
        let packed_again = std::cell::Cell::new(0);
        let replaying = Prepacks::replaying(&records);
        replaying.set_node("n");
        replaying.set_kernel("k");
        let a = replaying.take(&[4], 4, || {
            packed_again.set(packed_again.get() + 1);
            vec![0.0f32; 4]
        });
        // Another layout for the second buffer: packed again, not taken.
        let b = replaying.take(&[2, 2], 2, || {
            packed_again.set(packed_again.get() + 1);
            vec![9i32, 9]
        });
        let used = replaying.used();
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
        // Builds without one are unaffected.
        let (a, _) = build(Prepacks::none(), "n", "k");
        assert!(!a.is_stored());
    }

    #[test]
    fn a_stored_buffer_of_another_dtype_or_length_is_not_taken() {
        let recording = Prepacks::recording();
        build(&recording, "n", "k");
        let replaying = Prepacks::replaying(&recording.into_records());
        replaying.set_node("n");
        replaying.set_kernel("k");
        let a: Packed<i32> = replaying.take(&[4], 4, || vec![0; 4]);
        assert!(!a.is_stored(), "dtype differs");
        let b: Packed<i32> = replaying.take(&[2, 1], 3, || vec![0; 3]);
        assert!(!b.is_stored(), "length differs");
        assert_eq!(replaying.used(), 0);
    }
}
