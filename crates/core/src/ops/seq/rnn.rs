//! RNN, GRU and LSTM: one recurrence loop shared by the three cell kinds.
//!
//! Shapes (layout 0; layout 1 swaps the sequence and batch axes of X, Y, Y_h and Y_c):
//! X `[S, B, I]`, W `[D, G·H, I]`, R `[D, G·H, H]`, B `[D, 2·G·H]` (W biases then R biases),
//! sequence_lens `[B]`, initial_h/initial_c `[D, B, H]`, P `[D, 3·H]`;
//! Y `[S, D, B, H]`, Y_h/Y_c `[D, B, H]`. G is 1 (RNN), 3 (GRU, gates z r h) or 4 (LSTM,
//! gates i o f c). Steps past a batch entry's sequence length write zeros to Y and leave its
//! state unchanged, so Y_h holds the state after the last valid step.

use crate::op::{input, optional, optional_output, required, Prototype};
use crate::{op_bail, op_common, op_ensure, DType, DTypeSet, InferCtx, Op, OpResult, Tensor};
use crate::{OpError, TensorInfo};

/// Which way the sequence is processed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Direction {
    #[default]
    Forward,
    Reverse,
    Bidirectional,
}

impl Direction {
    pub fn parse(s: &str) -> Option<Direction> {
        match s {
            "forward" => Some(Direction::Forward),
            "reverse" => Some(Direction::Reverse),
            "bidirectional" => Some(Direction::Bidirectional),
            _ => None,
        }
    }

    pub fn num_directions(self) -> usize {
        if self == Direction::Bidirectional {
            2
        } else {
            1
        }
    }
}

/// A gate activation function with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    Relu,
    Tanh,
    Sigmoid,
    Affine { alpha: f32, beta: f32 },
    LeakyRelu { alpha: f32 },
    ThresholdedRelu { alpha: f32 },
    ScaledTanh { alpha: f32, beta: f32 },
    HardSigmoid { alpha: f32, beta: f32 },
    Elu { alpha: f32 },
    Softsign,
    Softplus,
}

impl Activation {
    /// Parses an activation name (case-insensitive), taking `alpha`/`beta` from the given
    /// values or the function's defaults. Returns whether alpha and beta were used.
    pub fn parse(
        name: &str,
        alpha: Option<f32>,
        beta: Option<f32>,
    ) -> Option<(Activation, bool, bool)> {
        use Activation::*;
        let a = |d: f32| alpha.unwrap_or(d);
        let b = |d: f32| beta.unwrap_or(d);
        Some(match name.to_ascii_lowercase().as_str() {
            "relu" => (Relu, false, false),
            "tanh" => (Tanh, false, false),
            "sigmoid" => (Sigmoid, false, false),
            "affine" => (
                Affine {
                    alpha: a(1.0),
                    beta: b(0.0),
                },
                true,
                true,
            ),
            "leakyrelu" => (LeakyRelu { alpha: a(0.01) }, true, false),
            "thresholdedrelu" => (ThresholdedRelu { alpha: a(1.0) }, true, false),
            "scaledtanh" => (
                ScaledTanh {
                    alpha: a(1.0),
                    beta: b(1.0),
                },
                true,
                true,
            ),
            "hardsigmoid" => (
                HardSigmoid {
                    alpha: a(0.2),
                    beta: b(0.5),
                },
                true,
                true,
            ),
            "elu" => (Elu { alpha: a(1.0) }, true, false),
            "softsign" => (Softsign, false, false),
            "softplus" => (Softplus, false, false),
            _ => return None,
        })
    }

    pub fn apply(self, x: f64) -> f64 {
        use Activation::*;
        match self {
            Relu => x.max(0.0),
            Tanh => x.tanh(),
            Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Affine { alpha, beta } => alpha as f64 * x + beta as f64,
            LeakyRelu { alpha } => {
                if x >= 0.0 {
                    x
                } else {
                    alpha as f64 * x
                }
            }
            ThresholdedRelu { alpha } => {
                if x > alpha as f64 {
                    x
                } else {
                    0.0
                }
            }
            ScaledTanh { alpha, beta } => alpha as f64 * (beta as f64 * x).tanh(),
            HardSigmoid { alpha, beta } => (alpha as f64 * x + beta as f64).clamp(0.0, 1.0),
            Elu { alpha } => {
                if x >= 0.0 {
                    x
                } else {
                    alpha as f64 * (x.exp() - 1.0)
                }
            }
            Softsign => x / (1.0 + x.abs()),
            Softplus => {
                // ln(1 + e^x) without overflow for large x.
                if x > 30.0 {
                    x
                } else {
                    x.exp().ln_1p()
                }
            }
        }
    }
}

