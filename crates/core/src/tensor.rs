//! Tensors: a dtype, a shape and contiguous row-major data aligned to 64 bytes.
//!
//! Data sits behind an `Arc`, so cloning a tensor (a weight handed to several plans or threads)
//! shares it without copying; writing to a shared tensor copies it first.

use crate::{DType, Elem, Error, Result};
use std::fmt;
use std::sync::Arc;

/// The largest tensor the engine will allocate (4 GiB). Shapes can come from hostile files; a
/// size above this is reported as an error instead of attempting the allocation. Edge models
/// stay far below it.
pub const MAX_TENSOR_BYTES: usize = 1 << 32;

/// The storage unit: 64 bytes aligned to 64, so every tensor starts on a cache line and can be
/// viewed as a slice of any element type.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Block([u8; 64]);

#[derive(Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Arc<Data>,
}

/// Bytes that tensors can view without copying: a memory-mapped model file, say. The tensors
/// keep the owner alive.
pub trait SharedBytes: Send + Sync + 'static {
    fn bytes(&self) -> &[u8];
}

impl SharedBytes for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// A tensor's memory: its own blocks, or a 64-byte-aligned range of shared bytes (read only:
/// writing copies it first). Strings, sequences and optionals hold Rust values instead.
#[derive(Clone)]
enum Data {
    Owned(Vec<Block>),
    Shared {
        owner: Arc<dyn SharedBytes>,
        offset: usize,
    },
    Strings(Vec<String>),
    Sequence(Vec<Tensor>),
    Optional(Option<Tensor>),
}

impl Data {
    /// The bytes from the tensor's start (possibly more than it holds; none for the values
    /// that are not bytes).
    fn raw(&self) -> &[u8] {
        match self {
            Data::Owned(blocks) => bytemuck::cast_slice(blocks),
            Data::Shared { owner, offset } => &owner.bytes()[*offset..],
            Data::Strings(_) | Data::Sequence(_) | Data::Optional(_) => &[],
        }
    }
}

/// The memory of a tensor that is no longer needed, kept to back a later tensor (see
/// [`Tensor::into_storage`] and [`Tensor::with_storage`]). Execution plans reuse it by lifetime.
pub struct Storage(Vec<Block>);

impl Storage {
    /// Capacity in bytes.
    pub fn bytes(&self) -> usize {
        self.0.len() * 64
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Storage({} bytes)", self.bytes())
    }
}

/// Number of elements of a shape, or an error when it overflows.
pub fn checked_numel(shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| Error::Tensor(format!("shape {shape:?} has too many elements")))
    })
}

fn check_limit(bytes: usize) -> Result<()> {
    let limit = MAX_TENSOR_BYTES;
    if bytes > limit {
        return Err(Error::Tensor(format!(
            "a tensor of {bytes} bytes exceeds the limit of {limit} bytes"
        )));
    }
    Ok(())
}

fn alloc_blocks(bytes: usize) -> Result<Vec<Block>> {
    check_limit(bytes)?;
    let n = bytes.div_ceil(64);
    let mut v: Vec<Block> = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::Tensor(format!("could not allocate {bytes} bytes")))?;
    v.resize(n, Block([0; 64]));
    Ok(v)
}

