//! The kernels' worker threads: pinning each to one CPU, and the polling that keeps them
//! awake between a run's steps.

/// The CPUs the calling thread may run on, in order (`None` when they cannot be read).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data (all-zero is the empty set); sched_getaffinity gets a
    // pointer to a set of the size it is told, alive across the call; pid 0 is this thread.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        set
    };
    // SAFETY: CPU_ISSET reads the set above at indices below CPU_SETSIZE.
    let cpus = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect();
    Some(cpus)
}

/// Pins the calling thread to one CPU of those the thread may run on: the `index`-th, wrapping.
/// Nothing happens when fewer than two CPUs are allowed or the calls fail.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn pin_to_cpu(index: usize) {
    let Some(cpus) = allowed_cpus().filter(|c| c.len() >= 2) else {
        return;
    };
    // SAFETY: as in allowed_cpus; CPU_SET writes a CPU number below CPU_SETSIZE (it came from
    // the allowed set) into a set that lives across the sched_setaffinity call.
    unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpus[index % cpus.len()], &mut one);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn pin_to_cpu(_index: usize) {}

/// How long a worker polls for a run's work without finding any before it stops polling
/// ([`with_workers_polling`]).
pub(super) const POLL_IDLE_LIMIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Runs `f` on the current pool thread while the pool's other workers poll for its parallel
/// work instead of going to sleep.
///
/// A plan is a chain of short kernels, each split over the threads. Idle rayon workers sleep
/// after a few dozen yields, and waking one costs a futex call and an inter-processor interrupt
/// (tens of microseconds in a virtual machine), paid again by every kernel: on small models at
/// 2 threads that cost more than the second thread gained. Polling for the length of one run,
/// as onnxruntime's pool spins, keeps the hand-off at a cache miss. After a while without work
/// a poller yields its CPU at each poll, so a run that leaves the workers idle (a long serial
/// kernel) does not take the CPU from other processes, and after [`POLL_IDLE_LIMIT`] without
/// work it stops polling and its worker sleeps as usual.
///
/// That limit is also what keeps a run from hanging: a worker that stole a piece of the run's
/// work before it took up its poll (a race with the broadcast) polls on top of that piece,
/// and the run waits for the piece while the poller waits for the run. The poller's return
/// lets the piece finish, a hiccup of the limit instead of a hang.
pub(super) fn with_workers_polling<T>(f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    /// Polls without a system call before yielding the CPU at each poll.
    const BUSY_POLLS: u32 = 1 << 14;
    let done = AtomicBool::new(false);
    let runner = rayon::current_thread_index();
    rayon::in_place_scope(|scope| {
        scope.spawn_broadcast(|_, ctx| {
            // The runner's own copy returns at once: it is busy running `f`, and polling there
            // would never return.
            if Some(ctx.index()) == runner {
                return;
            }
            let mut idle = 0u32;
            let mut worked = Instant::now();
            while !done.load(Ordering::Acquire) {
                match rayon::yield_now() {
                    Some(rayon::Yield::Executed) => idle = 0,
                    _ if idle < BUSY_POLLS => {
                        idle += 1;
                        if idle == 1 {
                            worked = Instant::now();
                        }
                        std::hint::spin_loop();
                    }
                    _ if worked.elapsed() > POLL_IDLE_LIMIT => return,
                    _ => std::thread::yield_now(),
                }
            }
        });
        // Set on drop, so that the pollers stop even when `f` panics (the scope waits for them).
        struct Finish<'a>(&'a AtomicBool);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let _finish = Finish(&done);
        f()
    })
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_on_one_allowed_cpu() {
        std::thread::spawn(|| {
            let before = allowed_cpus().unwrap();
            pin_to_cpu(1);
            let after = allowed_cpus().unwrap();
            if before.len() >= 2 {
                assert_eq!(after, vec![before[1]]);
            } else {
                assert_eq!(after, before);
            }
        })
        .join()
        .unwrap();
    }
}

#[cfg(test)]
mod polling_tests {
    use super::with_workers_polling;
    use rayon::prelude::*;

    fn pool() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap()
    }

    /// Parallel work inside a polled run completes with the right result, run after run.
    #[test]
    fn polled_runs_share_their_work() {
        let pool = pool();
        for round in 0..50u64 {
            let sum: u64 = pool.install(|| {
                with_workers_polling(|| (0..100_000u64).into_par_iter().map(|v| v ^ round).sum())
            });
            let want: u64 = (0..100_000u64).map(|v| v ^ round).sum();
            assert_eq!(sum, want);
        }
    }

    /// Many short polled runs on busy cores, a stress of the race in [`with_workers_polling`]'s
    /// doc: a worker that steals a piece of a run before it takes up its poll polls on top of
    /// that piece. Without the idle limit the run and that poller waited for each other
    /// forever (`polled_runs_share_their_work` hung so once in a full test run; this test did
    /// not catch it in three tries, so it guards against a hang rather than proving the fix).
    #[test]
    fn polls_that_sit_on_top_of_a_runs_work_let_it_finish() {
        let (sent, got) = std::sync::mpsc::channel();
        const ROUNDS: u64 = 3000;
        // Threads that keep the cores busy, so that the OS preempts the pool's workers at
        // any point, the broadcast's window included.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy: Vec<_> = (0..2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        std::thread::spawn(move || {
            let pool = pool();
            for round in 0..ROUNDS {
                let sum: u64 = pool.install(|| {
                    with_workers_polling(|| (0..4096u64).into_par_iter().map(|v| v ^ round).sum())
                });
                let want: u64 = (0..4096u64).map(|v| v ^ round).sum();
                let _ = sent.send(sum == want);
            }
        });
        for round in 0..ROUNDS {
            let right = got
                .recv_timeout(std::time::Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("round {round} hung"));
            assert!(right, "round {round}");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.into_iter().for_each(|t| t.join().unwrap());
    }

    /// A panic in the run reaches the caller: the pollers stop instead of holding the scope.
    #[test]
    fn a_panicking_run_releases_the_pollers() {
        let pool = pool();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.install(|| with_workers_polling(|| panic!("kernel failed")))
        }));
        assert!(caught.is_err());
        // The pool still serves runs afterwards.
        let n: usize = pool.install(|| with_workers_polling(|| (0..1000).into_par_iter().count()));
        assert_eq!(n, 1000);
    }
}
