//! One microkernel table per ISA. A session picks its [`Isa`] once; [`Isa::table`] hands the
//! kernels that ISA's [`Table`], and they call through it instead of branching on the ISA.
//!
//! Each kernel family owns its part of the table (a `Kernels` struct of function pointers in
//! the family's `mod.rs`) and fills it once per ISA in its per-ISA files
//! (`<family>/{avx2,avx512,neon}.rs`, `KERNELS`); the portable entries sit in `mod.rs`, in
//! plain Rust. The tables below only assemble the families' parts.
//!
//! A new ISA variant is one more table here, built from the one it extends with Rust's
//! struct update syntax, overriding only the entries it speeds up: an AVX-512 FP16 or BF16
//! table is `Table { ..AVX512 }` with its own entries, NEON FP16 or BF16 ones `..NEON`. That, a
//! variant of [`Isa`] and its detection are all a new ISA needs (docs/adding-a-kernel.md).
//!
//! CPU features that refine an ISA without being a session choice of their own (AVX-VNNI and
//! AVX-512 VNNI for the int8 GEMM, VBMI for the int8 lookups) are applied to the x86 tables
//! once, the first time a session takes the ISA ([`refined_x86`]), as MLAS fills its platform
//! table at start-up.

use crate::isa::Isa;
use crate::{
    conv, depthwise, elementwise, math, nchwc, pool, qconv, qconv_nhwc, qelementwise, qgemm,
    qlinear, qpool_nhwc, sgemm, softmax, stride2, winograd,
};
#[cfg(target_arch = "x86_64")]
use std::sync::OnceLock;

/// Every family's microkernels for one ISA.
pub(crate) struct Table {
    /// The f32 GEMM's tile loops.
    pub(crate) sgemm: sgemm::Kernels,
    /// The blocked (NCHWc) kernels' loops.
    pub(crate) nchwc: nchwc::Kernels,
    /// exp, erf, tanh, sigmoid and GELU over slices.
    pub(crate) math: math::Kernels,
    /// The binary, unary and Clip loops.
    pub(crate) elementwise: elementwise::Kernels,
    /// Softmax and LogSoftmax rows.
    pub(crate) softmax: softmax::Kernels,
    /// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear's loops.
    pub(crate) quantize: qelementwise::Kernels,
    /// QLinearConv's depthwise conversions.
    pub(crate) qconv: qconv::Kernels,
    /// The QLinear ops' loops: lookups, QLinearAdd, QLinearMul, QdqBinary.
    pub(crate) qlinear: qlinear::Kernels,
    /// Even/odd splits for stride-2 windows.
    pub(crate) stride2: stride2::Kernels,
    /// MaxPool and AveragePool rows and blocked planes.
    pub(crate) pool: pool::Kernels,
    /// The f32 depthwise convolution's row and channel-blocked loops.
    pub(crate) depthwise: depthwise::Kernels,
    /// The im2col convolution's packing.
    pub(crate) conv: conv::Kernels,
    /// The Winograd convolution's transforms.
    pub(crate) winograd: winograd::Kernels,
    /// The NHWC 8-bit MaxPool's rows.
    pub(crate) qpool_nhwc: qpool_nhwc::Kernels,
    /// The channels-last QLinearConv's depthwise loops.
    pub(crate) qconv_nhwc: qconv_nhwc::Kernels,
    /// The int8 GEMM's path (and the channels-last convolution's in-place tile).
    pub(crate) qgemm: qgemm::Kernels,
}

/// Plain Rust, for any CPU.
const PORTABLE: Table = Table {
    sgemm: sgemm::PORTABLE,
    nchwc: nchwc::PORTABLE,
    math: math::PORTABLE,
    elementwise: elementwise::PORTABLE,
    softmax: softmax::PORTABLE,
    quantize: qelementwise::PORTABLE,
    qconv: qconv::PORTABLE,
    qlinear: qlinear::PORTABLE,
    stride2: stride2::PORTABLE,
    pool: pool::PORTABLE,
    depthwise: depthwise::PORTABLE,
    conv: conv::PORTABLE,
    winograd: winograd::PORTABLE,
    qpool_nhwc: qpool_nhwc::PORTABLE,
    qconv_nhwc: qconv_nhwc::PORTABLE,
    qgemm: qgemm::PORTABLE,
};

/// AVX2 + FMA (x86-64), before [`refined_x86`].
#[cfg(target_arch = "x86_64")]
const AVX2: Table = Table {
    sgemm: sgemm::AVX2,
    nchwc: nchwc::avx2::KERNELS,
    math: math::avx2::KERNELS,
    elementwise: elementwise::avx2::KERNELS,
    softmax: softmax::avx2::KERNELS,
    quantize: qelementwise::avx2::KERNELS,
    qconv: qconv::avx2::KERNELS,
    qlinear: qlinear::avx2::KERNELS,
    stride2: stride2::avx2::KERNELS,
    pool: pool::avx2::KERNELS,
    depthwise: depthwise::avx2::KERNELS,
    conv: conv::avx2::KERNELS,
    winograd: winograd::avx2::KERNELS,
    qpool_nhwc: qpool_nhwc::PORTABLE,
    qconv_nhwc: qconv_nhwc::avx2::KERNELS,
    qgemm: qgemm::x86::AVX2,
};

