//! Tiny-M products (`m <= GEMV_MAX_M`, e.g. classifier heads with one row): instead of
//! padding A to the microkernel's [`MR`] rows and packing B, stream B once in strips of
//! [`NR`] columns (a prepacked panel, or row-major B read in place), accumulating the few
//! rows of C in registers, and store each strip through the usual epilogue.

use super::{store_scalar, Problem, SendPtr, Src, KC, MR, NR};
use crate::split::{self, Cost};

/// Largest `m` taken by the streaming path.
pub(crate) const GEMV_MAX_M: usize = 4;

/// Accumulator rows of one strip (only the first `m` are used).
type Acc = [[f32; NR]; MR];

/// The portable strip kernel: `acc[i][j] += sum_p a[i * lda + p] * b[p * bs + j]`.
///
/// # Safety
/// `b` must be valid for reads of `kc` rows of `NR` values with stride `bs`.
pub(super) unsafe fn strip_portable(
    kc: usize,
    a: *const f32,
    lda: usize,
    m: usize,
    b: *const f32,
    bs: usize,
    acc: &mut Acc,
) {
    if m == 0 || kc == 0 {
        return;
    }
    // SAFETY: a holds m rows of kc values with stride lda (the caller vouches).
    let a = unsafe { std::slice::from_raw_parts(a, (m - 1) * lda + kc) };
    for p in 0..kc {
        // SAFETY: row p of the strip, as the caller vouches.
        let row: &[f32; NR] = unsafe { &*(b.add(p * bs) as *const [f32; NR]) };
        for (i, acc) in acc.iter_mut().enumerate().take(m) {
            let av = a[i * lda + p];
            for (x, &bv) in acc.iter_mut().zip(row) {
                *x += av * bv;
            }
        }
    }
}

impl Problem<'_> {
    /// Whether [`Problem::run_gemv`] handles this problem.
    pub(crate) fn gemv_applies(&self) -> bool {
        self.m <= GEMV_MAX_M
            && self.k > 0
            && matches!(self.b, Src::Packed(_) | Src::Strided { cs: 1, .. })
    }

    /// A as a dense `m x k` row-major matrix.
    fn dense_a(&self) -> Vec<f32> {
        let (m, k) = (self.m, self.k);
        let mut out = vec![0.0f32; m * k];
        match self.a {
            Src::Strided { data, rs, cs } => {
                for i in 0..m {
                    for p in 0..k {
                        out[i * k + p] = data[i * rs + p * cs];
                    }
                }
            }
            Src::Packed(d) => {
                // One panel of MR rows per KC block (m <= MR).
                for pc in (0..k).step_by(KC) {
                    let kc = KC.min(k - pc);
                    for p in 0..kc {
                        for i in 0..m {
                            out[i * k + pc + p] = d[pc * MR + p * MR + i];
                        }
                    }
                }
            }
        }
        out
    }

    /// Computes strips `s0..s1` (columns `s0 * NR..`) of C, KC block by KC block so a
    /// prepacked B is read in memory order.
    ///
    /// # Safety
    /// As [`Problem::run_block`] for the strips' columns.
    unsafe fn gemv_strips(&self, a: &[f32], s0: usize, s1: usize, c: *mut f32, rsc: usize) {
        let (m, k, n) = (self.m, self.k, self.n);
        let np = n.div_ceil(NR);
        let mut accs: Vec<Acc> = vec![[[0.0; NR]; MR]; s1 - s0];
        let mut tail = Vec::new();
        let strip = self.isa.table().sgemm.gemv_strip;
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            let a = &a[pc..];
            for (s, acc) in (s0..s1).zip(accs.iter_mut()) {
                let j0 = s * NR;
                let nr = NR.min(n - j0);
                let (b, bs): (&[f32], usize) = match self.b {
                    Src::Packed(d) => (&d[pc * np * NR + s * kc * NR..][..kc * NR], NR),
                    Src::Strided { data, rs, .. } if nr == NR => {
                        (&data[pc * rs + j0..][..(kc - 1) * rs + NR], rs)
                    }
                    Src::Strided { data, rs, .. } => {
                        // A partial last strip: pad its rows to NR columns.
                        tail.clear();
                        tail.resize(kc * NR, 0.0);
                        for p in 0..kc {
                            let row = &data[(pc + p) * rs + j0..][..nr];
                            tail[p * NR..p * NR + nr].copy_from_slice(row);
                        }
                        (&tail[..], NR)
                    }
                };
                // SAFETY: the ISA's loop runs on a CPU with its features (`Isa::table`); b
                // holds kc rows of NR values with stride bs (sliced above); a holds m rows of
                // at least kc values with stride k.
                unsafe { strip(kc, a.as_ptr(), k, m, b.as_ptr(), bs, acc) }
            }
        }
        for (s, acc) in (s0..s1).zip(&accs) {
            let j0 = s * NR;
            let e = self.epi(0, j0, true, true);
            // SAFETY: the strip's m x nr tile lies in C as the caller vouches.
            unsafe { store_scalar(acc, c.add(j0), rsc, m, NR.min(n - j0), &e) };
        }
    }

    /// Computes all of C by streaming B (see the module doc); strips split over rayon tasks
    /// when `parallel` and B is large.
    ///
    /// # Safety
    /// As [`Problem::run`]; [`Problem::gemv_applies`] must hold.
    pub(crate) unsafe fn run_gemv(&self, c: *mut f32, rsc: usize, parallel: bool) {
        let a = self.dense_a();
        let strips = self.n.div_ceil(NR);
        let threads = if parallel { split::threads() } else { 1 };
        // Bound by streaming B once.
        let cost = Cost::bytes(self.n * self.k * size_of::<f32>());
        let tasks = split::cut(strips, 1, split::workers(cost, threads), 1);
        if !tasks.parallel() {
            // SAFETY: forwarded from the caller.
            unsafe { self.gemv_strips(&a, 0, strips, c, rsc) };
            return;
        }
        let cp = SendPtr(c);
        split::for_each_task(tasks.count, true, |t| {
            let r = tasks.range(t, strips);
            // SAFETY: tasks write disjoint column strips of the caller's C.
            unsafe { self.gemv_strips(&a, r.start, r.end, cp.get(), rsc) };
        });
    }
}
