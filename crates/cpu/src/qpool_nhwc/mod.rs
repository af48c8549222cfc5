//! int8 MaxPool on channels-last tensors (the `layout-nhwc-int8` pass's): each output pixel is
//! the element-wise maximum of its taps' channel vectors, contiguous bytes that the loops
//! below take a vector at a time.

use crate::backend::Registry;
use crate::isa::Isa;
use crate::qparams::signed;
use crate::split::{self, Cost};
use ferrolite_core::op::required;
use ferrolite_core::ops::layout::FROM_NHWC;
use ferrolite_core::ops::nn::geometry::AxisGeometry;
use ferrolite_core::ops::nn::pool::{Pool, PoolKind};
use ferrolite_core::plan::Kernel;
use ferrolite_core::registry::DTypes;
use ferrolite_core::{op_ensure, OpError, OpResult, Tensor};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// The NHWC 8-bit MaxPool's part of an ISA's microkernel table ([`crate::table`]).
pub(crate) struct Kernels {
    /// Output row `oy` of one image into `out`.
    pub(crate) row: fn(&QMaxPoolNhwc, &[u8], usize, &mut [u8]),
}

/// Plain Rust (SSE2's 16-byte vectors on x86-64, NEON's on aarch64).
pub(crate) const PORTABLE: Kernels = Kernels {
    row: QMaxPoolNhwc::row_impl,
};

#[derive(Debug)]
pub(crate) struct QMaxPoolNhwc {
    /// The channels-last input shape.
    x: Vec<usize>,
    gh: AxisGeometry,
    gw: AxisGeometry,
    /// 0x80 for i8 (compared as u8 after flipping the top bit), else 0.
    flip: u8,
    isa: Isa,
}

impl Kernel for QMaxPoolNhwc {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = required(inputs, 0)?;
        op_ensure!(
            x.shape() == self.x.as_slice(),
            "input 0 has shape {:?}, the kernel was built for {:?}",
            x.shape(),
            self.x
        );
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        let [n, ih, iw, c] = self.x[..] else {
            unreachable!("built for 4-D inputs")
        };
        let (oh, ow) = (self.gh.output, self.gw.output);
        op_ensure!(
            y.byte_len() == n * oh * ow * c,
            "output size differs from the plan"
        );
        let xs = x.bytes();
        let image_len = ih * iw * c;
        // One output row (image b, row oy) per task.
        let row = |(r, out): (usize, &mut [u8])| {
            let (b, oy) = (r / oh.max(1), r % oh.max(1));
            let image = &xs[b * image_len..(b + 1) * image_len];
            self.row(image, oy, out);
        };
        let ys = y.bytes_mut();
        let chunk = (ow * c).max(1);
        let taps = self.gh.kernel * self.gw.kernel;
        let workers = split::worth(Cost::elementwise(ys.len(), 1, taps));
        split::for_rows(ys, chunk, workers, |r, out| row((r, out)));
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qmaxpool.nhwc"
    }
}

/// Channels per register block: one AVX-512 vector, four SSE2 ones.
const BLOCK: usize = 64;

impl QMaxPoolNhwc {
    /// Output row `oy` of one image into `out`.
    fn row(&self, image: &[u8], oy: usize, out: &mut [u8]) {
        (self.isa.table().qpool_nhwc.row)(self, image, oy, out)
    }

    #[inline(always)]
    pub(crate) fn row_impl(&self, image: &[u8], oy: usize, out: &mut [u8]) {
        let [_, ih, iw, c] = self.x[..] else {
            unreachable!("built for 4-D inputs")
        };
        let flip = self.flip;
        // The window's taps that are inside the image (a window wholly in the padding is not
        // possible with pads smaller than the kernel).
        let rows = (0..self.gh.kernel)
            .map(move |kh| self.gh.tap(oy, kh))
            .filter(move |&iy| iy >= 0 && iy < ih as i64)
            .map(|iy| iy as usize);
        for (ox, dst) in out.chunks_exact_mut(c.max(1)).enumerate() {
            let taps = || {
                let cols = (0..self.gw.kernel)
                    .map(move |kw| self.gw.tap(ox, kw))
                    .filter(|&ix| ix >= 0 && ix < iw as i64);
                rows.clone()
                    .flat_map(move |iy| cols.clone().map(move |ix| (iy * iw + ix as usize) * c))
            };
            // Whole blocks in registers across the taps; 0 is the smallest value once flipped.
            let whole = c / BLOCK * BLOCK;
            for c0 in (0..whole).step_by(BLOCK) {
                let mut acc = [0u8; BLOCK];
                for at in taps() {
                    let src: &[u8; BLOCK] = image[at + c0..][..BLOCK].try_into().expect("block");
                    for (a, &v) in acc.iter_mut().zip(src) {
                        *a = (*a).max(v ^ flip);
                    }
                }
                for (d, a) in dst[c0..c0 + BLOCK].iter_mut().zip(acc) {
                    *d = a ^ flip;
                }
            }
            let tail = &mut dst[whole..];
            if !tail.is_empty() {
                tail.fill(0);
                for at in taps() {
                    for (d, &v) in tail.iter_mut().zip(&image[at + whole..at + c]) {
                        *d = (*d).max(v ^ flip);
                    }
                }
                tail.iter_mut().for_each(|d| *d ^= flip);
            }
        }
    }
}

/// Whether the channels-last kernel takes this pool (the `layout-nhwc-int8` pass asks).
pub fn supported(p: &Pool, plain_shape: &[usize]) -> bool {
    p.kind == PoolKind::Max
        && !p.with_indices
        && plain_shape.len() == 4
        && p.geometry(plain_shape).is_ok_and(|g| g.len() == 2)
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<Pool>(
        "cpu.qmaxpool.nhwc",
        "Pool",
        5,
        DTypes::Any,
        ferrolite_core::ops::layout::NHWC,
        |p, r| {
            let x = r
                .req
                .inputs
                .first()
                .and_then(|i| i.as_ref())
                .ok_or("needs an input")?;
            let flip = if signed(x.dtype)? { 0x80 } else { 0 };
            if x.shape.len() != 4 || r.req.outputs.len() != 1 {
                return Err("needs a 4-D input and one output".into());
            }
            let plain: Vec<usize> = FROM_NHWC.iter().map(|&a| x.shape[a]).collect();
            if !supported(p, &plain) {
                return Err("needs a 2-D max pool without indices".into());
            }
            let g = p.geometry(&plain).map_err(|e| e.to_string())?;
            let [gh, gw] = <[AxisGeometry; 2]>::try_from(g).map_err(|_| "needs a 2-D pool")?;
            Ok(Box::new(QMaxPoolNhwc {
                x: x.shape.to_vec(),
                gh,
                gw,
                flip,
                isa: r.cx.isa,
            }))
        },
    );
}
