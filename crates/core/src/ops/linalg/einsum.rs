//! Einsum: general Einstein summation (explicit or implicit output, repeated labels within a
//! term for diagonals, one `...` ellipsis per term with broadcasting).
//!
//! The reference loops over the full index space of all labels, which is slow but plainly
//! right.

use super::conv_geometry::for_each_index;
use super::{tensor_from_sink, tensor_from_sink_i64};
use crate::op::{output, required, variadic, Prototype};
use crate::{op_bail, op_common, op_ensure, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Einsum {
    pub equation: String,
}

/// One position of a term: a letter or the ellipsis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Label {
    Letter(u8),
    Ellipsis,
}

fn parse_term(t: &str) -> OpResult<Vec<Label>> {
    let b = t.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphabetic() {
            out.push(Label::Letter(b[i]));
            i += 1;
        } else if b[i..].starts_with(b"...") {
            op_ensure!(
                !out.contains(&Label::Ellipsis),
                "einsum term '{t}' has more than one ellipsis"
            );
            out.push(Label::Ellipsis);
            i += 3;
        } else {
            op_bail!(
                "einsum term '{t}' has the invalid character '{}'",
                b[i] as char
            );
        }
    }
    Ok(out)
}

/// The resolved summation: label ids (letters 0..128 by code, ellipsis dimensions 128+i),
/// the size of every label, and per input the label of each dimension.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EinsumPlan {
    /// Per input, the label id of each dimension.
    inputs: Vec<Vec<usize>>,
    output: Vec<usize>,
    /// Labels summed over (appear in inputs, not in the output).
    summed: Vec<usize>,
    size: Vec<usize>,
}

const ELL: usize = 128;

impl EinsumPlan {
    pub fn new(equation: &str, shapes: &[&[usize]]) -> OpResult<EinsumPlan> {
        let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match eq.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (eq.as_str(), None),
        };
        let terms: Vec<Vec<Label>> = lhs.split(',').map(parse_term).collect::<OpResult<_>>()?;
        op_ensure!(
            terms.len() == shapes.len(),
            "equation '{equation}' has {} input terms, but {} inputs are given",
            terms.len(),
            shapes.len()
        );
        // Rank covered by each term's ellipsis.
        let mut ell_ranks = Vec::with_capacity(terms.len());
        for (i, (t, s)) in terms.iter().zip(shapes).enumerate() {
            let letters = t.iter().filter(|l| matches!(l, Label::Letter(_))).count();
            let has_ell = t.contains(&Label::Ellipsis);
            op_ensure!(
                s.len() == letters || (has_ell && s.len() > letters),
                "input {i} has shape {s:?}, which does not fit the term {:?} of '{equation}'",
                lhs.split(',').nth(i).unwrap_or("")
            );
            ell_ranks.push(s.len() - letters);
        }
        let ell_rank = ell_ranks.iter().copied().max().unwrap_or(0);
        let any_ell = terms.iter().any(|t| t.contains(&Label::Ellipsis));
        let mut size = vec![1usize; ELL + ell_rank];
        let mut seen = vec![false; ELL + ell_rank];
        let mut count = [0usize; ELL];
        let mut inputs = Vec::with_capacity(terms.len());
        for (i, (t, s)) in terms.iter().zip(shapes).enumerate() {
            let mut ids = Vec::with_capacity(s.len());
            for l in t {
                match *l {
                    Label::Letter(c) => {
                        count[c as usize] += 1;
                        ids.push(c as usize);
                    }
                    Label::Ellipsis => {
                        ids.extend((ell_rank - ell_ranks[i]..ell_rank).map(|e| ELL + e));
                    }
                }
            }
            for (&id, &d) in ids.iter().zip(s.iter()) {
                // Size-1 dimensions broadcast; others must agree.
                if !seen[id] || size[id] == 1 {
                    size[id] = d;
                } else {
                    op_ensure!(
                        d == size[id] || d == 1,
                        "input {i} of shape {s:?}: label size {d} conflicts with {} elsewhere in '{equation}'",
                        size[id]
                    );
                }
                seen[id] = true;
            }
            inputs.push(ids);
        }
        let output: Vec<usize> = match rhs {
            Some(r) => {
                let mut out = Vec::new();
                for l in parse_term(r)? {
                    match l {
                        Label::Letter(c) => {
                            let id = c as usize;
                            op_ensure!(
                                seen[id],
                                "output label '{}' of '{equation}' is not in any input",
                                c as char
                            );
                            op_ensure!(
                                !out.contains(&id),
                                "output label '{}' of '{equation}' is repeated",
                                c as char
                            );
                            out.push(id);
                        }
                        Label::Ellipsis => out.extend((0..ell_rank).map(|e| ELL + e)),
                    }
                }
                out
            }
            None => {
                let mut out: Vec<usize> = if any_ell {
                    (0..ell_rank).map(|e| ELL + e).collect()
                } else {
                    vec![]
                };
                out.extend((0..ELL).filter(|&c| count[c] == 1));
                out
            }
        };
        let summed: Vec<usize> = (0..ELL + ell_rank)
            .filter(|&id| seen[id] && !output.contains(&id))
            .collect();
        Ok(EinsumPlan {
            inputs,
            output,
            summed,
            size,
        })
    }

    pub fn output_shape(&self) -> Vec<usize> {
        self.output.iter().map(|&id| self.size[id]).collect()
    }

    /// Per input, its element stride for each label id (summed over repeated labels, zero for
    /// broadcast dimensions).
    fn strides(&self, shapes: &[&[usize]]) -> Vec<Vec<usize>> {
        self.inputs
            .iter()
            .zip(shapes)
            .map(|(ids, s)| {
                let st = crate::ops::util::strides(s);
                let mut per = vec![0usize; self.size.len()];
                for ((&id, &d), &stride) in ids.iter().zip(s.iter()).zip(&st) {
                    if d != 1 {
                        per[id] += stride;
                    }
                }
                per
            })
            .collect()
    }
}

