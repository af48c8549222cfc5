//! Data movement: Transpose (collapsed axes, contiguous or strided inner runs; f32 and 8-bit
//! values), Concat and Split (f32 block copies).

use crate::backend::Registry;
use crate::kernel_io::{f32_shape, input, output};
use crate::split;
use ferrolite_core::op::normalize_axis;
use ferrolite_core::op::required;
use ferrolite_core::ops::shape::concat::Concat;
use ferrolite_core::ops::shape::split::Split;
use ferrolite_core::ops::shape::transpose::Transpose;
use ferrolite_core::plan::{Kernel, KernelRequest};
use ferrolite_core::registry::{needs, DTypes, Layout};
use ferrolite_core::{op_ensure, DType, OpError, OpResult, Tensor};

pub(crate) fn register(r: &mut Registry) {
    r.add::<Transpose>(
        "cpu.transpose",
        "Transpose",
        10,
        DTypes::Any,
        Layout::PLAIN,
        |t, r| {
            let x = match r.req.inputs.first() {
                Some(Some(x)) => x,
                _ => return Err("needs input 0".into()),
            };
            let bytes = match x.dtype.size() {
                4 if x.dtype == DType::F32 => false,
                1 => true,
                _ => return Err(format!("moves f32 or 8-bit values, not {}", x.dtype)),
            };
            let perm = t.resolved_perm(x.shape.len()).map_err(|e| e.to_string())?;
            Ok(Box::new(TransposeKernel::new(x.shape, &perm, bytes)))
        },
    );
    r.add::<Concat>(
        "cpu.concat",
        "Concat",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |c, r| {
            needs(
                concat(c, r.req),
                "inputs of one rank, equal but for the axis",
            )
        },
    );
    r.add::<Split>(
        "cpu.split",
        "Split",
        10,
        // The sizes input (opset 13) is i64.
        DTypes::OutputsF32,
        Layout::PLAIN,
        |s, r| {
            needs(
                split(s, r.req),
                "outputs of one rank, equal but for the axis",
            )
        },
    );
}

fn concat(c: &Concat, req: &KernelRequest) -> Option<Box<dyn Kernel>> {
    let shapes: Vec<Vec<usize>> = (0..req.inputs.len())
        .map(|i| f32_shape(req, i).ok().map(|s| s.to_vec()))
        .collect::<Option<_>>()?;
    let first = shapes.first()?;
    if first.is_empty() {
        return None;
    }
    let axis = normalize_axis(c.axis, first.len()).ok()?;
    let out = &req.outputs[0].shape;
    if out.len() != first.len() {
        return None;
    }
    let inner: usize = out[axis + 1..].iter().product();
    let outer: usize = out[..axis].iter().product();
    let mut blocks = Vec::new();
    for s in &shapes {
        if s.len() != out.len() || s[..axis] != out[..axis] || s[axis + 1..] != out[axis + 1..] {
            return None;
        }
        blocks.push(s[axis] * inner);
    }
    if blocks.iter().sum::<usize>() != out[axis] * inner {
        return None;
    }
    Some(Box::new(BlockKernel {
        concat: true,
        shapes,
        outer,
        blocks,
    }))
}

fn split(s: &Split, req: &KernelRequest) -> Option<Box<dyn Kernel>> {
    let x = f32_shape(req, 0).ok()?.to_vec();
    if x.is_empty() {
        return None;
    }
    let axis = normalize_axis(s.axis, x.len()).ok()?;
    let inner: usize = x[axis + 1..].iter().product();
    let outer: usize = x[..axis].iter().product();
    let mut blocks = Vec::new();
    let mut shapes = vec![x.clone()];
    for o in req.outputs {
        let os = &o.shape;
        if os.len() != x.len() || os[..axis] != x[..axis] || os[axis + 1..] != x[axis + 1..] {
            return None;
        }
        blocks.push(os[axis] * inner);
        shapes.push(os.clone());
    }
    if blocks.iter().sum::<usize>() != x[axis] * inner {
        return None;
    }
    Some(Box::new(BlockKernel {
        concat: false,
        shapes,
        outer,
        blocks,
    }))
}

#[derive(Debug)]
struct TransposeKernel {
    x: Vec<usize>,
    /// Whether the values are 8-bit (int8 tensors at the edges of channels-last regions)
    /// rather than f32.
    bytes: bool,
    /// Collapsed output dims and the input stride of each.
    dims: Vec<usize>,
    src_stride: Vec<usize>,
}