impl Tensor {
    /// A tensor of zeros (false for bool).
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let numel = checked_numel(shape)?;
        if !dtype.is_bytes() {
            // Empty strings; an empty sequence; an empty optional.
            let data = match dtype {
                DType::String => {
                    check_limit(numel.saturating_mul(std::mem::size_of::<String>()))?;
                    Data::Strings(vec![String::new(); numel])
                }
                DType::Sequence => Data::Sequence(Vec::new()),
                _ => Data::Optional(None),
            };
            return Ok(Tensor {
                dtype,
                shape: shape.to_vec(),
                data: Arc::new(data),
            });
        }
        let bytes = numel
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::Tensor(format!("shape {shape:?} is too large")))?;
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Arc::new(Data::Owned(alloc_blocks(bytes)?)),
        })
    }

    /// A tensor backed by `storage` when it is large enough (its contents are left as they
    /// are: stale data, not zeros), grown when it is too small, or newly allocated (zeroed)
    /// without one.
    pub fn with_storage(dtype: DType, shape: &[usize], storage: Option<Storage>) -> Result<Tensor> {
        let Some(Storage(mut blocks)) = storage.filter(|_| dtype.is_bytes()) else {
            return Tensor::zeros(dtype, shape);
        };
        let bytes = checked_numel(shape)?
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::Tensor(format!("shape {shape:?} is too large")))?;
        check_limit(bytes)?;
        let n = bytes.div_ceil(64);
        if blocks.len() < n {
            blocks
                .try_reserve_exact(n - blocks.len())
                .map_err(|_| Error::Tensor(format!("could not allocate {bytes} bytes")))?;
            blocks.resize(n, Block([0; 64]));
        }
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Arc::new(Data::Owned(blocks)),
        })
    }

    /// Whether no other tensor shares this one's data.
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.data) == 1 && Arc::weak_count(&self.data) == 0
    }

    /// The tensor's memory for reuse, when no other tensor shares it.
    pub fn into_storage(self) -> Option<Storage> {
        match Arc::try_unwrap(self.data).ok()? {
            Data::Owned(blocks) => Some(Storage(blocks)),
            _ => None,
        }
    }

    /// A tensor from raw little-endian bytes. Bool bytes are normalised to 0/1.
    pub fn from_bytes(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<Tensor> {
        if !dtype.is_bytes() {
            return Err(Error::Tensor(format!(
                "a {dtype} tensor cannot be made of bytes"
            )));
        }
        let mut t = Tensor::zeros(dtype, shape)?;
        if bytes.len() != t.byte_len() {
            return Err(Error::Tensor(format!(
                "{} tensor of shape {:?} needs {} bytes, got {}",
                dtype,
                shape,
                t.byte_len(),
                bytes.len()
            )));
        }
        let dst = t.bytes_mut();
        if dtype == DType::Bool {
            for (d, s) in dst.iter_mut().zip(bytes) {
                *d = (*s != 0) as u8;
            }
        } else {
            dst.copy_from_slice(bytes);
        }
        Ok(t)
    }

    /// A tensor holding `values` with the given shape.
    pub fn from_vec<T: Elem>(shape: &[usize], values: Vec<T>) -> Result<Tensor> {
        Tensor::from_slice(shape, &values)
    }

    pub fn from_slice<T: Elem>(shape: &[usize], values: &[T]) -> Result<Tensor> {
        let mut t = Tensor::zeros(T::DTYPE, shape)?;
        if values.len() != t.numel() {
            return Err(Error::Tensor(format!(
                "shape {:?} holds {} elements, got {}",
                shape,
                t.numel(),
                values.len()
            )));
        }
        t.as_mut_slice::<T>()?.copy_from_slice(values);
        Ok(t)
    }

    /// A bool tensor from Rust bools.
    pub fn from_bools(shape: &[usize], values: &[bool]) -> Result<Tensor> {
        let bytes: Vec<u8> = values.iter().map(|&b| b as u8).collect();
        Tensor::from_bytes(DType::Bool, shape, &bytes)
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Elem>(v: T) -> Tensor {
        let mut t = Tensor::zeros(T::DTYPE, &[]).expect("a scalar always fits");
        t.as_mut_slice::<T>().expect("dtype matches")[0] = v;
        t
    }

    /// A tensor of `dtype` with every element set to `value` (converted from f64).
    pub fn full(dtype: DType, shape: &[usize], value: f64) -> Result<Tensor> {
        let mut t = Tensor::zeros(dtype, shape)?;
        crate::dispatch_all!(dtype, T => {
            let v = if dtype == DType::Bool { T::from_f64((value != 0.0) as u8 as f64) } else { T::from_f64(value) };
            t.as_mut_slice::<T>()?.fill(v);
        });
        Ok(t)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn byte_len(&self) -> usize {
        self.numel() * self.dtype.size()
    }

    /// The bytes of data the value holds: [`Tensor::byte_len`] for tensors of bytes, the
    /// characters of strings, and what a sequence's or optional's tensors hold.
    pub fn held_bytes(&self) -> usize {
        match &*self.data {
            Data::Strings(v) => v.iter().map(String::len).sum(),
            Data::Sequence(v) => v.iter().map(Tensor::held_bytes).sum(),
            Data::Optional(v) => v.as_ref().map_or(0, Tensor::held_bytes),
            _ => self.byte_len(),
        }
    }

    /// Whether two tensors share the same data buffer.
    pub fn shares_data_with(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.data, &other.data)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.data.raw()[..self.byte_len()]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if !self.dtype.is_bytes() {
            return &mut [];
        }
        let len = self.byte_len();
        &mut bytemuck::cast_slice_mut::<Block, u8>(self.owned_blocks())[..len]
    }

    /// The tensor's own blocks, copying shared data first.
    fn owned_blocks(&mut self) -> &mut Vec<Block> {
        if let Data::Shared { .. } = *self.data {
            let len = self.byte_len();
            let bytes = self.data.raw();
            let mut blocks = vec![Block([0; 64]); len.div_ceil(64)];
            bytemuck::cast_slice_mut::<Block, u8>(&mut blocks)[..len]
                .copy_from_slice(&bytes[..len]);
            self.data = Arc::new(Data::Owned(blocks));
        }
        let data = Arc::make_mut(&mut self.data);
        if !matches!(data, Data::Owned(_)) {
            // Values that are not bytes have no blocks (callers check the dtype first).
            *data = Data::Owned(Vec::new());
        }
        match data {
            Data::Owned(blocks) => blocks,
            _ => unreachable!("replaced above"),
        }
    }

    /// A tensor viewing `owner`'s bytes from `offset` without copying them, when they start
    /// on a 64-byte boundary (else, and for bool, a copy).
    pub fn from_shared(
        dtype: DType,
        shape: &[usize],
        owner: Arc<dyn SharedBytes>,
        offset: usize,
    ) -> Result<Tensor> {
        let len = checked_numel(shape)?
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::Tensor(format!("shape {shape:?} is too large")))?;
        let all = owner.bytes();
        let Some(bytes) = offset.checked_add(len).and_then(|end| all.get(offset..end)) else {
            return Err(Error::Tensor(format!(
                "{dtype} tensor of shape {shape:?} at offset {offset} runs past the {} bytes \
                 it views",
                all.len()
            )));
        };
        if dtype == DType::Bool || !(bytes.as_ptr() as usize).is_multiple_of(64) {
            return Tensor::from_bytes(dtype, shape, bytes);
        }
        Ok(Tensor {
            dtype,
            shape: shape.to_vec(),
            data: Arc::new(Data::Shared { owner, offset }),
        })
    }

    /// A string tensor.
    pub fn from_strings(shape: &[usize], values: Vec<String>) -> Result<Tensor> {
        if checked_numel(shape)? != values.len() {
            return Err(Error::Tensor(format!(
                "shape {shape:?} holds {} elements, got {} strings",
                checked_numel(shape)?,
                values.len()
            )));
        }
        Ok(Tensor {
            dtype: DType::String,
            shape: shape.to_vec(),
            data: Arc::new(Data::Strings(values)),
        })
    }

    /// A string tensor's elements.
    pub fn strings(&self) -> Result<&[String]> {
        match &*self.data {
            Data::Strings(v) => Ok(v),
            _ => Err(Error::Tensor(format!(
                "tensor is {}, read as strings",
                self.dtype
            ))),
        }
    }

    /// A sequence of tensors (one value of shape `[]`).
    pub fn from_sequence(items: Vec<Tensor>) -> Tensor {
        Tensor {
            dtype: DType::Sequence,
            shape: Vec::new(),
            data: Arc::new(Data::Sequence(items)),
        }
    }

    /// A sequence's tensors.
    pub fn sequence(&self) -> Result<&[Tensor]> {
        match &*self.data {
            Data::Sequence(v) => Ok(v),
            _ => Err(Error::Tensor(format!(
                "tensor is {}, read as a sequence",
                self.dtype
            ))),
        }
    }

    /// An optional holding a tensor or a sequence, or nothing (one value of shape `[]`).
    pub fn from_optional(value: Option<Tensor>) -> Tensor {
        Tensor {
            dtype: DType::Optional,
            shape: Vec::new(),
            data: Arc::new(Data::Optional(value)),
        }
    }

    /// What an optional holds.
    pub fn optional(&self) -> Result<Option<&Tensor>> {
        match &*self.data {
            Data::Optional(v) => Ok(v.as_ref()),
            _ => Err(Error::Tensor(format!(
                "tensor is {}, read as an optional",
                self.dtype
            ))),
        }
    }

    /// Whether the tensor views shared bytes (a mapped file) rather than memory of its own.
    pub fn is_shared_view(&self) -> bool {
        matches!(*self.data, Data::Shared { .. })
    }

    fn check_dtype<T: Elem>(&self) -> Result<()> {
        let ok = T::DTYPE == self.dtype || (self.dtype == DType::Bool && T::DTYPE == DType::U8);
        if ok {
            Ok(())
        } else {
            Err(Error::Tensor(format!(
                "tensor is {}, accessed as {}",
                self.dtype,
                T::DTYPE
            )))
        }
    }

    /// The elements as a slice. Bool tensors are read as `u8`.
    pub fn as_slice<T: Elem>(&self) -> Result<&[T]> {
        self.check_dtype::<T>()?;
        // Owned blocks and shared views both start 64-byte aligned, so the cast holds.
        Ok(bytemuck::cast_slice::<u8, T>(self.bytes()))
    }

    /// The elements as a mutable slice; copies the data first if it is shared.
    pub fn as_mut_slice<T: Elem>(&mut self) -> Result<&mut [T]> {
        self.check_dtype::<T>()?;
        let n = self.numel();
        Ok(&mut bytemuck::cast_slice_mut::<Block, T>(self.owned_blocks())[..n])
    }

    /// The same data with another shape of the same element count (no copy).
    pub fn reshaped(&self, shape: &[usize]) -> Result<Tensor> {
        if checked_numel(shape)? != self.numel() {
            return Err(Error::Tensor(format!(
                "cannot reshape {:?} to {:?}",
                self.shape, shape
            )));
        }
        Ok(Tensor {
            dtype: self.dtype,
            shape: shape.to_vec(),
            data: self.data.clone(),
        })
    }

    /// Every element converted to f64 (bool as 0/1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        crate::dispatch_all!(self.dtype, T => {
            self.as_slice::<T>().map(|s| s.iter().map(|v| v.to_f64()).collect()).unwrap_or_default()
        })
    }

    /// Every element converted to i64 (floats truncated, bool as 0/1).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        crate::dispatch_all!(self.dtype, T => {
            self.as_slice::<T>().map(|s| s.iter().map(|v| v.to_i64()).collect()).unwrap_or_default()
        })
    }

    /// Converts to another dtype. Float to int truncates toward zero and saturates, NaN becomes 0
    /// (to int4/uint4 it wraps modulo 16, as ONNX's reference does); to float8 rounds to nearest
    /// even and saturates; anything to bool is `!= 0`.
    pub fn cast(&self, to: DType) -> Result<Tensor> {
        if to == self.dtype {
            return Ok(self.clone());
        }
        let mut out = Tensor::zeros(to, &self.shape)?;
        let from = self.dtype;
        crate::dispatch_all!(from, S => {
            let src = self.as_slice::<S>()?;
            crate::dispatch_all!(to, D => {
                let dst = out.as_mut_slice::<D>()?;
                cast_slice(src, dst, from, to);
            })
        });
        Ok(out)
    }
}

