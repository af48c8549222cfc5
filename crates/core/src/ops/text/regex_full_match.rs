//! RegexFullMatch: whether each string matches a regular expression as a whole.
//!
//! ONNX names RE2's syntax; the `regex` crate reads the same syntax (no backreferences or
//! lookaround, linear-time matching). One difference: its `\w`, `\d`, `\s` and `\b` are
//! Unicode-aware where RE2's are ASCII-only, which changes results only on non-ASCII text.

use crate::op::{input, output, required, Prototype};
use crate::{
    op_common, DType, DTypeSet, Error, InferCtx, Op, OpResult, Result, Tensor, TensorInfo,
};

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RegexFullMatch {
    pattern: String,
    /// The pattern anchored at both ends.
    #[cfg(feature = "regex")]
    whole: regex::Regex,
}

impl RegexFullMatch {
    /// Compiles `pattern`; a pattern the syntax does not allow is an error naming it.
    #[cfg(feature = "regex")]
    pub fn new(pattern: &str) -> Result<RegexFullMatch> {
        let whole = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
            // A hostile pattern must not take unbounded memory to compile.
            .size_limit(1 << 22)
            .build()
            .map_err(|e| Error::InvalidModel(format!("pattern {pattern:?}: {e}")))?;
        Ok(RegexFullMatch {
            pattern: pattern.to_string(),
            whole,
        })
    }

    /// A build without the `regex` feature (the light build) has no engine to run patterns.
    #[cfg(not(feature = "regex"))]
    pub fn new(pattern: &str) -> Result<RegexFullMatch> {
        Err(Error::Other(format!(
            "RegexFullMatch (pattern {pattern:?}): this build of ferrolite leaves out the regex \
             engine (ferrolite-core's `regex` feature)"
        )))
    }

    #[cfg(feature = "regex")]
    fn matches(&self, s: &str) -> bool {
        self.whole.is_match(s)
    }

    /// Never called: `new` makes no RegexFullMatch without the engine.
    #[cfg(not(feature = "regex"))]
    fn matches(&self, _: &str) -> bool {
        false
    }

    pub fn pattern(&self) -> &str {
        &self.pattern
    }
}

impl PartialEq for RegexFullMatch {
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern
    }
}

impl TryFrom<String> for RegexFullMatch {
    type Error = Error;
    fn try_from(pattern: String) -> Result<Self> {
        RegexFullMatch::new(&pattern)
    }
}

impl From<RegexFullMatch> for String {
    fn from(r: RegexFullMatch) -> String {
        r.pattern
    }
}

impl Op for RegexFullMatch {
    op_common!(
        "RegexFullMatch",
        Prototype {
            inputs: &[input("X", DTypeSet::STRING)],
            outputs: &[output("Y")],
            value_inputs: &[],
        }
    );

    fn infer(&self, ctx: &InferCtx) -> OpResult<Vec<TensorInfo>> {
        Ok(vec![TensorInfo::new(DType::Bool, ctx.shape(0)?.to_vec())])
    }

    fn eval(&self, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let x = required(inputs, 0)?;
        let matches: Vec<bool> = x.strings()?.iter().map(|s| self.matches(s)).collect();
        Ok(vec![Tensor::from_bools(x.shape(), &matches)?])
    }
}

#[cfg(all(test, feature = "regex"))]
mod tests {
    use super::*;

    #[test]
    fn matches_whole_strings_only() {
        let op = RegexFullMatch::new(r"[a-z]+@(gmail|yahoo)\.com").unwrap();
        let x = Tensor::from_strings(
            &[2, 2],
            ["ann@gmail.com", "x ann@gmail.com", "bob@yahoo.com", ""]
                .map(String::from)
                .to_vec(),
        )
        .unwrap();
        let y = op.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.to_f64_vec(), [1.0, 0.0, 1.0, 0.0]);
        // An alternation binds inside the anchors: "a|b" must not match "ab".
        let alt = RegexFullMatch::new("a|b").unwrap();
        let x = Tensor::from_strings(&[2], vec!["ab".into(), "b".into()]).unwrap();
        let y = alt.eval(&[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.to_f64_vec(), [0.0, 1.0]);
    }

    #[test]
    fn bad_patterns_and_inputs_are_errors() {
        let e = RegexFullMatch::new("(unclosed").unwrap_err().to_string();
        assert!(e.contains("(unclosed"), "{e}");
        // Backreferences are outside RE2's syntax.
        assert!(RegexFullMatch::new(r"(a)\1").is_err());
        let op = RegexFullMatch::new("a").unwrap();
        let n = Tensor::from_vec(&[1], vec![1.0f32]).unwrap();
        assert!(op.eval(&[Some(&n)]).is_err());
    }

    #[test]
    fn round_trips_through_the_codec() {
        let op = RegexFullMatch::new(r"\d+").unwrap();
        let bytes = postcard::to_allocvec(&op).unwrap();
        let back: RegexFullMatch = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, op);
        assert_eq!(back.pattern(), r"\d+");
    }
}
