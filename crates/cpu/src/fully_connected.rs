//! f32 FullyConnected (`Y = X · W + bias`, then the epilogue activation) on the [`Gemm`] trait:
//! a constant W is packed once; bias and activation go into the GEMM's epilogue.

use crate::backend::{built, constant, shape, Registry};
use crate::gemm::{
    Bias, Epilogue, Gemm, MatMut, MatRef, Operand, PackedMatrix, Packing, PackingFor, Sgemm, Side,
};
use crate::kernel_io::f32_shape;
use ferrolite_core::op::required;
use ferrolite_core::ops::elementwise::unary::UnaryKind;
use ferrolite_core::ops::linalg::fully_connected::fc_dims;
use ferrolite_core::ops::linalg::fully_connected::FullyConnected;
use ferrolite_core::plan::Kernel;
use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::registry::{DTypes, Layout};
use ferrolite_core::scratch::{Scratch, ScratchNeed};
use ferrolite_core::{op_ensure, OpError, OpResult, Tensor};

#[derive(Debug)]
pub struct FullyConnectedKernel {
    gemm: Sgemm,
    m: usize,
    k: usize,
    n: usize,
    x_shape: Vec<usize>,
    w_shape: Vec<usize>,
    /// W packed at build time when it is a constant; otherwise read at run time.
    packed: Option<PackedMatrix>,
    has_bias: bool,
    activation: Option<UnaryKind>,
}

impl FullyConnectedKernel {
    pub fn new(
        gemm: Sgemm,
        activation: Option<UnaryKind>,
        x: &[usize],
        w: &[usize],
        w_value: Option<&Tensor>,
        bias: Option<&[usize]>,
        packs: &Prepacks,
    ) -> OpResult<FullyConnectedKernel> {
        let (m, k, n, _) = fc_dims(x, w, bias)?;
        let packed = match w_value {
            Some(t) => {
                let data = t.as_slice::<f32>()?;
                Some(gemm.pack(k, n, MatRef { data, rs: n, cs: 1 }, Side::B, packs)?)
            }
            None => None,
        };
        Ok(FullyConnectedKernel {
            gemm,
            m,
            k,
            n,
            x_shape: x.to_vec(),
            w_shape: w.to_vec(),
            packed,
            has_bias: bias.is_some(),
            activation,
        })
    }
}

impl Kernel for FullyConnectedKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        scratch: &Scratch,
    ) -> OpResult<()> {
        let x = required(inputs, 0)?;
        op_ensure!(
            x.shape() == self.x_shape,
            "input 0 (X) has shape {:?}, the kernel was built for {:?}",
            x.shape(),
            self.x_shape
        );
        let (m, k, n) = (self.m, self.k, self.n);
        let w = match &self.packed {
            Some(p) => Operand::Packed(p),
            None => {
                let t = required(inputs, 1)?;
                op_ensure!(
                    t.shape() == self.w_shape,
                    "input 1 (W) has shape {:?}, the kernel was built for {:?}",
                    t.shape(),
                    self.w_shape
                );
                Operand::Mat(MatRef {
                    data: t.as_slice::<f32>()?,
                    rs: n,
                    cs: 1,
                })
            }
        };
        let bias = match (self.has_bias, inputs.get(2).copied().flatten()) {
            (true, Some(b)) => {
                op_ensure!(b.numel() == n, "input 2 (bias) must have {n} elements");
                Bias::Col(b.as_slice::<f32>()?)
            }
            (false, None) => Bias::None,
            _ => {
                return Err(OpError(
                    "input 2 (bias) presence differs from the plan".into(),
                ))
            }
        };
        let xv = x.as_slice::<f32>()?;
        let yv = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?
            .as_mut_slice::<f32>()?;
        op_ensure!(
            yv.len() == m * n,
            "the output has {} elements, expected {}",
            yv.len(),
            m * n
        );
        if yv.is_empty() {
            return Ok(());
        }
        let a = MatRef {
            data: xv,
            rs: k,
            cs: 1,
        };
        let c = MatMut {
            data: yv,
            rs: n,
            cs: 1,
        };
        let epilogue = Epilogue {
            bias,
            activation: self.activation,
        };
        let packing = Packing::Parallel(scratch);
        self.gemm.gemm(
            m,
            k,
            n,
            1.0,
            Operand::Mat(a),
            w,
            false,
            c,
            &epilogue,
            packing,
        )
    }

    fn scratch(&self, _threads: usize) -> ScratchNeed {
        let product = PackingFor::new(self.m, self.k, self.n).b_packed(self.packed.is_some());
        ScratchNeed::for_each_thread(product.bytes())
    }

    fn name(&self) -> &str {
        "cpu.fully_connected"
    }

    fn prepacked_bytes(&self) -> usize {
        self.packed.as_ref().map_or(0, PackedMatrix::bytes)
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add::<FullyConnected>(
        "cpu.fully_connected",
        "FullyConnected",
        10,
        DTypes::AllF32,
        Layout::PLAIN,
        |fc, r| {
            let (x, w) = (f32_shape(r.req, 0)?, f32_shape(r.req, 1)?);
            let k = FullyConnectedKernel::new(
                r.cx.gemm(),
                fc.activation,
                x,
                w,
                constant(r.req, 1),
                shape(r.req, 2),
                r.req.packs,
            );
            built(k.map(Some), "")
        },
    );
}