fn cast_slice<S: Elem, D: Elem>(src: &[S], dst: &mut [D], from: DType, to: DType) {
    if to == DType::Bool {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = D::from_i64((s.to_f64() != 0.0) as i64);
        }
    } else if from.is_float() || to.is_float() || from.is_minifloat() || to.is_minifloat() {
        // Minifloats convert through f64 (exact for every source value); to float8 this
        // saturates, ONNX's default.
        for (d, s) in dst.iter_mut().zip(src) {
            *d = D::from_f64(s.to_f64());
        }
    } else if from == DType::U64 {
        // u64 values above i64::MAX would not survive the trip through i64.
        for (d, s) in dst.iter_mut().zip(src) {
            let v: u64 = bytemuck::cast::<S, u64>(*s);
            *d = D::from_i64(v as i64);
        }
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = D::from_i64(s.to_i64());
        }
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor<{}>{:?}", self.dtype, self.shape)?;
        match &*self.data {
            Data::Strings(v) if v.len() <= 16 => return write!(f, " {v:?}"),
            Data::Sequence(v) => return write!(f, " {v:?}"),
            Data::Optional(v) => return write!(f, " {v:?}"),
            _ => {}
        }
        if self.dtype.is_bytes() && self.numel() <= 16 {
            let v = self.to_f64_vec();
            write!(f, " {v:?}")?;
        }
        Ok(())
    }
}

