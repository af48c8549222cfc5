//! Unique: the distinct elements (or slices along `axis`), with first-occurrence indices,
//! inverse indices and counts. Output sizes depend on the data, so input 0 is value-dependent.

use crate::op::normalize_axis;
use crate::op::{input, optional_output, output, required, Prototype};
use crate::{op_common, DType, DTypeSet, Elem, InferCtx, Op, OpResult, Tensor, TensorInfo};
use std::cmp::Ordering;

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Unique {
    /// Sort the unique values ascending; otherwise keep first-occurrence order.
    pub sorted: bool,
    /// Compare slices along this axis; `None` flattens the input.
    pub axis: Option<i64>,
    /// Outputs the node uses: Y, indices, inverse_indices, counts (1 to 4).
    pub num_outputs: usize,
}

impl Default for Unique {
    fn default() -> Self {
        Unique {
            sorted: true,
            axis: None,
            num_outputs: 4,
        }
    }
}

/// The grouping: the slice index of each unique entry (its first occurrence), the inverse
/// index of every slice and the counts.
struct Groups {
    first: Vec<usize>,
    inverse: Vec<usize>,
    counts: Vec<usize>,
}

fn cmp<T: Elem>(a: &[T], b: &[T]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.partial_cmp(y) {
            Some(Ordering::Equal) => {}
            Some(o) => return o,
            // NaNs: order by the f64 total order so sorting stays consistent.
            None => return x.to_f64().total_cmp(&y.to_f64()),
        }
    }
    Ordering::Equal
}

/// `(outer, n, inner)` around the axis (the flattened input when there is none).
fn split(shape: &[usize], axis: Option<usize>) -> (usize, usize, usize) {
    match axis {
        None => (1, shape.iter().product(), 1),
        Some(a) => (
            shape[..a].iter().product(),
            shape[a],
            shape[a + 1..].iter().product(),
        ),
    }
}

fn group<T: Elem>(x: &Tensor, axis: Option<usize>, sorted: bool) -> OpResult<Groups> {
    let v = x.as_slice::<T>()?;
    let (outer, n, inner) = split(x.shape(), axis);
    let slices: Vec<Vec<T>> = (0..n)
        .map(|i| {
            (0..outer)
                .flat_map(|o| {
                    v[(o * n + i) * inner..(o * n + i + 1) * inner]
                        .iter()
                        .copied()
                })
                .collect()
        })
        .collect();
    // Sort slice indices by value (stable, so each run starts at its first occurrence), then
    // number the runs: O(n log n) comparisons rather than comparing every pair.
    let mut order: Vec<usize> = (0..n).collect();
    crate::ops::util::sort_indices_by(&mut order, &mut |i, j| cmp(&slices[i], &slices[j]));
    let mut first: Vec<usize> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    let mut inverse = vec![0usize; n];
    for (p, &i) in order.iter().enumerate() {
        if p == 0 || cmp(&slices[order[p - 1]], &slices[i]) != Ordering::Equal {
            first.push(i);
            counts.push(0);
        }
        inverse[i] = first.len() - 1;
        if let Some(c) = counts.last_mut() {
            *c += 1;
        }
    }
    if !sorted {
        // First-occurrence order: renumber the groups by their first index.
        let mut by_first: Vec<usize> = (0..first.len()).collect();
        crate::ops::util::sort_indices_by(&mut by_first, &mut |a, b| first[a].cmp(&first[b]));
        let mut rank = vec![0usize; by_first.len()];
        for (r, &k) in by_first.iter().enumerate() {
            rank[k] = r;
        }
        first = by_first.iter().map(|&k| first[k]).collect();
        counts = by_first.iter().map(|&k| counts[k]).collect();
        for k in inverse.iter_mut() {
            *k = rank[*k];
        }
    }
    Ok(Groups {
        first,
        inverse,
        counts,
    })
}

impl Unique {
    fn axis(&self, rank: usize) -> OpResult<Option<usize>> {
        self.axis.map(|a| normalize_axis(a, rank)).transpose()
    }

