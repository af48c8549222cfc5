//! QLinearLookup: an 8-bit tensor computed element by element from another, given as the
//! table of its 256 values (made by the `lookup-int8` pass from chains such as a quantized
//! hard-swish, `x * HardSigmoid(x)` between DequantizeLinear and QuantizeLinear), and
//! QLinearChannelLookup, a table per channel (a chain with per-channel constants: a
//! BatchNormalization between DequantizeLinear and QuantizeLinear).

use super::Q8;
use crate::op::{input, output, required, Prototype};
use crate::{op_common, op_ensure, DType, InferCtx, Op, OpResult, Tensor, TensorInfo};

/// Whether `d` is an 8-bit type a table can fill.
fn is_8bit(d: DType) -> bool {
    matches!(d, DType::U8 | DType::I8)
}
use std::sync::Arc;

/// `Y[i] = table[X[i]]`, X's element read as its byte (an i8's two's complement bits), Y of
/// type `output`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearLookup {
    #[serde(with = "crate::ops::codec::table256")]
    pub table: Arc<[u8; 256]>,
    pub output: DType,
}

impl Op for QLinearLookup {
    fn pointwise(&self) -> bool {
        true
    }

    op_common!(
        "QLinearLookup",
        Prototype {
            inputs: &[input("X", Q8)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        op_ensure!(
            matches!(self.output, DType::U8 | DType::I8),
            "the output type must be uint8 or int8, not {}",
            self.output
        );
        Ok(vec![TensorInfo::new(self.output, ctx.shape(0)?.to_vec())])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        op_ensure!(
            matches!(x.dtype(), DType::U8 | DType::I8),
            "input 0 (X) must be uint8 or int8, got {}",
            x.dtype()
        );
        let y: Vec<u8> = x.bytes().iter().map(|&b| self.table[b as usize]).collect();
        Ok(vec![Tensor::from_bytes(self.output, x.shape(), &y)?])
    }
}

/// `Y[n, c, ...] = tables[c * 256 + X[n, c, ...]]`: a 256-entry table per channel (axis 1), X's
/// element read as its byte, Y of type `output`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QLinearChannelLookup {
    /// 256 entries per channel, channel by channel.
    pub tables: Vec<u8>,
    pub output: DType,
}

impl QLinearChannelLookup {
    /// The channels the tables cover.
    pub fn channels(&self) -> usize {
        self.tables.len() / 256
    }

    fn check(&self, x: DType, shape: &[usize]) -> OpResult<()> {
        op_ensure!(
            is_8bit(self.output),
            "the output type must be uint8 or int8, not {}",
            self.output
        );
        op_ensure!(is_8bit(x), "input 0 (X) must be uint8 or int8, got {x}");
        op_ensure!(
            self.tables.len().is_multiple_of(256)
                && shape.len() >= 2
                && shape[1] == self.channels(),
            "input 0 (X) of shape {shape:?} does not have the {} channels (axis 1) of the tables",
            self.channels()
        );
        Ok(())
    }
}

impl Op for QLinearChannelLookup {
    op_common!(
        "QLinearChannelLookup",
        Prototype {
            inputs: &[input("X", Q8)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        self.check(ctx.dtype(0)?, ctx.shape(0)?)?;
        Ok(vec![TensorInfo::new(self.output, ctx.shape(0)?.to_vec())])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        self.check(x.dtype(), x.shape())?;
        let c = self.channels();
        let inner: usize = x.shape()[2..].iter().product();
        let y: Vec<u8> = x
            .bytes()
            .iter()
            .enumerate()
            .map(|(i, &b)| self.tables[(i / inner.max(1)) % c * 256 + b as usize])
            .collect();
        Ok(vec![Tensor::from_bytes(self.output, x.shape(), &y)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_byte_through_the_table() {
        let mut table = [0u8; 256];
        for (i, t) in table.iter_mut().enumerate() {
            *t = (255 - i) as u8;
        }
        let op = QLinearLookup {
            table: Arc::new(table),
            output: DType::I8,
        };
        let x = Tensor::from_bytes(DType::I8, &[2, 2], &[0, 1, 0x80, 0xff]).unwrap();
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.dtype(), DType::I8);
        assert_eq!(y.shape(), &[2, 2]);
        // Bytes 255, 254, 127, 0 read as i8.
        assert_eq!(y.to_i64_vec(), vec![-1, -2, 127, 0]);
        let u = Tensor::from_bytes(DType::U8, &[1], &[7]).unwrap();
        let bad = QLinearLookup {
            table: Arc::new(table),
            output: DType::F32,
        };
        // An output type the table cannot fill is an error, not a panic.
        assert!(bad.eval(&[Some(&u)]).is_err());
    }

    #[test]
    fn reads_each_channel_through_its_table() {
        // Channel 0 adds one, channel 1 negates the byte.
        let mut tables = vec![0u8; 512];
        for b in 0..256 {
            tables[b] = (b as u8).wrapping_add(1);
            tables[256 + b] = (b as u8).wrapping_neg();
        }
        let op = QLinearChannelLookup {
            tables,
            output: DType::U8,
        };
        let x = Tensor::from_bytes(DType::U8, &[2, 2, 1, 2], &[0, 1, 2, 3, 10, 255, 7, 8]).unwrap();
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.to_i64_vec(), vec![1, 2, 254, 253, 11, 0, 249, 248]);
        // Other channel counts are an error, not a panic.
        let wrong = Tensor::from_bytes(DType::U8, &[1, 3, 1], &[0, 1, 2]).unwrap();
        assert!(op.eval(&[Some(&wrong)]).is_err());
        let flat = Tensor::from_bytes(DType::U8, &[2], &[0, 1]).unwrap();
        assert!(op.eval(&[Some(&flat)]).is_err());
    }
}