/// Renders a shape as `1x3x224x224` (and `scalar` for rank 0).
pub fn shape_str(shape: &[usize]) -> String {
    if shape.is_empty() {
        "scalar".to_string()
    } else {
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x")
    }
}

/// serde for tensors held in op attributes (ConstantOfShape's value, say): dtype, shape, raw
/// little-endian bytes. Weights are not stored this way; the optimized format keeps them in
/// its aligned data section.
impl serde::Serialize for Tensor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(3)?;
        t.serialize_element(&self.dtype)?;
        t.serialize_element(&self.shape)?;
        t.serialize_element(&ByteStr(self.bytes()))?;
        t.end()
    }
}

impl<'de> serde::Deserialize<'de> for Tensor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Tensor, D::Error> {
        use serde::de::Error as _;
        let (dtype, shape, bytes): (DType, Vec<usize>, Vec<u8>) =
            serde::Deserialize::deserialize(d)?;
        // The length is checked against the shape before anything is allocated for it.
        let needed = checked_numel(&shape)
            .ok()
            .and_then(|n| n.checked_mul(dtype.size()));
        if needed != Some(bytes.len()) {
            return Err(D::Error::custom(format!(
                "{dtype} tensor of shape {shape:?} with {} bytes",
                bytes.len()
            )));
        }
        Tensor::from_bytes(dtype, &shape, &bytes).map_err(D::Error::custom)
    }
}