    fn groups(&self, x: &Tensor) -> OpResult<Groups> {
        let axis = self.axis(x.rank())?;
        crate::dispatch_all!(x.dtype(), T => { group::<T>(x, axis, self.sorted) })
    }

    fn infos(&self, x: &Tensor, g: &Groups) -> OpResult<Vec<TensorInfo>> {
        let k = g.first.len();
        let y = match self.axis(x.rank())? {
            None => vec![k],
            Some(a) => {
                let mut s = x.shape().to_vec();
                s[a] = k;
                s
            }
        };
        let mut v = vec![
            TensorInfo::new(x.dtype(), y),
            TensorInfo::new(DType::I64, vec![k]),
            TensorInfo::new(DType::I64, vec![g.inverse.len()]),
            TensorInfo::new(DType::I64, vec![k]),
        ];
        v.truncate(self.num_outputs.clamp(1, 4));
        Ok(v)
    }
}

impl Op for Unique {
    op_common!(
        "Unique",
        Prototype {
            inputs: &[input("X", DTypeSet::ALL)],
            outputs: &[
                output("Y"),
                optional_output("indices"),
                optional_output("inverse_indices"),
                optional_output("counts"),
            ],
            value_inputs: &[0],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let x = ctx.value(0)?;
        self.infos(x, &self.groups(x)?)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let g = self.groups(x)?;
        let infos = self.infos(x, &g)?;
        let axis = self.axis(x.rank())?;
        let (outer, n, inner) = split(x.shape(), axis);
        let k = g.first.len();
        let esz = x.dtype().size();
        let src = x.bytes();
        let mut y = Tensor::zeros(x.dtype(), &infos[0].shape)?;
        {
            let dst = y.bytes_mut();
            for o in 0..outer {
                for (j, &f) in g.first.iter().enumerate() {
                    let s = ((o * n + f) * inner) * esz;
                    let d = ((o * k + j) * inner) * esz;
                    dst[d..d + inner * esz].copy_from_slice(&src[s..s + inner * esz]);
                }
            }
        }
        let ints =
            |v: &[usize]| Tensor::from_vec(&[v.len()], v.iter().map(|&i| i as i64).collect());
        let mut outs = vec![y, ints(&g.first)?, ints(&g.inverse)?, ints(&g.counts)?];
        outs.truncate(infos.len());
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_sorted_and_unsorted() {
        let x = Tensor::from_vec(&[6], vec![2.0f32, 1., 1., 3., 4., 3.]).unwrap();
        let y = Unique::default().eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![1., 2., 3., 4.]);
        assert_eq!(y[1].to_i64_vec(), vec![1, 0, 3, 4]);
        assert_eq!(y[2].to_i64_vec(), vec![1, 0, 0, 2, 3, 2]);
        assert_eq!(y[3].to_i64_vec(), vec![2, 1, 2, 1]);
        let u = Unique {
            sorted: false,
            ..Default::default()
        };
        let y = u.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![2., 1., 3., 4.]);
        assert_eq!(y[1].to_i64_vec(), vec![0, 1, 3, 4]);
        assert_eq!(y[2].to_i64_vec(), vec![0, 1, 1, 2, 3, 2]);
    }

    #[test]
    fn along_axis() {
        // Rows [1,0,0], [1,0,0], [2,3,4]: two unique rows.
        let x = Tensor::from_vec(&[3, 3], vec![2i32, 3, 4, 1, 0, 0, 1, 0, 0]).unwrap();
        let u = Unique {
            axis: Some(0),
            ..Default::default()
        };
        let y = u.eval(&[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[2, 3]);
        assert_eq!(y[0].to_i64_vec(), vec![1, 0, 0, 2, 3, 4]);
        assert_eq!(y[1].to_i64_vec(), vec![1, 0]);
        assert_eq!(y[2].to_i64_vec(), vec![1, 0, 0]);
        assert_eq!(y[3].to_i64_vec(), vec![2, 1]);
    }
}
