//! The one place that decides how a kernel's work spreads over the session's threads.
//!
//! A kernel describes a run by its [`Cost`] (arithmetic and memory traffic) and by the units it
//! can be cut into (rows, pixel blocks, channel groups, column strips). [`workers`] says how
//! many threads that cost is worth, [`cut`] cuts the units into tasks for them, and the task
//! runners ([`for_each_task`], [`try_for_each_task`], [`for_chunks`], [`try_for_chunks`])
//! run the tasks: on the calling thread when there is one, else over the session's rayon pool.
//! No kernel calls rayon itself or keeps a threshold of its own.
//!
//! The cost model is deliberately rough: one core does about [`FLOPS_PER_NS`] floating-point
//! (or int8 multiply-add) operations and streams about [`BYTES_PER_NS`] bytes per
//! nanosecond, and a thread pays for waking and joining only when it gets at least
//! [`TASK_NS`] of work. Those three numbers replace the thresholds the kernels used to keep
//! (2^18 flops per GEMM task, 2^19 flops before a convolution went parallel, 2^14 output
//! elements before an element-wise loop did, 2^14 multiply-adds per GEMV task), and give the
//! same decisions on the workloads those were tuned on.

use ferrolite_core::OpResult;
use rayon::prelude::*;

/// Floating-point operations one core does per nanosecond in a compute-bound kernel (an AVX2
/// core at about 3 GHz keeps two 8-lane FMA pipes most of the way busy).
pub(crate) const FLOPS_PER_NS: usize = 64;
/// Bytes one core streams per nanosecond through its caches in a memory-bound kernel.
pub(crate) const BYTES_PER_NS: usize = 16;
/// Nanoseconds of work a thread must get to pay for being woken and joined.
pub(crate) const TASK_NS: usize = 4096;
/// Tasks per worker for work whose tasks cost nothing to start: more, smaller tasks even out
/// a noisy machine (a worker descheduled for a while leaves its share to the others).
pub(crate) const BALANCE: usize = 4;

/// What one run of a kernel costs: its arithmetic and the bytes it moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    pub flops: usize,
    pub bytes: usize,
}

impl Cost {
    /// Compute-bound work of `flops` operations (a multiply-add counts two).
    pub fn flops(flops: usize) -> Cost {
        Cost { flops, bytes: 0 }
    }

    /// Memory-bound work moving `bytes`.
    pub fn bytes(bytes: usize) -> Cost {
        Cost { flops: 0, bytes }
    }

    /// `n` outputs of `elem` bytes, each reading `passes` inputs' worth (a pool's taps, a
    /// reduction's length, a transcendental's few operations counted as passes).
    pub fn elementwise(n: usize, elem: usize, passes: usize) -> Cost {
        Cost::bytes(
            n.saturating_mul(elem)
                .saturating_mul(passes.max(1).saturating_add(1)),
        )
    }

    /// Estimated nanoseconds on one core.
    pub fn nanos(self) -> usize {
        (self.flops / FLOPS_PER_NS).saturating_add(self.bytes / BYTES_PER_NS)
    }
}

/// The threads of the pool the kernel runs in (the session's; 1 outside a pool of its own).
pub(crate) fn threads() -> usize {
    rayon::current_num_threads().max(1)
}

/// How many of `threads` threads work costing `cost` is worth: each must get [`TASK_NS`].
pub(crate) fn workers(cost: Cost, threads: usize) -> usize {
    threads.min(cost.nanos() / TASK_NS).max(1)
}

/// Tasks over the units of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tasks {
    /// How many tasks (at least 1).
    pub count: usize,
    /// Units per task, a multiple of the alignment (the last task may get fewer).
    pub per: usize,
}

impl Tasks {
    /// Whether the tasks spread over more than the calling thread.
    pub fn parallel(self) -> bool {
        self.count > 1
    }

    /// The units of task `t`.
    pub fn range(self, t: usize, units: usize) -> std::ops::Range<usize> {
        (t * self.per).min(units)..((t + 1) * self.per).min(units)
    }
}

/// Cuts `units` into tasks for `workers` threads, `per_worker` tasks each (1 where every task
/// pays a setup, such as packing, [`BALANCE`] where tasks are free), each task a multiple of
/// `align` units. Fewer tasks where there are not enough units.
pub(crate) fn cut(units: usize, align: usize, workers: usize, per_worker: usize) -> Tasks {
    let align = align.max(1);
    let blocks = units.div_ceil(align).max(1);
    let want = workers.max(1).saturating_mul(per_worker.max(1));
    if workers <= 1 || blocks <= 1 {
        return Tasks {
            count: 1,
            per: units.max(1).next_multiple_of(align),
        };
    }
    let per = blocks.div_ceil(want.min(blocks)) * align;
    Tasks {
        count: units.div_ceil(per).max(1),
        per,
    }
}

/// How many of the current pool's threads a run costing `cost` is worth.
pub(crate) fn worth(cost: Cost) -> usize {
    workers(cost, threads())
}

