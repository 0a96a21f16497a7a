//! Linear layers (`x . W^T + b`, weights f32/f16/bf16/q8_0, fused activation) and batched
//! f32 matmul.
//!
//! Both run one GEMM driver (`driver.rs`: BLIS-style blocking, packing, tiling over threads)
//! instantiated per ISA with a register micro-kernel and its packers:
//!
//! | ISA | tile (rows x cols) | KC | file |
//! |---|---|---|---|
//! | scalar | 4 x 8, unfused multiply-add | 256 | `scalar.rs` |
//! | AVX2 + FMA | 6 x 16, 12 ymm accumulators | 384 | `avx2.rs` |
//! | AVX-512 | 12 x 32, 24 zmm accumulators | 128 | `avx512.rs` |
//! | AVX-512 BF16 (fast precision) | 12 x 32 `vdpbf16ps` on k pairs | 256 | `bf16.rs` |
//! | NEON | 8 x 12, `fmla` by lane | 256 | `neon.rs` |
//!
//! Weights stay where they are (memory-mapped) and are widened to f32 exactly while a
//! micro-panel is packed, so f16/bf16/q8_0 cost no more than f32 once packed. Results are
//! bit-identical for every thread count (tiles are split over threads, k never is); they
//! differ between ISAs only by rounding, within the bound the tests state.

mod driver;
mod scalar;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod bf16;
#[cfg(target_arch = "aarch64")]
mod neon;

use super::{Cx, Isa, Weights};
use crate::ops::{Activation, BatchedMatmulParams, LinearParams};
use crate::precision::Precision;
use driver::{BSrc, Problem};

pub mod reference {
    use super::super::Weights;
    use crate::ops::{BatchedMatmulParams, LinearParams};

    /// f64 accumulation over the exactly widened weights.
    pub fn linear(p: &LinearParams, x: &[f32], w: Weights, bias: Option<&[f32]>, y: &mut [f32]) {
        let mut wrow = vec![0f32; p.k];
        for n in 0..p.n {
            w.widen_into(n * p.k, &mut wrow);
            for m in 0..p.m {
                let xr = &x[m * p.k..(m + 1) * p.k];
                let mut acc: f64 = xr
                    .iter()
                    .zip(&wrow)
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
                if let Some(b) = bias {
                    acc += b[n] as f64;
                }
                y[m * p.n + n] =
                    super::super::activation::reference::apply(p.activation, acc as f32);
            }
        }
    }

    pub fn batched_matmul(p: &BatchedMatmulParams, a: &[f32], b: &[f32], c: &mut [f32]) {
        for bi in 0..p.batch {
            let a0 = bi * p.a_batch_stride;
            let b0 = bi * p.b_batch_stride;
            let c0 = bi * p.m * p.n;
            for i in 0..p.m {
                for j in 0..p.n {
                    let mut acc = 0f64;
                    for l in 0..p.k {
                        let bv = if p.trans_b {
                            b[b0 + j * p.k + l]
                        } else {
                            b[b0 + l * p.n + j]
                        };
                        acc += a[a0 + i * p.k + l] as f64 * bv as f64;
                    }
                    c[c0 + i * p.n + j] = (p.alpha as f64 * acc) as f32;
                }
            }
        }
    }
}

/// `y[m, n] = act(x[m, k] . w[n, k]^T + bias[n])`. Weights are read in place and widened
/// to f32 exactly while packing; with `Precision::Fast`, bf16 weights on a CPU with
/// `avx512_bf16` use bf16 dot products instead (x rounded to bf16 once, f32 accumulation).
///
/// # Panics
/// If a slice is shorter than the shape needs, or q8_0 weights have `k % 32 != 0` (the SIMD
/// packers read through raw pointers, so this is checked here).
pub fn linear(
    cx: &Cx,
    p: &LinearParams,
    x: &[f32],
    w: Weights,
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    assert!(
        x.len() >= p.m * p.k,
        "linear: x holds {} values, needs {}",
        x.len(),
        p.m * p.k
    );
    assert!(
        w.len() >= p.n * p.k,
        "linear: w holds {} values, needs {}",
        w.len(),
        p.n * p.k
    );
    assert!(
        y.len() >= p.m * p.n,
        "linear: y holds {} values, needs {}",
        y.len(),
        p.m * p.n
    );
    assert!(
        bias.is_none_or(|b| b.len() >= p.n),
        "linear: bias shorter than n = {}",
        p.n
    );
    assert!(
        !matches!(w, Weights::Q8_0(_)) || p.k.is_multiple_of(crate::tensor::Q8_0_BLOCK),
        "linear: q8_0 weights need k a multiple of 32, got {}",
        p.k
    );
    let prob = Problem {
        m: p.m,
        n: p.n,
        k: p.k,
        a: x,
        b: BSrc::RowsN { w, ld: p.k },
        alpha: 1.0,
        bias,
        act: p.activation,
        isa: cx.isa,
    };
    let bf16_dots = cx.precision == Precision::Fast && matches!(w, Weights::BF16(_));
    run(cx, bf16_dots, 1, |_| prob, y);
}

/// `c[b] = alpha * a[b] . op(b[b])` for every batch entry (see `BatchedMatmulParams`).
///
/// # Panics
/// If a slice is shorter than the shape and strides need.
pub fn batched_matmul(cx: &Cx, p: &BatchedMatmulParams, a: &[f32], b: &[f32], c: &mut [f32]) {
    if p.batch > 0 && p.m * p.n > 0 {
        let need_a = (p.batch - 1) * p.a_batch_stride + p.m * p.k;
        let need_b = (p.batch - 1) * p.b_batch_stride + p.k * p.n;
        assert!(
            a.len() >= need_a,
            "batched_matmul: a holds {}, needs {need_a}",
            a.len()
        );
        assert!(
            b.len() >= need_b,
            "batched_matmul: b holds {}, needs {need_b}",
            b.len()
        );
    }
    let problem = |bi: usize| {
        let bb = &b[bi * p.b_batch_stride..];
        Problem {
            m: p.m,
            n: p.n,
            k: p.k,
            a: &a[bi * p.a_batch_stride..],
            b: if p.trans_b {
                BSrc::RowsN {
                    w: Weights::F32(bb),
                    ld: p.k,
                }
            } else {
                BSrc::RowsK { b: bb, ld: p.n }
            },
            alpha: p.alpha,
            bias: None,
            act: Activation::None,
            isa: cx.isa,
        }
    };
    run(cx, false, p.batch, problem, c);
}

/// Dispatch once on the ISA to the driver instantiated with that ISA's micro-kernel.
fn run<'a>(
    cx: &Cx,
    bf16_dots: bool,
    batch: usize,
    problem: impl Fn(usize) -> Problem<'a> + Sync,
    c: &mut [f32],
) {
    const DETECTED: &str = "Cx::isa names an ISA this CPU supports";
    // The driver on one micro-kernel (a macro: each arm's kernel is another type).
    macro_rules! drive {
        ($kernel:expr) => {
            driver::run_batched(&$kernel, cx.pool, batch, problem, c)
        };
    }
    match cx.isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => match bf16_dots.then(bf16::Avx512Bf16::new).flatten() {
            Some(k) => drive!(k),
            None => drive!(avx512::Avx512::new().expect(DETECTED)),
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => drive!(avx2::Avx2::new().expect(DETECTED)),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => drive!(neon::Neon::new().expect(DETECTED)),
        _ => {
            // Only AVX-512 has bf16 dot products; everything else widens bf16 exactly.
            let _ = bf16_dots;
            drive!(scalar::Scalar)
        }
    }
}

#[cfg(test)]
mod tests;