/// Plain Einstein summation; pushes the output elements in row-major order.
fn einsum_reference<T: Copy>(
    plan: &EinsumPlan,
    shapes: &[&[usize]],
    data: &[Vec<T>],
    zero: T,
    mul: impl Fn(T, T) -> T,
    add: impl Fn(T, T) -> T,
    sink: &mut dyn FnMut(T),
) {
    let strides = plan.strides(shapes);
    let out_sizes = plan.output_shape();
    let sum_sizes: Vec<usize> = plan.summed.iter().map(|&id| plan.size[id]).collect();
    for_each_index(&out_sizes, |o| {
        let mut acc = zero;
        for_each_index(&sum_sizes, |s| {
            let mut prod: Option<T> = None;
            for (x, st) in data.iter().zip(&strides) {
                let mut off = 0;
                for (&id, &i) in plan.output.iter().zip(o) {
                    off += st[id] * i;
                }
                for (&id, &i) in plan.summed.iter().zip(s) {
                    off += st[id] * i;
                }
                prod = Some(match prod {
                    None => x[off],
                    Some(p) => mul(p, x[off]),
                });
            }
            if let Some(p) = prod {
                acc = add(acc, p);
            }
        });
        sink(acc);
    });
}

impl Op for Einsum {
    op_common!(
        "Einsum",
        Prototype {
            inputs: &[variadic("Inputs", DTypeSet::NUMERIC, 1)],
            outputs: &[output("Output")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        let dt = ctx.dtype(0)?;
        let mut shapes = Vec::with_capacity(ctx.len());
        for i in 0..ctx.len() {
            op_ensure!(
                ctx.dtype(i)? == dt,
                "input {i} is {}, expected {dt} like input 0",
                ctx.dtype(i)?
            );
            shapes.push(ctx.shape(i)?);
        }
        let plan = EinsumPlan::new(&self.equation, &shapes)?;
        Ok(vec![TensorInfo::new(dt, plan.output_shape())])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let ts: Vec<&Tensor> = (0..inputs.len())
            .map(|i| required(inputs, i))
            .collect::<OpResult<_>>()?;
        op_ensure!(!ts.is_empty(), "Einsum needs at least one input");
        let dt = ts[0].dtype();
        op_ensure!(
            ts.iter().all(|t| t.dtype() == dt),
            "all inputs must have the dtype of input 0 ({dt})"
        );
        let shapes: Vec<&[usize]> = ts.iter().map(|t| t.shape()).collect();
        let plan = EinsumPlan::new(&self.equation, &shapes)?;
        let out_shape = plan.output_shape();
        let y = if dt.is_float() {
            let data: Vec<Vec<f64>> = ts.iter().map(|t| t.to_f64_vec()).collect();
            tensor_from_sink(dt, &out_shape, |sink| {
                einsum_reference(&plan, &shapes, &data, 0.0, |a, b| a * b, |a, b| a + b, sink)
            })?
        } else {
            let data: Vec<Vec<i64>> = ts.iter().map(|t| t.to_i64_vec()).collect();
            tensor_from_sink_i64(dt, &out_shape, |sink| {
                einsum_reference(
                    &plan,
                    &shapes,
                    &data,
                    0,
                    i64::wrapping_mul,
                    i64::wrapping_add,
                    sink,
                )
            })?
        };
        Ok(vec![y])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn es(eq: &str, ts: &[&Tensor]) -> OpResult<Tensor> {
        let ins: Vec<Option<&Tensor>> = ts.iter().map(|t| Some(*t)).collect();
        Ok(Einsum {
            equation: eq.into(),
        }
        .eval(&ins)?
        .remove(0))
    }

    fn f(shape: &[usize], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(shape, v).unwrap()
    }

    fn vals(t: &Tensor) -> Vec<f32> {
        t.as_slice::<f32>().unwrap().to_vec()
    }

    #[test]
    fn sum_transpose_matmul() {
        let a = f(&[2, 3], vec![1., 2., 3., 4., 5., 6.]);
        assert_eq!(vals(&es("ij->i", &[&a]).unwrap()), vec![6., 15.]);
        let t = es("ij->ji", &[&a]).unwrap();
        assert_eq!(t.shape(), &[3, 2]);
        assert_eq!(vals(&t), vec![1., 4., 2., 5., 3., 6.]);
        // Implicit output: "ji" sorts to "ij" -> transpose of the stored order.
        assert_eq!(
            vals(&es("ji", &[&a]).unwrap()),
            vec![1., 4., 2., 5., 3., 6.]
        );
        let b = f(&[3, 1], vec![1., 0., -1.]);
        let y = es(
            "bij, bjk -> bik",
            &[
                &a.reshaped(&[1, 2, 3]).unwrap(),
                &b.reshaped(&[1, 3, 1]).unwrap(),
            ],
        )
        .unwrap();
        assert_eq!((y.shape(), vals(&y)), (&[1, 2, 1][..], vec![-2., -2.]));
        // Implicit matmul "ij,jk" -> "ik".
        assert_eq!(vals(&es("ij,jk", &[&a, &b]).unwrap()), vec![-2., -2.]);
    }

    #[test]
    fn inner_product_scalar_and_total_sum() {
        let x = f(&[3], vec![1., 2., 3.]);
        let y = es("i,i", &[&x, &x]).unwrap();
        assert_eq!((y.shape(), vals(&y)), (&[][..], vec![14.]));
        let s = Tensor::scalar(2.0f32);
        let y = es(",->", &[&s, &s]).unwrap();
        assert_eq!(vals(&y), vec![4.]);
        assert_eq!(vals(&es("i->", &[&x]).unwrap()), vec![6.]);
        // Outer product.
        let y = es("i,j->ij", &[&x, &f(&[2], vec![1., -1.])]).unwrap();
        assert_eq!(vals(&y), vec![1., -1., 2., -2., 3., -3.]);
    }

    #[test]
    fn diagonals_and_ellipsis() {
        let m = f(&[2, 2, 2], vec![1., 2., 3., 4., 5., 6., 7., 8.]);
        // ONNX test_einsum_batch_diagonal: "...ii ->...i".
        let y = es("...ii ->...i", &[&m]).unwrap();
        assert_eq!((y.shape(), vals(&y)), (&[2, 2][..], vec![1., 4., 5., 8.]));
        // Trace and diagonal.
        let sq = f(&[2, 2], vec![1., 2., 3., 4.]);
        assert_eq!(vals(&es("ii", &[&sq]).unwrap()), vec![5.]);
        assert_eq!(vals(&es("ii->i", &[&sq]).unwrap()), vec![1., 4.]);
        // Ellipsis broadcasting: [2, 1, 2] ... with [3, 2] -> batch [2, 3].
        let a = f(&[2, 1, 2], vec![1., 2., 3., 4.]);
        let b = f(&[3, 2], vec![1., 0., 0., 1., 1., 1.]);
        let y = es("...j,...j->...", &[&a, &b]).unwrap();
        assert_eq!(
            (y.shape(), vals(&y)),
            (&[2, 3][..], vec![1., 2., 3., 3., 4., 7.])
        );
        // Implicit output keeps the ellipsis first.
        let y = es("...i", &[&a]).unwrap();
        assert_eq!(y.shape(), &[2, 1, 2]);
    }

    #[test]
    fn errors_and_ints() {
        let x = Tensor::from_vec(&[3], vec![1i32, 2, 3]).unwrap();
        assert_eq!(
            es("i,i->", &[&x, &x]).unwrap().as_slice::<i32>().unwrap(),
            &[14]
        );
        assert!(es("ij", &[&x]).is_err());
        assert!(es("i,i", &[&x]).is_err());
        assert!(es("i->j", &[&x]).is_err());
        assert!(es("i->ii", &[&x]).is_err());
        assert!(es("i$", &[&x]).is_err());
        let y = Tensor::from_vec(&[2], vec![1i32, 2]).unwrap();
        assert!(es("i,i", &[&x, &y]).is_err());
    }
}
