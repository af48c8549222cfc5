//! Kernels' scratch memory, planned like the tensors: a kernel declares what it needs when the
//! plan is built ([`crate::plan::Kernel::scratch`]), the plan keeps one [`Scratch`] per
//! concurrent run sized for its neediest step, and `--max-memory` counts it.
//!
//! A kernel needs two kinds of scratch: one region for the run as a whole (a padded copy of
//! the input, say) and one per worker thread for what each parallel task works in (packed
//! panels, a block's transformed tiles). A task takes its thread's region for the length of
//! the task; regions hold what the last task left, since kernels write every value they read.

use crate::{OpError, OpResult};
use bytemuck::{Pod, Zeroable};
use std::sync::Mutex;

/// What a kernel declares: bytes for the whole run, and bytes for each worker thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScratchNeed {
    pub shared: usize,
    pub per_thread: usize,
}

impl ScratchNeed {
    /// No scratch.
    pub const NONE: ScratchNeed = ScratchNeed {
        shared: 0,
        per_thread: 0,
    };

    /// Bytes in all at `threads` workers.
    pub fn bytes(&self, threads: usize) -> u64 {
        (self.per_thread as u64)
            .saturating_mul(threads.max(1) as u64)
            .saturating_add(self.shared as u64)
    }

    /// The larger of each part: what a sequence of kernels, one at a time, needs.
    pub fn max(self, other: ScratchNeed) -> ScratchNeed {
        ScratchNeed {
            shared: self.shared.max(other.shared),
            per_thread: self.per_thread.max(other.per_thread),
        }
    }

    /// `bytes` for the whole run only.
    pub fn for_run(bytes: usize) -> ScratchNeed {
        ScratchNeed {
            shared: bytes,
            per_thread: 0,
        }
    }

    /// `bytes` for each worker thread only.
    pub fn for_each_thread(bytes: usize) -> ScratchNeed {
        ScratchNeed {
            shared: 0,
            per_thread: bytes,
        }
    }

    /// Whether there is none.
    pub fn is_none(&self) -> bool {
        self.shared == 0 && self.per_thread == 0
    }
}

/// The bytes [`Carve::take`] uses for `n` values of `T`: whole cache lines, so every buffer
/// starts on one.
pub fn bytes_for<T>(n: usize) -> usize {
    n.saturating_mul(std::mem::size_of::<T>())
        .saturating_add(LINE - 1)
        / LINE
        * LINE
}

const LINE: usize = 64;

/// The unit scratch is allocated in, so that it starts on a cache line.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; LINE]);

fn lines(bytes: usize) -> Vec<Line> {
    // Zeroed through the allocator: pages are only touched where a kernel writes.
    vec![Line::zeroed(); bytes.div_ceil(LINE)]
}

/// A region and its lock, alone on its cache line: workers take their own regions at every
/// task, and locks side by side would bounce one line between their cores.
#[derive(Default)]
#[repr(align(64))]
struct ThreadRegion(Mutex<Vec<Line>>);

/// The scratch of one run of a plan: a shared region and one region per worker thread.
#[derive(Default)]
pub struct Scratch {
    need: ScratchNeed,
    /// The workers it was made for.
    threads: usize,
    shared: Mutex<Vec<Line>>,
    regions: Vec<ThreadRegion>,
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch")
            .field("need", &self.need)
            .field("threads", &self.threads)
            .finish()
    }
}

impl Scratch {
    /// Scratch for `need` with a region for each of `threads` workers (rayon's thread
    /// indices).
    pub fn new(need: ScratchNeed, threads: usize) -> Scratch {
        let regions = if need.per_thread == 0 { 0 } else { threads };
        Scratch {
            need,
            threads,
            shared: Mutex::new(lines(need.shared)),
            regions: (0..regions)
                .map(|_| ThreadRegion(Mutex::new(lines(need.per_thread))))
                .collect(),
        }
    }

    /// Scratch for `need` at the current rayon pool's thread count (kernels run outside a
    /// plan: tests, tools).
    pub fn for_need(need: ScratchNeed) -> Scratch {
        Scratch::new(need, rayon::current_num_threads())
    }

    /// The workers it was made for.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on the shared region (the run's own, taken by the thread that runs the
    /// kernel).
    pub fn with_shared<R>(&self, f: impl FnOnce(&mut Carve) -> R) -> R {
        match self.shared.try_lock() {
            Ok(mut region) => f(&mut Carve::new(&mut region)),
            // Held already: a kernel of another part of the same run (a subgraph's plan run
            // inside this step) nested on this thread. Rare; it gets memory of its own.
            Err(_) => f(&mut Carve::new(&mut lines(self.need.shared))),
        }
    }

    /// Runs `f` on the calling worker thread's region.
    pub fn with_thread<R>(&self, f: impl FnOnce(&mut Carve) -> R) -> R {
        let slot = rayon::current_thread_index().and_then(|i| self.regions.get(i));
        match slot.map(|s| s.0.try_lock()) {
            Some(Ok(mut region)) => f(&mut Carve::new(&mut region)),
            // Not a worker of the pool this scratch was made for, or a task nested on a
            // thread whose region is taken (a task that waited for rayon and ran another
            // task meanwhile): memory of its own for this task.
            _ => f(&mut Carve::new(&mut lines(self.need.per_thread))),
        }
    }
}

/// Hands out typed buffers from a region, in order, each starting on a cache line.
pub struct Carve<'a> {
    rest: &'a mut [u8],
}

impl<'a> Carve<'a> {
    fn new(region: &'a mut [Line]) -> Carve<'a> {
        Carve {
            rest: bytemuck::cast_slice_mut(region),
        }
    }

    /// Scratch bytes given to nobody yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// The next `bytes` as a region of their own, carved again and again: each iteration of
    /// a loop takes its buffers from [`Region::carve`].
    pub fn take_region(&mut self, bytes: usize) -> OpResult<Region<'a>> {
        Ok(Region(self.take::<u8>(bytes)?))
    }

    /// The next `n` values of `T`, holding whatever the last user left there. An error when
    /// the region is smaller than the kernel declared: a kernel's bug, not the model's.
    pub fn take<T: Pod>(&mut self, n: usize) -> OpResult<&'a mut [T]> {
        let bytes = bytes_for::<T>(n);
        if bytes > self.rest.len() {
            return Err(OpError(format!(
                "scratch: {bytes} bytes wanted, {} left of what the kernel declared",
                self.rest.len()
            )));
        }
        let rest = std::mem::take(&mut self.rest);
        let (head, tail) = rest.split_at_mut(bytes);
        self.rest = tail;
        let head = &mut head[..n * std::mem::size_of::<T>()];
        bytemuck::try_cast_slice_mut(head)
            .map_err(|e| OpError(format!("scratch: misaligned buffer ({e})")))
    }
}

/// Part of a region that a loop reuses (see [`Carve::take_region`]); starts on a cache line.
pub struct Region<'a>(&'a mut [u8]);

impl Region<'_> {
    /// Hands out the region from its start again.
    pub fn carve(&mut self) -> Carve<'_> {
        Carve { rest: self.0 }
    }
}
