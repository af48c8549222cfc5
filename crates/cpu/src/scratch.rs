//! Per-thread scratch buffers kept between runs: allocating them per run cost page faults and
//! zero fills on every call.

use std::cell::RefCell;
use std::thread::LocalKey;

/// The first `n` values of a scratch buffer, grown when needed but never cleared: callers
/// write every value they read (zeroing shared scratch on every call cost as much as using
/// it).
pub(crate) fn grown(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// Runs `f` with this thread's scratch in `key`, taken out for the call and put back after
/// rather than borrowed: while a kernel waits for its rayon tasks, rayon may run another
/// kernel (of a concurrent run) on this thread, which would find the scratch borrowed.
pub(crate) fn with_taken<T: Default, R>(
    key: &'static LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    let mut s = key.with(|c| std::mem::take(&mut *c.borrow_mut()));
    let r = f(&mut s);
    key.with(|c| *c.borrow_mut() = s);
    r
}
