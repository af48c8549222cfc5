//! The CPU backend as one value: the session's ISA, its GEMM, its passes (the blocked layout)
//! and its kernel registry. Every kernel module registers its kernels in [`registry`]; a node
//! whose op type has none, or whose entries all pass, runs its reference implementation.

use crate::isa::Isa;
#[cfg(feature = "analysis")]
use crate::layout_nhwc::LayoutNhwcInt8;
#[cfg(feature = "analysis")]
use crate::layout_pass::LayoutNchwc;
use crate::Sgemm;
use ferrolite_core::passes::Pass;
use ferrolite_core::plan::{Backend, Kernel, KernelProvider, KernelRequest};
use ferrolite_core::registry::{Kernels, Request, Selection};
use ferrolite_core::Result;
use std::sync::OnceLock;

/// What every CPU kernel builder is handed: the one ISA and the precision of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuContext {
    pub isa: Isa,
    pub precision: Precision,
}

/// How close the f32 kernels stay to the exact result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// The fastest kernels: 3x3 convolutions on larger images run Winograd F(4x4, 3x3), whose
    /// transforms scale values by up to 100 and round relative to that (docs/performance.md,
    /// Winograd and accuracy).
    #[default]
    Fast,
    /// Kernels that stay within a few ulps of the direct sum: Winograd F(2x2, 3x3) only, whose
    /// transforms are additions and halvings.
    Accurate,
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fast" => Ok(Precision::Fast),
            "accurate" => Ok(Precision::Accurate),
            other => Err(format!(
                "unknown precision '{other}' (expected fast or accurate)"
            )),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Precision::Fast => "fast",
            Precision::Accurate => "accurate",
        })
    }
}

impl CpuContext {
    /// The GEMM on the session's ISA.
    pub fn gemm(&self) -> Sgemm {
        Sgemm { isa: self.isa }
    }
}

/// The CPU's registry type.
pub(crate) type Registry = Kernels<CpuContext>;
/// What a builder sees.
pub(crate) type Req<'r, 'a> = Request<'r, 'a, CpuContext>;
/// What a builder returns: the kernel, or why it passes.
pub(crate) type Built = std::result::Result<Box<dyn Kernel>, String>;

/// Every CPU kernel, registered once.
pub fn registry() -> &'static Kernels<CpuContext> {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry::default();
        crate::conv::register(&mut r);
        crate::conv_transpose::register(&mut r);
        crate::matmul::register(&mut r);
        crate::fully_connected::register(&mut r);
        crate::elementwise::register(&mut r);
        crate::pool::register(&mut r);
        crate::softmax::register(&mut r);
        crate::reduce::register(&mut r);
        crate::norm::register(&mut r);
        crate::movement::register(&mut r);
        crate::resize::register(&mut r);
        crate::nchwc::register(&mut r);
        crate::qconv::register(&mut r);
        crate::qconv_nhwc::register(&mut r);
        crate::qpool_nhwc::register(&mut r);
        crate::qmatmul::register(&mut r);
        crate::qelementwise::register(&mut r);
        crate::qlinear::register(&mut r);
        r
    })
}

/// The CPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuBackend {
    cx: CpuContext,
}

impl Default for CpuBackend {
    /// The best ISA this CPU has (ignores `FERROLITE_ISA`; see [`CpuBackend::choose`]).
    fn default() -> Self {
        CpuBackend::new(Isa::detect())
    }
}

impl CpuBackend {
    /// A backend whose kernels all use `isa`, at [`Precision::Fast`].
    pub fn new(isa: Isa) -> Self {
        CpuBackend {
            cx: CpuContext {
                isa,
                precision: Precision::Fast,
            },
        }
    }

    /// The same backend with kernels picked for `precision`.
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.cx.precision = precision;
        self
    }

    pub fn precision(&self) -> Precision {
        self.cx.precision
    }

    /// The ISA named by `requested` (a session option), else by `FERROLITE_ISA`, else the best
    /// this CPU has; an unknown or unsupported name is an error.
    pub fn choose(requested: Option<&str>) -> std::result::Result<Self, String> {
        Isa::select(requested).map(CpuBackend::new)
    }

    pub fn isa(&self) -> Isa {
        self.cx.isa
    }
}

impl KernelProvider for CpuBackend {
    fn kernel(&self, req: &KernelRequest) -> Result<Option<Box<dyn Kernel>>> {
        Ok(self.select(req)?.kernel)
    }

    fn select(&self, req: &KernelRequest) -> Result<Selection<Box<dyn Kernel>>> {
        Ok(registry().select_nonempty(req, &self.cx))
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn describe(&self) -> String {
        let precision = match self.cx.precision {
            Precision::Fast => "",
            Precision::Accurate => ", accurate",
        };
        format!(
            "cpu, {}{precision}, int8 {}",
            self.cx.isa,
            crate::qgemm::QPath::for_isa(self.cx.isa).describe()
        )
    }

    fn passes(&self) -> Vec<Box<dyn Pass>> {
        // None in the light build (no `analysis` feature): optimized models carry the layout.
        #[cfg(not(feature = "analysis"))]
        return Vec::new();
        #[cfg(feature = "analysis")]
        vec![
            Box::new(LayoutNchwc { isa: self.cx.isa }),
            Box::new(LayoutNhwcInt8),
        ]
    }
}

/// The value of input `i` when it is a constant (weights to prepack).
pub(crate) fn constant<'a>(
    req: &KernelRequest<'a>,
    i: usize,
) -> Option<&'a ferrolite_core::Tensor> {
    req.inputs.get(i)?.as_ref()?.value
}

/// The shape of input `i` when it is present.
pub(crate) fn shape<'a>(req: &KernelRequest<'a>, i: usize) -> Option<&'a [usize]> {
    req.inputs.get(i)?.as_ref().map(|x| x.shape)
}

/// A builder's verdict from a constructor's `Option<K>`: `None` means the node is outside
/// `conditions`.
pub(crate) fn boxed<K: Kernel + 'static>(k: Option<K>, conditions: &str) -> Built {
    match k {
        Some(k) => Ok(Box::new(k)),
        None => Err(format!("needs {conditions}")),
    }
}

/// A builder's verdict from a constructor's `OpResult<Option<K>>`: `None` means the node is
/// outside `conditions`, an error says what failed.
pub(crate) fn built<K: Kernel + 'static>(
    k: ferrolite_core::OpResult<Option<K>>,
    conditions: &str,
) -> Built {
    match k {
        Ok(Some(k)) => Ok(Box::new(k)),
        Ok(None) => Err(format!("needs {conditions}")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::registry;
    use std::collections::HashSet;

    /// `explain` names kernels by their entries: a name stands for one entry per op type and
    /// layout.
    #[test]
    fn entry_names_are_distinct_per_op_and_layout() {
        let entries = registry().entries();
        assert!(entries.len() > 20);
        let mut seen = HashSet::new();
        for e in entries {
            assert!(e.name.starts_with("cpu."), "{}", e.name);
            assert!(seen.insert((e.op, e.layout, e.name)), "{} twice", e.name);
        }
    }
}
