//! GEMM throughput: `linear` with f32/f16/bf16/q8_0 weights at the Kimodo shapes (M = 202)
//! and 1024^3, `batched_matmul` at attention shapes, and the register-only FMA peak loop,
//! for every ISA this CPU runs, on 2 threads and 1. Throughput is FLOPs (2 m n k), so
//! criterion prints GFLOP/s ("Gelem/s"). Compare with `tools/sgemm_numpy.py` run right after.
//!
//! Filter with criterion's regex, e.g. `cargo bench --bench gemm -- 'linear_f32/avx2'`.
//!
//! The `cpu_time/...` groups (Linux) time the f32 GEMM and the FMA loop in CPU seconds of
//! this process's threads instead of wall-clock: on a shared machine FLOPs per CPU-second
//! show the kernel's efficiency apart from time lost to other processes (compare with
//! `gflops_per_cpu_s` of `tools/sgemm_numpy.py`).

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use half::{bf16, f16};
use kinema::Precision;
use kinema::cpu::matmul::{batched_matmul, linear};
use kinema::cpu::{Cx, Isa, ThreadPool, Weights, peak};
use kinema::ops::{Activation, BatchedMatmulParams, LinearParams};
use kinema::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES, q8_0_quantize_block};

/// (M, N, K): Kimodo's projections at 202 tokens, then the square reference size.
const KIMODO: [(usize, usize, usize); 4] = [
    (202, 3072, 1024),
    (202, 1024, 1024),
    (202, 2048, 1024),
    (202, 1024, 2048),
];
const SQUARE: (usize, usize, usize) = (1024, 1024, 1024);
const THREADS: [usize; 2] = [2, 1];

fn settings<M: Measurement>(g: &mut BenchmarkGroup<M>) {
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
}

/// Deterministic values in [-1, 1).
fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

enum Stored {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    Q8(Vec<u8>),
}

impl Stored {
    fn weights(&self) -> Weights<'_> {
        match self {
            Stored::F32(w) => Weights::F32(w),
            Stored::F16(w) => Weights::F16(w),
            Stored::Bf16(w) => Weights::BF16(w),
            Stored::Q8(w) => Weights::Q8_0(w),
        }
    }
}

fn stored(dtype: &str, v: &[f32]) -> Stored {
    match dtype {
        "f32" => Stored::F32(v.to_vec()),
        "f16" => Stored::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        "bf16" => Stored::Bf16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
        _ => {
            let mut q = vec![0u8; v.len() / Q8_0_BLOCK * Q8_0_BLOCK_BYTES];
            for (s, d) in v.chunks(Q8_0_BLOCK).zip(q.chunks_mut(Q8_0_BLOCK_BYTES)) {
                q8_0_quantize_block(s, d);
            }
            Stored::Q8(q)
        }
    }
}

fn bench_linear(
    c: &mut Criterion,
    isa: Isa,
    dtype: &str,
    precision: Precision,
    shapes: &[(usize, usize, usize)],
) {
    let suffix = if dtype == "bf16" {
        format!("/{}", precision.name())
    } else {
        String::new()
    };
    let mut g = c.benchmark_group(format!("linear_{dtype}/{}{suffix} (GFLOP/s)", isa.name()));
    settings(&mut g);
    for threads in THREADS {
        let pool = ThreadPool::new(threads);
        let cx = Cx {
            isa,
            pool: &pool,
            precision,
        };
        for &(m, n, k) in shapes {
            let x = data(m * k, 1);
            let w = stored(dtype, &data(n * k, 2));
            let bias = data(n, 3);
            let mut y = vec![0f32; m * n];
            let p = LinearParams {
                m,
                n,
                k,
                activation: Activation::None,
            };
            g.throughput(Throughput::Elements((2 * m * n * k) as u64));
            g.bench_function(format!("{m}x{n}x{k}/t{threads}"), |b| {
                b.iter(|| linear(&cx, &p, black_box(&x), w.weights(), Some(&bias), &mut y))
            });
        }
    }
    g.finish();
}

fn bench_attention(c: &mut Criterion, isa: Isa) {
    let mut g = c.benchmark_group(format!("batched_matmul/{} (GFLOP/s)", isa.name()));
    settings(&mut g);
    // Per head: scores = q k^T (202 x 128 . (202 x 128)^T), then out = p v (202 x 202 . 202 x 128).
    let shapes = [("qk_t", 202, 202, 128, true), ("pv", 202, 128, 202, false)];
    for threads in THREADS {
        let pool = ThreadPool::new(threads);
        let cx = Cx {
            isa,
            pool: &pool,
            precision: Precision::Strict,
        };
        for (name, m, n, k, trans_b) in shapes {
            let batch = 8;
            let p = BatchedMatmulParams {
                batch,
                m,
                n,
                k,
                trans_b,
                alpha: 0.088,
                a_batch_stride: m * k,
                b_batch_stride: n * k,
            };
            let a = data(batch * m * k, 4);
            let b = data(batch * n * k, 5);
            let mut out = vec![0f32; batch * m * n];
            g.throughput(Throughput::Elements((2 * batch * m * n * k) as u64));
            g.bench_function(format!("{name}_8x{m}x{n}x{k}/t{threads}"), |bch| {
                bch.iter(|| batched_matmul(&cx, &p, black_box(&a), black_box(&b), &mut out))
            });
        }
    }
    g.finish();
}

