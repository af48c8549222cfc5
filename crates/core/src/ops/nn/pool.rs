//! Pooling: MaxPool (with optional indices), AveragePool, LpPool and their global forms.

use super::geometry::{window_geometry, AutoPad, AxisGeometry};
use super::tensor_from_f64;
use crate::op::{input, optional_output, output, required, Prototype};
use crate::ops::util::strides;
use crate::{op_bail, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// What a window computes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PoolKind {
    #[default]
    Max,
    Average,
    /// `(sum |x|^p)^(1/p)`.
    Lp,
}

impl PoolKind {
    /// Every kind, for the backends' tests (the match fails to compile on a new variant
    /// until it is listed).
    pub const ALL: [PoolKind; 3] = {
        use PoolKind::*;
        const fn listed(k: PoolKind) -> PoolKind {
            match k {
                Max | Average | Lp => k,
            }
        }
        [listed(Max), listed(Average), listed(Lp)]
    };
}

/// MaxPool, AveragePool and LpPool over N x C x D1 x ... x Dn.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pool {
    pub kind: PoolKind,
    pub kernel_shape: Vec<i64>,
    /// Empty means 1 on every axis.
    pub strides: Vec<i64>,
    /// Begins then ends; empty means no padding.
    pub pads: Vec<i64>,
    /// Empty means 1 on every axis.
    pub dilations: Vec<i64>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
    /// AveragePool: divide by the whole window, padding included (not the region added by
    /// `ceil_mode` past the end padding).
    pub count_include_pad: bool,
    /// MaxPool indices: 0 row-major, 1 column-major over the spatial axes.
    pub storage_order: i64,
    /// LpPool's p.
    pub p: f64,
    /// MaxPool: whether the second output (indices) is produced.
    pub with_indices: bool,
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            kind: PoolKind::Max,
            kernel_shape: Vec::new(),
            strides: Vec::new(),
            pads: Vec::new(),
            dilations: Vec::new(),
            auto_pad: AutoPad::NotSet,
            ceil_mode: false,
            count_include_pad: false,
            storage_order: 0,
            p: 2.0,
            with_indices: false,
        }
    }
}

const POOL_TYPES: DTypeSet = DTypeSet::FLOAT
    .union(DTypeSet::of(DType::I8))
    .union(DTypeSet::of(DType::U8));

static POOL_PROTO: Prototype = Prototype {
    inputs: &[input("X", POOL_TYPES)],
    outputs: &[output("Y"), optional_output("Indices")],
    value_inputs: &[],
};

impl Pool {
    pub fn geometry(&self, x: &[usize]) -> OpResult<Vec<AxisGeometry>> {
        if x.len() < 3 {
            op_bail!("input 0 must have rank >= 3 (N x C x spatial), got shape {x:?}");
        }
        let kernel: Vec<usize> =
            super::geometry::axis_values(&self.kernel_shape, x.len() - 2, 0, "kernel_shape")?;
        window_geometry(
            &x[2..],
            &kernel,
            &self.strides,
            &self.dilations,
            &self.pads,
            self.auto_pad,
            self.ceil_mode,
        )
    }

    fn out_shape(&self, x: &[usize]) -> OpResult<Vec<usize>> {
        let g = self.geometry(x)?;
        let mut s = x[..2].to_vec();
        s.extend(g.iter().map(|a| a.output));
        Ok(s)
    }
}

