//! QdqBinary: a float binary op between dequantized 8-bit operands, requantized.

use super::*;

/// How an 8-bit operand of QdqBinary dequantizes: `((byte ^ flip) - offset) * scale`, where
/// `flip` makes an int8's bits unsigned (0x80) and `offset` is then its zero point plus 128:
/// the same integer `q - zero` as the reference's, so the same f32.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dequantized {
    pub(super) flip: u8,
    pub(super) offset: i32,
    pub(super) scale: f32,
}

impl Dequantized {
    fn new(q: &QParams) -> Dequantized {
        let flip = if q.signed { 0x80 } else { 0 };
        Dequantized {
            flip,
            offset: q.zero[0] + i32::from(flip),
            scale: q.scale[0],
        }
    }

    #[inline(always)]
    fn value(self, byte: u8) -> f32 {
        ((byte ^ self.flip) as i32 - self.offset) as f32 * self.scale
    }
}

/// A run of one QdqBinary operand: a value per element, or one value for the whole run.
#[derive(Clone, Copy)]
pub(crate) enum Run<'a> {
    Each(&'a [u8]),
    One(f32),
}

/// The output's quantization: `clamp(round_half_even(v / scale) + zero, lo, hi)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Requantized {
    pub(super) scale: f32,
    pub(super) zero: i32,
    pub(super) lo: i32,
    pub(super) hi: i32,
    pub(super) signed: bool,
}

/// `out = Q(DQ(a) kind DQ(b))` for a run of at most 256 elements, in the reference's f32
/// arithmetic: each operand's value, the float op, the division by the output's scale (all
/// vectorised; compiled again per ISA).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn qdq_combine_impl(
    kind: BinaryKind,
    a: Run<'_>,
    da: Dequantized,
    b: Run<'_>,
    db: Dequantized,
    q: Requantized,
    out: &mut [u8],
) {
    let mut buf = [0f32; 256];
    let v = &mut buf[..out.len()];
    let s = q.scale;
    macro_rules! each {
        ($f:expr) => {
            match (a, b) {
                (Run::Each(a), Run::Each(b)) => {
                    for ((v, &a), &b) in v.iter_mut().zip(a).zip(b) {
                        *v = $f(da.value(a), db.value(b)) / s;
                    }
                }
                (Run::Each(a), Run::One(b)) => {
                    for (v, &a) in v.iter_mut().zip(a) {
                        *v = $f(da.value(a), b) / s;
                    }
                }
                (Run::One(a), Run::Each(b)) => {
                    for (v, &b) in v.iter_mut().zip(b) {
                        *v = $f(a, db.value(b)) / s;
                    }
                }
                (Run::One(a), Run::One(b)) => v.fill($f(a, b) / s),
            }
        };
    }
    match kind {
        BinaryKind::Add => each!(|x: f32, y: f32| x + y),
        BinaryKind::Sub => each!(|x: f32, y: f32| x - y),
        _ => each!(|x: f32, y: f32| x * y),
    }
    crate::qgemm::requantize(v, q.zero, q.lo, q.hi, q.signed, out);
}

/// QdqBinary over operands of one shape, one a single value, or one per channel: the
/// reference's own f32 arithmetic, vectorised, so the same bits without a table (whose
/// 64 KiB missed L1 on most lookups: ppocrv4_det_qdq's 23 of them took 11.6 ms, against 4.6 ms
/// for the DequantizeLinear, Add and QuantizeLinear passes they replace).
#[derive(Debug)]
pub(super) struct QdqBinaryKernel {
    pub(super) kind: BinaryKind,
    pub(super) a: Dequantized,
    pub(super) b: Dequantized,
    pub(super) y: Requantized,
    pub(super) pairing: Pairing,
    pub(super) out_len: usize,
    /// The ISA's loop.
    pub(super) combine: CombineFn,
}

pub(super) fn qdq_binary_kernel(
    op: &QdqBinary,
    r: &KernelRequest,
    isa: Isa,
) -> Result<QdqBinaryKernel, String> {
    let [qa, qb, qy] = per_tensor_operands(r)?;
    let (pairing, out_len) = pairing(r, true)?;
    let (lo, hi) = if qy.signed { (-128, 127) } else { (0, 255) };
    Ok(QdqBinaryKernel {
        kind: op.kind,
        a: Dequantized::new(&qa),
        b: Dequantized::new(&qb),
        y: Requantized {
            scale: qy.scale[0],
            zero: qy.zero[0],
            lo,
            hi,
            signed: qy.signed,
        },
        pairing,
        out_len,
        combine: isa.table().qlinear.qdq_combine,
    })
}

impl QdqBinaryKernel {
    /// Output elements `first..first + out.len()`, in runs that do not cross a plane.
    fn run_range(&self, a: &[u8], b: &[u8], first: usize, out: &mut [u8]) {
        let mut i = 0;
        while i < out.len() {
            let g = first + i;
            let n = (out.len() - i).min(256);
            let (n, ra, rb) = match self.pairing {
                Pairing::Elementwise => (n, Run::Each(&a[g..g + n]), Run::Each(&b[g..g + n])),
                Pairing::Scalar { a_scalar: false } => {
                    (n, Run::Each(&a[g..g + n]), Run::One(self.b.value(b[0])))
                }
                Pairing::Scalar { a_scalar: true } => {
                    (n, Run::One(self.a.value(a[0])), Run::Each(&b[g..g + n]))
                }
                Pairing::PerPlane { plane, a_per_plane } => {
                    let (c, n) = (g / plane, n.min(plane - g % plane));
                    if a_per_plane {
                        (n, Run::One(self.a.value(a[c])), Run::Each(&b[g..g + n]))
                    } else {
                        (n, Run::Each(&a[g..g + n]), Run::One(self.b.value(b[c])))
                    }
                }
            };
            let out = &mut out[i..i + n];
            (self.combine)(self.kind, ra, self.a, rb, self.b, self.y, out);
            i += n;
        }
    }
}

impl Kernel for QdqBinaryKernel {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let n = self.out_len;
        let (a, b, y) = binary_operands(inputs, outputs, n)?;
        let sizes_ok = match self.pairing {
            Pairing::Elementwise => a.len() == n && b.len() == n,
            Pairing::Scalar { a_scalar: false } => a.len() == n && b.len() == 1,
            Pairing::Scalar { a_scalar: true } => a.len() == 1 && b.len() == n,
            Pairing::PerPlane { plane, a_per_plane } => {
                let (full, part) = if a_per_plane { (b, a) } else { (a, b) };
                plane > 0 && full.len() == n && part.len() * plane == n
            }
        };
        op_ensure!(sizes_ok, "input sizes differ from the plan");
        split::for_chunks(y, 64, 2, |s, out| self.run_range(a, b, s, out));
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qdq_binary"
    }
}