/// Attributes shared by the three recurrent ops.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RecurrentAttrs {
    /// Taken from R's last dimension when absent.
    pub hidden_size: Option<usize>,
    pub direction: Direction,
    /// X, Y, Y_h and Y_c put the batch axis first.
    pub batch_first: bool,
    /// The cell's activations (per direction, in cell order); empty for the defaults.
    pub activations: Vec<Activation>,
    /// Gate pre-activations are clamped to `[-clip, clip]`.
    pub clip: Option<f32>,
    /// How many outputs the node has (Y, Y_h and for LSTM Y_c).
    pub num_outputs: usize,
}

impl Default for RecurrentAttrs {
    fn default() -> Self {
        RecurrentAttrs {
            hidden_size: None,
            direction: Direction::Forward,
            batch_first: false,
            activations: Vec::new(),
            clip: None,
            num_outputs: 2,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
enum Cell {
    Rnn,
    Gru { linear_before_reset: bool },
    Lstm { input_forget: bool },
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru { .. } => 3,
            Cell::Lstm { .. } => 4,
        }
    }

    fn default_activations(self) -> &'static [Activation] {
        use Activation::*;
        match self {
            Cell::Rnn => &[Tanh],
            Cell::Gru { .. } => &[Sigmoid, Tanh],
            Cell::Lstm { .. } => &[Sigmoid, Tanh, Tanh],
        }
    }

    fn max_outputs(self) -> usize {
        if matches!(self, Cell::Lstm { .. }) {
            3
        } else {
            2
        }
    }
}

/// Input slots.
const X: usize = 0;
const W: usize = 1;
const R: usize = 2;
const BIAS: usize = 3;
const SEQ_LENS: usize = 4;
const INIT_H: usize = 5;
const INIT_C: usize = 6;
const PEEP: usize = 7;

/// Sizes resolved from the input shapes.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct Dims {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
}

fn expect_shape(shapes: &[Option<&[usize]>], i: usize, want: &[usize], what: &str) -> OpResult<()> {
    if let Some(Some(s)) = shapes.get(i) {
        op_ensure!(
            *s == want,
            "input {i} ({what}): expected shape {want:?}, got {s:?}"
        );
    }
    Ok(())
}

fn resolve(attrs: &RecurrentAttrs, cell: Cell, shapes: &[Option<&[usize]>]) -> OpResult<Dims> {
    let get = |i: usize| shapes.get(i).copied().flatten();
    let (Some(x), Some(w), Some(r)) = (get(X), get(W), get(R)) else {
        op_bail!("inputs X, W and R are required");
    };
    op_ensure!(
        x.len() == 3,
        "input 0 (X): expected rank 3, got shape {x:?}"
    );
    op_ensure!(
        r.len() == 3,
        "input 2 (R): expected rank 3, got shape {r:?}"
    );
    let (seq, batch) = if attrs.batch_first {
        (x[1], x[0])
    } else {
        (x[0], x[1])
    };
    let hidden = attrs.hidden_size.unwrap_or(r[2]);
    let dirs = attrs.direction.num_directions();
    let g = cell.gates();
    let d = Dims {
        seq,
        batch,
        input: x[2],
        hidden,
        dirs,
    };
    op_ensure!(
        hidden == r[2],
        "hidden_size is {hidden} but input 2 (R) has shape {r:?}"
    );
    let gh = g
        .checked_mul(hidden)
        .filter(|gh| gh.checked_mul(2).is_some())
        .ok_or_else(|| OpError("hidden_size is too large".into()))?;
    expect_shape(shapes, W, &[dirs, gh, d.input], "W")?;
    let _ = w;
    expect_shape(shapes, R, &[dirs, gh, hidden], "R")?;
    expect_shape(shapes, BIAS, &[dirs, 2 * gh], "B")?;
    expect_shape(shapes, SEQ_LENS, &[batch], "sequence_lens")?;
    let state = if attrs.batch_first {
        [batch, dirs, hidden]
    } else {
        [dirs, batch, hidden]
    };
    expect_shape(shapes, INIT_H, &state, "initial_h")?;
    if matches!(cell, Cell::Lstm { .. }) {
        expect_shape(shapes, INIT_C, &state, "initial_c")?;
        expect_shape(shapes, PEEP, &[dirs, 3 * hidden], "P")?;
    }
    let n_act = cell.default_activations().len();
    op_ensure!(
        attrs.activations.is_empty() || attrs.activations.len() == n_act * dirs,
        "expected {} activations, got {}",
        n_act * dirs,
        attrs.activations.len()
    );
    op_ensure!(
        (1..=cell.max_outputs()).contains(&attrs.num_outputs),
        "expected 1 to {} outputs, got {}",
        cell.max_outputs(),
        attrs.num_outputs
    );
    Ok(d)
}

