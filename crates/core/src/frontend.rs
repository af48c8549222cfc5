//! Format-agnostic helpers for the frontends' op mapping: the error a mapping function returns,
//! the lookup in a table of op types kept as one slice per op family, the conversions of
//! attribute values both frontends check the same way, and
//! [`plain_unary!`](crate::plain_unary), which writes the mapping functions of unary ops
//! without attributes.
//!
//! Nothing here reads a file format: each frontend reads its own attributes and passes the
//! values in.

/// Why an op (an ONNX node, a Paddle op) could not be mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapError {
    /// The op type is known but this use of it is not supported (an attribute value, an opset,
    /// a dtype); an unknown op type reports an empty reason. Collected with the other
    /// unsupported ops, so a model reports them all at once.
    Unsupported(String),
    /// The op is malformed (a missing input or required attribute, an attribute of the wrong
    /// type or out of range).
    Invalid(String),
}

/// The mapping function of `op_type` in a table kept as one slice of `(op type, function)`
/// pairs per op family; the first family that lists it wins.
pub fn lookup<F: Copy>(tables: &[&[(&str, F)]], op_type: &str) -> Option<F> {
    tables
        .iter()
        .flat_map(|t| t.iter())
        .find(|(name, _)| *name == op_type)
        .map(|(_, f)| *f)
}

/// Every op type a table lists, sorted.
pub fn op_types<F>(tables: &[&[(&'static str, F)]]) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = tables
        .iter()
        .flat_map(|t| t.iter())
        .map(|(n, _)| *n)
        .collect();
    v.sort_unstable();
    v
}

/// A list of sizes (strides, dilations, pads, output sizes) as `usize`; a negative entry is
/// invalid. `what` names the list in the message, e.g. `'strides'`.
pub fn usizes(v: &[i64], what: &str) -> Result<Vec<usize>, MapError> {
    v.iter()
        .map(|&x| {
            usize::try_from(x)
                .map_err(|_| MapError::Invalid(format!("{what} has the negative value {x}")))
        })
        .collect()
}

/// A convolution's group count, which must be at least 1. `what` names the attribute in the
/// message (`group` in ONNX, `groups` in Paddle).
pub fn group_count(g: i64, what: &str) -> Result<usize, MapError> {
    usize::try_from(g)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| MapError::Invalid(format!("{what} must be at least 1, got {g}")))
}

/// Writes one mapping function per unary op without attributes.
///
/// ```text
/// plain_unary!(
///     |c: &Ctx, kind| -> MapResult { unary(c, kind) };
///     relu => Relu, exp => Exp,
/// );
/// ```
///
/// writes `fn relu(c: &Ctx) -> MapResult`, whose body is the block with `kind` bound to
/// `UnaryKind::Relu`, and the same for `exp`: the op names and their
/// [`UnaryKind`](crate::ops::elementwise::UnaryKind)s are listed once, each frontend says how
/// it maps a kind.
#[macro_export]
macro_rules! plain_unary {
    (|$c:tt: $ctx:ty, $k:ident| -> $ret:ty $body:block; $($f:ident => $kind:ident),* $(,)?) => {$(
        fn $f($c: $ctx) -> $ret {
            let $k = $crate::ops::elementwise::UnaryKind::$kind;
            $body
        }
    )*};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_goes_through_every_family() {
        const A: &[(&str, u8)] = &[("Relu", 1), ("Add", 2)];
        const B: &[(&str, u8)] = &[("Conv", 3), ("Add", 4)];
        assert_eq!(lookup(&[A, B], "Conv"), Some(3));
        assert_eq!(lookup(&[A, B], "Add"), Some(2));
        assert_eq!(lookup(&[A, B], "Gemm"), None);
        assert_eq!(op_types(&[A, B]), ["Add", "Add", "Conv", "Relu"]);
    }

    #[test]
    fn usizes_refuses_negative_entries() {
        assert_eq!(usizes(&[0, 2, 3], "'pads'"), Ok(vec![0, 2, 3]));
        assert_eq!(
            usizes(&[1, -1], "'strides'"),
            Err(MapError::Invalid(
                "'strides' has the negative value -1".into()
            ))
        );
    }

    #[test]
    fn group_count_is_at_least_one() {
        assert_eq!(group_count(4, "group"), Ok(4));
        assert_eq!(
            group_count(0, "groups"),
            Err(MapError::Invalid("groups must be at least 1, got 0".into()))
        );
        assert!(group_count(-2, "group").is_err());
    }
}
