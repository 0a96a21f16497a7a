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
    match isa {
        // SAFETY: the public entry points assert `isa.is_supported()`.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::fma_avx2(iters) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::fma_avx512(iters) },
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { neon::fma(iters) },
        _ => scalar(iters),
    }
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
    /// AVX2 and FMA are available.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma_avx2(iters: u64) -> u64 {
        const CHAINS: usize = 12;
        let a = _mm256_set1_ps(black_box(0.999_999_9));
        let b = _mm256_set1_ps(black_box(1e-7));
        let mut acc = [_mm256_set1_ps(black_box(1.0)); CHAINS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm256_fmadd_ps(*v, a, b);
            }
        }
        black_box(acc);
        iters * (CHAINS * 8 * 2) as u64
    }

    /// # Safety
    /// AVX-512F is available.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
    pub(super) unsafe fn fma_avx512(iters: u64) -> u64 {
        const CHAINS: usize = 24;
        let a = _mm512_set1_ps(black_box(0.999_999_9));
        let b = _mm512_set1_ps(black_box(1e-7));
        let mut acc = [_mm512_set1_ps(black_box(1.0)); CHAINS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm512_fmadd_ps(*v, a, b);
            }
        }
        black_box(acc);
        iters * (CHAINS * 16 * 2) as u64
    }

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

#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;
    use std::hint::black_box;

    /// # Safety
    /// NEON is available.
    #[target_feature(enable = "neon")]
    pub(super) unsafe fn fma(iters: u64) -> u64 {
        const CHAINS: usize = 16;
        let a = vdupq_n_f32(black_box(0.999_999_9));
        let b = vdupq_n_f32(black_box(1e-7));
        let mut acc = [vdupq_n_f32(black_box(1.0)); CHAINS];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                // acc += b * a: one dependent multiply-add per chain.
                *v = vfmaq_f32(*v, b, a);
            }
        }
        black_box(acc);
        iters * (CHAINS * 4 * 2) as u64
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
