//! Two-input ops as 65536-entry tables: QLinearAdd and QLinearMul where no computed kernel
//! takes them.

use super::*;

/// A two-operand kernel's operands (inputs 0 and 3) and output bytes, the output checked
/// against the plan's `out_len`.
pub(super) fn binary_operands<'a, 'o>(
    inputs: &[Option<&'a Tensor>],
    outputs: &'o mut [Tensor],
    out_len: usize,
) -> OpResult<(&'a [u8], &'a [u8], &'o mut [u8])> {
    let a = required(inputs, 0)?.bytes();
    let b = required(inputs, 3)?.bytes();
    let y = outputs
        .first_mut()
        .ok_or_else(|| OpError("no output".into()))?;
    op_ensure!(y.byte_len() == out_len, "output size differs from the plan");
    Ok((a, b, y.bytes_mut()))
}

/// How the second operand of a two-input table op lines up with the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pairing {
    /// Same shapes.
    Elementwise,
    /// `[N, C, D...]` with `[N, C, 1...]` (B per plane), or A per plane when `a_per_plane`.
    PerPlane { plane: usize, a_per_plane: bool },
    /// One operand is a single value (a constant scale, say), A's when `a_scalar`.
    Scalar { a_scalar: bool },
}

/// QLinearAdd and QLinearMul on operands of one shape, or with one operand a single value,
/// and QLinearMul with one operand per channel, as a 65536-entry table indexed by `a * 256 +
/// b`.
#[derive(Debug)]
pub(super) struct BinaryTable {
    pub(super) table: Vec<u8>,
    pub(super) pairing: Pairing,
    pub(super) out_len: usize,
    pub(super) name: &'static str,
}

/// How the two operands (inputs 0 and 3) of a QLinear binary op line up, and the output's
/// length; one operand per channel only when `per_plane_ok`.
pub(super) fn pairing(r: &KernelRequest, per_plane_ok: bool) -> Result<(Pairing, usize), String> {
    let shape = |i: usize| r.inputs[i].as_ref().map(|v| v.shape).unwrap_or(&[]);
    let (sa, sb) = (shape(0), shape(3));
    let out_len: usize = r
        .outputs
        .first()
        .ok_or("needs an output")?
        .shape
        .iter()
        .product();
    let per_plane = |full: &[usize], part: &[usize]| {
        full.len() >= 3
            && part.len() == full.len()
            && part[..2] == full[..2]
            && part[2..].iter().all(|&d| d == 1)
    };
    let pairing = if sa == sb {
        Pairing::Elementwise
    } else if per_plane_ok && per_plane(sa, sb) {
        Pairing::PerPlane {
            plane: sa[2..].iter().product(),
            a_per_plane: false,
        }
    } else if per_plane_ok && per_plane(sb, sa) {
        Pairing::PerPlane {
            plane: sb[2..].iter().product(),
            a_per_plane: true,
        }
    } else if sb.iter().product::<usize>() == 1 && sa.iter().product::<usize>() == out_len {
        Pairing::Scalar { a_scalar: false }
    } else if sa.iter().product::<usize>() == 1 && sb.iter().product::<usize>() == out_len {
        Pairing::Scalar { a_scalar: true }
    } else {
        return Err(
            "needs operands of one shape, one a single value, or (for QLinearMul) one per channel"
                .into(),
        );
    };
    Ok((pairing, out_len))
}

pub(super) fn binary_table(
    op: &dyn Op,
    r: &KernelRequest,
    per_plane_ok: bool,
    name: &'static str,
) -> Result<BinaryTable, String> {
    let (da, db) = (eight_bit(r, 0)?, eight_bit(r, 3)?);
    let (pairing, out_len) = pairing(r, per_plane_ok)?;
    let consts = constants(r, &[0, 3])?;
    // a runs slowly, b fast: element a * 256 + b.
    let a_vals = all_values(da, 256)?;
    let b_bytes: Vec<u8> = (0..65536).map(|i| i as u8).collect();
    let b_vals = Tensor::from_bytes(db, &[65536], &b_bytes).map_err(|e| e.to_string())?;
    let table = evaluate(op, &consts, &[(0, &a_vals), (3, &b_vals)])?;
    Ok(BinaryTable {
        table,
        pairing,
        out_len,
        name,
    })
}

impl Kernel for BinaryTable {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let a = required(inputs, 0)?.bytes();
        let b = required(inputs, 3)?.bytes();
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        op_ensure!(
            y.byte_len() == self.out_len,
            "output size differs from the plan"
        );
        let t = &self.table;
        let at = |x: u8, z: u8| t[(x as usize) << 8 | z as usize];
        match self.pairing {
            Pairing::Elementwise => {
                op_ensure!(
                    a.len() == self.out_len && b.len() == self.out_len,
                    "input sizes differ from the plan"
                );
                let one = |((a, b), y): ((&[u8], &[u8]), &mut [u8])| {
                    for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
                        *y = at(a, b);
                    }
                };
                split::for_chunks(y.bytes_mut(), 64, 2, |s, out| {
                    let r = s..s + out.len();
                    one(((&a[r.clone()], &b[r]), out))
                });
            }
            Pairing::Scalar { a_scalar } => {
                let (full, one) = if a_scalar { (b, a) } else { (a, b) };
                op_ensure!(
                    full.len() == self.out_len && one.len() == 1,
                    "input sizes differ from the plan"
                );
                // The row of the table for the single value: a 256-entry lookup.
                let s = one[0] as usize;
                let row: Vec<u8> = (0..256)
                    .map(|x| {
                        if a_scalar {
                            t[s << 8 | x]
                        } else {
                            t[x << 8 | s]
                        }
                    })
                    .collect();
                let each = |(x, y): (&[u8], &mut [u8])| {
                    y.iter_mut().zip(x).for_each(|(y, &x)| *y = row[x as usize]);
                };
                split::for_chunks(y.bytes_mut(), 64, 1, |s, out| {
                    each((&full[s..s + out.len()], out))
                });
            }
            Pairing::PerPlane { plane, a_per_plane } => {
                let (full, part) = if a_per_plane { (b, a) } else { (a, b) };
                op_ensure!(
                    full.len() == self.out_len && part.len() * plane == self.out_len,
                    "input sizes differ from the plan"
                );
                let one = |((x, &s), y): ((&[u8], &u8), &mut [u8])| {
                    for (y, &x) in y.iter_mut().zip(x) {
                        *y = if a_per_plane { at(s, x) } else { at(x, s) };
                    }
                };
                let plane = plane.max(1);
                let workers = split::worth(Cost::elementwise(full.len(), 1, 1));
                split::for_rows(y.bytes_mut(), plane, workers, |p, out| {
                    one(((&full[p * plane..][..out.len()], &part[p]), out))
                });
            }
        }
        Ok(())
    }

    fn name(&self) -> &str {
        self.name
    }

    fn prepacked_bytes(&self) -> usize {
        self.table.len()
    }
}