impl Op for Pool {
    fn name(&self) -> &'static str {
        match self.kind {
            PoolKind::Max => "MaxPool",
            PoolKind::Average => "AveragePool",
            PoolKind::Lp => "LpPool",
        }
    }

    fn prototype(&self) -> &'static Prototype {
        &POOL_PROTO
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(0)?;
        if self.kind != PoolKind::Max && !dt.is_float() {
            op_bail!("input 0 must be a float tensor, got {dt}");
        }
        if self.with_indices && self.kind != PoolKind::Max {
            op_bail!("only MaxPool has an indices output");
        }
        let shape = self.out_shape(ctx.shape(0)?)?;
        let mut outs = vec![TensorInfo::new(dt, shape.clone())];
        if self.with_indices {
            outs.push(TensorInfo::new(DType::I64, shape));
        }
        Ok(outs)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let geom = self.geometry(x.shape())?;
        let out_shape = self.out_shape(x.shape())?;
        let xs = x.to_f64_vec();
        let spatial_in: Vec<usize> = x.shape()[2..].to_vec();
        let plane: usize = spatial_in.iter().product();
        let planes = x.shape()[0] * x.shape()[1];
        let out_spatial: Vec<usize> = geom.iter().map(|g| g.output).collect();
        let out_plane: usize = out_spatial.iter().product();
        let in_str = strides(&spatial_in);
        // Column-major strides of the spatial axes, for storage_order = 1 indices.
        let mut col_str = vec![1usize; spatial_in.len()];
        for a in 1..spatial_in.len() {
            col_str[a] = col_str[a - 1] * spatial_in[a - 1];
        }
        let out_str = strides(&out_spatial);
        let mut ys = Vec::with_capacity(planes * out_plane);
        let mut idx = Vec::new();
        let rank = geom.len();
        // Per output, per axis: the taps inside the input (only those are visited, in the
        // window's row-major order, so a window far larger than the input costs nothing).
        let mut ranges = vec![(0usize, 0usize); rank];
        let mut k = vec![0usize; rank];
        for pl in 0..planes {
            let src = &xs[pl * plane..(pl + 1) * plane];
            for o in 0..out_plane {
                let mut acc = match self.kind {
                    PoolKind::Max => f64::NEG_INFINITY,
                    _ => 0.0,
                };
                let mut best: Option<usize> = None;
                let (mut inside, mut padded) = (1usize, 1usize);
                for (a, g) in geom.iter().enumerate() {
                    let oa = (o / out_str[a]) % g.output;
                    ranges[a] = g.valid_taps(oa);
                    inside *= ranges[a].1 - ranges[a].0;
                    padded = padded.saturating_mul(g.padded_taps(oa));
                }
                let count = if self.count_include_pad {
                    padded
                } else {
                    inside
                };
                for (ka, r) in k.iter_mut().zip(&ranges) {
                    *ka = r.0;
                }
                for _ in 0..inside {
                    let (mut off, mut col_off) = (0usize, 0usize);
                    for (a, g) in geom.iter().enumerate() {
                        let pos = g.tap((o / out_str[a]) % g.output, k[a]) as usize;
                        off += pos * in_str[a];
                        col_off += pos * col_str[a];
                    }
                    let v = src[off];
                    match self.kind {
                        PoolKind::Max => {
                            if best.is_none() || v > acc {
                                acc = v;
                                let flat = if self.storage_order == 1 {
                                    col_off
                                } else {
                                    off
                                };
                                best = Some(pl * plane + flat);
                            }
                        }
                        PoolKind::Average => acc += v,
                        PoolKind::Lp => acc += v.abs().powf(self.p),
                    }
                    // The next tap, the last axis fastest.
                    for a in (0..rank).rev() {
                        k[a] += 1;
                        if k[a] < ranges[a].1 {
                            break;
                        }
                        k[a] = ranges[a].0;
                    }
                }
                ys.push(match self.kind {
                    PoolKind::Max => acc,
                    PoolKind::Average => acc / count as f64,
                    PoolKind::Lp => acc.powf(1.0 / self.p),
                });
                if self.with_indices {
                    idx.push(best.map_or(-1, |b| b as i64));
                }
            }
        }
        let mut outs = vec![tensor_from_f64(x.dtype(), &out_shape, &ys)?];
        if self.with_indices {
            outs.push(Tensor::from_vec(&out_shape, idx)?);
        }
        Ok(outs)
    }
}

/// GlobalMaxPool, GlobalAveragePool, GlobalLpPool: one window covering all spatial axes.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GlobalPool {
    pub kind: PoolKind,
    pub p: f64,
}

impl Default for GlobalPool {
    fn default() -> Self {
        GlobalPool {
            kind: PoolKind::Average,
            p: 2.0,
        }
    }
}

static GLOBAL_PROTO: Prototype = Prototype {
    inputs: &[input("X", DTypeSet::FLOAT)],
    outputs: &[output("Y")],
    value_inputs: &[],
};

