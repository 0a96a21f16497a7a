//! Criterion benches of fused attention, RoPE, conv1d and nearest x2 upsampling at the shapes
//! of Kimodo, LLM2Vec (Llama-3-8B) and MotionBricks, on every ISA this CPU runs, 1 and 2
//! threads. `fma_peak` measures this machine's f32 FMA peak in the same run (12 independent
//! vector chains, registers only) so attention's GFLOP/s can be read as a fraction of it.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use kinema::Precision;
use kinema::cpu::{Cx, Isa, ThreadPool, attention, conv1d, rope};
use kinema::ops::{
    AttentionParams, Conv1dParams, MaskKind, RopePairing, RopeParams, UpsampleParams,
};

const THREADS: [usize; 2] = [1, 2];

fn short(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    g.sample_size(10)
        .measurement_time(Duration::from_millis(1500))
        .warm_up_time(Duration::from_millis(500));
}

fn values(n: usize, salt: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ salt) as f32 / u32::MAX as f32 - 0.5)
        .collect()
}

/// Register-only f32 FMA throughput: 12 independent 8-lane chains (AVX2) or 16-lane chains
/// (AVX-512), enough to cover FMA latency x throughput on current x86 cores.
#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;

    pub const ITERS: u64 = 1 << 20;

    #[target_feature(enable = "avx2,fma")]
    pub fn avx2(m: f32, c: f32) -> f32 {
        let (m, c) = (_mm256_set1_ps(m), _mm256_set1_ps(c));
        let mut acc = [_mm256_setzero_ps(); 12];
        for _ in 0..ITERS {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, m, c);
            }
        }
        let s = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, &a| _mm256_add_ps(s, a));
        _mm256_cvtss_f32(s)
    }

    #[target_feature(enable = "avx512f,fma")]
    pub fn avx512(m: f32, c: f32) -> f32 {
        let (m, c) = (_mm512_set1_ps(m), _mm512_set1_ps(c));
        let mut acc = [_mm512_setzero_ps(); 12];
        for _ in 0..ITERS {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, m, c);
            }
        }
        _mm512_reduce_add_ps(
            acc.iter()
                .fold(_mm512_setzero_ps(), |s, &a| _mm512_add_ps(s, a)),
        )
    }
}

fn fma_peak(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    for isa in Isa::available() {
        let (lanes, f): (u64, fn(f32, f32) -> f32) = match isa {
            // SAFETY: the ISA is available (Isa::available).
            Isa::Avx2 => (8, |m, c| unsafe { peak::avx2(m, c) }),
            // SAFETY: as above.
            Isa::Avx512 => (16, |m, c| unsafe { peak::avx512(m, c) }),
            _ => continue,
        };
        let mut g = c.benchmark_group(format!("fma_peak GFLOP/s/{}", isa.name()));
        short(&mut g);
        g.throughput(Throughput::Elements(peak::ITERS * 12 * lanes * 2));
        g.bench_function("12 chains x 1 thread", |b| {
            b.iter(|| f(black_box(0.999), black_box(1e-3)))
        });
        g.finish();
    }
    let _ = c;
}

struct AttnShape {
    name: &'static str,
    p: AttentionParams,
}

fn attention_shapes() -> Vec<AttnShape> {
    let kimodo = AttentionParams {
        batch: 3,
        q_len: 254,
        kv_len: 254,
        q_heads: 8,
        kv_heads: 8,
        head_dim: 128,
        scale: 1.0 / 128f32.sqrt(),
        mask: MaskKind::None,
        // Kimodo's fused in_proj: q | k | v columns of one [tokens, 3 * 1024] buffer.
        q_row_stride: 3 * 1024,
        kv_row_stride: 3 * 1024,
    };
    let llama = AttentionParams {
        batch: 1,
        q_len: 128,
        kv_len: 128,
        q_heads: 32,
        kv_heads: 8,
        head_dim: 128,
        scale: 1.0 / 128f32.sqrt(),
        mask: MaskKind::Causal,
        q_row_stride: 32 * 128,
        kv_row_stride: 8 * 128,
    };
    vec![
        AttnShape {
            name: "kimodo b3 s254 8x128",
            p: kimodo,
        },
        AttnShape {
            name: "llama s128 32q/8kv x128 causal",
            p: llama,
        },
    ]
}