/// Bytes serialized as one byte string rather than as a sequence of numbers.
struct ByteStr<'a>(&'a [u8]);

impl serde::Serialize for ByteStr<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_views_read_in_place_and_copy_on_write() {
        // A 64-aligned owner: the bytes of an owned tensor's blocks.
        let backing = Tensor::from_vec(&[32], (0..32).map(|i| i as f32).collect()).unwrap();
        struct Owner(Tensor);
        impl SharedBytes for Owner {
            fn bytes(&self) -> &[u8] {
                self.0.bytes()
            }
        }
        let owner: Arc<dyn SharedBytes> = Arc::new(Owner(backing));
        let v = Tensor::from_shared(DType::F32, &[2, 4], owner.clone(), 64).unwrap();
        assert!(v.is_shared_view());
        assert_eq!(v.as_slice::<f32>().unwrap()[..3], [16.0, 17.0, 18.0]);
        assert!((v.as_slice::<f32>().unwrap().as_ptr() as usize).is_multiple_of(64));
        let mut w = v.clone();
        w.as_mut_slice::<f32>().unwrap()[0] = -1.0;
        assert!(!w.is_shared_view());
        assert_eq!(w.as_slice::<f32>().unwrap()[..2], [-1.0, 17.0]);
        assert_eq!(v.as_slice::<f32>().unwrap()[0], 16.0);
        assert!(v.clone().into_storage().is_none());
        // Misaligned: a copy; past the end: an error.
        let c = Tensor::from_shared(DType::F32, &[2], owner.clone(), 4).unwrap();
        assert!(!c.is_shared_view());
        assert_eq!(c.as_slice::<f32>().unwrap(), &[1.0, 2.0]);
        assert!(Tensor::from_shared(DType::F32, &[30], owner.clone(), 64).is_err());
        assert!(Tensor::from_shared(DType::F32, &[1], owner, usize::MAX).is_err());
    }

    #[test]
    fn data_is_aligned_and_shared() {
        let t = Tensor::zeros(DType::F32, &[3, 5]).unwrap();
        let s = t.as_slice::<f32>().unwrap();
        assert_eq!(s.as_ptr() as usize % 64, 0);
        assert_eq!(s.len(), 15);
        let u = t.clone();
        assert!(u.shares_data_with(&t));
        let r = t.reshaped(&[15]).unwrap();
        assert!(r.shares_data_with(&t));
    }

    #[test]
    fn writing_a_shared_tensor_copies() {
        let a = Tensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
        let mut b = a.clone();
        b.as_mut_slice::<f32>().unwrap()[0] = 9.0;
        assert_eq!(a.as_slice::<f32>().unwrap(), &[1.0, 2.0]);
        assert_eq!(b.as_slice::<f32>().unwrap(), &[9.0, 2.0]);
    }

    #[test]
    fn wrong_sizes_and_dtypes_are_errors() {
        assert!(Tensor::from_vec(&[2, 2], vec![1i64, 2, 3]).is_err());
        assert!(Tensor::from_bytes(DType::F32, &[2], &[0u8; 7]).is_err());
        let t = Tensor::zeros(DType::I64, &[2]).unwrap();
        assert!(t.as_slice::<f32>().is_err());
        assert!(Tensor::zeros(DType::F32, &[usize::MAX, 2]).is_err());
        assert!(Tensor::zeros(DType::F32, &[1 << 31]).is_err());
    }

    #[test]
    fn strings_sequences_and_optionals_hold_values_not_bytes() {
        let s = Tensor::from_strings(&[2], vec!["a".into(), "bé".into()]).unwrap();
        assert_eq!(s.dtype(), DType::String);
        assert_eq!(s.strings().unwrap(), ["a", "bé"]);
        assert!(s.bytes().is_empty() && s.as_slice::<u8>().is_err() && s.cast(DType::F32).is_err());
        assert!(Tensor::from_strings(&[3], vec!["a".into()]).is_err());
        assert_eq!(
            Tensor::zeros(DType::String, &[2, 2])
                .unwrap()
                .strings()
                .unwrap(),
            ["", "", "", ""]
        );
        assert!(Tensor::from_bytes(DType::String, &[0], &[]).is_err());
        let seq = Tensor::from_sequence(vec![s.clone(), Tensor::scalar(1.0f32)]);
        assert_eq!(seq.sequence().unwrap().len(), 2);
        assert!(seq.strings().is_err());
        let some = Tensor::from_optional(Some(seq.clone()));
        assert_eq!(
            some.optional().unwrap().unwrap().sequence().unwrap().len(),
            2
        );
        assert!(Tensor::zeros(DType::Optional, &[])
            .unwrap()
            .optional()
            .unwrap()
            .is_none());
        // Byte access to them is empty, never a panic.
        let mut m = s.clone();
        assert!(m.bytes_mut().is_empty());
        assert!(m.as_mut_slice::<u8>().is_err());
        assert_eq!(m.strings().unwrap(), ["a", "bé"]);
        assert!(format!("{seq:?}").contains("bé"));
    }

    #[test]
    fn bools_are_normalised_and_cast() {
        let t = Tensor::from_bytes(DType::Bool, &[3], &[0, 7, 1]).unwrap();
        assert_eq!(t.as_slice::<u8>().unwrap(), &[0, 1, 1]);
        let f = Tensor::from_vec(&[4], vec![-1.7f32, 0.0, 2.9, f32::NAN]).unwrap();
        assert_eq!(f.cast(DType::I32).unwrap().to_i64_vec(), vec![-1, 0, 2, 0]);
        assert_eq!(f.cast(DType::Bool).unwrap().to_i64_vec(), vec![1, 0, 1, 1]);
        let big = Tensor::from_vec(&[1], vec![u64::MAX]).unwrap();
        assert_eq!(
            big.cast(DType::U32).unwrap().as_slice::<u32>().unwrap(),
            &[u32::MAX]
        );
    }
}
