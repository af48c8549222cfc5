//! Scan: runs its body once per step along the scan inputs' axes, carrying state values and
//! stacking the body's scan outputs.
//!
//! Inputs: opset 8's optional sequence lengths (absent from opset 9 on), the initial states,
//! the scan inputs, then the outer values the body captures. The body takes the states and
//! one slice of each scan input (the scanned axis removed) and gives the next states and one
//! slice of each scan output. Opset 8's form has a batch axis 0 on every input and output,
//! scans axis 1, and runs the body per batch entry.

use super::{stack_along, take_along, Subgraph};
use crate::op::{normalize_axis, optional, output, variadic, Prototype};
use crate::{op_bail, op_common, op_ensure, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug)]
pub struct Scan {
    pub body: Subgraph,
    pub num_scan_inputs: usize,
    /// Per scan input: 0 scans forward, 1 backward (empty: all forward).
    pub input_directions: Vec<i64>,
    /// Per scan input: the axis scanned (empty: all 0).
    pub input_axes: Vec<i64>,
    /// Per scan output: 0 stacks in iteration order, 1 in reverse (empty: all 0).
    pub output_directions: Vec<i64>,
    /// Per scan output: the new axis the slices are stacked along (empty: all 0).
    pub output_axes: Vec<i64>,
    /// Opset 8's form (see the module's comment).
    pub batched: bool,
}

impl Scan {
    fn states(&self) -> OpResult<usize> {
        self.body
            .formal_inputs
            .checked_sub(self.num_scan_inputs)
            .ok_or_else(|| {
                crate::OpError(format!(
                    "num_scan_inputs {} is more than the body's {} inputs",
                    self.num_scan_inputs, self.body.formal_inputs
                ))
            })
    }

    fn setting(list: &[i64], i: usize, what: &str) -> OpResult<i64> {
        match list.len() {
            0 => Ok(0),
            _ => list
                .get(i)
                .copied()
                .ok_or_else(|| crate::OpError(format!("{what} has no entry {i}"))),
        }
    }

    /// One unbatched scan: states and scan inputs in, final states and scan outputs out.
    fn scan(
        &self,
        states: Vec<Tensor>,
        scans: &[&Tensor],
        captured: &[&Tensor],
    ) -> OpResult<Vec<Tensor>> {
        let n = states.len();
        op_ensure!(
            self.body.outputs() >= n,
            "the body gives {} outputs, fewer than the {n} states",
            self.body.outputs()
        );
        let k = self.body.outputs() - n;
        let mut axes = Vec::with_capacity(scans.len());
        let mut steps = None;
        for (j, x) in scans.iter().enumerate() {
            let axis = normalize_axis(
                Self::setting(&self.input_axes, j, "scan_input_axes")?,
                x.rank(),
            )?;
            let len = x.shape()[axis];
            op_ensure!(
                steps.is_none_or(|s| s == len),
                "the scan inputs have {} and {len} steps",
                steps.unwrap_or(0)
            );
            steps = Some(len);
            axes.push(axis);
        }
        let steps = steps.unwrap_or(0);
        let mut states = states;
        let mut scanned: Vec<Vec<Tensor>> = vec![Vec::new(); k];
        for t in 0..steps {
            let mut slices = Vec::with_capacity(scans.len());
            for (j, x) in scans.iter().enumerate() {
                let backward =
                    Self::setting(&self.input_directions, j, "scan_input_directions")? == 1;
                slices.push(take_along(
                    x,
                    axes[j],
                    if backward { steps - 1 - t } else { t },
                )?);
            }
            let mut args: Vec<&Tensor> = states.iter().collect();
            args.extend(slices.iter());
            args.extend(captured.iter().copied());
            let mut outs = self
                .body
                .run(&args)
                .map_err(|e| crate::OpError(format!("step {t}: {}", e.0)))?;
            let outs_scanned = outs.split_off(n);
            states = outs;
            for (list, s) in scanned.iter_mut().zip(outs_scanned) {
                list.push(s);
            }
        }
        let mut results = states;
        for (i, mut list) in scanned.into_iter().enumerate() {
            if list.is_empty() {
                results.push(self.body.empty_output(n + i)?);
                continue;
            }
            if Self::setting(&self.output_directions, i, "scan_output_directions")? == 1 {
                list.reverse();
            }
            let axis = normalize_axis(
                Self::setting(&self.output_axes, i, "scan_output_axes")?,
                list[0].rank() + 1,
            )?;
            results.push(stack_along(&list, axis)?);
        }
        Ok(results)
    }
}

