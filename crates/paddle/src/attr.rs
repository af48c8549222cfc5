//! Typed attribute values of an [`OpDesc`](crate::proto::OpDesc).

use crate::proto::{attr_type, scalar_type, Attr, Scalar};

/// A decoded `Scalar` attribute.
#[derive(Clone, Debug, PartialEq)]
pub enum ScalarValue {
    Bool(bool),
    Long(i64),
    Float64(f64),
    Complex128(f64, f64),
}

impl ScalarValue {
    pub fn decode(s: &Scalar) -> Result<ScalarValue, String> {
        Ok(match s.r#type {
            scalar_type::BOOLEAN => ScalarValue::Bool(s.b),
            scalar_type::LONG => ScalarValue::Long(s.i),
            scalar_type::FLOAT64 => ScalarValue::Float64(s.r),
            scalar_type::COMPLEX128 => {
                let c = s.c.clone().unwrap_or_default();
                ScalarValue::Complex128(c.r, c.i)
            }
            t => return Err(format!("unknown scalar type {t}")),
        })
    }

    pub fn as_f64(&self) -> f64 {
        match *self {
            ScalarValue::Bool(b) => b as i64 as f64,
            ScalarValue::Long(i) => i as f64,
            ScalarValue::Float64(f) => f,
            ScalarValue::Complex128(r, _) => r,
        }
    }
}

/// An attribute value, by its declared [`attr_type`].
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i32),
    Float(f32),
    String(String),
    Ints(Vec<i32>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Boolean(bool),
    Booleans(Vec<bool>),
    Block(i32),
    Long(i64),
    Blocks(Vec<i32>),
    Longs(Vec<i64>),
    Float64s(Vec<f64>),
    Var(String),
    Vars(Vec<String>),
    Float64(f64),
    Scalar(ScalarValue),
    Scalars(Vec<ScalarValue>),
}

impl AttrValue {
    /// Decodes an attribute by its `type` field.
    pub fn decode(a: &Attr) -> Result<AttrValue, String> {
        Ok(match a.r#type {
            attr_type::INT => AttrValue::Int(a.i),
            attr_type::FLOAT => AttrValue::Float(a.f),
            attr_type::STRING => AttrValue::String(a.s.clone()),
            attr_type::INTS => AttrValue::Ints(a.ints.clone()),
            attr_type::FLOATS => AttrValue::Floats(a.floats.clone()),
            attr_type::STRINGS => AttrValue::Strings(a.strings.clone()),
            attr_type::BOOLEAN => AttrValue::Boolean(a.b),
            attr_type::BOOLEANS => AttrValue::Booleans(a.bools.clone()),
            attr_type::BLOCK => AttrValue::Block(a.block_idx),
            attr_type::LONG => AttrValue::Long(a.l),
            attr_type::BLOCKS => AttrValue::Blocks(a.blocks_idx.clone()),
            attr_type::LONGS => AttrValue::Longs(a.longs.clone()),
            attr_type::FLOAT64S => AttrValue::Float64s(a.float64s.clone()),
            attr_type::VAR => AttrValue::Var(a.var_name.clone()),
            attr_type::VARS => AttrValue::Vars(a.vars_name.clone()),
            attr_type::FLOAT64 => AttrValue::Float64(a.float64),
            attr_type::SCALAR => {
                AttrValue::Scalar(ScalarValue::decode(a.scalar.as_ref().ok_or_else(
                    || format!("attribute '{}' of type SCALAR holds no scalar", a.name),
                )?)?)
            }
            attr_type::SCALARS => AttrValue::Scalars(
                a.scalars
                    .iter()
                    .map(ScalarValue::decode)
                    .collect::<Result<_, _>>()?,
            ),
            t => return Err(format!("attribute '{}' has unknown type {t}", a.name)),
        })
    }

    /// An integer (INT, LONG, BOOLEAN, or an integral SCALAR).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(*i as i64),
            AttrValue::Long(l) => Some(*l),
            AttrValue::Boolean(b) => Some(*b as i64),
            AttrValue::Scalar(ScalarValue::Long(l)) => Some(*l),
            AttrValue::Scalar(ScalarValue::Bool(b)) => Some(*b as i64),
            _ => None,
        }
    }

    /// A real number (FLOAT, FLOAT64, INT, LONG or SCALAR).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            AttrValue::Float(f) => Some(*f as f64),
            AttrValue::Float64(f) => Some(*f),
            AttrValue::Int(i) => Some(*i as f64),
            AttrValue::Long(l) => Some(*l as f64),
            AttrValue::Scalar(s) => Some(s.as_f64()),
            _ => None,
        }
    }

    /// A boolean (BOOLEAN, or INT/LONG as 0/1).
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            AttrValue::Boolean(b) => Some(*b),
            AttrValue::Int(i) => Some(*i != 0),
            AttrValue::Long(l) => Some(*l != 0),
            AttrValue::Scalar(ScalarValue::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// A list of integers (INTS, LONGS, BOOLEANS, SCALARS, or one INT/LONG).
    pub fn as_i64s(&self) -> Option<Vec<i64>> {
        match self {
            AttrValue::Ints(v) => Some(v.iter().map(|&x| x as i64).collect()),
            AttrValue::Longs(v) => Some(v.clone()),
            AttrValue::Booleans(v) => Some(v.iter().map(|&x| x as i64).collect()),
            AttrValue::Scalars(v) => Some(v.iter().map(|s| s.as_f64() as i64).collect()),
            AttrValue::Int(_) | AttrValue::Long(_) => self.as_i64().map(|x| vec![x]),
            _ => None,
        }
    }

    /// A list of reals (FLOATS, FLOAT64S, INTS, LONGS, SCALARS).
    pub fn as_f64s(&self) -> Option<Vec<f64>> {
        match self {
            AttrValue::Floats(v) => Some(v.iter().map(|&x| x as f64).collect()),
            AttrValue::Float64s(v) => Some(v.clone()),
            AttrValue::Ints(v) => Some(v.iter().map(|&x| x as f64).collect()),
            AttrValue::Longs(v) => Some(v.iter().map(|&x| x as f64).collect()),
            AttrValue::Scalars(v) => Some(v.iter().map(ScalarValue::as_f64).collect()),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            AttrValue::Strings(s) => Some(s),
            _ => None,
        }
    }

    /// The attribute type's name, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            AttrValue::Int(_) => "INT",
            AttrValue::Float(_) => "FLOAT",
            AttrValue::String(_) => "STRING",
            AttrValue::Ints(_) => "INTS",
            AttrValue::Floats(_) => "FLOATS",
            AttrValue::Strings(_) => "STRINGS",
            AttrValue::Boolean(_) => "BOOLEAN",
            AttrValue::Booleans(_) => "BOOLEANS",
            AttrValue::Block(_) => "BLOCK",
            AttrValue::Long(_) => "LONG",
            AttrValue::Blocks(_) => "BLOCKS",
            AttrValue::Longs(_) => "LONGS",
            AttrValue::Float64s(_) => "FLOAT64S",
            AttrValue::Var(_) => "VAR",
            AttrValue::Vars(_) => "VARS",
            AttrValue::Float64(_) => "FLOAT64",
            AttrValue::Scalar(_) => "SCALAR",
            AttrValue::Scalars(_) => "SCALARS",
        }
    }
}
