//! The int8 GEMM on AMX-INT8: `tdpbusd` on 16 x 64-byte tiles (32x32 outputs per call), where
//! the CPU and the OS allow them; its output goes through memory and the AVX-512 column
//! requantization.

use super::avx512::{ColumnQuantized, Columns};
use std::arch::x86_64::*;

/// Rows per block and columns per panel of the AMX path: a 2x2 grid of 16x16 i32 tiles.
pub const AMX_MR: usize = 32;

pub const AMX_NR: usize = 32;

/// Bytes of `k` per AMX step (one 16 x 64-byte tile of each operand).
pub const AMX_K_STEP: usize = 64;

/// Whether the AMX tiles may run: the CPU has AMX-TILE and AMX-INT8, Linux granted this
/// process the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, needed once per process
/// before any thread touches a tile), and `FERROLITE_AMX` is not `0`. Decided once.
pub fn amx_ready() -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READY.get_or_init(|| {
        if std::env::var("FERROLITE_AMX").is_ok_and(|v| v.trim() == "0") {
            return false;
        }
        // CPUID leaf 7: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8.
        let edx = __cpuid_count(7, 0).edx;
        if edx & (3 << 24) != 3 << 24 {
            return false;
        }
        amx_permission()
    })
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn amx_permission() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it only changes which register
    // state this process may use.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn amx_permission() -> bool {
    false
}

/// The tile configuration (palette 1): tmm0-3 the four 16x16 i32 accumulators, tmm4-5 the
/// rows' two 16 x 64-byte halves, tmm6-7 the panel's.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// The configuration the tile kernels use.
    fn ours() -> TileConfig {
        let mut cfg = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        for t in 0..8 {
            cfg.colsb[t] = 64;
            cfg.rows[t] = 16;
        }
        cfg
    }
}

/// Loads the AMX tile configuration on this thread.
///
/// # Safety
/// [`amx_ready`] returned true.
unsafe fn amx_configure() {
    let cfg = TileConfig::ours();
    // SAFETY: the config is a valid palette-1 layout of 64 bytes; AMX is enabled for this
    // process (the caller's contract).
    unsafe {
        std::arch::asm!("ldtilecfg [{}]", in(reg) &cfg as *const TileConfig, options(nostack, readonly));
    }
}

/// This thread's current tile configuration (all zeros where none is loaded).
///
/// # Safety
/// [`amx_ready`] returned true.
unsafe fn amx_current() -> TileConfig {
    let mut cfg = TileConfig {
        palette: 0,
        start_row: 0,
        reserved: [0; 14],
        colsb: [0; 16],
        rows: [0; 16],
    };
    // SAFETY: `sttilecfg` writes the 64-byte configuration into `cfg`, which is 64 bytes;
    // AMX is enabled for this process (the caller's contract).
    unsafe {
        std::arch::asm!("sttilecfg [{}]", in(reg) &mut cfg as *mut TileConfig, options(nostack));
    }
    cfg
}

