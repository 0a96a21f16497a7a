//! Elementwise, normalisation and reduction kernels at Kimodo sizes: 606 rows (3 CFG rows
//! x 202 tokens) of width 1024, the 2048-wide feed-forward activations, and attention-like
//! softmax rows of 254 keys (3 x 8 heads x 202 queries). One group per op and ISA, with 1
//! and 2 threads, throughput in bytes read + written. Every group also times a plain vector
//! copy of the same number of bytes (`copy/tN`, split over the same pool): the bandwidth
//! floor to compare against.
//!
//! `fma_peak/avx2` measures the f32 FMA throughput of the same machine in the same run
//! (12 independent chains of 8-lane fused multiply-adds, 2 FLOP each): the FLOP floor to
//! compare the transcendental kernels against.
//!
//! Run one group with e.g. `cargo bench --bench elementwise -- 'layer_norm/avx2'`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use half::{bf16, f16};
use kinema::backend::Precision;
use kinema::cpu::simd::{self, Kernel, Simd};
use kinema::cpu::{Cx, Isa, ThreadPool, Weights};
use kinema::cpu::{
    activation, argmax, diffusion, elementwise, embedding, gumbel, mean_pool, norm, posenc, softmax,
};
use kinema::ops::*;

const TOKENS: usize = 202;
const ROWS: usize = 3 * TOKENS;
const DIM: usize = 1024;
const FF: usize = 2048;
const HEADS: usize = 8;
const KEYS: usize = 254;

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 10_007) as f32 / 10_007.0 * 8.0 - 4.0)
        .collect()
}

/// A plain vector copy (loads and stores of the widest ISA the CPU has, nothing else): the
/// floor any kernel that reads and writes the same bytes can reach, the same for every ISA's
/// group. Not glibc's `memcpy`, whose strategy (`rep movsb`, non-temporal stores) changes
/// with the size and was erratic on the development machine.
struct PlainCopy<'a> {
    src: &'a [f32],
    dst: &'a mut [f32],
}

impl Kernel for PlainCopy<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.dst.len();
        let (src, dst) = (self.src.as_ptr(), self.dst.as_mut_ptr());
        let mut i = 0;
        while i + S::LANES <= n {
            // SAFETY: lanes i..i + LANES are inside both slices (same length).
            unsafe { s.store(dst.add(i), s.load(src.add(i))) };
            i += S::LANES;
        }
        self.dst[i..].copy_from_slice(&self.src[i..n]);
    }
    fn scalar(self) {
        self.dst.copy_from_slice(self.src);
    }
}

/// `f(cx)` for 1 and 2 threads in one group per ISA, next to a copy of `bytes / 2` bytes.
fn bench_op(c: &mut Criterion, pools: &[ThreadPool], op: &str, bytes: usize, f: &dyn Fn(&Cx)) {
    for isa in Isa::available() {
        let mut g = c.benchmark_group(format!("{op}/{}", isa.name()));
        settings(&mut g);
        g.throughput(Throughput::Bytes(bytes as u64));
        let src = data(bytes / 8, 1);
        let mut dst = vec![0f32; bytes / 8];
        for pool in pools {
            let cx = Cx {
                isa,
                pool,
                precision: Precision::Strict,
            };
            g.bench_function(format!("t{}", pool.threads()), |b| b.iter(|| f(&cx)));
            g.bench_function(format!("copy/t{}", pool.threads()), |b| {
                b.iter(|| {
                    pool.par_chunks_mut(&mut dst, 1 << 14, |i, o| {
                        let src = &src[i << 14..(i << 14) + o.len()];
                        simd::dispatch(Isa::best(), PlainCopy { src, dst: o });
                    });
                    black_box(&mut dst);
                })
            });
        }
        g.finish();
    }
}

fn settings(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.sample_size(10)
        .measurement_time(Duration::from_millis(1500))
        .warm_up_time(Duration::from_millis(500));
}