impl TransposeKernel {
    fn new(x: &[usize], perm: &[usize], bytes: bool) -> TransposeKernel {
        let r = x.len();
        let mut st = vec![1usize; r];
        for d in (0..r.saturating_sub(1)).rev() {
            st[d] = st[d + 1] * x[d + 1];
        }
        // Output axes in order, dropping size-1 axes, merging runs that stay adjacent.
        let mut dims: Vec<usize> = Vec::new();
        let mut src_stride: Vec<usize> = Vec::new();
        let mut prev: Option<usize> = None;
        for &p in perm {
            if x[p] == 1 {
                continue;
            }
            match prev {
                Some(q) if q + 1 == p || (q < p && x[q + 1..p].iter().all(|&d| d == 1)) => {
                    let last = dims.len() - 1;
                    dims[last] *= x[p];
                    src_stride[last] = st[p];
                }
                _ => {
                    dims.push(x[p]);
                    src_stride.push(st[p]);
                }
            }
            prev = Some(p);
        }
        if dims.is_empty() {
            dims.push(1);
            src_stride.push(1);
        }
        TransposeKernel {
            x: x.to_vec(),
            bytes,
            dims,
            src_stride,
        }
    }
}

impl TransposeKernel {
    /// Output rows from row `r0` on into `y` (whole rows).
    fn rows<V: Copy>(&self, x: &[V], r0: usize, y: &mut [V]) {
        let k = self.dims.len();
        let n = self.dims[k - 1];
        let s = self.src_stride[k - 1];
        // Odometer over the outer output dims, started at row r0.
        let mut idx = vec![0usize; k - 1];
        let mut base = 0usize;
        let mut r = r0;
        for d in (0..k - 1).rev() {
            idx[d] = r % self.dims[d];
            r /= self.dims[d];
            base += idx[d] * self.src_stride[d];
        }
        for row in y.chunks_exact_mut(n) {
            if s == 1 {
                row.copy_from_slice(&x[base..base + n]);
            } else {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = x[base + j * s];
                }
            }
            for d in (0..k - 1).rev() {
                idx[d] += 1;
                base += self.src_stride[d];
                if idx[d] < self.dims[d] {
                    break;
                }
                base -= idx[d] * self.src_stride[d];
                idx[d] = 0;
            }
        }
    }
}

impl TransposeKernel {
    /// Output plane `b` (over the last two output axes) into `out`, in tiles of 8 x 8: output
    /// `(r, c)` is input `base + r + c * stride`.
    fn tiles<V: Copy + Default>(&self, x: &[V], b: usize, out: &mut [V]) {
        const T: usize = 8;
        let k = self.dims.len();
        let (rows, cols, stride) = (self.dims[k - 2], self.dims[k - 1], self.src_stride[k - 1]);
        let base = self.plane_base(b);
        for r0 in (0..rows).step_by(T) {
            let rn = T.min(rows - r0);
            for c0 in (0..cols).step_by(T) {
                let cn = T.min(cols - c0);
                let mut tile = [[V::default(); T]; T];
                for (c, line) in tile.iter_mut().enumerate().take(cn) {
                    let at = base + r0 + (c0 + c) * stride;
                    match x.get(at..at + T).filter(|_| rn == T) {
                        // A fixed-size copy is one vector move, a sized one a memcpy call.
                        Some(v) => *line = v.try_into().expect("T values"),
                        None => {
                            for (d, &v) in line.iter_mut().zip(&x[at..at + rn]) {
                                *d = v;
                            }
                        }
                    }
                }
                for (r, o) in out[r0 * cols + c0..].chunks_mut(cols).take(rn).enumerate() {
                    for (c, v) in o[..cn].iter_mut().enumerate() {
                        *v = tile[c][r];
                    }
                }
            }
        }
    }
}

impl TransposeKernel {
    /// The input offset of output plane `b` (over the last two output axes), from its index
    /// over the outer output axes.
    fn plane_base(&self, b: usize) -> usize {
        let k = self.dims.len();
        let (mut base, mut rest) = (0, b);
        for d in (0..k - 2).rev() {
            base += rest % self.dims[d] * self.src_stride[d];
            rest /= self.dims[d];
        }
        base
    }

    /// Output rows from element `start` on into `out` (whole rows) when the output's last axis
    /// is `C` (1 to 4) values that lie a stride apart in the input, and its rows are
    /// contiguous there: an image's few channels made channels-last. Each input line is read
    /// in order; 8 x 8 tiles would be mostly empty.
    fn gather_short<V: Copy, const C: usize>(&self, x: &[V], start: usize, out: &mut [V]) {
        let k = self.dims.len();
        let (rows, stride) = (self.dims[k - 2], self.src_stride[k - 1]);
        let mut row = start / C;
        let mut rest = out;
        while !rest.is_empty() {
            let (b, r0) = (row / rows, row % rows);
            let n = (rows - r0).min(rest.len() / C);
            let base = self.plane_base(b) + r0;
            let (now, later) = rest.split_at_mut(n * C);
            let lines: [&[V]; C] = std::array::from_fn(|c| &x[base + c * stride..][..n]);
            for (r, o) in now.chunks_exact_mut(C).enumerate() {
                for (d, line) in o.iter_mut().zip(&lines) {
                    *d = line[r];
                }
            }
            rest = later;
            row += n;
        }
    }

