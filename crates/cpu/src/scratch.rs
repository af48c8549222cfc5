//! Per-thread buffers of the int8 kernels kept between runs: allocating them per run cost page
//! faults and zero fills on every call. Their packed operands are owned types; moving them to
//! the plan's scratch ([`ferrolite_core::scratch`]), as the f32 kernels' is, is still to do.

use std::cell::RefCell;
use std::thread::LocalKey;

/// This thread's scratch buffers of one kind: a stack rather than one slot, because while a
/// kernel waits for its rayon tasks, rayon may run another kernel (or another task of the same
/// one) on this thread. With one slot that nested call found the buffer taken, allocated its
/// own and, when both were put back, one was dropped: large buffers allocated and freed on the
/// workers every run (ppocrv4_det_qdq's int8 depthwise chunks took its RSS from 52 to 68 MB
/// over 60 runs at 2 threads).
pub(crate) type Scratch<T> = RefCell<Vec<T>>;

/// The most buffers of one kind a thread keeps: as deep as kernels nest on one thread.
const KEPT: usize = 4;

/// A buffer from this thread's `key`, or a new empty one.
pub(crate) fn take<T: Default>(key: &'static LocalKey<Scratch<T>>) -> T {
    key.with(|c| c.borrow_mut().pop().unwrap_or_default())
}

/// Returns a buffer taken with [`take`] to this thread's `key`.
pub(crate) fn put_back<T>(key: &'static LocalKey<Scratch<T>>, buffer: T) {
    key.with(|c| {
        let mut kept = c.borrow_mut();
        if kept.len() < KEPT {
            kept.push(buffer);
        }
    });
}
