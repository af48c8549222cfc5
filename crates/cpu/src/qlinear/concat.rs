//! QLinearConcat: each input through its own 256-entry table (or copied).

use super::*;

/// QLinearConcat: each input through its own 256-entry table (or copied, when its scale and
/// zero point are the output's), placed along the axis.
#[derive(Debug)]
pub(super) struct ConcatTables {
    /// Per input: its table, or None to copy.
    pub(super) tables: Vec<Option<Vec<u8>>>,
    /// Bytes of each input per outer index, and of the output.
    pub(super) inner: Vec<usize>,
    pub(super) outer: usize,
}

pub(super) fn concat_tables(c: &QLinearConcat, r: &KernelRequest) -> Result<ConcatTables, String> {
    let n = r.inputs.len().saturating_sub(2) / 3;
    if n == 0 || r.inputs.len() != 2 + 3 * n {
        return Err("needs (tensor, scale, zero point) triples".into());
    }
    let dtype = eight_bit(r, 1)?;
    let out_shape = &r.outputs.first().ok_or("needs an output")?.shape;
    let rank = out_shape.len() as i64;
    let axis = if c.axis < 0 { c.axis + rank } else { c.axis };
    if !(0..rank).contains(&axis) {
        return Err("needs an axis inside the rank".into());
    }
    let axis = axis as usize;
    let outer: usize = out_shape[..axis].iter().product();
    let y_s = constant(r, 0).ok_or("needs a constant Y_scale")?;
    let y_z = constant(r, 1).ok_or("needs a constant Y_zero_point")?;
    let mut tables = Vec::with_capacity(n);
    let mut inner = Vec::with_capacity(n);
    for k in 0..n {
        let i = 2 + 3 * k;
        let xi = r.inputs[i].as_ref().ok_or("needs every input")?;
        if xi.dtype != dtype {
            return Err("needs inputs of Y_zero_point's type".into());
        }
        inner.push(xi.shape[axis..].iter().product());
        let x_s = constant(r, i + 1).ok_or("needs constant scales")?;
        let x_z = match &r.inputs[i + 2] {
            Some(_) => Some(constant(r, i + 2).ok_or("needs constant zero points")?),
            None => None,
        };
        let same = x_s.bytes() == y_s.bytes() && x_z.map(|t| t.bytes()) == Some(y_z.bytes());
        tables.push(if same {
            None
        } else {
            let all = all_values(dtype, 1)?;
            let args = [Some(y_s), Some(y_z), Some(&all), Some(x_s), x_z];
            // The values as one 1-D input: its table along axis 0.
            let t = QLinearConcat { axis: 0 }
                .eval(&args)
                .map_err(|e| e.to_string())?;
            Some(t.first().ok_or("no output")?.bytes().to_vec())
        });
    }
    Ok(ConcatTables {
        tables,
        inner,
        outer,
    })
}

impl Kernel for ConcatTables {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        let row: usize = self.inner.iter().sum();
        op_ensure!(
            y.byte_len() == row * self.outer,
            "output size differs from the plan"
        );
        let ys = y.bytes_mut();
        let mut offset = 0;
        for (k, (table, &inner)) in self.tables.iter().zip(&self.inner).enumerate() {
            let x = required(inputs, 2 + 3 * k)?.bytes();
            op_ensure!(
                x.len() == inner * self.outer,
                "input {k} size differs from the plan"
            );
            for o in 0..self.outer {
                let src = &x[o * inner..(o + 1) * inner];
                let dst = &mut ys[o * row + offset..o * row + offset + inner];
                match table {
                    None => dst.copy_from_slice(src),
                    Some(t) => dst
                        .iter_mut()
                        .zip(src)
                        .for_each(|(d, &s)| *d = t[s as usize]),
                }
            }
            offset += inner;
        }
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qconcat"
    }

    fn prepacked_bytes(&self) -> usize {
        self.tables.iter().flatten().map(Vec::len).sum()
    }
}