impl Op for Scan {
    op_common!(
        "Scan",
        Prototype {
            inputs: &[
                optional("sequence_lens", DTypeSet::I64),
                variadic("values", DTypeSet::VALUE, 0)
            ],
            outputs: &[output("outputs")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        op_bail!("Scan's output types are known only by running it")
    }

    fn shapes_known_by_running(&self) -> bool {
        true
    }

    fn is_foldable(&self) -> bool {
        false
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let n = self.states()?;
        let m = self.num_scan_inputs;
        let values: Vec<&Tensor> = inputs.iter().skip(1).flatten().copied().collect();
        op_ensure!(
            values.len() == n + m + self.body.captured(),
            "expected {n} states, {m} scan inputs and {} captured values, got {} inputs",
            self.body.captured(),
            values.len()
        );
        let (states, rest) = values.split_at(n);
        let (scans, captured) = rest.split_at(m);
        if !self.batched {
            let states = states.iter().map(|t| (*t).clone()).collect();
            return self.scan(states, scans, captured);
        }
        // Opset 8: axis 0 is a batch; each entry scans its own slices along (what was) axis 1.
        let batch = values
            .first()
            .map(|t| t.shape().first().copied().unwrap_or(0))
            .unwrap_or(0);
        for t in &values[..n + m] {
            op_ensure!(
                t.shape().first() == Some(&batch),
                "every state and scan input needs the batch axis 0 of size {batch}, one has shape {:?}",
                t.shape()
            );
        }
        if let Some(lens) = inputs.first().copied().flatten() {
            let full = scans
                .first()
                .map_or(0, |s| s.shape().get(1).copied().unwrap_or(0));
            op_ensure!(
                lens.to_i64_vec().iter().all(|&l| l == full as i64),
                "sequence_lens shorter than the scan inputs' {full} steps are not supported"
            );
        }
        let mut per_entry: Vec<Vec<Tensor>> = Vec::with_capacity(batch);
        for b in 0..batch {
            let st = states
                .iter()
                .map(|t| take_along(t, 0, b))
                .collect::<OpResult<Vec<_>>>()?;
            let sc = scans
                .iter()
                .map(|t| take_along(t, 0, b))
                .collect::<OpResult<Vec<_>>>()?;
            let sc_refs: Vec<&Tensor> = sc.iter().collect();
            per_entry.push(self.scan(st, &sc_refs, captured)?);
        }
        let outputs = self.body.outputs();
        (0..outputs)
            .map(|i| {
                let parts: Vec<Tensor> = per_entry.iter().map(|r| r[i].clone()).collect();
                stack_along(&parts, 0)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::{Binary, BinaryKind};
    use crate::ops::elementwise::cast::Identity;
    use crate::Graph;
    use std::sync::Arc;

    /// body(sum, x) = (sum + x, sum + x): a cumulative sum.
    fn cumulative(batched: bool, input_directions: Vec<i64>, output_axes: Vec<i64>) -> Scan {
        let mut g = Graph::new();
        let sum = g.add_value("sum");
        let x = g.add_value("x");
        let next = g.add_value("next");
        let out = g.add_value("out");
        g.inputs = vec![sum, x];
        let add = Arc::new(Binary::new(BinaryKind::Add));
        g.add_node("add", add, vec![Some(sum), Some(x)], vec![next])
            .unwrap();
        g.add_node("copy", Arc::new(Identity), vec![Some(next)], vec![out])
            .unwrap();
        g.outputs = vec![next, out];
        Scan {
            body: Subgraph::new(g, 2),
            num_scan_inputs: 1,
            input_directions,
            input_axes: vec![],
            output_directions: vec![],
            output_axes,
            batched,
        }
    }

    #[test]
    fn scans_forward_backward_and_stacks_on_the_output_axis() {
        let init = Tensor::from_vec(&[2], vec![0.0f32, 0.0]).unwrap();
        // Three steps of two values: [1,2], [3,4], [5,6].
        let x = Tensor::from_vec(&[3, 2], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let out = cumulative(false, vec![], vec![])
            .eval(&[None, Some(&init), Some(&x)])
            .unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![9.0, 12.0]);
        assert_eq!(out[1].to_f64_vec(), vec![1.0, 2.0, 4.0, 6.0, 9.0, 12.0]);
        let back = cumulative(false, vec![1], vec![-1])
            .eval(&[None, Some(&init), Some(&x)])
            .unwrap();
        assert_eq!(back[0].to_f64_vec(), vec![9.0, 12.0]);
        // Steps 5, 3, 1 stacked on the last axis: [[5, 8, 9], [6, 10, 12]].
        assert_eq!(back[1].shape(), &[2, 3]);
        assert_eq!(back[1].to_f64_vec(), vec![5.0, 8.0, 9.0, 6.0, 10.0, 12.0]);
    }

    #[test]
    fn opset_8_scans_each_batch_entry() {
        let init = Tensor::from_vec(&[2, 1], vec![0.0f32, 100.0]).unwrap();
        let x = Tensor::from_vec(&[2, 3, 1], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let op = cumulative(true, vec![], vec![]);
        let out = op.eval(&[None, Some(&init), Some(&x)]).unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![6.0, 115.0]);
        assert_eq!(out[1].shape(), &[2, 3, 1]);
        assert_eq!(
            out[1].to_f64_vec(),
            vec![1.0, 3.0, 6.0, 104.0, 109.0, 115.0]
        );
        let short = Tensor::from_vec(&[2], vec![3i64, 2]).unwrap();
        assert!(op.eval(&[Some(&short), Some(&init), Some(&x)]).is_err());
    }
}