impl Op for GlobalPool {
    fn name(&self) -> &'static str {
        match self.kind {
            PoolKind::Max => "GlobalMaxPool",
            PoolKind::Average => "GlobalAveragePool",
            PoolKind::Lp => "GlobalLpPool",
        }
    }

    fn prototype(&self) -> &'static Prototype {
        &GLOBAL_PROTO
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.shape(0)?;
        if x.len() < 2 {
            op_bail!("input 0 must have rank >= 2 (N x C x ...), got shape {x:?}");
        }
        let mut s = x.to_vec();
        s[2..].fill(1);
        Ok(vec![TensorInfo::new(ctx.dtype(0)?, s)])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let info = self.infer(&InferCtx {
            inputs: &[Some(crate::InferInput {
                dtype: x.dtype(),
                shape: x.shape(),
                value: None,
            })],
        })?;
        let xs = x.to_f64_vec();
        let planes = x.shape()[0] * x.shape()[1];
        let plane: usize = x.shape()[2..].iter().product();
        let mut ys = Vec::with_capacity(planes);
        for pl in 0..planes {
            let s = &xs[pl * plane..(pl + 1) * plane];
            ys.push(match self.kind {
                PoolKind::Max => s.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                PoolKind::Average => s.iter().sum::<f64>() / plane as f64,
                PoolKind::Lp => s
                    .iter()
                    .map(|v| v.abs().powf(self.p))
                    .sum::<f64>()
                    .powf(1.0 / self.p),
            });
        }
        Ok(vec![tensor_from_f64(x.dtype(), &info[0].shape, &ys)?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{assert_close, f32t};
    use super::*;

    fn x4x4() -> Tensor {
        let v: Vec<f32> = (1..=16).map(|v| v as f32).collect();
        f32t(&[1, 1, 4, 4], &v)
    }

    #[test]
    fn maxpool_ceil_and_indices() {
        let p = Pool {
            kernel_shape: vec![3, 3],
            strides: vec![2, 2],
            ceil_mode: true,
            with_indices: true,
            ..Default::default()
        };
        let y = p.eval(&[Some(&x4x4())]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 2, 2]);
        assert_close(&y[0], &[11., 12., 15., 16.], 0.0);
        assert_eq!(y[1].to_i64_vec(), vec![10, 11, 14, 15]);
        let col = Pool {
            storage_order: 1,
            ..p
        };
        // Column-major: h + w * H.
        assert_eq!(
            col.eval(&[Some(&x4x4())]).unwrap()[1].to_i64_vec(),
            vec![2 + 2 * 4, 2 + 3 * 4, 3 + 2 * 4, 3 + 3 * 4]
        );
    }

    #[test]
    fn maxpool_u8_with_padding() {
        let x = Tensor::from_vec(&[1, 1, 2, 2], vec![1u8, 5, 3, 2]).unwrap();
        let p = Pool {
            kernel_shape: vec![2, 2],
            pads: vec![1, 1, 1, 1],
            strides: vec![2, 2],
            ..Default::default()
        };
        let y = p.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].dtype(), DType::U8);
        assert_eq!(y[0].to_i64_vec(), vec![1, 5, 3, 2]);
    }

    #[test]
    fn average_pads_and_count_include_pad() {
        let x = f32t(&[1, 1, 2, 2], &[1., 2., 3., 4.]);
        let mut p = Pool {
            kind: PoolKind::Average,
            kernel_shape: vec![2, 2],
            pads: vec![1, 1, 1, 1],
            strides: vec![2, 2],
            ..Default::default()
        };
        assert_close(&p.eval(&[Some(&x)]).unwrap()[0], &[1., 2., 3., 4.], 0.0);
        p.count_include_pad = true;
        assert_close(
            &p.eval(&[Some(&x)]).unwrap()[0],
            &[0.25, 0.5, 0.75, 1.0],
            0.0,
        );
        // ceil_mode region past the end padding is not counted.
        let q = Pool {
            kind: PoolKind::Average,
            kernel_shape: vec![2],
            strides: vec![2],
            ceil_mode: true,
            count_include_pad: true,
            ..Default::default()
        };
        let x = f32t(&[1, 1, 3], &[1., 2., 6.]);
        assert_close(&q.eval(&[Some(&x)]).unwrap()[0], &[1.5, 6.0], 0.0);
    }

    #[test]
    fn dilated_same_and_lp() {
        let p = Pool {
            kernel_shape: vec![2, 2],
            dilations: vec![2, 2],
            ..Default::default()
        };
        let y = p.eval(&[Some(&x4x4())]).unwrap();
        assert_close(&y[0], &[11., 12., 15., 16.], 0.0);
        let s = Pool {
            kernel_shape: vec![2, 2],
            auto_pad: AutoPad::SameUpper,
            kind: PoolKind::Average,
            ..Default::default()
        };
        let y = s.eval(&[Some(&x4x4())]).unwrap();
        assert_eq!(y[0].shape(), &[1, 1, 4, 4]);
        assert_eq!(&y[0].to_f64_vec()[..4], &[3.5, 4.5, 5.5, 6.0]);
    }

    #[test]
    fn hostile_geometry_is_an_error() {
        let x = f32t(&[1, 1, 2, 2], &[0.; 4]);
        let p = Pool {
            kernel_shape: vec![3, 3],
            ..Default::default()
        };
        assert!(p.eval(&[Some(&x)]).is_err());
        let p = Pool {
            kernel_shape: vec![1],
            ..Default::default()
        };
        assert!(p.eval(&[Some(&x)]).is_err());
        let p = Pool {
            kernel_shape: vec![1, 1],
            strides: vec![0, 1],
            ..Default::default()
        };
        assert!(p.eval(&[Some(&x)]).is_err());
    }

    #[test]
    fn global() {
        let x = f32t(&[1, 2, 2], &[1., -2., 3., 4.]);
        let g = GlobalPool::default();
        assert_close(&g.eval(&[Some(&x)]).unwrap()[0], &[-0.5, 3.5], 0.0);
        let m = GlobalPool {
            kind: PoolKind::Max,
            p: 2.0,
        };
        assert_close(&m.eval(&[Some(&x)]).unwrap()[0], &[1., 4.], 0.0);
        let l = GlobalPool {
            kind: PoolKind::Lp,
            p: 2.0,
        };
        assert_close(&l.eval(&[Some(&x)]).unwrap()[0], &[5f64.sqrt(), 5.0], 1e-6);
    }
}
