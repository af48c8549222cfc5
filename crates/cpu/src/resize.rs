//! f32 Resize of the two spatial axes of N x C x H x W (any mode whose taps the reference
//! computes: nearest, linear, cubic), separable: each output row is the weighted sum of its
//! source rows, then each output element the weighted sum of its horizontal taps. 8-bit
//! tensors (a quantized model's upsampling, kept 8-bit by the `quantize` pass) take the
//! nearest taps only: a gather of bytes.

use crate::backend::Registry;
use crate::kernel_io::{f32_shape, input, input_bytes, output, output_bytes};
use crate::split::{self, Cost};
use ferrolite_core::ops::nn::resize::Resize;
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::registry::{needs, DTypes, Layout};
use ferrolite_core::{DType, OpResult, Tensor};

type Taps = Vec<Option<Vec<(usize, f32)>>>;

pub(crate) fn register(r: &mut Registry) {
    r.add::<Resize>(
        "cpu.resize",
        "Resize",
        10,
        DTypes::OutputsF32,
        Layout::PLAIN,
        |op, r| {
            let k = resize(op, r.req, f32_shape(r.req, 0)?).map(|k| Box::new(k) as Box<dyn Kernel>);
            needs(k, "a 4-D input, constant scales or sizes, N and C kept")
        },
    );
    r.add::<Resize>(
        "cpu.resize.8bit",
        "Resize",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |op, r| {
            let x = match r.req.inputs.first() {
                Some(Some(x)) if matches!(x.dtype, DType::U8 | DType::I8) => x.shape,
                _ => return Err("needs an 8-bit input".into()),
            };
            let k = resize(op, r.req, x).and_then(|k| k.nearest_bytes());
            needs(
                k.map(|k| Box::new(k) as Box<dyn Kernel>),
                "a 4-D input, constant scales or sizes, N and C kept, one source per output element",
            )
        },
    );
}

fn resize(r: &Resize, req: &KernelRequest, x: &[usize]) -> Option<ResizeKernel> {
    if x.len() != 4 {
        return None;
    }
    let mut vals = vec![None];
    for i in 1..req.inputs.len() {
        match &req.inputs[i] {
            Some(v) => vals.push(Some(v.value?)),
            None => vals.push(None),
        }
    }
    let (out, taps) = r.axis_tables(x, &vals).ok()?;
    if out != req.outputs.first()?.shape || out[0] != x[0] || out[1] != x[1] {
        return None;
    }
    // N and C must map every index to itself.
    for axis in &taps[..2] {
        for (o, t) in axis.iter().enumerate() {
            let t = t.as_ref()?;
            let own: f64 = t.iter().filter(|p| p.0 == o).map(|p| p.1).sum();
            let other: f64 = t.iter().filter(|p| p.0 != o).map(|p| p.1.abs()).sum();
            if own != 1.0 || other != 0.0 {
                return None;
            }
        }
    }
    let conv = |t: &Vec<Option<Vec<(usize, f64)>>>| -> Taps {
        t.iter()
            .map(|o| {
                o.as_ref().map(|v| {
                    v.iter()
                        .filter(|p| p.1 != 0.0)
                        .map(|&(i, w)| (i, w as f32))
                        .collect()
                })
            })
            .collect()
    };
    let (th, tw) = (conv(&taps[2]), conv(&taps[3]));
    // Nearest-like W taps (one source, weight 1) become a plain gather.
    let gather: Option<Vec<usize>> = tw
        .iter()
        .map(|t| match t.as_deref() {
            Some([(i, w)]) if *w == 1.0 => Some(*i),
            _ => None,
        })
        .collect();
    Some(ResizeKernel {
        x: x.to_vec(),
        out,
        th,
        tw,
        gather,
        extrap: r.extrapolation_value as f32,
    })
}

#[derive(Debug)]
struct ResizeKernel {
    x: Vec<usize>,
    out: Vec<usize>,
    th: Taps,
    tw: Taps,
    gather: Option<Vec<usize>>,
    extrap: f32,
}

impl ResizeKernel {
    /// The byte gather, when every output element has one source of weight 1.
    fn nearest_bytes(self) -> Option<NearestBytes> {
        let rows = self
            .th
            .iter()
            .map(|t| match t.as_deref() {
                Some([(i, w)]) if *w == 1.0 => Some(*i),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()?;
        Some(NearestBytes {
            x: self.x,
            out: self.out,
            rows,
            cols: self.gather?,
        })
    }

    fn plane(&self, src: &[f32], dst: &mut [f32], v: &mut [f32]) {
        let iw = self.x[3];
        let ow = self.out[3];
        for (oh, row) in dst.chunks_exact_mut(ow).enumerate() {
            let Some(hts) = &self.th[oh] else {
                row.fill(self.extrap);
                continue;
            };
            let vr: &[f32] = match hts.as_slice() {
                [(i, w)] if *w == 1.0 => &src[i * iw..(i + 1) * iw],
                _ => {
                    v.fill(0.0);
                    for &(i, w) in hts {
                        for (a, &s) in v.iter_mut().zip(&src[i * iw..(i + 1) * iw]) {
                            *a += w * s;
                        }
                    }
                    v
                }
            };
            match &self.gather {
                Some(g) => {
                    for (o, &i) in row.iter_mut().zip(g) {
                        *o = vr[i];
                    }
                }
                None => {
                    for (o, t) in row.iter_mut().zip(&self.tw) {
                        *o = match t {
                            None => self.extrap,
                            Some(t) => t.iter().map(|&(i, w)| w * vr[i]).sum(),
                        };
                    }
                }
            }
        }
    }
}

impl Kernel for ResizeKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input(inputs, 0, &self.x)?;
        let ip = self.x[2] * self.x[3];
        let op = self.out[2] * self.out[3];
        let y = output(outputs, 0, self.out.iter().product())?;
        if op == 0 {
            return Ok(());
        }
        split::for_chunks(y, op, 4, |s, c| {
            let mut v = vec![0.0f32; self.x[3]];
            for (i, dst) in c.chunks_exact_mut(op).enumerate() {
                let p = s / op + i;
                self.plane(&x[p * ip..(p + 1) * ip], dst, &mut v);
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.resize"
    }
}

/// Nearest Resize of 8-bit values: output row `r` copies source row `rows[r]` through the
/// column gather `cols`.
#[derive(Debug)]
struct NearestBytes {
    x: Vec<usize>,
    out: Vec<usize>,
    rows: Vec<usize>,
    cols: Vec<usize>,
}

impl Kernel for NearestBytes {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = input_bytes(inputs, 0, &self.x)?;
        let y = output_bytes(outputs, 0, self.out.iter().product())?;
        let (iw, ow) = (self.x[3], self.out[3]);
        let (ip, op) = (self.x[2] * iw, self.out[2] * ow);
        if op == 0 || ow == 0 {
            return Ok(());
        }
        let workers = split::worth(Cost::bytes(2 * y.len()));
        split::for_rows(y, op, workers, |p, dst| {
            let src = &x[p * ip..(p + 1) * ip];
            for (row, &r) in dst.chunks_exact_mut(ow).zip(&self.rows) {
                let line = &src[r * iw..(r + 1) * iw];
                for (o, &c) in row.iter_mut().zip(&self.cols) {
                    *o = line[c];
                }
            }
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.resize.8bit"
    }
}
