//! GEMM throughput of the packed SGEMM on a few shapes: `cargo run --release -p ferrolite-cpu
//! --example gemm_bench [M,K,N ...]`. Prints the median GFLOP/s per shape (packed A,
//! row-major B), for a default list of conv-like shapes or the ones given.

use ferrolite_core::prepacked::Prepacks;
use ferrolite_core::scratch::{Scratch, ScratchNeed};
use ferrolite_cpu::gemm::{
    Epilogue, Gemm, MatMut, MatRef, Operand, Packing, PackingFor, Packs, Side,
};
use ferrolite_cpu::Sgemm;
use std::time::Instant;

fn main() {
    // FERROLITE_ISA picks the microkernel (default: the best this CPU has).
    let isa = ferrolite_cpu::Isa::select(None).unwrap_or_else(|e| panic!("{e}"));
    let g = Sgemm { isa };
    println!("isa {isa}");
    let shapes = [
        (96, 16, 12544),
        (32, 27, 12544),
        (64, 576, 3136),
        (128, 1152, 784),
        (256, 2304, 196),
        (512, 4608, 49),
        (1000, 512, 169),
        (64, 147, 12544),
        (256, 256, 256),
        (512, 512, 512),
    ];
    let args: Vec<(usize, usize, usize)> = std::env::args()
        .skip(1)
        .filter_map(|a| {
            let v: Vec<usize> = a.split(',').filter_map(|x| x.parse().ok()).collect();
            (v.len() == 3).then(|| (v[0], v[1], v[2]))
        })
        .collect();
    let shapes = if args.is_empty() {
        shapes.to_vec()
    } else {
        args
    };
    for (m, k, n) in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut c = vec![0.0f32; m * n];
        let pa = g
            .pack(
                m,
                k,
                MatRef {
                    data: &a,
                    rs: k,
                    cs: 1,
                },
                Side::A,
                Prepacks::none(),
            )
            .unwrap();
        // The packing buffers, allocated once as a plan's scratch is.
        let need = ScratchNeed {
            shared: PackingFor::new(m, k, n).a_packed(true).bytes(),
            per_thread: 0,
        };
        let scratch = Scratch::new(need, 1);
        let mut times = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            scratch
                .with_shared(|carve| {
                    let product = PackingFor::new(m, k, n).a_packed(true);
                    let packing = Packing::Serial(Packs::carve(carve, product)?);
                    g.gemm(
                        m,
                        k,
                        n,
                        1.0,
                        Operand::Packed(&pa),
                        Operand::Mat(MatRef {
                            data: &b,
                            rs: n,
                            cs: 1,
                        }),
                        false,
                        MatMut {
                            data: &mut c,
                            rs: n,
                            cs: 1,
                        },
                        &Epilogue::default(),
                        packing,
                    )
                })
                .unwrap();
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let med = times[times.len() / 2];
        let flops = 2.0 * (m * k * n) as f64;
        println!(
            "m {m:5} k {k:5} n {n:6}  median {:8.3} ms  {:6.1} GFLOP/s  (best {:6.1})",
            med * 1e3,
            flops / med / 1e9,
            flops / times[0] / 1e9
        );
    }
}
