//! NonMaxSuppression: greedy per-(batch, class) box selection by score and IoU.
//!
//! boxes `[B, N, 4]`, scores `[B, C, N]`; the output `[K, 3]` lists (batch, class, box)
//! triples. K depends on the data, so every input is value-dependent.

use crate::op::{input, optional, output, required, Prototype};
use crate::{op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NonMaxSuppression {
    /// Boxes are `[x_center, y_center, width, height]` instead of two corners `[y1, x1, y2, x2]`.
    pub center_point_box: bool,
}

/// A box as `(y_min, x_min, y_max, x_max)`.
fn corners(b: &[f64], center: bool) -> [f64; 4] {
    if center {
        let (xc, yc, w, h) = (b[0], b[1], b[2], b[3]);
        [yc - h / 2.0, xc - w / 2.0, yc + h / 2.0, xc + w / 2.0]
    } else {
        [
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        ]
    }
}

fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let ih = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let iw = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = ih * iw;
    let area = |c: &[f64; 4]| (c[2] - c[0]) * (c[3] - c[1]);
    let union = area(a) + area(b) - inter;
    if inter <= 0.0 || union <= 0.0 {
        0.0
    } else {
        inter / union
    }
}

impl NonMaxSuppression {
    /// The selected (batch, class, box) triples.
    pub fn select(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<[i64; 3]>> {
        let boxes = required(inputs, 0)?;
        let scores = required(inputs, 1)?;
        let bs = boxes.shape();
        let ss = scores.shape();
        op_ensure!(
            bs.len() == 3 && bs[2] == 4,
            "input 0 (boxes): expected shape [B, N, 4], got {bs:?}"
        );
        op_ensure!(
            ss.len() == 3 && ss[0] == bs[0] && ss[2] == bs[1],
            "input 1 (scores): expected shape [{}, C, {}], got {ss:?}",
            bs[0],
            bs[1]
        );
        let scalar = |i: usize| -> Option<f64> {
            inputs
                .get(i)
                .copied()
                .flatten()
                .and_then(|t| t.to_f64_vec().first().copied())
        };
        let max_out = inputs
            .get(2)
            .copied()
            .flatten()
            .and_then(|t| t.to_i64_vec().first().copied())
            .unwrap_or(0)
            .max(0) as usize;
        let iou_th = scalar(3).unwrap_or(0.0);
        let score_th = scalar(4);
        let bv = boxes.to_f64_vec();
        let sv = scores.to_f64_vec();
        let (nb, nc, n) = (ss[0], ss[1], ss[2]);
        let mut out = Vec::new();
        for b in 0..nb {
            let cs: Vec<[f64; 4]> = (0..n)
                .map(|i| {
                    corners(
                        &bv[(b * n + i) * 4..(b * n + i) * 4 + 4],
                        self.center_point_box,
                    )
                })
                .collect();
            for c in 0..nc {
                let sc = &sv[(b * nc + c) * n..(b * nc + c + 1) * n];
                let mut cand: Vec<usize> = (0..n)
                    .filter(|&i| score_th.is_none_or(|t| sc[i] > t))
                    .collect();
                // Stable: equal scores keep the lower box index first.
                crate::ops::util::sort_indices_by(&mut cand, &mut |i, j| sc[j].total_cmp(&sc[i]));
                let mut kept: Vec<usize> = Vec::new();
                for i in cand {
                    if kept.len() >= max_out {
                        break;
                    }
                    if kept.iter().all(|&k| iou(&cs[k], &cs[i]) <= iou_th) {
                        kept.push(i);
                    }
                }
                out.extend(kept.into_iter().map(|i| [b as i64, c as i64, i as i64]));
            }
        }
        Ok(out)
    }
}

impl Op for NonMaxSuppression {
    op_common!(
        "NonMaxSuppression",
        Prototype {
            inputs: &[
                input("boxes", DTypeSet::FLOAT),
                input("scores", DTypeSet::FLOAT),
                optional("max_output_boxes_per_class", DTypeSet::I64),
                optional("iou_threshold", DTypeSet::FLOAT),
                optional("score_threshold", DTypeSet::FLOAT),
            ],
            outputs: &[output("selected_indices")],
            value_inputs: &[0, 1, 2, 3, 4],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let vals: Vec<Option<&Tensor>> = (0..ctx.len())
            .map(|i| {
                if ctx.has(i) {
                    ctx.value(i).map(Some)
                } else {
                    Ok(None)
                }
            })
            .collect::<OpResult<_>>()?;
        let k = self.select(&vals)?.len();
        Ok(vec![TensorInfo::new(DType::I64, vec![k, 3])])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let sel = self.select(inputs)?;
        let flat: Vec<i64> = sel.iter().flatten().copied().collect();
        Ok(vec![Tensor::from_vec(&[sel.len(), 3], flat)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suppresses_overlaps() {
        // Box 1 overlaps box 0 with IoU 0.81/1.19 ≈ 0.68; box 2 is disjoint.
        let boxes = Tensor::from_vec(
            &[1, 3, 4],
            vec![0.0f32, 0., 1., 1., 0.1, 0.1, 1.0, 1.0, 2., 2., 3., 3.],
        )
        .unwrap();
        let scores = Tensor::from_vec(&[1, 1, 3], vec![0.9f32, 0.95, 0.3]).unwrap();
        let max = Tensor::from_vec(&[1], vec![3i64]).unwrap();
        let th = Tensor::from_vec(&[1], vec![0.5f32]).unwrap();
        let nms = NonMaxSuppression::default();
        let y = nms
            .eval(&[Some(&boxes), Some(&scores), Some(&max), Some(&th)])
            .unwrap();
        assert_eq!(y[0].shape(), &[2, 3]);
        assert_eq!(y[0].to_i64_vec(), vec![0, 0, 1, 0, 0, 2]);
        let st = Tensor::from_vec(&[1], vec![0.5f32]).unwrap();
        let y = nms
            .eval(&[
                Some(&boxes),
                Some(&scores),
                Some(&max),
                Some(&th),
                Some(&st),
            ])
            .unwrap();
        assert_eq!(y[0].to_i64_vec(), vec![0, 0, 1]);
        // No max_output_boxes_per_class: nothing is selected.
        let y = nms.eval(&[Some(&boxes), Some(&scores)]).unwrap();
        assert_eq!(y[0].shape(), &[0, 3]);
    }

    #[test]
    fn center_format() {
        let c = corners(&[1.0, 2.0, 2.0, 4.0], true);
        assert_eq!(c, [0.0, 0.0, 4.0, 2.0]);
        assert_eq!(corners(&[1.0, 3.0, 0.0, 2.0], false), [0.0, 2.0, 1.0, 3.0]);
    }
}
