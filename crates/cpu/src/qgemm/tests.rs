//! The integer GEMM against a naive i64 product, on every path this CPU has.

use super::*;

/// A small deterministic generator.
struct Lcg(u64);

impl Lcg {
    fn byte(&mut self) -> u8 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u8
    }
}

/// Bytes with the extremes (0, 255, 0x80, 0x7f) well represented.
fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut g = Lcg(seed);
    (0..n)
        .map(|_| match g.byte() % 8 {
            0 => 0,
            1 => 255,
            2 => 0x80,
            3 => 0x7f,
            _ => g.byte(),
        })
        .collect()
}

fn val(b: u8, signed: bool) -> i64 {
    if signed {
        b as i8 as i64
    } else {
        b as i64
    }
}

/// Naive `sum_k (R[m,k] - zr[m]) (P[k,n] - zp[n]) + bias[m]`, with R `[m][k]` and P `[k][n]`
/// row-major.
#[allow(clippy::too_many_arguments)]
fn naive(
    r: &[u8],
    p: &[u8],
    m: usize,
    n: usize,
    k: usize,
    rows_signed: bool,
    zr: &[i32],
    zp: &[i32],
    bias: &[i32],
) -> Vec<i64> {
    let mut out = vec![0i64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = bias[i] as i64;
            for kk in 0..k {
                s += (val(r[i * k + kk], rows_signed) - zr[i] as i64)
                    * (val(p[kk * n + j], !rows_signed) - zp[j] as i64);
            }
            out[i * n + j] = s;
        }
    }
    out
}

fn shapes() -> Vec<(usize, usize, usize)> {
    let mut v = vec![
        (1, 1, 1),
        (3, 5, 7),
        (8, 32, 4),
        (9, 33, 5),
        (17, 70, 147),
        (64, 49, 576),
    ];
    v.extend([
        (6, 16, 2),
        (7, 17, 3),
        (2, 100, 64),
        (130, 3, 31),
        (5, 5, 1000),
    ]);
    v
}

#[test]
fn i32_products_match_naive_on_every_path() {
    for path in QPath::available() {
        for (si, &(m, n, k)) in shapes().iter().enumerate() {
            for rows_signed in [true, false] {
                let r = bytes(m * k, 1 + si as u64);
                let p = bytes(k * n, 100 + si as u64);
                // Zero points at the extremes of each side's type, per row and per column.
                let (lo_r, hi_r) = if rows_signed { (-128, 127) } else { (0, 255) };
                let (lo_p, hi_p) = if rows_signed { (0, 255) } else { (-128, 127) };
                let zr: Vec<i32> = (0..m).map(|i| [lo_r, hi_r, 0, 3][i % 4]).collect();
                let zp: Vec<i32> = (0..n).map(|j| [hi_p, lo_p, 1, 0][j % 4]).collect();
                let bias: Vec<i32> = (0..m).map(|i| i as i32 * 1000 - 7000).collect();
                let rows = Packed::new(
                    path,
                    Side::Rows,
                    k,
                    m,
                    Source {
                        data: &r,
                        rs: k,
                        cs: 1,
                        flip: 0,
                        signed: rows_signed,
                    },
                )
                .unwrap();
                let panels = Packed::new(
                    path,
                    Side::Panels,
                    k,
                    n,
                    Source {
                        data: &p,
                        rs: 1,
                        cs: n,
                        flip: 0,
                        signed: !rows_signed,
                    },
                )
                .unwrap();
                let want = naive(&r, &p, m, n, k, rows_signed, &zr, &zp, &bias);
                for parallel in [false, true] {
                    let mut got = vec![0i32; m * n];
                    Product {
                        rows: &rows,
                        panels: &panels,
                        rows_zero: Axis::Rows(&zr),
                        panels_zero: Axis::Cols(&zp),
                        bias: Some(Axis::Rows(&bias)),
                        ldc: n,
                    }
                    .run(&mut Out::I32(&mut got), parallel)
                    .unwrap();
                    let got: Vec<i64> = got.iter().map(|&v| v as i64).collect();
                    assert_eq!(got, want, "{path:?} {m}x{n}x{k} rows_signed {rows_signed}");
                }
            }
        }
    }
}

