//! QLinearGlobalAveragePool: integer sums per channel, then the reference's rounding.

use super::*;

/// QLinearGlobalAveragePool: integer sums per channel, then the reference's one f32 scaling
/// of each.
#[derive(Debug)]
pub(super) struct QGlobalAverage {
    pub(super) image: usize,
    /// The channel count of a channels-last input (`[N, D1.., C]`, summed a pixel's channel
    /// vector at a time); `None` for channels-first planes.
    pub(super) channels_last: Option<usize>,
    pub(super) x_zero: i64,
    pub(super) y_zero: i32,
    pub(super) scale: f32,
    pub(super) signed: bool,
}

/// Pixels summed in i32 before an i64 total: 2^16 values of at most 255 stay far below 2^31.
pub(super) const I32_SUM_PIXELS: usize = 1 << 16;

impl QGlobalAverage {
    /// The output byte of channel sum `sum`.
    fn requantize(&self, sum: i64) -> u8 {
        let (lo, hi) = if self.signed { (-128, 127) } else { (0, 255) };
        let acc = sum - self.x_zero * self.image.max(1) as i64;
        let v = (acc as f32 * self.scale).round_ties_even() as i32 + self.y_zero;
        let q = v.clamp(lo, hi);
        if self.signed {
            q as i8 as u8
        } else {
            q as u8
        }
    }

    /// One channels-first plane's sum.
    fn plane_sum(&self, x: &[u8]) -> i64 {
        // i32 sums vectorize; i64 ones did not.
        let part = |x: &[u8]| -> i64 {
            let s: i32 = if self.signed {
                x.iter().map(|&b| b as i8 as i32).sum()
            } else {
                x.iter().map(|&b| b as i32).sum()
            };
            s as i64
        };
        x.chunks(I32_SUM_PIXELS).map(part).sum()
    }

    /// One channels-last image's channel sums into `y`, a pixel's channel vector at a time.
    fn image_sums(&self, x: &[u8], c: usize, y: &mut [u8]) {
        let mut total = vec![0i64; c];
        let mut part = vec![0i32; c];
        for block in x.chunks(c * I32_SUM_PIXELS) {
            part.fill(0);
            for px in block.chunks_exact(c) {
                if self.signed {
                    part.iter_mut()
                        .zip(px)
                        .for_each(|(s, &b)| *s += b as i8 as i32);
                } else {
                    part.iter_mut().zip(px).for_each(|(s, &b)| *s += b as i32);
                }
            }
            total
                .iter_mut()
                .zip(&part)
                .for_each(|(t, &s)| *t += s as i64);
        }
        for (y, &t) in y.iter_mut().zip(&total) {
            *y = self.requantize(t);
        }
    }
}

impl Kernel for QGlobalAverage {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = required(inputs, 0)?.bytes();
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        let image = self.image.max(1);
        op_ensure!(
            x.len() == y.byte_len() * image,
            "sizes differ from the plan"
        );
        let workers = split::worth(Cost::bytes(x.len()));
        match self.channels_last {
            Some(c) => {
                let c = c.max(1);
                split::for_rows(y.bytes_mut(), c, workers, |i, y| {
                    self.image_sums(&x[i * image * c..][..image * c], c, y)
                })
            }
            None => split::for_rows(y.bytes_mut(), 1, workers, |i, y| {
                y[0] = self.requantize(self.plane_sum(&x[i * image..][..image]))
            }),
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qglobal_average"
    }
}