fn bench_peak(c: &mut Criterion, isa: Isa) {
    let mut g = c.benchmark_group(format!("fma_peak/{} (GFLOP/s)", isa.name()));
    settings(&mut g);
    // ~5 ms of FMAs per iteration, so spawning the threads is noise.
    let iters = 1 << 20;
    for threads in THREADS {
        g.throughput(Throughput::Elements(
            peak::fma_loop(isa, threads, 1) * iters,
        ));
        g.bench_function(format!("t{threads}"), |b| {
            b.iter(|| peak::fma_loop(isa, threads, black_box(iters)))
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    for isa in Isa::available() {
        bench_peak(c, isa);
        let mut f32_shapes = KIMODO.to_vec();
        f32_shapes.push(SQUARE);
        bench_linear(c, isa, "f32", Precision::Strict, &f32_shapes);
        bench_linear(c, isa, "f16", Precision::Strict, &KIMODO);
        bench_linear(c, isa, "bf16", Precision::Strict, &KIMODO);
        bench_linear(c, isa, "bf16", Precision::Fast, &KIMODO);
        bench_linear(c, isa, "q8_0", Precision::Strict, &KIMODO);
        bench_attention(c, isa);
    }
}

/// CPU time of this process's threads: the sum of the first field of
/// `/proc/self/task/*/schedstat` (nanoseconds on the CPU). Threads that exit inside a
/// measurement are missed, so it only times work on the calling thread and the kernel pool's
/// persistent workers.
struct CpuTime;

fn cpu_ns() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        cpu_ns().expect("checked before the cpu_time groups run")
    }
    fn end(&self, start: u64) -> u64 {
        self.start() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, _typical: f64, values: &mut [f64]) -> &'static str {
        values.iter_mut().for_each(|v| *v /= 1e6);
        "ms CPU"
    }
    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        let per_iter = match *t {
            Throughput::Elements(e) => e as f64,
            _ => unreachable!("the cpu_time groups report FLOPs as elements"),
        };
        values.iter_mut().for_each(|v| *v = per_iter / *v);
        "GFLOP/CPU-s"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn cpu_time_benches(c: &mut Criterion<CpuTime>) {
    if cpu_ns().is_none() {
        eprintln!("cpu_time groups skipped: /proc/self/task/*/schedstat is not readable");
        return;
    }
    for isa in Isa::available() {
        let mut g = c.benchmark_group(format!(
            "cpu_time/fma_peak/{} (GFLOP per CPU-s)",
            isa.name()
        ));
        settings(&mut g);
        let iters = 1 << 20;
        // One thread only: it runs on the caller, which the measurement sees.
        g.throughput(Throughput::Elements(peak::fma_loop(isa, 1, 1) * iters));
        g.bench_function("t1", |b| {
            b.iter(|| peak::fma_loop(isa, 1, black_box(iters)))
        });
        g.finish();

        let mut g = c.benchmark_group(format!(
            "cpu_time/linear_f32/{} (GFLOP per CPU-s)",
            isa.name()
        ));
        settings(&mut g);
        for threads in THREADS {
            let pool = ThreadPool::new(threads);
            let cx = Cx {
                isa,
                pool: &pool,
                precision: Precision::Strict,
            };
            for (m, n, k) in std::iter::once(SQUARE).chain(KIMODO) {
                let x = data(m * k, 1);
                let w = data(n * k, 2);
                let mut y = vec![0f32; m * n];
                let p = LinearParams {
                    m,
                    n,
                    k,
                    activation: Activation::None,
                };
                g.throughput(Throughput::Elements((2 * m * n * k) as u64));
                g.bench_function(format!("{m}x{n}x{k}/t{threads}"), |b| {
                    b.iter(|| linear(&cx, &p, black_box(&x), Weights::F32(&w), None, &mut y))
                });
            }
        }
        g.finish();
    }
}

criterion_group!(gemm, benches);
criterion_group! {
    name = gemm_cpu_time;
    config = Criterion::default().with_measurement(CpuTime);
    targets = cpu_time_benches
}
criterion_main!(gemm, gemm_cpu_time);
