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

    pub fn clear(&mut self) {
        self.len = 0;
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
                b.clear();
            }
        }
        assert_eq!(&LineBytes::from_slice(&v)[..], &v[..]);
    }
}
