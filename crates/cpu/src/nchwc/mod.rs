//! Kernels of the blocked NCHWc layout (see `ferrolite_core::ops::layout`): the reorders,
//! ordinary ([`conv`]) and depthwise ([`depthwise`]) convolutions; blocked pooling and
//! BatchNormalization live with their plain kernels.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
pub(crate) mod conv;
pub(crate) mod depthwise;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod winograd;

use crate::backend::{boxed, Built, Registry, Req};
use crate::kernel_io::{f32_shape, input, output};
use crate::sgemm::{activate, EpilogueAct, Isa};
use crate::split;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::layout::{plain_shape, Nchwc, ReorderNchwc};
use ferrolite_core::ops::linalg::conv::Conv;
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::{OpResult, Tensor};

/// The block every blocked kernel here is written for: eight f32 channels, one AVX2 or two NEON
/// registers. AVX-512 tables keep it and cover sixteen channels as two blocks with their wide
/// tiles (`conv.wide`); a block of sixteen would need tiles of its own, measured against these
/// on an AVX-512 host (docs/adding-a-kernel.md).
pub(crate) const B: usize = 8;

/// The blocked kernels' part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// The channel block the layout pass blocks tensors by under this ISA ([`B`] everywhere
    /// today): the CPU's layout policy, per ISA, not the graph's.
    pub(crate) block: usize,
    /// [`reorder_block`]'s whole runs of eight pixels; returns how many pixels it did:
    /// (to_blocked, src, dst, hw).
    pub(crate) reorder_block: fn(bool, &[f32], &mut [f32], usize) -> usize,
    /// [`activate`] over a row.
    pub(crate) activate_row: fn(Option<UnaryKind>, &mut [f32]),
    /// Whether the blocked Winograd F(4x4, 3x3) kernels exist (and beat the direct
    /// convolution) under this ISA.
    pub(crate) winograd: bool,
    /// The direct convolution's tiles.
    pub(crate) conv: conv::Kernels,
    /// The depthwise convolution's rows.
    pub(crate) depthwise: depthwise::Kernels,
}

/// Plain Rust.
pub(crate) const PORTABLE: Kernels = Kernels {
    block: B,
    reorder_block: |_, _, _, _| 0,
    activate_row: activate,
    winograd: false,
    conv: conv::PORTABLE,
    depthwise: depthwise::PORTABLE,
};

/// NEON: the plain loops vectorise to it, the tiles are its own.
#[cfg(target_arch = "aarch64")]
pub(crate) const NEON: Kernels = Kernels {
    conv: conv::NEON,
    depthwise: depthwise::NEON,
    ..PORTABLE
};

/// `ToNchwc` / `FromNchwc` on `[N, C, H, W]` (plain) tensors.
#[derive(Debug)]
pub(crate) struct ReorderKernel {
    isa: Isa,
    to_blocked: bool,
    x: Vec<usize>,
    /// Spatial size per channel.
    hw: usize,
}

impl ReorderKernel {
    /// `plain` is the 4-D plain shape; `x` the input's shape.
    pub(crate) fn new(isa: Isa, op: &ReorderNchwc, x: &[usize], plain: &[usize]) -> Option<Self> {
        let [_, c, h, w] = *plain else { return None };
        (c % B == 0).then(|| ReorderKernel {
            isa,
            to_blocked: op.to_blocked,
            x: x.to_vec(),
            hw: h * w,
        })
    }
}