/// The flip turns s8 data into u8 with the zero point flipped too, leaving the product as is.
#[test]
fn flipped_operands_give_the_same_product() {
    for path in QPath::available() {
        let (m, n, k) = (5, 19, 37);
        let w = bytes(m * k, 7);
        let x = bytes(k * n, 8);
        let xz: i32 = -3; // as s8
                          // Reference with x read as s8, zero point -3.
        let mut want = vec![0i64; m * n];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (0..k)
                    .map(|kk| val(w[i * k + kk], true) * (val(x[kk * n + j], true) - xz as i64))
                    .sum();
            }
        }
        let rows = Packed::new(
            path,
            Side::Rows,
            k,
            m,
            Source {
                data: &w,
                rs: k,
                cs: 1,
                flip: 0,
                signed: true,
            },
        )
        .unwrap();
        let panels = Packed::new(
            path,
            Side::Panels,
            k,
            n,
            Source {
                data: &x,
                rs: 1,
                cs: n,
                flip: 0x80,
                signed: false,
            },
        )
        .unwrap();
        let mut got = vec![0i32; m * n];
        Product {
            rows: &rows,
            panels: &panels,
            rows_zero: Axis::All(0),
            panels_zero: Axis::All(xz + 128),
            bias: None,
            ldc: n,
        }
        .run(&mut Out::I32(&mut got), false)
        .unwrap();
        let got: Vec<i64> = got.iter().map(|&v| v as i64).collect();
        assert_eq!(got, want, "{path:?}");
    }
}

/// Requantization to u8 and s8 (per-row scales, clamps, ties to even) and the f32 output
/// against the naive product.
#[test]
fn requantized_and_float_outputs_match_naive() {
    for path in QPath::available() {
        let (m, n, k) = (13, 41, 75);
        let w = bytes(m * k, 21);
        let x = bytes(k * n, 22);
        let zx = 131;
        let want = naive(&w, &x, m, n, k, true, &[0; 13], &[zx; 41], &[5; 13]);
        let rows = Packed::new(
            path,
            Side::Rows,
            k,
            m,
            Source {
                data: &w,
                rs: k,
                cs: 1,
                flip: 0,
                signed: true,
            },
        )
        .unwrap();
        let panels = Packed::new(
            path,
            Side::Panels,
            k,
            n,
            Source {
                data: &x,
                rs: 1,
                cs: n,
                flip: 0,
                signed: false,
            },
        )
        .unwrap();
        let scale: Vec<f32> = (0..m).map(|i| 0.0005 * (i + 1) as f32).collect();
        let bias = [5i32; 13];
        let product = Product {
            rows: &rows,
            panels: &panels,
            rows_zero: Axis::All(0),
            panels_zero: Axis::All(zx),
            bias: Some(Axis::Rows(&bias)),
            ldc: n,
        };
        for (signed, zero, lo, hi) in [
            (false, 128, 0, 255),
            (true, -5, -128, 127),
            (true, 0, 0, 127),
        ] {
            let mut got = vec![0u8; m * n];
            product
                .run(
                    &mut Out::Quantized {
                        data: &mut got,
                        signed,
                        scale: Axis::Rows(&scale),
                        zero_point: zero,
                        lo,
                        hi,
                    },
                    true,
                )
                .unwrap();
            for (i, (&g, &a)) in got.iter().zip(&want).enumerate() {
                let v = a as f32 * scale[i / n];
                let q = (v.round_ties_even() as i32 + zero).clamp(lo, hi);
                let g = if signed { g as i8 as i32 } else { g as i32 };
                assert_eq!(g, q, "{path:?} element {i}: {a} * {}", scale[i / n]);
            }
        }
        let mut got = vec![0f32; m * n];
        let fb: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
        product
            .run(
                &mut Out::F32 {
                    data: &mut got,
                    scale: Axis::Rows(&scale),
                    bias: Some(Axis::Cols(&fb)),
                },
                false,
            )
            .unwrap();
        for (i, (&g, &a)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, a as f32 * scale[i / n] + fb[i % n], "{path:?} {i}");
        }
    }
}

#[test]
fn requantize_rounds_half_to_even_and_saturates() {
    let v = [0.5f32, 1.5, 2.5, -0.5, -1.5, 1e9, -1e9, 126.5];
    let mut out = [0u8; 8];
    requantize(&v, 0, -128, 127, true, &mut out);
    let got: Vec<i8> = out.iter().map(|&b| b as i8).collect();
    assert_eq!(got, [0, 2, 2, 0, -2, 127, -128, 126]);
    requantize(&v, 10, 0, 255, false, &mut out);
    assert_eq!(out, [10, 12, 12, 10, 8, 255, 0, 136]);
}

#[test]
fn mismatched_operands_are_errors() {
    let path = QPath::Portable;
    let src = Source {
        data: &[1, 2, 3, 4],
        rs: 2,
        cs: 1,
        flip: 0,
        signed: true,
    };
    assert!(
        Packed::new(path, Side::Rows, 2, 3, src).is_err(),
        "reads past the data"
    );
    assert!(Packed::new(path, Side::Rows, MAX_K + 1, 0, src).is_err());
    let a = Packed::new(path, Side::Rows, 2, 2, src).unwrap();
    let b = Packed::new(path, Side::Panels, 2, 2, src).unwrap();
    let mut out = vec![0i32; 4];
    let product = Product {
        rows: &a,
        panels: &b,
        rows_zero: Axis::All(0),
        panels_zero: Axis::All(0),
        bias: None,
        ldc: 2,
    };
    assert!(
        product.run(&mut Out::I32(&mut out), false).is_err(),
        "both signed"
    );
}

