//! QLinearLookup: an 8-bit tensor computed element by element from another, given as the
//! table of its 256 values (made by the `lookup-int8` pass from chains such as a quantized
//! hard-swish, `x * HardSigmoid(x)` between DequantizeLinear and QuantizeLinear).

use super::Q8;
use crate::op::{input, output, required, Prototype};
use crate::{op_common, op_ensure, DType, InferCtx, Op, OpResult, Tensor, TensorInfo};
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
}