fn bench_attention(c: &mut Criterion) {
    for isa in Isa::available() {
        let mut g = c.benchmark_group(format!("attention GFLOP/s/{}", isa.name()));
        short(&mut g);
        for s in attention_shapes() {
            let p = s.p;
            let (q_n, kv_n) = (
                p.batch * p.q_len * p.q_row_stride,
                p.batch * p.kv_len * p.kv_row_stride,
            );
            let (q, k, v) = (values(q_n, 1), values(kv_n, 2), values(kv_n, 3));
            let mut out = vec![0f32; p.batch * p.q_len * p.q_heads * p.head_dim];
            // 2 FLOP per multiply-add of Q.K^T and of P.V over the visible keys.
            let visible: u64 = match p.mask {
                MaskKind::Causal => (p.q_len * (p.q_len + 1) / 2) as u64,
                _ => (p.q_len * p.kv_len) as u64,
            };
            let flops = 4 * visible * (p.head_dim * p.q_heads * p.batch) as u64;
            g.throughput(Throughput::Elements(flops));
            for threads in THREADS {
                let pool = ThreadPool::new(threads);
                let cx = Cx {
                    isa,
                    pool: &pool,
                    precision: Precision::Strict,
                };
                g.bench_function(format!("{} t{threads}", s.name), |b| {
                    b.iter(|| {
                        attention::attention(&cx, &p, &q, &k, &v, None, &mut out);
                        black_box(&mut out);
                    })
                });
            }
        }
        g.finish();
    }
}

fn bench_rope(c: &mut Criterion) {
    for isa in Isa::available() {
        let mut g = c.benchmark_group(format!("rope GFLOP/s/{}", isa.name()));
        short(&mut g);
        for (name, p) in [
            (
                "llama q 512 tok 32x128 half",
                RopeParams {
                    tokens: 512,
                    heads: 32,
                    head_dim: 128,
                    pairing: RopePairing::RotateHalf,
                    row_stride: 32 * 128,
                },
            ),
            (
                "512 tok 8x128 interleaved",
                RopeParams {
                    tokens: 512,
                    heads: 8,
                    head_dim: 128,
                    pairing: RopePairing::Interleaved,
                    row_stride: 8 * 128,
                },
            ),
        ] {
            let n = p.tokens * p.heads * p.head_dim;
            let x = values(n, 4);
            let pos: Vec<i32> = (0..p.tokens as i32).collect();
            let inv_freq: Vec<f32> = (0..p.head_dim / 2)
                .map(|i| 500_000f32.powf(-2.0 * i as f32 / p.head_dim as f32))
                .collect();
            let mut y = vec![0f32; n];
            // 3 FLOP per output (2 multiplies, 1 add); the sin/cos per (token, freq) are extra.
            g.throughput(Throughput::Elements(3 * n as u64));
            for threads in THREADS {
                let pool = ThreadPool::new(threads);
                let cx = Cx {
                    isa,
                    pool: &pool,
                    precision: Precision::Strict,
                };
                g.bench_function(format!("{name} t{threads}"), |b| {
                    b.iter(|| {
                        rope::rope(&cx, &p, &x, &pos, &inv_freq, &mut y);
                        black_box(&mut y);
                    })
                });
            }
        }
        g.finish();
    }
}

fn bench_conv1d(c: &mut Criterion) {
    for isa in Isa::available() {
        let mut g = c.benchmark_group(format!("conv1d GFLOP/s/{}", isa.name()));
        short(&mut g);
        for (kernel, len) in [(3, 16), (3, 64), (1, 64)] {
            let p = Conv1dParams {
                batch: 1,
                c_in: 512,
                c_out: 512,
                len,
                kernel,
                padding: kernel / 2,
                dilation: 1,
            };
            let out_len = p.out_len().unwrap();
            let x = values(p.c_in * len, 5);
            let w = values(p.c_out * p.c_in * kernel, 6);
            let bias = values(p.c_out, 7);
            let mut y = vec![0f32; p.c_out * out_len];
            g.throughput(Throughput::Elements(
                (2 * p.c_out * p.c_in * kernel * out_len) as u64,
            ));
            for threads in THREADS {
                let pool = ThreadPool::new(threads);
                let cx = Cx {
                    isa,
                    pool: &pool,
                    precision: Precision::Strict,
                };
                g.bench_function(format!("512ch k{kernel} L{len} t{threads}"), |b| {
                    b.iter(|| {
                        conv1d::conv1d(&cx, &p, &x, &w, Some(&bias), &mut y);
                        black_box(&mut y);
                    })
                });
            }
        }
        g.finish();
    }
}

fn bench_upsample(c: &mut Criterion) {
    for isa in Isa::available() {
        let mut g = c.benchmark_group(format!("upsample_nearest2x bytes/{}", isa.name()));
        short(&mut g);
        for (rows, len) in [(512, 32), (512, 1024)] {
            let p = UpsampleParams { rows, len };
            let x = values(rows * len, 8);
            let mut y = vec![0f32; 2 * rows * len];
            // Reads n floats, writes 2 n.
            g.throughput(Throughput::Bytes((12 * rows * len) as u64));
            for threads in THREADS {
                let pool = ThreadPool::new(threads);
                let cx = Cx {
                    isa,
                    pool: &pool,
                    precision: Precision::Strict,
                };
                g.bench_function(format!("{rows}x{len} t{threads}"), |b| {
                    b.iter(|| {
                        conv1d::upsample_nearest2x(&cx, &p, &x, &mut y);
                        black_box(&mut y);
                    })
                });
            }
        }
        g.finish();
    }
}

criterion_group!(
    benches,
    fma_peak,
    bench_attention,
    bench_rope,
    bench_conv1d,
    bench_upsample
);
criterion_main!(benches);