/// [`cut`] for a run costing `cost` on the current pool's threads.
pub(crate) fn plan(cost: Cost, units: usize, align: usize, per_worker: usize) -> Tasks {
    cut(units, align, workers(cost, threads()), per_worker)
}

/// Runs `f(t)` for every task `t < count`: in parallel when `parallel` and there are
/// several (a kernel may cut work into blocks for its caches and still run them in turn).
pub(crate) fn for_each_task(count: usize, parallel: bool, f: impl Fn(usize) + Sync + Send) {
    if parallel && count > 1 {
        (0..count).into_par_iter().for_each(f);
    } else {
        (0..count).for_each(f);
    }
}

/// [`for_each_task`] for tasks that may fail: the first error is returned.
pub(crate) fn try_for_each_task(
    count: usize,
    parallel: bool,
    f: impl Fn(usize) -> OpResult<()> + Sync + Send,
) -> OpResult<()> {
    if parallel && count > 1 {
        (0..count).into_par_iter().try_for_each(f)
    } else {
        (0..count).try_for_each(f)
    }
}

/// Runs `f` on every item (each borrowing its own part of an output), in parallel when
/// `parallel` and there are several.
pub(crate) fn try_for_each_item<T: Send>(
    items: Vec<T>,
    parallel: bool,
    f: impl Fn(T) -> OpResult<()> + Sync + Send,
) -> OpResult<()> {
    if parallel && items.len() > 1 {
        items.into_par_iter().try_for_each(f)
    } else {
        items.into_iter().try_for_each(f)
    }
}

/// Folds `map` of every chunk of `0..len` (an element-wise read of `elem`-byte values) with
/// `combine`, from `identity`: a reduction spread like [`for_chunks`].
pub(crate) fn map_reduce<R: Send + Clone + Sync>(
    len: usize,
    elem: usize,
    identity: R,
    map: impl Fn(std::ops::Range<usize>) -> R + Sync + Send,
    combine: impl Fn(R, R) -> R + Sync + Send,
) -> R {
    let tasks = plan(Cost::bytes(len.saturating_mul(elem)), len, 64, BALANCE);
    if tasks.parallel() {
        (0..tasks.count)
            .into_par_iter()
            .map(|t| map(tasks.range(t, len)))
            .reduce(|| identity.clone(), &combine)
    } else {
        combine(identity, map(0..len))
    }
}

/// Calls `f(start, chunk)` over `out` cut into chunks of `tasks.per` elements.
pub(crate) fn chunks<T: Send>(out: &mut [T], tasks: Tasks, f: impl Fn(usize, &mut [T]) + Sync) {
    let per = tasks.per.max(1);
    if tasks.parallel() {
        out.par_chunks_mut(per)
            .enumerate()
            .for_each(|(i, c)| f(i * per, c));
    } else {
        out.chunks_mut(per)
            .enumerate()
            .for_each(|(i, c)| f(i * per, c));
    }
}

/// [`chunks`] for tasks that may fail: the first error is returned.
pub(crate) fn try_chunks<T: Send>(
    out: &mut [T],
    tasks: Tasks,
    f: impl Fn(usize, &mut [T]) -> OpResult<()> + Sync,
) -> OpResult<()> {
    let per = tasks.per.max(1);
    if tasks.parallel() {
        out.par_chunks_mut(per)
            .enumerate()
            .try_for_each(|(i, c)| f(i * per, c))
    } else {
        out.chunks_mut(per)
            .enumerate()
            .try_for_each(|(i, c)| f(i * per, c))
    }
}

/// Calls `f(first, rows)` over `out` as rows of `row_len` elements, cut into whole rows
/// (`first` is the index of the first) spread over `workers` threads ([`worth`]),
/// [`BALANCE`] tasks each: for tasks that set something up once for their rows.
pub(crate) fn row_chunks<T: Send>(
    out: &mut [T],
    row_len: usize,
    workers: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let row_len = row_len.max(1);
    let tasks = cut(out.len(), row_len, workers, BALANCE);
    chunks(out, tasks, |start, c| f(start / row_len, c))
}

/// Calls `f(r, row)` for every row of `row_len` elements of `out` (the last may be shorter),
/// the rows spread over `workers` threads ([`worth`]), [`BALANCE`] tasks each.
pub(crate) fn for_rows<T: Send>(
    out: &mut [T],
    row_len: usize,
    workers: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let row_len = row_len.max(1);
    row_chunks(out, row_len, workers, |first, c| {
        for (i, row) in c.chunks_mut(row_len).enumerate() {
            f(first + i, row)
        }
    })
}

/// Calls `f(start, chunk)` over `out` in chunks that are multiples of `align` elements,
/// [`BALANCE`] per worker, for an element-wise run where each output costs `passes` passes
/// over its size ([`Cost::elementwise`]).
pub(crate) fn for_chunks<T: Send>(
    out: &mut [T],
    align: usize,
    passes: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let cost = Cost::elementwise(out.len(), size_of::<T>(), passes);
    let tasks = plan(cost, out.len(), align, BALANCE);
    chunks(out, tasks, f)
}