/// AMX tile: `rows` is 32 rows of `4 kq` bytes each (row-major, `k` zero-padded), `panel`
/// `[kq][32][4]` bytes, `kq` a multiple of 16; `tile` gets the 32x32 i32 products, row
/// stride 32. Unsigned rows times signed panel (`tdpbusd`), or signed times unsigned
/// (`tdpbsud`) when `rows_signed`.
///
/// # Safety
/// The thread's tiles are configured ([`amx_tiles_ready`]).
pub unsafe fn tile_amx(rows: &[u8], panel: &[u8], kq: usize, rows_signed: bool, tile: &mut [i32]) {
    assert!(kq.is_multiple_of(16));
    assert!(rows.len() >= AMX_MR * kq * 4 && panel.len() >= kq * AMX_NR * 4);
    assert!(tile.len() >= AMX_MR * AMX_NR);
    let row_stride = kq * 4;
    let panel_stride = AMX_NR * 4;
    let (r, p, t) = (rows.as_ptr(), panel.as_ptr(), tile.as_mut_ptr());
    // SAFETY: every tile load reads 16 lines of 64 bytes: rows `16 h..16 h + 16` at byte
    // `64 s` of their `4 kq` (inside `rows`, asserted), and quads `16 s..16 s + 16` of the
    // panel at lane `16 h` (inside `panel`); the stores write 16 lines of 16 i32 inside
    // `tile` (asserted). The tiles are configured (the caller's contract).
    unsafe {
        std::arch::asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        );
        for s in 0..kq / 16 {
            let rs = r.add(s * AMX_K_STEP);
            let ps = p.add(s * 16 * panel_stride);
            std::arch::asm!(
                "tileloadd tmm4, [{r0} + {rst}*1]",
                "tileloadd tmm5, [{r1} + {rst}*1]",
                "tileloadd tmm6, [{p0} + {pst}*1]",
                "tileloadd tmm7, [{p1} + {pst}*1]",
                r0 = in(reg) rs,
                r1 = in(reg) rs.add(16 * row_stride),
                p0 = in(reg) ps,
                p1 = in(reg) ps.add(64),
                rst = in(reg) row_stride,
                pst = in(reg) panel_stride,
                options(nostack, readonly)
            );
            if rows_signed {
                std::arch::asm!(
                    "tdpbsud tmm0, tmm4, tmm6",
                    "tdpbsud tmm1, tmm4, tmm7",
                    "tdpbsud tmm2, tmm5, tmm6",
                    "tdpbsud tmm3, tmm5, tmm7",
                    options(nostack, nomem)
                );
            } else {
                std::arch::asm!(
                    "tdpbusd tmm0, tmm4, tmm6",
                    "tdpbusd tmm1, tmm4, tmm7",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tdpbusd tmm3, tmm5, tmm7",
                    options(nostack, nomem)
                );
            }
        }
        let stride = AMX_NR * 4;
        std::arch::asm!(
            "tilestored [{t0} + {st}*1], tmm0",
            "tilestored [{t1} + {st}*1], tmm1",
            "tilestored [{t2} + {st}*1], tmm2",
            "tilestored [{t3} + {st}*1], tmm3",
            t0 = in(reg) t,
            t1 = in(reg) t.add(16),
            t2 = in(reg) t.add(16 * AMX_NR),
            t3 = in(reg) t.add(16 * AMX_NR + 16),
            st = in(reg) stride,
            options(nostack)
        );
    }
}

/// Configures this thread's AMX tiles for [`tile_amx`] unless they already are, and says
/// whether they are ready. The configuration stays for the thread's life: loading and
/// releasing it per task cost more than resnet18's stem convolution itself (hundreds of
/// small tasks). The CPU holds it per thread, so reading it back (`sttilecfg`) tells whether
/// this thread has it, with no bookkeeping of ours.
pub fn amx_tiles_ready() -> bool {
    if !amx_ready() {
        return false;
    }
    // SAFETY: AMX is ready (checked).
    unsafe {
        if amx_current() != TileConfig::ours() {
            amx_configure();
        }
    }
    true
}

/// Requantizes an AMX tile read back from memory (`tile`, 32 x 32 i32, row stride 32) per
/// column: `(acc + add[j]) as f32 * scale[j]`, narrowed, to `q.dst + i * q.ldc + j` for the
/// first `q.rows` rows and `q.cols` columns.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL; `q.dst + i * q.ldc` is valid for `q.cols` bytes for every
/// `i < q.rows`, and no other thread writes them meanwhile.
pub unsafe fn quantize_columns(tile: &[i32], q: &ColumnQuantized) {
    assert!(q.rows <= AMX_MR && q.cols <= AMX_NR && tile.len() >= AMX_MR * AMX_NR);
    // SAFETY: the tile holds 32 rows of 32 (asserted); the output as the caller vouches.
    unsafe { quantize_columns_impl(tile.as_ptr(), q) }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn quantize_columns_impl(tile: *const i32, q: &ColumnQuantized) {
    let columns = Columns::<2>::new(q);
    for r in 0..q.rows {
        let acc =
            [0, 1].map(|h| _mm512_loadu_si512(tile.add(r * AMX_NR + 16 * h) as *const __m512i));
        columns.store(q, r, &acc);
    }
}