    fn transpose<V: Copy + Default + Send + Sync>(&self, x: &[V], y: &mut [V]) {
        if y.is_empty() {
            return;
        }
        let k = self.dims.len();
        let n = self.dims[k - 1];
        if k >= 2 && self.src_stride[k - 2] == 1 && (2..=4).contains(&n) {
            match n {
                2 => split::for_chunks(y, 2, 1, |start, c| self.gather_short::<V, 2>(x, start, c)),
                3 => split::for_chunks(y, 3, 1, |start, c| self.gather_short::<V, 3>(x, start, c)),
                _ => split::for_chunks(y, 4, 1, |start, c| self.gather_short::<V, 4>(x, start, c)),
            }
            return;
        }
        if k >= 2 && self.src_stride[k - 2] == 1 && self.src_stride[k - 1] != 1 {
            // The two last output axes swap the input's contiguous axis: tiles of 8 x 8 read
            // eight contiguous values per input line and write eight per output row, where
            // row by row read every value a stride apart (a K^T of attention: 4x slower).
            let plane = self.dims[k - 2] * n;
            split::for_chunks(y, plane, 1, |start, chunk| {
                for (i, out) in chunk.chunks_exact_mut(plane).enumerate() {
                    self.tiles(x, start / plane + i, out);
                }
            });
            return;
        }
        split::for_chunks(y, n, 1, |start, chunk| {
            self.rows(x, start / n.max(1), chunk)
        });
    }
}

impl Kernel for TransposeKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        if !self.bytes {
            let x = input(inputs, 0, &self.x)?;
            let y = output(outputs, 0, x.len())?;
            self.transpose(x, y);
            return Ok(());
        }
        let x = required(inputs, 0)?;
        op_ensure!(
            x.shape() == self.x.as_slice() && x.dtype().size() == 1,
            "input 0 is {} {:?}, the kernel was built for 8-bit {:?}",
            x.dtype(),
            x.shape(),
            self.x
        );
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("output 0 is missing".into()))?;
        op_ensure!(
            y.numel() == x.numel() && y.dtype().size() == 1,
            "output 0 is {} {:?}, expected {} 8-bit values",
            y.dtype(),
            y.shape(),
            x.numel()
        );
        self.transpose(x.bytes(), y.bytes_mut());
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.transpose"
    }
}

/// Concat (many inputs, one output) or Split (one input, many outputs) as block copies.
#[derive(Debug)]
struct BlockKernel {
    concat: bool,
    /// Input shapes (Concat) or the input then the output shapes (Split).
    shapes: Vec<Vec<usize>>,
    outer: usize,
    blocks: Vec<usize>,
}

impl Kernel for BlockKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let total: usize = self.blocks.iter().sum();
        if self.concat {
            let xs: Vec<&[f32]> = self
                .shapes
                .iter()
                .enumerate()
                .map(|(i, s)| input(inputs, i, s))
                .collect::<OpResult<_>>()?;
            let y = output(outputs, 0, self.outer * total)?;
            if total == 0 {
                return Ok(());
            }
            // Chunks of the output, not of whole output rows: a batch-1 concat along channels
            // is one row, which one thread copied alone (squeezenet1_1's eight concats took
            // longer at 2 threads than at 1).
            split::for_chunks(y, 16, 1, |start, mut chunk| {
                let mut pos = start;
                while !chunk.is_empty() {
                    let (o, e) = (pos / total, pos % total);
                    // The input block holding row offset e (skipping empty inputs).
                    let (mut i, mut at) = (0, 0);
                    while e >= at + self.blocks[i] {
                        at += self.blocks[i];
                        i += 1;
                    }
                    let b = self.blocks[i];
                    let n = (at + b - e).min(chunk.len());
                    let (dst, rest) = chunk.split_at_mut(n);
                    dst.copy_from_slice(&xs[i][o * b + e - at..][..n]);
                    chunk = rest;
                    pos += n;
                }
            });
        } else {
            let x = input(inputs, 0, &self.shapes[0])?;
            let mut at = 0;
            for (i, &b) in self.blocks.iter().enumerate() {
                let y = output(outputs, i, self.outer * b)?;
                for o in 0..self.outer {
                    let src = o * total + at;
                    y[o * b..(o + 1) * b].copy_from_slice(&x[src..src + b]);
                }
                at += b;
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        if self.concat {
            "cpu.concat"
        } else {
            "cpu.split"
        }
    }
}
