//! Packed 8-bit operands on 64-byte lines.
//!
//! The VNNI and AMX kernels load packed operands a 64-byte line at a time. A `Vec<u8>` may start
//! anywhere on a line (a large one 16 bytes into its page), and then every such load spans two
//! cache lines; these bytes start on one.

use std::ops::{Deref, DerefMut};

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A growable byte buffer whose first byte starts a 64-byte line.
#[derive(Clone, Default)]
pub struct LineBytes {
    lines: Vec<Line>,
    len: usize,
}

impl LineBytes {
    pub fn from_slice(bytes: &[u8]) -> LineBytes {
        let mut b = LineBytes::default();
        b.resize_zeroed(bytes.len());
        b.copy_from_slice(bytes);
        b
    }

    /// `Vec::resize(n, 0)`: keeps the first bytes, and those past the old length are zero.
    pub fn resize_zeroed(&mut self, n: usize) {
        let old = self.len;
        let lines = n.div_ceil(64);
        if self.lines.len() < lines {
            self.lines.resize(lines, Line([0; 64]));
        }
        self.len = n;
        if n > old {
            self[old..n].fill(0);
        }
    }
}

impl Deref for LineBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl DerefMut for LineBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

impl std::fmt::Debug for LineBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LineBytes[{}]", self.len)
    }
}

/// Where a packing's values live: a buffer of its own (weights, packed once) or a region of
/// a plan's scratch (activations, packed every run; carved on a cache line).
pub enum Store<'s, T, Own> {
    Own(Own),
    Lent(&'s mut [T]),
}

/// A packing's bytes.
pub type Bytes<'s> = Store<'s, u8, LineBytes>;
/// A packing's 16-bit pairs.
pub type Pairs<'s> = Store<'s, i16, Vec<i16>>;

/// What [`Store`] needs of its own buffer.
pub trait OwnBuffer<T>: Deref<Target = [T]> + DerefMut + Default + Clone {
    /// Exactly `n` values; those past the old length are zero.
    fn grow_to(&mut self, n: usize);
    fn copied(values: &[T]) -> Self;
}

impl OwnBuffer<u8> for LineBytes {
    fn grow_to(&mut self, n: usize) {
        self.resize_zeroed(n)
    }
    fn copied(values: &[u8]) -> Self {
        LineBytes::from_slice(values)
    }
}

impl OwnBuffer<i16> for Vec<i16> {
    fn grow_to(&mut self, n: usize) {
        self.resize(n, 0)
    }
    fn copied(values: &[i16]) -> Self {
        values.to_vec()
    }
}

impl<T: Copy + Default, Own: OwnBuffer<T>> Store<'_, T, Own> {
    /// Exactly `n` values, whatever they held (callers write all they read). A lent region
    /// shorter than `n` is a kernel's bug: it declared too little scratch.
    pub fn set_len(&mut self, n: usize) -> ferrolite_core::OpResult<()> {
        match self {
            Store::Own(v) => v.grow_to(n),
            Store::Lent(s) => {
                ferrolite_core::op_ensure!(
                    n <= s.len(),
                    "scratch: a packing of {n} values in a region of {}",
                    s.len()
                );
                let whole = std::mem::take(s);
                *s = &mut whole[..n];
            }
        }
        Ok(())
    }

    /// Exactly `n` values, all zero.
    pub fn set_len_zeroed(&mut self, n: usize) -> ferrolite_core::OpResult<()> {
        self.set_len(n)?;
        self.fill(T::default());
        Ok(())
    }
}

impl<T, Own: Deref<Target = [T]>> Deref for Store<'_, T, Own> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Store::Own(v) => v,
            Store::Lent(s) => s,
        }
    }
}

impl<T, Own: Deref<Target = [T]> + DerefMut> DerefMut for Store<'_, T, Own> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Store::Own(v) => v,
            Store::Lent(s) => s,
        }
    }
}

impl<T: Copy + Default, Own: OwnBuffer<T>> Clone for Store<'_, T, Own> {
    /// A copy of its own, lent or not.
    fn clone(&self) -> Self {
        match self {
            Store::Own(v) => Store::Own(v.clone()),
            Store::Lent(s) => Store::Own(Own::copied(s)),
        }
    }
}

impl<T, Own: Deref<Target = [T]>> std::fmt::Debug for Store<'_, T, Own> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Store::Own(_) => "own",
            Store::Lent(_) => "lent",
        };
        write!(f, "Store[{kind}, {}]", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resizes_like_a_vec_and_starts_on_a_line() {
        let mut v: Vec<u8> = Vec::new();
        let mut b = LineBytes::default();
        for (n, fill) in [(10, 1u8), (200, 2), (70, 3), (0, 4), (129, 5), (129, 6)] {
            v.resize(n, 0);
            b.resize_zeroed(n);
            assert_eq!(&b[..], &v[..], "resize to {n}");
            v.iter_mut().step_by(3).for_each(|x| *x = fill);
            b.iter_mut().step_by(3).for_each(|x| *x = fill);
            assert_eq!(b.as_ptr() as usize % 64, 0);
            if n == 70 {
                v.clear();
                b.resize_zeroed(0);
            }
        }
        assert_eq!(&LineBytes::from_slice(&v)[..], &v[..]);
    }

    #[test]
    fn lent_stores_take_their_length_from_the_region() {
        let mut region = [7i16; 10];
        let mut p: Pairs = Store::Lent(&mut region);
        p.set_len(4).unwrap();
        assert_eq!(&p[..], &[7; 4]);
        p.set_len_zeroed(3).unwrap();
        assert_eq!(&p[..], &[0; 3]);
        // Past the region: the kernel declared too little scratch.
        assert!(p.set_len(5).unwrap_err().to_string().contains("scratch"));
        // A clone owns its copy.
        assert!(matches!(p.clone(), Store::Own(v) if v == [0; 3]));
        let mut own: Bytes = Store::Own(LineBytes::default());
        own.set_len(70).unwrap();
        assert_eq!(own.len(), 70);
    }
}
