//! StringNormalizer: drops stop words from a row of strings and changes their case.
//!
//! The input is `[C]` or `[1, C]`. Stop words compare exactly, or after lowercasing both sides
//! when not case sensitive; the kept strings are then lowercased or uppercased (Unicode's
//! rules, whatever the `locale`). When every string is dropped, the output holds one empty
//! string, as ONNX specifies.

use crate::op::{input, output, required, Prototype};
use crate::{op_bail, op_common, DTypeSet, InferCtx, Op, OpResult, Tensor, TensorInfo};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CaseChange {
    #[default]
    None,
    Lower,
    Upper,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StringNormalizer {
    pub case_change: CaseChange,
    pub case_sensitive: bool,
    pub stopwords: Vec<String>,
}

impl StringNormalizer {
    fn is_stopword(&self, s: &str) -> bool {
        if self.case_sensitive {
            self.stopwords.iter().any(|w| w == s)
        } else {
            let s = s.to_lowercase();
            self.stopwords.iter().any(|w| w.to_lowercase() == s)
        }
    }
}

impl Op for StringNormalizer {
    op_common!(
        "StringNormalizer",
        Prototype {
            inputs: &[input("X", DTypeSet::STRING)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        match ctx.shape(0)? {
            [_] | [1, _] => {}
            s => op_bail!("input 0 (X): expected shape [C] or [1, C], got {s:?}"),
        }
        op_bail!(
            "StringNormalizer's output length depends on the strings, known only by running it"
        )
    }

    fn shapes_known_by_running(&self) -> bool {
        true
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let rows = match x.shape() {
            [_] => false,
            [1, _] => true,
            s => op_bail!("input 0 (X): expected shape [C] or [1, C], got {s:?}"),
        };
        let mut kept: Vec<String> = x
            .strings()?
            .iter()
            .filter(|s| !self.is_stopword(s))
            .map(|s| match self.case_change {
                CaseChange::None => s.clone(),
                CaseChange::Lower => s.to_lowercase(),
                CaseChange::Upper => s.to_uppercase(),
            })
            .collect();
        if kept.is_empty() {
            kept.push(String::new());
        }
        let shape = if rows {
            vec![1, kept.len()]
        } else {
            vec![kept.len()]
        };
        Ok(vec![Tensor::from_strings(&shape, kept)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: &StringNormalizer, shape: &[usize], v: &[&str]) -> (Vec<usize>, Vec<String>) {
        let x = Tensor::from_strings(shape, v.iter().map(|s| s.to_string()).collect()).unwrap();
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        (y.shape().to_vec(), y.strings().unwrap().to_vec())
    }

    #[test]
    fn drops_stopwords_then_changes_case() {
        let op = StringNormalizer {
            case_change: CaseChange::Upper,
            case_sensitive: false,
            stopwords: vec!["monday".into()],
        };
        let (shape, y) = run(&op, &[1, 4], &["Monday", "tuesday", "MONDAY", "straße"]);
        assert_eq!(shape, [1, 2]);
        assert_eq!(y, ["TUESDAY", "STRASSE"]);
        let exact = StringNormalizer {
            case_sensitive: true,
            ..op.clone()
        };
        assert_eq!(run(&exact, &[2], &["Monday", "monday"]).1, ["MONDAY"]);
        // Everything dropped: one empty string.
        assert_eq!(run(&op, &[1], &["MONDAY"]), (vec![1], vec![String::new()]));
        let x = Tensor::from_strings(&[2, 1], vec!["a".into(), "b".into()]).unwrap();
        assert!(op.eval(&[Some(&x)]).is_err());
    }
}
