//! One-input ops as 256-entry tables: QLinearLookup, QLinearSigmoid, QLinearLeakyRelu, and
//! QLinearChannelLookup (one table per channel).

use super::*;

/// One-input ops as a 256-entry table.
#[derive(Debug)]
pub(super) struct UnaryTable {
    pub(super) table: Vec<u8>,
    /// The ISA's lookup loop.
    pub(super) lookup: LookupFn,
    pub(super) name: &'static str,
}

pub(super) fn unary_table(
    op: &dyn Op,
    r: &KernelRequest,
    isa: Isa,
    name: &'static str,
) -> Result<UnaryTable, String> {
    let d = eight_bit(r, 0)?;
    let consts = constants(r, &[0])?;
    let table = evaluate(op, &consts, &[(0, &all_values(d, 1)?)])?;
    if table.len() != 256 {
        return Err(format!("table of {} entries, not 256", table.len()));
    }
    let lookup = isa.table().qlinear.lookup;
    Ok(UnaryTable {
        table,
        lookup,
        name,
    })
}

impl Kernel for UnaryTable {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = required(inputs, 0)?.bytes();
        let y = outputs
            .first_mut()
            .ok_or_else(|| OpError("no output".into()))?;
        op_ensure!(
            y.byte_len() == x.len(),
            "output size differs from the input's"
        );
        let t: &[u8; 256] = self.table[..]
            .try_into()
            .map_err(|_| OpError("lookup table is not 256 entries".into()))?;
        let one = |(x, y): (&[u8], &mut [u8])| (self.lookup)(t, x, y);
        let y = y.bytes_mut();
        split::for_chunks(y, 64, 1, |s, out| one((&x[s..s + out.len()], out)));
        Ok(())
    }

    fn name(&self) -> &str {
        self.name
    }

    fn prepacked_bytes(&self) -> usize {
        self.table.len()
    }
}

/// QLinearChannelLookup: each plane `[n, c]` through channel `c`'s table, with the VBMI
/// lookup where the CPU has it.
#[derive(Debug)]
pub(super) struct ChannelTables {
    pub(super) tables: Vec<u8>,
    /// Input shape (the plan's): planes of `inner` values, `channels` a batch item.
    pub(super) x: Vec<usize>,
    /// The ISA's lookup loop.
    pub(super) lookup: LookupFn,
}

pub(super) fn channel_tables(
    op: &QLinearChannelLookup,
    r: &KernelRequest,
    isa: Isa,
) -> Result<ChannelTables, String> {
    eight_bit(r, 0)?;
    let x = r.inputs[0].as_ref().ok_or("needs an input")?;
    if x.shape.len() < 2 || x.shape[1] * 256 != op.tables.len() {
        return Err("needs an input with a channel (axis 1) per table".into());
    }
    let lookup = isa.table().qlinear.lookup;
    Ok(ChannelTables {
        tables: op.tables.clone(),
        x: x.shape.to_vec(),
        lookup,
    })
}

impl Kernel for ChannelTables {
    fn run(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        _scratch: &ferrolite_core::scratch::Scratch,
    ) -> OpResult<()> {
        let x = crate::kernel_io::input_bytes(inputs, 0, &self.x)?;
        let y = crate::kernel_io::output_bytes(outputs, 0, x.len())?;
        let channels = self.x[1];
        let inner: usize = self.x[2..].iter().product();
        if inner == 0 {
            return Ok(());
        }
        let plane = |(p, (x, y)): (usize, (&[u8], &mut [u8]))| {
            let c = p % channels;
            let t: &[u8; 256] = self.tables[c * 256..(c + 1) * 256]
                .try_into()
                .expect("256 entries a channel (checked at build)");
            (self.lookup)(t, x, y)
        };
        let workers = split::worth(Cost::elementwise(y.len(), 1, 1));
        split::for_rows(y, inner, workers, |p, y| {
            plane((p, (&x[p * inner..][..y.len()], y)))
        });
        Ok(())
    }

    fn name(&self) -> &str {
        "cpu.qchannel_lookup"
    }

    fn prepacked_bytes(&self) -> usize {
        self.tables.len()
    }
}