fn benches(c: &mut Criterion) {
    let pools = [ThreadPool::new(1), ThreadPool::new(2)];
    let f4 = 4usize;

    // Normalisation over 606 x 1024 with gamma (and beta).
    let x = data(ROWS * DIM, 2);
    let g = data(DIM, 3);
    let y = std::cell::RefCell::new(vec![0f32; ROWS * DIM]);
    let np = NormParams {
        rows: ROWS,
        cols: DIM,
        eps: 1e-5,
    };
    let nb = f4 * (2 * ROWS * DIM + 2 * DIM);
    bench_op(c, &pools, "layer_norm", nb, &|cx| {
        norm::layer_norm(cx, &np, &x, Some(&g), Some(&g), &mut y.borrow_mut())
    });
    bench_op(c, &pools, "rms_norm", nb - f4 * DIM, &|cx| {
        norm::rms_norm(cx, &np, &x, Some(&g), &mut y.borrow_mut())
    });

    // Attention-like softmax rows.
    let sp = SoftmaxParams {
        rows: 3 * HEADS * TOKENS,
        cols: KEYS,
        scale: 0.125,
    };
    let sx = data(sp.rows * KEYS, 4);
    let sy = std::cell::RefCell::new(vec![0f32; sp.rows * KEYS]);
    bench_op(c, &pools, "softmax", f4 * 2 * sp.rows * KEYS, &|cx| {
        softmax::softmax(cx, &sp, &sx, &mut sy.borrow_mut())
    });

    // Feed-forward activations, 606 x 2048.
    let ax = data(ROWS * FF, 5);
    let au = data(ROWS * FF, 6);
    let ay = std::cell::RefCell::new(vec![0f32; ROWS * FF]);
    let ab = f4 * 2 * ROWS * FF;
    for (name, act) in [
        ("gelu", Activation::Gelu),
        ("gelu_tanh", Activation::GeluTanh),
        ("silu", Activation::Silu),
        ("relu", Activation::Relu),
    ] {
        bench_op(c, &pools, name, ab, &|cx| {
            activation::activation(cx, act, &ax, &mut ay.borrow_mut())
        });
    }
    bench_op(c, &pools, "swiglu", f4 * 3 * ROWS * FF, &|cx| {
        activation::swiglu(cx, &ax, &au, &mut ay.borrow_mut())
    });

    // Elementwise arithmetic on 606 x 1024.
    let n = ROWS * DIM;
    let bp = BinaryParams {
        op: BinaryOp::Add,
        n,
        b_len: DIM,
    };
    bench_op(c, &pools, "binary_add_bias", f4 * (2 * n + DIM), &|cx| {
        elementwise::binary(cx, &bp, &x, &g, &mut y.borrow_mut())
    });
    bench_op(c, &pools, "scale", f4 * 2 * n, &|cx| {
        elementwise::scale(cx, 0.7, &x, &mut y.borrow_mut())
    });
    let x2 = data(n, 7);
    bench_op(c, &pools, "axpby", f4 * 3 * n, &|cx| {
        elementwise::axpby(cx, 0.3, &x, -1.2, &x2, &mut y.borrow_mut())
    });

    // Sampler ops on one 202 x 1024 state (CFG reads the 3 rows of the batch).
    let m = TOKENS * DIM;
    let coef = [1.0513f32, 0.3265, 0.9806, 0.1961];
    bench_op(c, &pools, "ddim", f4 * 3 * m, &|cx| {
        diffusion::ddim(
            cx,
            &DdimParams { n: m },
            &x[..m],
            &x2[..m],
            &coef,
            &mut y.borrow_mut(),
        )
    });
    let cp = CfgParams {
        n: m,
        rows: 3,
        w_text: 2.0,
        w_constraint: 1.5,
    };
    bench_op(c, &pools, "cfg3", f4 * 4 * m, &|cx| {
        diffusion::cfg(cx, &cp, &x[..3 * m], &mut y.borrow_mut())
    });

    // Embedding gather of 202 tokens from a 4096-row table, per dtype.
    let vocab = 4096;
    let table = data(vocab * DIM, 8);
    let tf16: Vec<f16> = table.iter().map(|&v| f16::from_f32(v)).collect();
    let tbf16: Vec<bf16> = table.iter().map(|&v| bf16::from_f32(v)).collect();
    let mut tq = vec![0u8; vocab * DIM / 32 * kinema::tensor::Q8_0_BLOCK_BYTES];
    for (blk, v) in tq
        .chunks_exact_mut(kinema::tensor::Q8_0_BLOCK_BYTES)
        .zip(table.chunks_exact(32))
    {
        kinema::tensor::q8_0_quantize_block(v, blk);
    }
    let ids: Vec<u32> = (0..TOKENS).map(|i| (i * 37 % vocab) as u32).collect();
    let ep = EmbeddingParams {
        tokens: TOKENS,
        vocab,
        dim: DIM,
    };
    for (name, w, elem_bytes) in [
        ("embedding_f16", Weights::F16(&tf16), 2.0),
        ("embedding_bf16", Weights::BF16(&tbf16), 2.0),
        ("embedding_q8_0", Weights::Q8_0(&tq), 34.0 / 32.0),
    ] {
        let bytes = (TOKENS as f64 * DIM as f64 * (elem_bytes + 4.0)) as usize;
        bench_op(c, &pools, name, bytes, &|cx| {
            embedding::embedding(cx, &ep, &ids, w, &mut y.borrow_mut()).unwrap()
        });
    }

    // Masked mean over 3 x 202 tokens of width 1024.
    let mp = MeanPoolParams {
        batch: 3,
        seq: TOKENS,
        dim: DIM,
    };
    let mask: Vec<u32> = (0..3 * TOKENS).map(|i| (i % 7 != 0) as u32).collect();
    bench_op(
        c,
        &pools,
        "mean_pool",
        f4 * (n + 3 * TOKENS + 3 * DIM),
        &|cx| mean_pool::mean_pool(cx, &mp, &x, &mask, &mut y.borrow_mut()),
    );

    // Token selection over 202 rows of a 1024-entry codebook.
    let ap = ArgmaxParams {
        rows: TOKENS,
        cols: DIM,
    };
    let idx = std::cell::RefCell::new(vec![0u32; TOKENS]);
    bench_op(c, &pools, "argmax", f4 * (m + TOKENS), &|cx| {
        argmax::argmax(cx, &ap, &x[..m], &mut idx.borrow_mut())
    });
    let gp = GumbelParams {
        rows: TOKENS,
        cols: DIM,
        temperature: 0.8,
        seed: 7,
        counter: 0,
    };
    bench_op(c, &pools, "gumbel", f4 * (m + TOKENS), &|cx| {
        gumbel::gumbel(cx, &gp, &x[..m], None, &mut idx.borrow_mut())
    });

    let pp = PosEncParams {
        start: 0,
        len: TOKENS,
        dim: DIM,
    };
    bench_op(c, &pools, "posenc", f4 * m, &|cx| {
        posenc::posenc(cx, &pp, &mut y.borrow_mut())
    });
}

/// `iters` rounds of 12 independent 8-lane FMA chains.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_chains(iters: usize) -> f32 {
    use std::arch::x86_64::*;
    let mut a = black_box([_mm256_set1_ps(1.0); 12]);
    let (b, c) = black_box((_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7)));
    for _ in 0..iters {
        for v in a.iter_mut() {
            *v = _mm256_fmadd_ps(*v, b, c);
        }
    }
    let s = a
        .iter()
        .fold(_mm256_setzero_ps(), |s, v| _mm256_add_ps(s, *v));
    _mm256_cvtss_f32(s)
}

#[cfg(target_arch = "x86_64")]
fn fma_peak(c: &mut Criterion) {
    if !Isa::Avx2.is_supported() {
        return;
    }
    let iters = 1 << 16;
    let mut g = c.benchmark_group("fma_peak/avx2");
    settings(&mut g);
    g.throughput(Throughput::Elements((iters * 12 * 16) as u64));
    // SAFETY: avx2 and fma were detected just above.
    g.bench_function("GFLOP/s", |b| b.iter(|| unsafe { fma_chains(iters) }));
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    #[cfg(target_arch = "x86_64")]
    fma_peak(&mut c);
    benches(&mut c);
    c.final_summary();
}
