//! Loop: runs its body while the trip count and the condition allow, carrying values from one
//! iteration to the next and stacking the body's scan outputs.
//!
//! Inputs: the trip count `M` and the condition (both optional), the carried values' initial
//! values, then the outer values the body captures. The body takes the iteration number, the
//! condition, the carried values and the captured values; it gives the next condition, the next
//! carried values (whose shapes may change from one iteration to the next) and the scan outputs.

use super::{stack_along, truth, Subgraph};
use crate::op::{optional, output, variadic, Prototype};
use crate::{op_bail, op_common, op_ensure, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// The most iterations one Loop node runs by default: a loop without a trip count whose
/// condition never turns false (a hostile or broken model) ends with an error instead of
/// hanging.
pub const MAX_ITERATIONS: i64 = 1 << 20;

/// The most bytes a Loop's carried and scanned values may hold together: a body that doubles
/// a carried value every iteration ends with an error before it exhausts memory.
pub const MAX_BYTES: usize = 1 << 30;

#[derive(Clone, Debug)]
pub struct Loop {
    pub body: Subgraph,
    /// More iterations than this is an error ([`MAX_ITERATIONS`] unless set).
    pub max_iterations: i64,
    /// More bytes of carried and scanned values than this is an error ([`MAX_BYTES`] unless
    /// set).
    pub max_bytes: usize,
}

impl Loop {
    pub fn new(body: Subgraph) -> Loop {
        Loop {
            body,
            max_iterations: MAX_ITERATIONS,
            max_bytes: MAX_BYTES,
        }
    }

    /// How many values the loop carries (the body's formal inputs past the iteration number
    /// and the condition).
    pub fn carried(&self) -> usize {
        self.body.formal_inputs.saturating_sub(2)
    }
}

impl Op for Loop {
    op_common!(
        "Loop",
        Prototype {
            inputs: &[
                optional("M", DTypeSet::I64),
                optional("cond", DTypeSet::BOOL),
                variadic("values", DTypeSet::VALUE, 0)
            ],
            outputs: &[output("outputs")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        op_bail!("Loop's output types are known only by running it")
    }

    fn shapes_known_by_running(&self) -> bool {
        true
    }

    fn is_foldable(&self) -> bool {
        false
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let n = self.carried();
        op_ensure!(
            self.body.formal_inputs >= 2,
            "the body must take the iteration number and the condition, takes {} formal inputs",
            self.body.formal_inputs
        );
        op_ensure!(
            self.body.outputs() > n,
            "the body gives {} outputs, fewer than the condition and {n} carried values",
            self.body.outputs()
        );
        let values: Vec<&Tensor> = inputs.iter().skip(2).flatten().copied().collect();
        op_ensure!(
            values.len() == n + self.body.captured(),
            "expected {n} initial values and {} captured ones, got {} inputs after M and cond",
            self.body.captured(),
            values.len()
        );
        let trip = match inputs.first().copied().flatten() {
            Some(m) => {
                op_ensure!(m.numel() == 1, "input 0 (M) must hold one value");
                Some(m.to_i64_vec()[0])
            }
            None => None,
        };
        let mut keep_going = match inputs.get(1).copied().flatten() {
            Some(c) => truth(c, "input 1 (cond)")?,
            None => true,
        };
        let (initial, captured) = values.split_at(n);
        let mut carried: Vec<Tensor> = initial.iter().map(|t| (*t).clone()).collect();
        let scan_outputs = self.body.outputs() - 1 - n;
        let mut scanned: Vec<Vec<Tensor>> = vec![Vec::new(); scan_outputs];
        let mut i: i64 = 0;
        let mut held = 0usize;
        while keep_going && trip.is_none_or(|m| i < m) {
            op_ensure!(
                i < self.max_iterations,
                "more than {} iterations (the trip count is {trip:?})",
                self.max_iterations
            );
            let number = Tensor::scalar(i);
            let cond = Tensor::from_bools(&[], &[keep_going])?;
            let mut args: Vec<&Tensor> = vec![&number, &cond];
            args.extend(carried.iter());
            args.extend(captured.iter().copied());
            let mut outs = self
                .body
                .run(&args)
                .map_err(|e| crate::OpError(format!("iteration {i}: {}", e.0)))?;
            keep_going = truth(&outs[0], "the body's condition output")?;
            let scans = outs.split_off(1 + n);
            carried = outs.split_off(1);
            for (list, t) in scanned.iter_mut().zip(scans) {
                held += t.held_bytes();
                list.push(t);
            }
            let carried_bytes: usize = carried.iter().map(Tensor::held_bytes).sum();
            op_ensure!(
                held.saturating_add(carried_bytes) <= self.max_bytes,
                "after iteration {i}, the carried and scanned values hold more than {} bytes",
                self.max_bytes
            );
            i += 1;
        }
        let mut results = carried;
        for (k, list) in scanned.iter().enumerate() {
            results.push(if list.is_empty() {
                // No iteration: an empty tensor of the type the body declares, if any.
                self.body.empty_output(1 + n + k)?
            } else {
                stack_along(list, 0)?
            });
        }
        Ok(results)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::elementwise::binary::{Binary, BinaryKind};
    use crate::ops::elementwise::cast::Identity;
    use crate::Graph;
    use std::sync::Arc;

    /// body(i, cond, sum; step) = (cond, sum + step, sum + step): a running sum of the captured
    /// `step`, carried and scanned.
    fn running_sum() -> Loop {
        let mut g = Graph::new();
        let i = g.add_value("i");
        let cond = g.add_value("cond");
        let sum = g.add_value("sum");
        let step = g.add_value("step");
        let cond_out = g.add_value("cond_out");
        let next = g.add_value("next");
        let scan = g.add_value("scan");
        g.inputs = vec![i, cond, sum, step];
        g.add_node("keep", Arc::new(Identity), vec![Some(cond)], vec![cond_out])
            .unwrap();
        let add = Arc::new(Binary::new(BinaryKind::Add));
        g.add_node("add", add, vec![Some(sum), Some(step)], vec![next])
            .unwrap();
        g.add_node("copy", Arc::new(Identity), vec![Some(next)], vec![scan])
            .unwrap();
        g.outputs = vec![cond_out, next, scan];
        Loop {
            body: Subgraph::new(g, 3),
            max_iterations: 1000,
            max_bytes: MAX_BYTES,
        }
    }

    #[test]
    fn a_trip_count_runs_that_many_iterations_and_stacks_the_scans() {
        let op = running_sum();
        let m = Tensor::scalar(3i64);
        let zero = Tensor::from_vec(&[2], vec![0.0f32, 1.0]).unwrap();
        let step = Tensor::from_vec(&[2], vec![1.0f32, 10.0]).unwrap();
        let out = op
            .eval(&[Some(&m), None, Some(&zero), Some(&step)])
            .unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![3.0, 31.0]);
        assert_eq!(out[1].shape(), &[3, 2]);
        assert_eq!(out[1].to_f64_vec(), vec![1.0, 11.0, 2.0, 21.0, 3.0, 31.0]);
        // Zero iterations: the initial value, and an empty scan output.
        let none = Tensor::scalar(0i64);
        let out = op
            .eval(&[Some(&none), None, Some(&zero), Some(&step)])
            .unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![0.0, 1.0]);
        assert_eq!(out[1].shape(), &[0]);
        // A false condition runs nothing either.
        let stop = Tensor::from_bools(&[], &[false]).unwrap();
        let out = op
            .eval(&[Some(&m), Some(&stop), Some(&zero), Some(&step)])
            .unwrap();
        assert_eq!(out[0].to_f64_vec(), vec![0.0, 1.0]);
    }

    #[test]
    fn a_loop_that_never_stops_is_an_error() {
        let op = running_sum();
        let zero = Tensor::from_vec(&[1], vec![0.0f32]).unwrap();
        let step = Tensor::from_vec(&[1], vec![0.0f32]).unwrap();
        let e = op
            .eval(&[None, None, Some(&zero), Some(&step)])
            .unwrap_err();
        assert!(e.0.contains("iterations"), "{e}");
        // A body that doubles its carried value fails on the byte limit, not on memory.
        let mut g = Graph::new();
        let (i, cond, s, cond_out, next) = (
            g.add_value("i"),
            g.add_value("cond"),
            g.add_value("s"),
            g.add_value("cond_out"),
            g.add_value("next"),
        );
        g.inputs = vec![i, cond, s];
        g.add_node("keep", Arc::new(Identity), vec![Some(cond)], vec![cond_out])
            .unwrap();
        let concat = Arc::new(crate::ops::shape::concat::Concat { axis: 0 });
        g.add_node("double", concat, vec![Some(s), Some(s)], vec![next])
            .unwrap();
        g.outputs = vec![cond_out, next];
        let doubling = Loop {
            max_bytes: 1 << 20,
            ..Loop::new(Subgraph::new(g, 3))
        };
        let e = doubling.eval(&[None, None, Some(&zero)]).unwrap_err();
        assert!(e.0.contains("bytes"), "{e}");
        // Missing captured value.
        let m = Tensor::scalar(1i64);
        assert!(op.eval(&[Some(&m), None, Some(&zero)]).is_err());
    }
}
