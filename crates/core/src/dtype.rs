//! Element types.

use half::{bf16, f16};
use std::fmt;

/// The element type of a tensor.
///
/// `Bool` is stored as one byte per element holding 0 or 1 and is read and written as `u8`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    Bool,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F8E8M0,
    F4E2M1,
    I4,
    U4,
    /// UTF-8 strings (not byte-addressable: a string tensor's elements are Rust `String`s).
    String,
    /// A sequence of tensors, held as one value of shape `[]` (not byte-addressable).
    Sequence,
    /// An optional: a tensor or sequence, or nothing; one value of shape `[]` (not
    /// byte-addressable).
    Optional,
}

impl DType {
    /// Every element type stored as bytes, in declaration order (not [`DType::String`],
    /// [`DType::Sequence`] or [`DType::Optional`]).
    pub const ALL: [DType; 21] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::U8,
        DType::I16,
        DType::U16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::Bool,
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::F8E8M0,
        DType::F4E2M1,
        DType::I4,
        DType::U4,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
            // Low-precision types take one byte per element in memory.
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F8E8M0
            | DType::F4E2M1
            | DType::I4
            | DType::U4 => 1,
            // Not bytes: kernels and byte views see nothing of these.
            DType::String | DType::Sequence | DType::Optional => 0,
        }
    }

    /// Whether elements are stored as bytes (every type but strings, sequences and optionals).
    pub fn is_bytes(self) -> bool {
        self.size() > 0
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::F8E8M0 => "f8e8m0",
            DType::F4E2M1 => "f4e2m1",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::String => "string",
            DType::Sequence => "sequence",
            DType::Optional => "optional",
        }
    }

    /// Parses the names printed by [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .into_iter()
            .chain([DType::String, DType::Sequence, DType::Optional])
            .find(|d| d.name() == name)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8
                | DType::U8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
        )
    }

    /// The float8/float4/int4 storage types ([`DTypeSet::LOW_PRECISION`]).
    pub fn is_low_precision(self) -> bool {
        DTypeSet::LOW_PRECISION.contains(self)
    }

    /// Float8 and float4 types.
    pub fn is_minifloat(self) -> bool {
        self.is_low_precision() && !matches!(self, DType::I4 | DType::U4)
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Bit for this dtype in a [`DTypeSet`].
    pub const fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of dtypes, used by operator prototypes to declare what an input accepts.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DTypeSet(pub u32);

impl DTypeSet {
    pub const FLOAT: DTypeSet =
        DTypeSet(DType::F32.bit() | DType::F64.bit() | DType::F16.bit() | DType::BF16.bit());
    pub const SIGNED_INT: DTypeSet =
        DTypeSet(DType::I8.bit() | DType::I16.bit() | DType::I32.bit() | DType::I64.bit());
    pub const UNSIGNED_INT: DTypeSet =
        DTypeSet(DType::U8.bit() | DType::U16.bit() | DType::U32.bit() | DType::U64.bit());
    pub const INT: DTypeSet = DTypeSet(Self::SIGNED_INT.0 | Self::UNSIGNED_INT.0);
    pub const NUMERIC: DTypeSet = DTypeSet(Self::FLOAT.0 | Self::INT.0);
    pub const SIGNED: DTypeSet = DTypeSet(Self::FLOAT.0 | Self::SIGNED_INT.0);
    pub const BOOL: DTypeSet = DTypeSet(DType::Bool.bit());
    pub const ALL: DTypeSet = DTypeSet(Self::NUMERIC.0 | Self::BOOL.0);
    /// Float8, float4 and 4-bit integer storage types: only casts, quantization and ops that
    /// move bytes accept them.
    pub const LOW_PRECISION: DTypeSet = DTypeSet(
        DType::F8E4M3FN.bit()
            | DType::F8E4M3FNUZ.bit()
            | DType::F8E5M2.bit()
            | DType::F8E5M2FNUZ.bit()
            | DType::F8E8M0.bit()
            | DType::F4E2M1.bit()
            | DType::I4.bit()
            | DType::U4.bit(),
    );
    /// [`DTypeSet::ALL`] plus the low-precision types: for ops that only move elements.
    pub const ANY: DTypeSet = DTypeSet(Self::ALL.0 | Self::LOW_PRECISION.0);
    /// Index tensors: i32 or i64.
    pub const INDEX: DTypeSet = DTypeSet(DType::I32.bit() | DType::I64.bit());
    pub const I64: DTypeSet = DTypeSet(DType::I64.bit());
    pub const STRING: DTypeSet = DTypeSet(DType::String.bit());
    pub const SEQUENCE: DTypeSet = DTypeSet(DType::Sequence.bit());
    pub const OPTIONAL: DTypeSet = DTypeSet(DType::Optional.bit());
    /// Every value a graph can hold: tensors of any element type, sequences, optionals.
    pub const VALUE: DTypeSet =
        DTypeSet(Self::ANY.0 | Self::STRING.0 | Self::SEQUENCE.0 | Self::OPTIONAL.0);

    pub const fn of(d: DType) -> DTypeSet {
        DTypeSet(d.bit())
    }

    pub const fn union(self, other: DTypeSet) -> DTypeSet {
        DTypeSet(self.0 | other.0)
    }

    pub fn contains(self, d: DType) -> bool {
        self.0 & d.bit() != 0
    }
}

impl fmt::Debug for DTypeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = DType::ALL
            .iter()
            .chain(&[DType::String, DType::Sequence, DType::Optional])
            .filter(|d| self.contains(**d))
            .map(|d| d.name())
            .collect();
        write!(f, "{{{}}}", names.join(", "))
    }
}