fn output_infos(attrs: &RecurrentAttrs, d: Dims, dtype: DType) -> Vec<TensorInfo> {
    let y = if attrs.batch_first {
        vec![d.batch, d.seq, d.dirs, d.hidden]
    } else {
        vec![d.seq, d.dirs, d.batch, d.hidden]
    };
    let state = if attrs.batch_first {
        vec![d.batch, d.dirs, d.hidden]
    } else {
        vec![d.dirs, d.batch, d.hidden]
    };
    let mut v = vec![TensorInfo::new(dtype, y)];
    while v.len() < attrs.num_outputs {
        v.push(TensorInfo::new(dtype, state.clone()));
    }
    v
}

fn infer(attrs: &RecurrentAttrs, cell: Cell, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
    let shapes: Vec<Option<&[usize]>> = ctx.inputs.iter().map(|i| i.map(|i| i.shape)).collect();
    let d = resolve(attrs, cell, &shapes)?;
    Ok(output_infos(attrs, d, ctx.dtype(X)?))
}

fn run(attrs: &RecurrentAttrs, cell: Cell, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let shapes: Vec<Option<&[usize]>> = inputs.iter().map(|t| t.map(|t| t.shape())).collect();
    let d = resolve(attrs, cell, &shapes)?;
    let dtype = required(inputs, X)?.dtype();
    let (s_len, bsz, isz, h, dirs) = (d.seq, d.batch, d.input, d.hidden, d.dirs);
    let g = cell.gates();
    let gh = g * h;
    let opt = |i: usize| inputs.get(i).copied().flatten();

    let x = required(inputs, X)?.to_f64_vec();
    let w = required(inputs, W)?.to_f64_vec();
    let r = required(inputs, R)?.to_f64_vec();
    let bias = opt(BIAS).map(|t| t.to_f64_vec());
    let peep = opt(PEEP).map(|t| t.to_f64_vec());
    let lens: Vec<usize> = match opt(SEQ_LENS) {
        Some(t) => t
            .to_i64_vec()
            .into_iter()
            .map(|l| {
                if l < 0 || l as usize > s_len {
                    Err(OpError(format!(
                        "input 4 (sequence_lens): {l} is outside [0, {s_len}]"
                    )))
                } else {
                    Ok(l as usize)
                }
            })
            .collect::<OpResult<_>>()?,
        None => vec![s_len; bsz],
    };
    // State index of (direction, batch, unit) in the caller's layout.
    let st = |dir: usize, b: usize, j: usize| {
        if attrs.batch_first {
            (b * dirs + dir) * h + j
        } else {
            (dir * bsz + b) * h + j
        }
    };
    let yi = |t: usize, dir: usize, b: usize, j: usize| {
        if attrs.batch_first {
            ((b * s_len + t) * dirs + dir) * h + j
        } else {
            ((t * dirs + dir) * bsz + b) * h + j
        }
    };
    let xi = |t: usize, b: usize| {
        if attrs.batch_first {
            (b * s_len + t) * isz
        } else {
            (t * bsz + b) * isz
        }
    };
    let state_numel = dirs * bsz * h;
    let mut hs = match opt(INIT_H) {
        Some(t) => t.to_f64_vec(),
        None => vec![0.0; state_numel],
    };
    let mut cs = match opt(INIT_C) {
        Some(t) => t.to_f64_vec(),
        None => vec![0.0; state_numel],
    };
    let infos = output_infos(attrs, d, dtype);
    // Allocated as a tensor so that absurd sizes are refused rather than aborting.
    let mut y_t = Tensor::zeros(DType::F64, &infos[0].shape)?;
    let y = y_t.as_mut_slice::<f64>()?;

    let defaults = cell.default_activations();
    let n_act = defaults.len();
    let clip = |v: f64| match attrs.clip {
        Some(c) => v.clamp(-(c as f64), c as f64),
        None => v,
    };
    let mut pre = vec![0.0f64; gh];
    let mut hprev = vec![0.0f64; h];
    let mut cprev = vec![0.0f64; h];
    for dir in 0..dirs {
        let acts: &[Activation] = if attrs.activations.is_empty() {
            defaults
        } else {
            &attrs.activations[dir * n_act..(dir + 1) * n_act]
        };
        let reverse = attrs.direction == Direction::Reverse || dir == 1;
        let wd = &w[dir * gh * isz..(dir + 1) * gh * isz];
        let rd = &r[dir * gh * h..(dir + 1) * gh * h];
        let (wb, rb) = match &bias {
            Some(b) => (
                &b[dir * 2 * gh..dir * 2 * gh + gh],
                &b[dir * 2 * gh + gh..(dir + 1) * 2 * gh],
            ),
            None => (&[][..], &[][..]),
        };
        let bias_at = |v: &[f64], k: usize| v.get(k).copied().unwrap_or(0.0);
        let pd = peep.as_ref().map(|p| &p[dir * 3 * h..(dir + 1) * 3 * h]);
        for (b, &len) in lens.iter().enumerate() {
            for j in 0..h {
                hprev[j] = hs[st(dir, b, j)];
                cprev[j] = cs[st(dir, b, j)];
            }
            for step in 0..len {
                let t = if reverse { len - 1 - step } else { step };
                let xt = &x[xi(t, b)..xi(t, b) + isz];
                // W·x + Wb for every gate, and R·h + Rb added where the cell allows.
                for (k, p) in pre.iter_mut().enumerate() {
                    let wrow = &wd[k * isz..(k + 1) * isz];
                    *p = wrow.iter().zip(xt).map(|(a, b)| a * b).sum::<f64>() + bias_at(wb, k);
                }
                let rdot = |k: usize, hv: &[f64]| -> f64 {
                    rd[k * h..(k + 1) * h]
                        .iter()
                        .zip(hv)
                        .map(|(a, b)| a * b)
                        .sum::<f64>()
                };
                match cell {
                    Cell::Rnn => {
                        let hn: Vec<f64> = (0..h)
                            .map(|j| acts[0].apply(clip(pre[j] + rdot(j, &hprev) + bias_at(rb, j))))
                            .collect();
                        hprev.copy_from_slice(&hn);
                    }
                    Cell::Gru {
                        linear_before_reset,
                    } => {
                        let mut z = vec![0.0; h];
                        let mut rg = vec![0.0; h];
                        for j in 0..h {
                            z[j] = acts[0].apply(clip(pre[j] + rdot(j, &hprev) + bias_at(rb, j)));
                            rg[j] = acts[0]
                                .apply(clip(pre[h + j] + rdot(h + j, &hprev) + bias_at(rb, h + j)));
                        }
                        let rh: Vec<f64> = hprev.iter().zip(&rg).map(|(a, b)| a * b).collect();
                        let mut hn = vec![0.0; h];
                        for j in 0..h {
                            let k = 2 * h + j;
                            let rec = if linear_before_reset {
                                rg[j] * (rdot(k, &hprev) + bias_at(rb, k))
                            } else {
                                rdot(k, &rh) + bias_at(rb, k)
                            };
                            let cand = acts[1].apply(clip(pre[k] + rec));
                            hn[j] = (1.0 - z[j]) * cand + z[j] * hprev[j];
                        }
                        hprev.copy_from_slice(&hn);
                    }
                    Cell::Lstm { input_forget } => {
                        for (k, p) in pre.iter_mut().enumerate() {
                            *p += rdot(k, &hprev) + bias_at(rb, k);
                        }
                        let p = |gate: usize, j: usize| pd.map_or(0.0, |p| p[gate * h + j]);
                        for j in 0..h {
                            let i = acts[0].apply(clip(pre[j] + p(0, j) * cprev[j]));
                            let f = if input_forget {
                                1.0 - i
                            } else {
                                acts[0].apply(clip(pre[2 * h + j] + p(2, j) * cprev[j]))
                            };
                            let cand = acts[1].apply(clip(pre[3 * h + j]));
                            let c = f * cprev[j] + i * cand;
                            let o = acts[0].apply(clip(pre[h + j] + p(1, j) * c));
                            cprev[j] = c;
                            hprev[j] = o * acts[2].apply(c);
                        }
                    }
                }
                for j in 0..h {
                    y[yi(t, dir, b, j)] = hprev[j];
                }
            }
            for j in 0..h {
                hs[st(dir, b, j)] = hprev[j];
                cs[st(dir, b, j)] = cprev[j];
            }
        }
    }

    let mut outs = vec![y_t.cast(dtype)?];
    if attrs.num_outputs > 1 {
        outs.push(Tensor::from_vec(&infos[1].shape, hs)?.cast(dtype)?);
    }
    if attrs.num_outputs > 2 {
        outs.push(Tensor::from_vec(&infos[2].shape, cs)?.cast(dtype)?);
    }
    Ok(outs)
}