/// AVX-512 (F, BW, VL, DQ), on top of AVX2 where a family has no 512-bit entries, before
/// [`refined_x86`].
#[cfg(target_arch = "x86_64")]
const AVX512: Table = Table {
    sgemm: sgemm::AVX512,
    nchwc: nchwc::avx2::KERNELS_AVX512,
    math: math::avx512::KERNELS,
    elementwise: elementwise::avx512::KERNELS,
    softmax: softmax::avx512::KERNELS,
    quantize: qelementwise::avx512::KERNELS,
    qconv: qconv::avx512::KERNELS,
    qlinear: qlinear::avx512::KERNELS,
    stride2: stride2::avx2::KERNELS,
    pool: pool::avx2::KERNELS,
    depthwise: depthwise::avx2::KERNELS,
    conv: conv::avx2::KERNELS,
    winograd: winograd::avx2::KERNELS,
    qpool_nhwc: qpool_nhwc::avx512::KERNELS,
    qconv_nhwc: qconv_nhwc::avx512::KERNELS,
    qgemm: qgemm::x86::AVX2,
};

/// An x86 table with the CPU's refinements (`avx512`: the AVX-512 table, whose registers allow
/// the 512-bit forms):
/// - the int8 GEMM on the widest VNNI the registers allow where the CPU has it (AVX-512 VNNI,
///   else AVX-VNNI), else AVX2's exact `vpmaddwd`;
/// - with VBMI (byte permutes across a register), the AVX-512 int8 lookups that take 64 bytes
///   at a time.
#[cfg(target_arch = "x86_64")]
fn refined_x86(base: Table, avx512: bool) -> Table {
    use std::arch::is_x86_feature_detected as has;
    let mut t = base;
    t.qgemm = if avx512 && has!("avx512vnni") {
        qgemm::x86::AVX512_VNNI
    } else if has!("avxvnni") {
        qgemm::x86::AVX_VNNI
    } else {
        qgemm::x86::AVX2
    };
    if avx512 && has!("avx512vbmi") {
        t.qlinear = qlinear::avx512::KERNELS_VBMI;
    }
    t
}

/// NEON (aarch64's baseline).
#[cfg(target_arch = "aarch64")]
const NEON: Table = Table {
    sgemm: sgemm::NEON,
    nchwc: nchwc::NEON,
    math: math::neon::KERNELS,
    elementwise: elementwise::neon::KERNELS,
    softmax: softmax::neon::KERNELS,
    quantize: qelementwise::PORTABLE,
    qconv: qconv::PORTABLE,
    qlinear: qlinear::PORTABLE,
    stride2: stride2::PORTABLE,
    pool: pool::PORTABLE,
    depthwise: depthwise::PORTABLE,
    conv: conv::PORTABLE,
    winograd: winograd::PORTABLE,
    qpool_nhwc: qpool_nhwc::PORTABLE,
    qconv_nhwc: qconv_nhwc::PORTABLE,
    qgemm: qgemm::neon::NEON,
};

/// NEON with the dot-product extension: the int8 GEMM on `SDOT`, the rest as NEON.
#[cfg(target_arch = "aarch64")]
const NEON_DOT: Table = Table {
    qgemm: qgemm::neon::NEON_DOT,
    ..NEON
};

impl Isa {
    /// This ISA's microkernels. The per-ISA entries call code compiled with target features,
    /// which is sound because an `Isa` other than `Portable` exists only on CPUs that have
    /// its features ([`Isa::detect`], [`Isa::parse`]), and a refinement only where the CPU
    /// has its own ([`refined_x86`]).
    pub(crate) fn table(self) -> &'static Table {
        match self {
            Isa::Portable => &PORTABLE,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => {
                static TABLE: OnceLock<Table> = OnceLock::new();
                TABLE.get_or_init(|| refined_x86(AVX2, false))
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                static TABLE: OnceLock<Table> = OnceLock::new();
                TABLE.get_or_init(|| refined_x86(AVX512, true))
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => &NEON,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDot => &NEON_DOT,
        }
    }
}

/// Defines safe functions, for a per-ISA file's table entries, whose bodies are compiled with
/// the target features of the attribute given first (a `target_feature` attribute), so that
/// their loops vectorise for that ISA; `softmax/avx2.rs` is the smallest example.
///
/// The functions are `pub(super)`, for the family's `KERNELS`; nothing else may call them, as
/// only [`Isa::table`] knows that the CPU has the features.
// aarch64's tables need no target_feature build yet (NEON is its baseline).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_macros))]
macro_rules! compiled_with {
    (#[$features:meta] $($(#[$doc:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? $body:block)*) => {
        $(
            $(#[$doc])*
            #[allow(clippy::too_many_arguments)]
            pub(super) fn $name($($a: $t),*) $(-> $r)? {
                #[$features]
                #[inline]
                #[allow(clippy::too_many_arguments)]
                fn body($($a: $t),*) $(-> $r)? $body
                // SAFETY: this function is reached only through the table of an ISA whose
                // CPUs have the features `body` is compiled with (`Isa::table`; an `Isa` other
                // than Portable exists only on such CPUs), the only requirement of its
                // target_feature attribute.
                unsafe { body($($a),*) }
            }
        )*
    };
}
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_imports))]
pub(crate) use compiled_with;
