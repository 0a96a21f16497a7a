//! Register-only multiply-add loops that measure the machine's arithmetic peak, so GEMM
//! throughput can be reported as a fraction of it from the same run (clock, turbo and
//! neighbours on a shared machine change the absolute figure from run to run).
//!
//! Each thread runs independent accumulator chains (`acc = acc * a + b`) that never touch
//! memory: enough chains to cover the FMA latency on every pipe (AVX2: 12 ymm for two pipes
//! of 4-cycle latency; AVX-512: 24 zmm; NEON: 16 q). Constants come through `black_box` so
//! the compiler cannot fold them, and `a < 1` keeps the chains finite and normal.

use std::hint::black_box;
use std::time::{Duration, Instant};

use super::Isa;
use super::simd::{self, Kernel, Simd};

/// Iterations per timed burst: ~0.1-1 ms, so the clock is read rarely.
const BURST: u64 = 1 << 16;

/// f32 GFLOP/s of the FMA loop for `isa`, run on `threads` threads at once for about
/// `duration`, summed over the threads (2 FLOP per lane per FMA; the scalar loop does an
/// unfused multiply and add, which is what portable scalar code compiles to).
///
/// # Panics
/// If `isa` is not supported by this CPU.
pub fn fma_peak_gflops(isa: Isa, threads: usize, duration: Duration) -> f64 {
    assert!(
        isa.is_supported(),
        "{} is not supported by this CPU",
        isa.name()
    );
    per_thread_sum(
        threads,
        |deadline| {
            let start = Instant::now();
            let mut flops = 0u64;
            while start.elapsed() < deadline {
                flops += burst(isa, BURST);
            }
            flops as f64 / start.elapsed().as_secs_f64() / 1e9
        },
        duration,
    )
}

/// Run `iters` iterations of the FMA loop on each of `threads` threads; returns the FLOPs
/// executed (for a fixed-work benchmark).
///
/// # Panics
/// If `isa` is not supported by this CPU.
pub fn fma_loop(isa: Isa, threads: usize, iters: u64) -> u64 {
    assert!(
        isa.is_supported(),
        "{} is not supported by this CPU",
        isa.name()
    );
    on_threads(threads, || burst(isa, iters))
}

/// bf16 dot-product GFLOP/s (`vdpbf16ps`: 32 multiply-adds, 64 FLOP, per zmm instruction),
/// summed over `threads` threads; `None` without `avx512_bf16`.
pub fn bf16_dot_peak_gflops(threads: usize, duration: Duration) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if super::isa::has_avx512_bf16() {
        return Some(per_thread_sum(
            threads,
            |deadline| {
                let start = Instant::now();
                let mut flops = 0u64;
                while start.elapsed() < deadline {
                    // SAFETY: avx512_bf16 (and AVX-512F) were detected just above.
                    flops += unsafe { x86::dpbf16_burst(BURST) };
                }
                flops as f64 / start.elapsed().as_secs_f64() / 1e9
            },
            duration,
        ));
    }
    let _ = (threads, duration);
    None
}

fn per_thread_sum(threads: usize, f: impl Fn(Duration) -> f64 + Sync, duration: Duration) -> f64 {
    on_threads(threads, || f(duration))
}

/// Run `f` on `threads` threads at once, the calling thread being one of them (as in the
/// kernel thread pool), and sum the results.
fn on_threads<T: std::iter::Sum + Send>(threads: usize, f: impl Fn() -> T + Sync) -> T {
    std::thread::scope(|s| {
        let others: Vec<_> = (1..threads.max(1)).map(|_| s.spawn(&f)).collect();
        let mine = f();
        std::iter::once(mine)
            .chain(
                others
                    .into_iter()
                    .map(|h| h.join().expect("peak loop thread")),
            )
            .sum()
    })
}

/// `iters` iterations of `isa`'s loop; returns the FLOPs done.
fn burst(isa: Isa, iters: u64) -> u64 {
    simd::dispatch(isa, FmaBurst { iters })
}

/// The FMA loop as a [`Kernel`]: enough chains per ISA to cover its FMA latency on every
/// pipe (12 ymm, 24 zmm, 16 q).
struct FmaBurst {
    iters: u64,
}

impl Kernel for FmaBurst {
    type Output = u64;
    #[inline(always)]
    fn run<S: Simd>(self, s: S) -> u64 {
        match S::LANES {
            8 => fma_chains::<S, 12>(s, self.iters),
            16 => fma_chains::<S, 24>(s, self.iters),
            _ => fma_chains::<S, 16>(s, self.iters),
        }
    }
    fn scalar(self) -> u64 {
        scalar(self.iters)
    }
}

/// `iters` rounds of `acc = acc * a + b` (one fused multiply-add) on `CHAINS` vectors.
#[inline(always)]
fn fma_chains<S: Simd, const CHAINS: usize>(s: S, iters: u64) -> u64 {
    let a = s.splat(black_box(0.999_999_9));
    let b = s.splat(black_box(1e-7));
    let mut acc = [s.splat(black_box(1.0)); CHAINS];
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = s.mul_add(*v, a, b);
        }
    }
    black_box(acc);
    iters * (CHAINS * S::LANES * 2) as u64
}

fn scalar(iters: u64) -> u64 {
    const CHAINS: usize = 8;
    let a = black_box(0.999_999_9f32);
    let b = black_box(1e-7f32);
    let mut acc = black_box([1f32; CHAINS]);
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = *v * a + b;
        }
    }
    black_box(acc);
    iters * CHAINS as u64 * 2
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// # Safety
    /// AVX-512F and AVX512_BF16 are available.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c,avx512bf16")]
    pub(super) unsafe fn dpbf16_burst(iters: u64) -> u64 {
        const CHAINS: usize = 24;
        // Pairs of 2^-12: each instruction adds 2^-23 per lane, far from overflow.
        let pair = _mm512_set1_epi32(black_box(0x3980_3980));
        // SAFETY: __m512i and __m512bh are both 64 bytes of plain bits.
        let a: __m512bh = unsafe { std::mem::transmute(pair) };
        let mut acc = [_mm512_set1_ps(black_box(1.0)); CHAINS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm512_dpbf16_ps(*v, a, a);
            }
        }
        black_box(acc);
        iters * (CHAINS * 32 * 2) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loop_reports_positive_throughput() {
        for isa in Isa::available() {
            let g = fma_peak_gflops(isa, 1, Duration::from_millis(20));
            assert!(g.is_finite() && g > 0.0, "{isa:?}: {g}");
            assert_eq!(fma_loop(isa, 2, 10), 2 * burst(isa, 10));
        }
        if let Some(g) = bf16_dot_peak_gflops(1, Duration::from_millis(20)) {
            assert!(g.is_finite() && g > 0.0);
        }
    }
}
