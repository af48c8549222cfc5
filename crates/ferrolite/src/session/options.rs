//! How a session is built: [`SessionOptions`], and the passes it may disable.

use crate::device::DeviceOption;
use ferrolite_core::passes::{session_pipeline, PartitionOptions};
use ferrolite_core::plan::Backend;
use ferrolite_cpu::{CpuBackend, Precision};

/// How a session is built.
///
/// ```
/// use ferrolite::SessionOptions;
/// let opts = SessionOptions::default()
///     .with_threads(2)
///     .disable_pass(ferrolite::pass_names()[0].0);
/// assert_eq!(opts.threads, 2);
/// assert_eq!(opts.disabled_passes.len(), 1);
/// ```
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Worker threads for kernels; 0 means one per core.
    pub threads: usize,
    /// Passes to skip, by name (see [`pass_names`]).
    pub disabled_passes: Vec<String>,
    /// Use the optimised CPU kernels (false: reference implementations only, for debugging).
    pub optimized_kernels: bool,
    /// Pin each worker thread to its own CPU (when there are several workers and the OS
    /// supports it). Without it, Linux may wake two workers on one CPU after other programs
    /// ran and leave them sharing it for a whole run; turn it off when several sessions or
    /// programs must share the CPUs.
    pub pin_threads: bool,
    /// The device for the subgraphs it supports; the CPU runs the rest.
    pub device: DeviceOption,
    /// How the graph is split between the device and the CPU.
    pub partition: PartitionOptions,
    /// The CPU kernels' instruction set by name (`portable`, `avx2`, `avx512`; `neon`, `neon-dot` on aarch64); `None`: the
    /// `FERROLITE_ISA` environment variable, else the best this CPU has.
    pub isa: Option<String>,
    /// The most bytes a session may plan for one input-shape signature: its weights, the
    /// arena of intermediate tensors and the kernels' prepacked copies of weights. A plan
    /// over it is refused with [`Error::MemoryLimit`](crate::Error::MemoryLimit) at prerun,
    /// before its arena is allocated (and before prepacking, when one tensor alone or the weights are over it). `None`: no
    /// cap beyond the per-tensor limit. It also caps what a Loop may hold in carried and
    /// scanned values (1 GiB without it), checked after every iteration.
    pub max_memory: Option<u64>,
    /// How close the f32 CPU kernels stay to the exact result: [`Precision::Fast`] (the
    /// default) or [`Precision::Accurate`], which gives up Winograd F(4x4, 3x3) for kernels
    /// within a few ulps of the direct sum (docs/performance.md, Winograd and accuracy).
    pub precision: Precision,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            threads: 0,
            disabled_passes: Vec::new(),
            optimized_kernels: true,
            pin_threads: true,
            device: DeviceOption::Cpu,
            partition: PartitionOptions::default(),
            isa: None,
            max_memory: None,
            precision: Precision::Fast,
        }
    }
}

impl SessionOptions {
    /// Sets the number of kernel worker threads (0: one per core).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// Pins (or not) each worker thread to its own CPU; see [`SessionOptions::pin_threads`].
    pub fn with_thread_pinning(mut self, pin: bool) -> Self {
        self.pin_threads = pin;
        self
    }

    /// Skips the optimisation pass with this name (see [`pass_names`]).
    pub fn disable_pass(mut self, name: impl Into<String>) -> Self {
        self.disabled_passes.push(name.into());
        self
    }

    /// Runs the subgraphs a device supports on it (see [`DeviceOption`]).
    pub fn with_device(mut self, device: DeviceOption) -> Self {
        self.device = device;
        self
    }

    /// Forces the CPU kernels' instruction set (`portable`, `avx2`, `avx512`, `neon`,
    /// `neon-dot`), for debugging and tests; one the CPU lacks is an error when the session is
    /// made.
    pub fn with_isa(mut self, isa: impl Into<String>) -> Self {
        self.isa = Some(isa.into());
        self
    }

    /// Caps the memory a session may plan (see [`SessionOptions::max_memory`]).
    pub fn with_max_memory(mut self, bytes: u64) -> Self {
        self.max_memory = Some(bytes);
        self
    }

    /// Picks kernels for `precision` (see [`SessionOptions::precision`]).
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// Uses the reference implementations only (slow; for debugging kernels).
    pub fn reference_kernels(mut self) -> Self {
        self.optimized_kernels = false;
        self
    }
}

/// Names and descriptions of a CPU session's passes, in order (the device-independent ones,
/// then the CPU backend's; a session with a device also runs `partition` before the CPU's).
pub fn pass_names() -> Vec<(&'static str, &'static str)> {
    session_pipeline(None, CpuBackend::default().passes())
        .iter()
        .map(|p| (p.name(), p.description()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_pin_by_default_and_can_turn_it_off() {
        assert!(SessionOptions::default().pin_threads);
        assert!(
            !SessionOptions::default()
                .with_thread_pinning(false)
                .pin_threads
        );
    }
}
