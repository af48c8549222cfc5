//! StringSplit: splits every string at a delimiter (or at runs of whitespace when the
//! delimiter is empty), as Python's `str.split` does, at most `maxsplit` times. Output 0 holds
//! the pieces along a new last axis, padded with empty strings to the longest split; output 1
//! the number of pieces of each string.

use crate::op::{input, output, required, Prototype};
use crate::{op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StringSplit {
    /// Empty: split at runs of whitespace, dropping leading and trailing whitespace.
    pub delimiter: String,
    /// At most this many splits (`None`: no limit).
    pub maxsplit: Option<usize>,
}

impl StringSplit {
    fn split<'a>(&self, s: &'a str) -> Vec<&'a str> {
        let limit = self.maxsplit.map_or(usize::MAX, |m| m.saturating_add(1));
        if self.delimiter.is_empty() {
            // Python's str.split(): runs of whitespace; the last piece keeps the rest.
            let mut pieces = Vec::new();
            let mut rest = s.trim_start();
            while !rest.is_empty() {
                if pieces.len() + 1 == limit {
                    pieces.push(rest);
                    break;
                }
                match rest.find(char::is_whitespace) {
                    Some(end) => {
                        pieces.push(&rest[..end]);
                        rest = rest[end..].trim_start();
                    }
                    None => {
                        pieces.push(rest);
                        break;
                    }
                }
            }
            pieces
        } else {
            s.splitn(limit, self.delimiter.as_str()).collect()
        }
    }
}

impl Op for StringSplit {
    op_common!(
        "StringSplit",
        Prototype {
            inputs: &[input("X", DTypeSet::STRING)],
            outputs: &[output("Y"), output("Z")],
            value_inputs: &[],
        }
    );

    fn infer(&self, _ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        crate::op_bail!("StringSplit's output width is the longest split, known only by running it")
    }

    fn shapes_known_by_running(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let splits: Vec<Vec<&str>> = x.strings()?.iter().map(|s| self.split(s)).collect();
        let width = splits.iter().map(Vec::len).max().unwrap_or(0);
        let mut pieces = Vec::with_capacity(splits.len() * width);
        for s in &splits {
            pieces.extend(s.iter().map(|p| p.to_string()));
            pieces.extend(std::iter::repeat_n(String::new(), width - s.len()));
        }
        let mut shape = x.shape().to_vec();
        shape.push(width);
        let counts: Vec<i64> = splits.iter().map(|s| s.len() as i64).collect();
        Ok(vec![
            Tensor::from_strings(&shape, pieces)?,
            Tensor::from_vec(x.shape(), counts)?,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: &StringSplit, v: &[&str]) -> (Vec<usize>, Vec<String>, Vec<i64>) {
        let x =
            Tensor::from_strings(&[v.len()], v.iter().map(|s| s.to_string()).collect()).unwrap();
        let out = op.eval(&[Some(&x)]).unwrap();
        (
            out[0].shape().to_vec(),
            out[0].strings().unwrap().to_vec(),
            out[1].to_i64_vec(),
        )
    }

    #[test]
    fn splits_as_python_does() {
        let ws = StringSplit::default();
        let (shape, y, z) = run(&ws, &["  a b\tc ", "", "d"]);
        assert_eq!(shape, [3, 3]);
        assert_eq!(y, ["a", "b", "c", "", "", "", "d", "", ""]);
        assert_eq!(z, [3, 0, 1]);
        let comma = StringSplit {
            delimiter: ",".into(),
            maxsplit: None,
        };
        let (_, y, z) = run(&comma, &["a,,b", ""]);
        assert_eq!(y, ["a", "", "b", "", "", ""]);
        assert_eq!(z, [3, 1]);
        let once = StringSplit {
            delimiter: "-".into(),
            maxsplit: Some(1),
        };
        let (_, y, _) = run(&once, &["a-b-c"]);
        assert_eq!(y, ["a", "b-c"]);
        let ws_once = StringSplit {
            delimiter: String::new(),
            maxsplit: Some(1),
        };
        let (_, y, _) = run(&ws_once, &[" a  b c "]);
        assert_eq!(y, ["a", "b c "]);
        let (shape, y, z) = run(&ws, &[]);
        assert_eq!((shape, y.len(), z.len()), (vec![0, 0], 0, 0));
    }
}