impl Kernel for ReorderKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let y = output(outputs, 0, x.len())?;
        let (hw, to_blocked, isa) = (self.hw, self.to_blocked, self.isa);
        // One block of eight channels is a [8, hw] matrix in the plain layout and its
        // transpose [hw, 8] in the blocked one.
        let block = B * hw;
        split::for_chunks(y, block.max(1), 2, |s, out| {
            for (i, dst) in out.chunks_exact_mut(block.max(1)).enumerate() {
                let src = &x[s + i * block..s + (i + 1) * block];
                reorder_block(isa, to_blocked, src, dst, hw);
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        if self.to_blocked {
            "cpu.to_nchwc"
        } else {
            "cpu.from_nchwc"
        }
    }
}

/// One block of eight channels: plain `[8, hw]` to blocked `[hw, 8]` (its transpose) or back.
fn reorder_block(isa: Isa, to_blocked: bool, src: &[f32], dst: &mut [f32], hw: usize) {
    assert!(src.len() == B * hw && dst.len() == B * hw);
    // Whole runs of eight pixels in registers where the ISA has such a loop, the rest here.
    let done = (isa.table().nchwc.reorder_block)(to_blocked, src, dst, hw);
    for p in done..hw {
        for j in 0..B {
            if to_blocked {
                dst[p * B + j] = src[j * hw + p];
            } else {
                dst[j * hw + p] = src[p * B + j];
            }
        }
    }
}

/// One plane `src` (`input` rows and columns, `unit` floats a pixel) into `dst` with zero
/// padding: `pad_begin` rows and columns before it, the rest of `dst`'s `padded_width`-wide
/// rows after.
fn pad_plane(
    src: &[f32],
    dst: &mut [f32],
    input: [usize; 2],
    pad_begin: [usize; 2],
    padded_width: usize,
    unit: usize,
) {
    let ([ih, iw], [pt, pl], pw, u) = (input, pad_begin, padded_width, unit);
    // Only the padding is zeroed: the copy writes the rest.
    let (top, rest) = dst.split_at_mut(pt * pw * u);
    top.fill(0.0);
    let (rows, bottom) = rest.split_at_mut(ih * pw * u);
    bottom.fill(0.0);
    for (row, s) in rows.chunks_exact_mut(pw * u).zip(src.chunks_exact(iw * u)) {
        row[..pl * u].fill(0.0);
        row[pl * u..(pl + iw) * u].copy_from_slice(s);
        row[(pl + iw) * u..].fill(0.0);
    }
}

/// Relu and Clip as bounds the tiles clamp to in registers (others run after the rows).
fn clamp_of(act: Option<UnaryKind>) -> Option<(f32, f32)> {
    match EpilogueAct::of(act?) {
        EpilogueAct::Relu => Some((0.0, f32::INFINITY)),
        EpilogueAct::Clip { min, max } => Some((min, max)),
        EpilogueAct::LeakyRelu { .. }
        | EpilogueAct::HardSigmoid { .. }
        | EpilogueAct::HardSwish
        | EpilogueAct::Mish
        | EpilogueAct::PerElement(_) => None,
    }
}

/// [`activate`], compiled for the ISA (`nchwc/avx2.rs`).
pub(crate) fn activate_row(isa: Isa, act: Option<UnaryKind>, row: &mut [f32]) {
    (isa.table().nchwc.activate_row)(act, row)
}

/// The output pointer shared by a kernel's row tasks, each writing its own rows.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(*mut f32);
// SAFETY: the tasks write disjoint rows of the output (see the kernels' `rows`).
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

/// The blocked kernels: reorders, and convolutions wrapped in `Nchwc` (blocked pooling and
/// BatchNormalization register with their plain kernels).
pub(crate) fn register(r: &mut Registry) {
    r.add::<ReorderNchwc>(
        "cpu.nchwc.reorder",
        "ReorderNchwc",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |op, r| {
            let x = f32_shape(r.req, 0)?;
            let plain = if op.to_blocked {
                x.to_vec()
            } else {
                plain_shape(x).map_err(|e| e.to_string())?
            };
            // Shape inference holds a blocked input to the op's block.
            if op.block != B {
                return Err(format!("blocks by {B} channels, not {}", op.block));
            }
            let k = ReorderKernel::new(r.cx.isa, op, x, &plain);
            boxed(k, "a 4-D tensor with channels a multiple of 8")
        },
    );
    r.add::<Conv>(
        "cpu.nchwc.conv",
        "Conv",
        10,
        DTypes::AllF32,
        ferrolite_core::ops::layout::NCHWC,
        blocked_conv,
    );
}

/// The [`Nchwc`] wrapper a blocked kernel's builder runs under, when it blocks by the [`B`]
/// channels the kernels are written for (a tensor blocked otherwise, from a file optimized
/// elsewhere, runs on the reference implementation).
pub(crate) fn wrapper<'r>(r: &Req<'r, '_>) -> Result<&'r Nchwc, String> {
    let w = r
        .wrapper
        .and_then(|w| w.as_any().downcast_ref::<Nchwc>())
        .ok_or("runs only inside an Nchwc wrapper")?;
    if w.block != B {
        return Err(format!("blocks by {B} channels, not {}", w.block));
    }
    Ok(w)
}

/// A Conv on blocked tensors: depthwise over whole blocks, or ordinary.
fn blocked_conv(c: &Conv, r: &Req) -> Built {
    let (req, isa) = (r.req, r.cx.isa);
    let blocked_input = wrapper(r)?.blocked_input;
    let x = f32_shape(req, 0)?;
    let x_plain = if blocked_input {
        plain_shape(x).map_err(|e| e.to_string())?
    } else {
        x.to_vec()
    };
    let s = c
        .shapes(&x_plain, f32_shape(req, 1)?)
        .map_err(|e| e.to_string())?;
    let constant = |i: usize| req.inputs.get(i)?.as_ref()?.value?.as_slice::<f32>().ok();
    let bias = match req.inputs.get(2) {
        Some(Some(_)) => Some(
            constant(2)
                .filter(|b| b.len() == s.out_channels)
                .ok_or("needs a constant bias of one value per output channel")?,
        ),
        _ => None,
    };
    let w = constant(1).ok_or("needs constant weights")?;
    if s.group > 1 {
        let k = depthwise::DepthwiseKernel::new(isa, s, c.activation, x, w, bias);
        return boxed(k, "a depthwise convolution over whole blocks");
    }
    #[cfg(target_arch = "x86_64")]
    // F(4x4, 3x3) only: at Precision::Accurate the blocked direct convolution runs instead.
    if isa.table().nchwc.winograd
        && r.cx.precision == crate::backend::Precision::Fast
        && blocked_input
        && winograd::pays(&s)
    {
        let k = winograd::WinogradKernel::new(s.clone(), c.activation, x, w, bias, req.packs);
        if let Some(k) = k.map_err(|e| e.to_string())? {
            return Ok(Box::new(k));
        }
    }
    let k = conv::ConvKernel::new(isa, s, blocked_input, c.activation, x, (w, bias), req.packs);
    boxed(k, "a 2-D convolution")
}