impl fmt::Display for DTypeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A Rust type that is the element of a tensor of dtype [`Elem::DTYPE`].
///
/// Conversions go through `f64` and `i64`, which is exact for every value of every dtype except
/// the full `u64` range (values above `i64::MAX` saturate in `to_i64`).
pub trait Elem:
    bytemuck::Pod + Default + PartialOrd + PartialEq + fmt::Debug + Send + Sync + 'static
{
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_i64(self) -> i64;
    fn from_i64(v: i64) -> Self;
    fn zero() -> Self {
        Self::default()
    }
    fn one() -> Self {
        Self::from_i64(1)
    }
}

macro_rules! int_elem {
    ($t:ty, $d:ident) => {
        impl Elem for $t {
            const DTYPE: DType = DType::$d;
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                // `as` saturates and maps NaN to 0, matching numpy's common behaviour.
                v as $t
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    };
}
int_elem!(i8, I8);
int_elem!(u8, U8);
int_elem!(i16, I16);
int_elem!(u16, U16);
int_elem!(i32, I32);
int_elem!(u32, U32);
int_elem!(i64, I64);
int_elem!(u64, U64);

impl Elem for f32 {
    const DTYPE: DType = DType::F32;
    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v as f32
    }
}

impl Elem for f64 {
    const DTYPE: DType = DType::F64;
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        v as f64
    }
}

impl Elem for f16 {
    const DTYPE: DType = DType::F16;
    #[inline]
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    #[inline]
    fn to_i64(self) -> i64 {
        f16::to_f64(self) as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        f16::from_f64(v as f64)
    }
}

impl Elem for bf16 {
    const DTYPE: DType = DType::BF16;
    #[inline]
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    #[inline]
    fn to_i64(self) -> i64 {
        bf16::to_f64(self) as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        bf16::from_f64(v as f64)
    }
}

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype` (Bool is bound to `u8`).
///
/// ```ignore
/// dispatch_all!(t.dtype(), T => { let s = t.as_slice::<T>()?; ... })
/// ```
#[macro_export]
macro_rules! dispatch_all {
    ($dtype:expr, $T:ident => $body:block) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            $crate::DType::I8 => {
                type $T = i8;
                $body
            }
            $crate::DType::U8 | $crate::DType::Bool => {
                type $T = u8;
                $body
            }
            $crate::DType::I16 => {
                type $T = i16;
                $body
            }
            $crate::DType::U16 => {
                type $T = u16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::U64 => {
                type $T = u64;
                $body
            }
            $crate::DType::F8E4M3FN => {
                type $T = $crate::lowp::F8E4M3FN;
                $body
            }
            $crate::DType::F8E4M3FNUZ => {
                type $T = $crate::lowp::F8E4M3FNUZ;
                $body
            }
            $crate::DType::F8E5M2 => {
                type $T = $crate::lowp::F8E5M2;
                $body
            }
            $crate::DType::F8E5M2FNUZ => {
                type $T = $crate::lowp::F8E5M2FNUZ;
                $body
            }
            $crate::DType::F8E8M0 => {
                type $T = $crate::lowp::F8E8M0;
                $body
            }
            $crate::DType::F4E2M1 => {
                type $T = $crate::lowp::F4E2M1;
                $body
            }
            $crate::DType::I4 => {
                type $T = $crate::lowp::I4;
                $body
            }
            $crate::DType::U4 => {
                type $T = $crate::lowp::U4;
                $body
            }
            // Not bytes: `as_slice::<u8>()` on these is an error, which the body reports (no
            // op whose prototype takes them only by bytes gets them).
            $crate::DType::String | $crate::DType::Sequence | $crate::DType::Optional => {
                type $T = u8;
                $body
            }
        }
    };
}

/// Like [`dispatch_all!`] for the float dtypes; evaluates `$other` for the rest.
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:block, $other:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            _ => $other,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
            assert!(d.size() >= 1 && d.size() <= 8);
        }
        assert_eq!(DType::BF16.size(), 2);
    }

    #[test]
    fn sets() {
        assert!(DTypeSet::FLOAT.contains(DType::F16));
        assert!(!DTypeSet::FLOAT.contains(DType::I32));
        assert!(DTypeSet::NUMERIC.contains(DType::U64));
        assert!(!DTypeSet::NUMERIC.contains(DType::Bool));
        assert!(!DTypeSet::NUMERIC.contains(DType::F8E4M3FN));
        assert!(!DTypeSet::ALL.contains(DType::I4));
        assert!(DTypeSet::ANY.contains(DType::U4));
        assert!(DType::F4E2M1.is_minifloat() && !DType::I4.is_minifloat());
        assert_eq!(format!("{:?}", DTypeSet::INDEX), "{i32, i64}");
    }

    #[test]
    fn conversions() {
        assert_eq!(<u8 as Elem>::from_f64(300.0), 255);
        assert_eq!(<i8 as Elem>::from_f64(-1.5), -1);
        assert_eq!(<f16 as Elem>::from_f64(1.5).to_f64(), 1.5);
    }
}