/// Elman RNN: `H = f(X·Wᵀ + H·Rᵀ + Wb + Rb)`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rnn {
    pub attrs: RecurrentAttrs,
}

/// GRU with update (z), reset (r) and hidden (h) gates.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Gru {
    pub attrs: RecurrentAttrs,
    /// Apply the reset gate after multiplying by R (the cuDNN form).
    pub linear_before_reset: bool,
}

/// LSTM with input (i), output (o), forget (f) and cell (c) gates and optional peepholes.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lstm {
    pub attrs: RecurrentAttrs,
    /// Couple the input and forget gates (`f = 1 - i`).
    pub input_forget: bool,
}

const RNN_INPUTS: &[crate::op::InputSpec] = &[
    input("X", DTypeSet::FLOAT),
    input("W", DTypeSet::FLOAT),
    input("R", DTypeSet::FLOAT),
    optional("B", DTypeSet::FLOAT),
    optional("sequence_lens", DTypeSet::INDEX),
    optional("initial_h", DTypeSet::FLOAT),
];

impl Op for Rnn {
    op_common!(
        "RNN",
        Prototype {
            inputs: RNN_INPUTS,
            outputs: &[optional_output("Y"), optional_output("Y_h")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        infer(&self.attrs, Cell::Rnn, ctx)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        run(&self.attrs, Cell::Rnn, inputs)
    }
}

impl Gru {
    fn cell(&self) -> Cell {
        Cell::Gru {
            linear_before_reset: self.linear_before_reset,
        }
    }
}

impl Op for Gru {
    op_common!(
        "GRU",
        Prototype {
            inputs: RNN_INPUTS,
            outputs: &[optional_output("Y"), optional_output("Y_h")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        infer(&self.attrs, self.cell(), ctx)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        run(&self.attrs, self.cell(), inputs)
    }
}

impl Lstm {
    fn cell(&self) -> Cell {
        Cell::Lstm {
            input_forget: self.input_forget,
        }
    }
}

impl Op for Lstm {
    op_common!(
        "LSTM",
        Prototype {
            inputs: &[
                input("X", DTypeSet::FLOAT),
                input("W", DTypeSet::FLOAT),
                input("R", DTypeSet::FLOAT),
                optional("B", DTypeSet::FLOAT),
                optional("sequence_lens", DTypeSet::INDEX),
                optional("initial_h", DTypeSet::FLOAT),
                optional("initial_c", DTypeSet::FLOAT),
                optional("P", DTypeSet::FLOAT),
            ],
            outputs: &[
                optional_output("Y"),
                optional_output("Y_h"),
                optional_output("Y_c")
            ],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        infer(&self.attrs, self.cell(), ctx)
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        run(&self.attrs, self.cell(), inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(shape, v.to_vec()).unwrap()
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn rnn_two_steps_with_lengths() {
        // H=1, I=1, W=1, R=0.5, bias Wb=0.1 Rb=0.1; Relu to keep the arithmetic exact.
        let rnn = Rnn {
            attrs: RecurrentAttrs {
                activations: vec![Activation::Relu],
                ..Default::default()
            },
        };
        let x = t(&[2, 2, 1], &[1.0, 2.0, 3.0, 4.0]); // [S=2, B=2, I=1]
        let w = t(&[1, 1, 1], &[1.0]);
        let r = t(&[1, 1, 1], &[0.5]);
        let b = t(&[1, 2], &[0.1, 0.1]);
        let lens = Tensor::from_vec(&[2], vec![2i32, 1]).unwrap();
        let y = rnn
            .eval(&[Some(&x), Some(&w), Some(&r), Some(&b), Some(&lens)])
            .unwrap();
        // batch 0: h1 = 1.2, h2 = 3 + 0.6 + 0.2 = 3.8; batch 1: h1 = 2.2, then stops.
        assert_eq!(y[0].shape(), &[2, 1, 2, 1]);
        close(&y[0].to_f64_vec(), &[1.2, 2.2, 3.8, 0.0]);
        close(&y[1].to_f64_vec(), &[3.8, 2.2]);
    }

    #[test]
    fn rnn_units_read_the_previous_state() {
        // H=2 with R swapping the units: h1 = [1, 1], h2 = [2 + 1, 2 + 1].
        let rnn = Rnn {
            attrs: RecurrentAttrs {
                activations: vec![Activation::Relu],
                ..Default::default()
            },
        };
        let x = t(&[2, 1, 1], &[1.0, 2.0]);
        let w = t(&[1, 2, 1], &[1.0, 1.0]);
        let r = t(&[1, 2, 2], &[0.0, 1.0, 1.0, 0.0]);
        let y = rnn.eval(&[Some(&x), Some(&w), Some(&r)]).unwrap();
        close(&y[1].to_f64_vec(), &[3.0, 3.0]);
    }

    #[test]
    fn reverse_and_bidirectional() {
        let attrs = RecurrentAttrs {
            activations: vec![Activation::Relu, Activation::Relu],
            direction: Direction::Bidirectional,
            ..Default::default()
        };
        let rnn = Rnn { attrs };
        let x = t(&[2, 1, 1], &[1.0, 2.0]);
        let w = t(&[2, 1, 1], &[1.0, 1.0]);
        let r = t(&[2, 1, 1], &[1.0, 1.0]);
        let y = rnn.eval(&[Some(&x), Some(&w), Some(&r)]).unwrap();
        // forward: 1, 3; reverse: t=1 -> 2, t=0 -> 1 + 2 = 3.
        assert_eq!(y[0].shape(), &[2, 2, 1, 1]);
        close(&y[0].to_f64_vec(), &[1.0, 3.0, 3.0, 2.0]);
        close(&y[1].to_f64_vec(), &[3.0, 3.0]);
    }

    #[test]
    fn gru_single_step() {
        // H=1, I=1, all weights zero except Wh=1: z = r = 0.5, h~ = tanh(x), h = 0.5·tanh(x).
        let gru = Gru::default();
        let x = t(&[1, 1, 1], &[0.5]);
        let w = t(&[1, 3, 1], &[0.0, 0.0, 1.0]);
        let r = t(&[1, 3, 1], &[0.0, 0.0, 0.0]);
        let y = gru.eval(&[Some(&x), Some(&w), Some(&r)]).unwrap();
        close(&y[1].to_f64_vec(), &[0.5 * 0.5f64.tanh()]);
    }

    #[test]
    fn lstm_single_step_and_batch_first() {
        // All gate pre-activations 0 except the cell gate: i = o = f = 0.5, c = 0.5·tanh(x),
        // h = 0.5·tanh(c).
        let lstm = Lstm {
            attrs: RecurrentAttrs {
                batch_first: true,
                num_outputs: 3,
                ..Default::default()
            },
            input_forget: false,
        };
        let x = t(&[1, 1, 1], &[1.0]);
        let w = t(&[1, 4, 1], &[0.0, 0.0, 0.0, 1.0]);
        let r = t(&[1, 4, 1], &[0.0; 4]);
        let y = lstm.eval(&[Some(&x), Some(&w), Some(&r)]).unwrap();
        let c = 0.5 * 1.0f64.tanh();
        close(&y[2].to_f64_vec(), &[c]);
        close(&y[1].to_f64_vec(), &[0.5 * c.tanh()]);
        assert_eq!(y[0].shape(), &[1, 1, 1, 1]);
        assert!(lstm.eval(&[Some(&x), Some(&w), Some(&x)]).is_err());
    }
}