#[cfg(test)]
mod tests {
    use crate::tests::check;
    use ferrolite_core::ops::elementwise::unary::UnaryKind;
    use ferrolite_core::ops::linalg::conv::Conv;
    use ferrolite_core::ops::linalg::fully_connected::FullyConnected;
    use ferrolite_core::ops::linalg::gemm::Gemm;
    use ferrolite_core::Tensor;
    use std::sync::Arc;

    fn tensor(seed: &mut u64, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        Tensor::from_vec(shape, v).unwrap()
    }

    const ACTS: [Option<UnaryKind>; 5] = [
        None,
        Some(UnaryKind::Relu),
        Some(UnaryKind::Clip { min: 0.0, max: 0.5 }),
        Some(UnaryKind::HardSwish),
        Some(UnaryKind::Sigmoid),
    ];

    #[test]
    fn fully_connected_matches_reference() {
        let mut seed = 5;
        let cases: &[(&[usize], usize)] = &[
            (&[1, 1], 1),
            (&[5], 3),
            (&[3, 5], 7),
            (&[2, 3, 17], 9),
            (&[1, 128, 64], 33),
            (&[1, 576], 1024),
            (&[37, 19], 23),
            (&[4, 0], 5),
            (&[0, 4], 5),
            (&[2, 1, 65], 1),
        ];
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                for &(x, n) in cases {
                    let k = *x.last().unwrap();
                    for (ai, act) in ACTS.into_iter().enumerate() {
                        let bias = (ai % 2 == 0).then(|| tensor(&mut seed, &[n]));
                        let ins = vec![
                            Some(tensor(&mut seed, x)),
                            Some(tensor(&mut seed, &[k, n])),
                            bias,
                        ];
                        let op = Arc::new(FullyConnected { activation: act });
                        let name = check(op.clone(), &ins, &[false, true, true]);
                        // An empty input is the reference's.
                        if !x.contains(&0) {
                            assert_eq!(name, "cpu.fully_connected");
                        }
                        check(op, &ins, &[false, false, false]);
                    }
                }
            });
        }
    }

    #[test]
    fn conv_and_gemm_apply_their_activation() {
        let mut seed = 11;
        for act in ACTS {
            let conv = Arc::new(Conv {
                activation: act,
                ..Conv::default()
            });
            let ins = vec![
                Some(tensor(&mut seed, &[1, 3, 6, 5])),
                Some(tensor(&mut seed, &[4, 3, 3, 3])),
                Some(tensor(&mut seed, &[4])),
            ];
            check(conv.clone(), &ins, &[false, true, true]);
            let gemm = Arc::new(Gemm {
                activation: act,
                trans_b: true,
                ..Gemm::default()
            });
            let ins = vec![
                Some(tensor(&mut seed, &[7, 5])),
                Some(tensor(&mut seed, &[3, 5])),
                Some(tensor(&mut seed, &[3])),
            ];
            check(gemm, &ins, &[false, true, true]);
        }
    }
}