/// [`for_chunks`] for tasks that may fail: the first error is returned.
pub(crate) fn try_for_chunks<T: Send>(
    out: &mut [T],
    align: usize,
    passes: usize,
    f: impl Fn(usize, &mut [T]) -> OpResult<()> + Sync,
) -> OpResult<()> {
    let cost = Cost::elementwise(out.len(), size_of::<T>(), passes);
    let tasks = plan(cost, out.len(), align, BALANCE);
    try_chunks(out, tasks, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_below_one_task_stays_on_the_calling_thread() {
        assert_eq!(workers(Cost::flops(FLOPS_PER_NS * TASK_NS - 1), 8), 1);
        assert_eq!(workers(Cost::bytes(BYTES_PER_NS * TASK_NS * 2), 8), 2);
        assert_eq!(workers(Cost::flops(usize::MAX), 8), 8);
        assert_eq!(workers(Cost::flops(usize::MAX), 0), 1);
        assert_eq!(workers(Cost::default(), 4), 1);
    }

    /// The thresholds the kernels kept before this module: the cost model reproduces them.
    #[test]
    fn the_model_keeps_the_thresholds_it_replaced() {
        // A GEMM task per 2^18 flops.
        assert_eq!(workers(Cost::flops(1 << 18), 64), 1);
        assert_eq!(workers(Cost::flops(3 << 18), 64), 3);
        // A convolution went parallel on 2 threads from 2^19 flops.
        assert_eq!(workers(Cost::flops((1 << 19) - 64), 2), 1);
        assert_eq!(workers(Cost::flops(1 << 19), 2), 2);
        // An element-wise f32 loop from 2^14 outputs.
        assert_eq!(workers(Cost::elementwise((1 << 14) - 64, 4, 1), 2), 1);
        assert_eq!(workers(Cost::elementwise(1 << 14, 4, 1), 2), 2);
        // A GEMV task per 2^14 multiply-adds of streamed f32 weights.
        assert_eq!(workers(Cost::bytes((2 << 14) * 4 / 2 * 2), 8), 2);
    }

    #[test]
    fn a_reduction_sees_every_element_once() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for len in [0, 1, 100, 1 << 20] {
            let sum =
                pool.install(|| map_reduce(len, 4, 0usize, |r| r.sum::<usize>(), |a, b| a + b));
            assert_eq!(sum, len * len.saturating_sub(1) / 2, "{len}");
        }
    }

    #[test]
    fn tasks_cover_the_units_in_aligned_pieces() {
        for units in [0, 1, 5, 7, 8, 63, 64, 65, 1000, 4097] {
            for align in [1, 3, 8, 16] {
                for workers in [1, 2, 3, 4, 16] {
                    for per_worker in [1, 4] {
                        let t = cut(units, align, workers, per_worker);
                        assert!(t.count >= 1);
                        assert_eq!(t.per % align, 0, "{units} {align} {workers}");
                        assert!(t.count * t.per >= units, "{units} {align} {workers}");
                        assert!((t.count - 1) * t.per < units.max(1), "no empty task");
                        assert!(t.count <= (workers * per_worker).max(1));
                        if workers == 1 {
                            assert_eq!(t.count, 1);
                        }
                        let covered: usize = (0..t.count).map(|i| t.range(i, units).len()).sum();
                        assert_eq!(covered, units);
                    }
                }
            }
        }
    }

    #[test]
    fn enough_units_give_every_worker_its_tasks() {
        assert_eq!(cut(1024, 8, 2, 1), Tasks { count: 2, per: 512 });
        assert_eq!(cut(1024, 8, 2, BALANCE).count, 8);
        // Fewer aligned units than tasks wanted: one unit each.
        assert_eq!(cut(24, 8, 4, 4), Tasks { count: 3, per: 8 });
    }

    #[test]
    fn the_runners_visit_every_task_once_and_return_the_first_error() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| {
            let mut v = vec![0u32; 1000];
            let tasks = cut(v.len(), 7, 3, BALANCE);
            chunks(&mut v, tasks, |s, c| {
                for (i, x) in c.iter_mut().enumerate() {
                    *x += (s + i) as u32;
                }
            });
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
            let seen = std::sync::atomic::AtomicUsize::new(0);
            for_each_task(5, true, |t| {
                seen.fetch_add(1 << (4 * t), std::sync::atomic::Ordering::Relaxed);
            });
            assert_eq!(seen.into_inner(), 0x11111);
            let e = try_for_each_task(4, true, |t| {
                if t == 2 {
                    Err(ferrolite_core::OpError("task 2".into()))
                } else {
                    Ok(())
                }
            });
            assert_eq!(e.unwrap_err().0, "task 2");
            let e = try_chunks(&mut v, tasks, |s, _| {
                ferrolite_core::op_ensure!(s < 500, "chunk at {s}");
                Ok(())
            });
            assert!(e.unwrap_err().0.starts_with("chunk at"));
        });
    }
}