/// The GEMM tests above cover every path the CPU has: list them, and check the list follows
/// the CPU's features.
#[test]
fn available_paths_follow_the_cpu() {
    let paths = QPath::available();
    eprintln!("integer GEMM paths tested: {paths:?}");
    assert_eq!(paths[0], QPath::Portable);
    #[cfg(target_arch = "x86_64")]
    {
        let has = |f: &str| match f {
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "avxvnni" => std::arch::is_x86_feature_detected!("avxvnni"),
            _ => std::arch::is_x86_feature_detected!("avx512vnni"),
        };
        assert_eq!(
            paths.contains(&QPath::Avx2),
            has("avx2") && Isa::available().len() > 1
        );
        assert_eq!(
            paths.contains(&QPath::AvxVnni),
            paths.contains(&QPath::Avx2) && has("avxvnni")
        );
        let avx512 = Isa::available().contains(&Isa::Avx512);
        assert_eq!(
            paths.contains(&QPath::Avx512Vnni),
            avx512 && has("avx512vnni")
        );
        // AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), where Linux lets the
        // process use them.
        let amx = std::arch::x86_64::__cpuid_count(7, 0).edx & (3 << 24) == 3 << 24;
        assert_eq!(
            paths.contains(&QPath::Amx),
            avx512 && has("avx512vnni") && amx && x86::amx_ready()
        );
    }
    // Every aarch64 CPU has NEON; SDOT where it has the dot product (qemu's `-cpu max` does,
    // `-cpu cortex-a72` does not).
    #[cfg(target_arch = "aarch64")]
    {
        assert!(paths.contains(&QPath::Neon));
        assert_eq!(
            paths.contains(&QPath::NeonDot),
            std::arch::is_aarch64_feature_detected!("dotprod")
        );
    }
}

/// MatMulIntegerToFloat's layout: unsigned activations as the rows (one zero point), signed
/// weights as the panels (zero points of 0, as stored or per column, else one that is not),
/// i32 bias per column, float scale and bias per column or for all. The AVX-512 VNNI path
/// finishes these in the tile's registers; every path gives the epilogue's f32 values exactly.
#[test]
fn float_outputs_per_column_match_naive() {
    for path in QPath::available() {
        for (si, &(m, n, k)) in shapes().iter().enumerate() {
            let a = bytes(m * k, 40 + si as u64);
            let b = bytes(k * n, 60 + si as u64);
            let pack = |side, data: &[u8], len, rs, cs, signed| {
                let src = Source {
                    data,
                    rs,
                    cs,
                    flip: 0,
                    signed,
                };
                Packed::new(path, side, k, len, src).unwrap()
            };
            let rows = pack(Side::Rows, &a, m, k, 1, false);
            let panels = pack(Side::Panels, &b, n, 1, n, true);
            let ibias: Vec<i32> = (0..n).map(|j| j as i32 * 7 - 50).collect();
            let scale: Vec<f32> = (0..n).map(|j| 0.001 * (j % 13 + 1) as f32).collect();
            let fbias: Vec<f32> = (0..n).map(|j| j as f32 * 0.125 - 1.0).collect();
            let zeros = vec![0i32; n];
            let ones = vec![1i32; n];
            for (za, panels_zero) in [
                (131, Axis::All(0)),
                (0, Axis::Cols(&zeros[..])),
                (77, Axis::Cols(&zeros[..])),
                (77, Axis::Cols(&ones[..])),
            ] {
                let zp: Vec<i32> = (0..n).map(|j| panels_zero.at(0, j)).collect();
                let want = naive(&a, &b, m, n, k, false, &vec![za; m], &zp, &vec![0; m]);
                let product = Product {
                    rows: &rows,
                    panels: &panels,
                    rows_zero: Axis::All(za),
                    panels_zero,
                    bias: Some(Axis::Cols(&ibias)),
                    ldc: n,
                };
                for (scale, bias) in [
                    (Axis::Cols(&scale[..]), Some(Axis::Cols(&fbias[..]))),
                    (Axis::All(0.003), None),
                    (Axis::Cols(&scale[..]), Some(Axis::All(0.5))),
                ] {
                    let mut got = vec![f32::NAN; m * n];
                    let mut out = Out::F32 {
                        data: &mut got,
                        scale,
                        bias,
                    };
                    product.run(&mut out, true).unwrap();
                    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                        let j = i % n;
                        let mut v = (w as i32 + ibias[j]) as f32 * scale.at(0, j);
                        if let Some(b) = bias {
                            v += b.at(0, j);
                        }
                        assert_eq!(g, v, "{path:?} {m}x{n}x{k} za {za} element {i}");
                    }
                }
            }
        }
    }
}
