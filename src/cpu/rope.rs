//! Rotary position embedding, rotate-half and interleaved pairings.
//!
//! Per token, the angle `pos * inv_freq[i]` is an f32 product (as Hugging Face Llama computes
//! `inv_freq @ position_ids` in f32) and its cos and sin come from the platform's f32
//! `sin_cos` (libm `sinf`/`cosf`, within an ulp like PyTorch's f32 `cos`/`sin`), once per
//! (token, frequency), reused over every head. The rotation `y_a = x_a cos - x_b sin`,
//! `y_b = x_b cos + x_a sin` rounds each product and the sum separately (no FMA): PyTorch's
//! `q * cos + rotate_half(q) * sin` op for op. So every ISA gives the same bits, and the SIMD
//! paths only vectorise the rotation over the frequencies.

use super::{Cx, Isa};
use crate::ops::{RopePairing, RopeParams};

/// Tokens per pool task: each task computes its tokens' cos/sin tables once.
const TOKENS_PER_TASK: usize = 8;

pub mod reference {
    use crate::ops::{RopePairing, RopeParams};

    pub fn rope(p: &RopeParams, x: &[f32], positions: &[i32], inv_freq: &[f32], y: &mut [f32]) {
        let d = p.head_dim;
        let half = d / 2;
        for (t, &pos) in positions[..p.tokens].iter().enumerate() {
            // The elements past the rotated heads are carried through.
            let row = t * p.row_stride..(t + 1) * p.row_stride;
            y[row.clone()].copy_from_slice(&x[row]);
            // The angle is an f32 product, as Hugging Face Llama computes `inv_freq * pos`.
            let pos = pos as f32;
            for h in 0..p.heads {
                let o = t * p.row_stride + h * d;
                for (i, &f) in inv_freq[..half].iter().enumerate() {
                    let ang = (pos * f) as f64;
                    let (s, c) = ang.sin_cos();
                    let (a, b) = match p.pairing {
                        RopePairing::RotateHalf => (o + i, o + i + half),
                        RopePairing::Interleaved => (o + 2 * i, o + 2 * i + 1),
                    };
                    let (xa, xb) = (x[a] as f64, x[b] as f64);
                    y[a] = (xa * c - xb * s) as f32;
                    y[b] = (xb * c + xa * s) as f32;
                }
            }
        }
    }
}

pub fn rope(
    cx: &Cx,
    p: &RopeParams,
    x: &[f32],
    positions: &[i32],
    inv_freq: &[f32],
    y: &mut [f32],
) {
    let d = p.head_dim;
    let row = p.row_stride;
    assert!(
        row >= p.heads * d,
        "rope: row stride {row} < heads * head_dim"
    );
    assert!(d.is_multiple_of(2), "rope: head_dim {d} must be even");
    assert!(x.len() >= p.tokens * row && y.len() >= p.tokens * row);
    assert!(positions.len() >= p.tokens && inv_freq.len() >= d / 2);
    assert!(
        cx.isa.is_supported(),
        "{} is not supported here",
        cx.isa.name()
    );
    if p.tokens * row == 0 {
        return;
    }
    let isa = cx.isa;
    cx.pool
        .par_chunks_mut(&mut y[..p.tokens * row], row * TOKENS_PER_TASK, |c, out| {
            let t0 = c * TOKENS_PER_TASK;
            let n = out.len() / row;
            let x = &x[t0 * row..(t0 + n) * row];
            let pos = &positions[t0..t0 + n];
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => {
                    // SAFETY: AVX-512 was detected above (`Isa::is_supported`).
                    unsafe { x86::tokens_avx512(p, x, pos, inv_freq, out) }
                }
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => {
                    // SAFETY: AVX2 was detected above (`Isa::is_supported`).
                    unsafe { x86::tokens_avx2(p, x, pos, inv_freq, out) }
                }
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => {
                    // SAFETY: NEON was detected above (`Isa::is_supported`).
                    unsafe { arm::tokens_neon(p, x, pos, inv_freq, out) }
                }
                _ => tokens_scalar(p, x, pos, inv_freq, out),
            }
        });
}

/// One token's tables over `head_dim` lanes. Rotate-half: `cos[i]`, `sin[i]` for
/// `i < head_dim / 2`. Interleaved, laid out like the pairs: `cos[2i] = cos[2i+1] = cos_i`,
/// `sin[2i] = -sin_i`, `sin[2i+1] = sin_i`, so `y = x cos + swap_pairs(x) sin`.
fn tables(pairing: RopePairing, pos: i32, inv_freq: &[f32], cos: &mut [f32], sin: &mut [f32]) {
    let pos = pos as f32;
    for (i, &f) in inv_freq[..cos.len() / 2].iter().enumerate() {
        let (s, c) = (pos * f).sin_cos();
        match pairing {
            RopePairing::RotateHalf => (cos[i], sin[i]) = (c, s),
            RopePairing::Interleaved => {
                (cos[2 * i], cos[2 * i + 1]) = (c, c);
                (sin[2 * i], sin[2 * i + 1]) = (-s, s);
            }
        }
    }
}

/// The rotation of one head from `from` (a multiple of the vector width the caller handled)
/// to the end, in scalar code with the vector paths' exact operations.
fn head_tail(
    pairing: RopePairing,
    from: usize,
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    y: &mut [f32],
) {
    let half = x.len() / 2;
    match pairing {
        RopePairing::RotateHalf => {
            for i in from..half {
                let (xa, xb) = (x[i], x[i + half]);
                y[i] = xa * cos[i] - xb * sin[i];
                y[i + half] = xb * cos[i] + xa * sin[i];
            }
        }
        RopePairing::Interleaved => {
            for i in (from..x.len()).step_by(2) {
                let (xa, xb) = (x[i], x[i + 1]);
                y[i] = xa * cos[i] + xb * sin[i];
                y[i + 1] = xb * cos[i + 1] + xa * sin[i + 1];
            }
        }
    }
}

/// `f(x_head, cos, sin, y_head)` for each rotated head of each token, with its token's
/// tables; the rest of each row is copied.
#[inline(always)]
fn for_each_head(
    p: &RopeParams,
    x: &[f32],
    pos: &[i32],
    inv_freq: &[f32],
    y: &mut [f32],
    mut f: impl FnMut(&[f32], &[f32], &[f32], &mut [f32]),
) {
    let d = p.head_dim;
    let (mut cos, mut sin) = (vec![0f32; d], vec![0f32; d]);
    let rotated = p.heads * d;
    for (t, (xt, yt)) in x
        .chunks(p.row_stride)
        .zip(y.chunks_mut(p.row_stride))
        .enumerate()
    {
        tables(p.pairing, pos[t], inv_freq, &mut cos, &mut sin);
        yt[rotated..].copy_from_slice(&xt[rotated..]);
        for (xh, yh) in xt[..rotated].chunks(d).zip(yt[..rotated].chunks_mut(d)) {
            f(xh, &cos, &sin, yh);
        }
    }
}

fn tokens_scalar(p: &RopeParams, x: &[f32], pos: &[i32], inv_freq: &[f32], y: &mut [f32]) {
    for_each_head(p, x, pos, inv_freq, y, |xh, cos, sin, yh| {
        head_tail(p.pairing, 0, xh, cos, sin, yh)
    });
}

/// The token loop of one SIMD ISA, as a function `$name` (with the attributes given before
/// its name), generic over the vector operations: `$lanes` lanes, `$load`/`$store` unaligned,
/// `$mul`, `$add`, `$sub`, and `$swap` exchanging the lanes of each (even, odd) pair.
macro_rules! tokens_simd {
    ($(#[$attr:meta])* $name:ident, $lanes:expr,
     $load:ident, $store:ident, $mul:ident, $add:ident, $sub:ident, $swap:expr) => {
        $(#[$attr])*
        pub unsafe fn $name(
            p: &RopeParams,
            x: &[f32],
            pos: &[i32],
            inv_freq: &[f32],
            y: &mut [f32],
        ) {
            let d = p.head_dim;
            let half = d / 2;
            for_each_head(p, x, pos, inv_freq, y, |xh, cos, sin, yh| {
                let (xp, yp) = (xh.as_ptr(), yh.as_mut_ptr());
                let (cp, sp) = (cos.as_ptr(), sin.as_ptr());
                let done = match p.pairing {
                    RopePairing::RotateHalf => {
                        let full = half / $lanes * $lanes;
                        for i in (0..full).step_by($lanes) {
                            // SAFETY: xh, yh, cos and sin hold d values, and every access is
                            // below `half + i + lanes <= d` (i < half / lanes * lanes).
                            unsafe {
                                let (xa, xb) = ($load(xp.add(i)), $load(xp.add(half + i)));
                                let (c, s) = ($load(cp.add(i)), $load(sp.add(i)));
                                $store(yp.add(i), $sub($mul(xa, c), $mul(xb, s)));
                                $store(yp.add(half + i), $add($mul(xb, c), $mul(xa, s)));
                            }
                        }
                        full
                    }
                    RopePairing::Interleaved => {
                        let full = d / $lanes * $lanes;
                        for i in (0..full).step_by($lanes) {
                            // SAFETY: xh, yh, cos and sin hold d values, and every access is
                            // below `i + lanes <= d` (i < d / lanes * lanes).
                            unsafe {
                                let xv = $load(xp.add(i));
                                let (c, s) = ($load(cp.add(i)), $load(sp.add(i)));
                                $store(yp.add(i), $add($mul(xv, c), $mul($swap(xv), s)));
                            }
                        }
                        full
                    }
                };
                head_tail(p.pairing, done, xh, cos, sin, yh);
            });
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{RopePairing, RopeParams, for_each_head, head_tail};
    use std::arch::x86_64::*;

    tokens_simd!(
        /// # Safety
        /// The CPU supports AVX2, FMA and F16C; `x` and `y` hold whole tokens.
        #[target_feature(enable = "avx2,fma,f16c")]
        tokens_avx2,
        8,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_mul_ps,
        _mm256_add_ps,
        _mm256_sub_ps,
        _mm256_permute_ps::<0b10_11_00_01>
    );

    tokens_simd!(
        /// # Safety
        /// The CPU supports the AVX-512 set of `Isa::Avx512`; `x` and `y` hold whole tokens.
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
        tokens_avx512,
        16,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_mul_ps,
        _mm512_add_ps,
        _mm512_sub_ps,
        _mm512_permute_ps::<0b10_11_00_01>
    );
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::{RopePairing, RopeParams, for_each_head, head_tail};
    use std::arch::aarch64::*;

    tokens_simd!(
        /// # Safety
        /// The CPU supports NEON; `x` and `y` hold whole tokens.
        #[target_feature(enable = "neon")]
        tokens_neon,
        4,
        vld1q_f32,
        vst1q_f32,
        vmulq_f32,
        vaddq_f32,
        vsubq_f32,
        vrev64q_f32
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ThreadPool;
    use crate::rng::uniform;
    use proptest::prelude::*;

    /// Bound per output against the f64 reference, in units of `eps * (|x_a| + |x_b|)`: f32
    /// cos and sin are within an ulp (`eps` relative), each product and the sum round once
    /// (`eps / 2` each), and the reference's own final rounding adds `eps / 2`.
    const ROPE_TOL_EPS: f32 = 2.5;

    struct Case {
        p: RopeParams,
        x: Vec<f32>,
        pos: Vec<i32>,
        inv_freq: Vec<f32>,
    }

    impl std::fmt::Debug for Case {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?} positions {:?}", self.p, self.pos)
        }
    }

    fn case() -> impl Strategy<Value = Case> {
        (
            (1..=20usize, 1..=5usize, 1..=40usize, 0..=3usize),
            prop_oneof![
                Just(RopePairing::RotateHalf),
                Just(RopePairing::Interleaved)
            ],
            prop_oneof![Just(10_000f32), Just(500_000f32)],
            any::<u64>(),
        )
            .prop_map(|((tokens, heads, half, carried), pairing, base, seed)| {
                let d = 2 * half;
                // Rows of `carried` further heads that are copied (a fused Q/K/V's values),
                // and one odd element.
                let row_stride = (heads + carried) * d + usize::from(carried == 3);
                let n = tokens * row_stride;
                Case {
                    p: RopeParams {
                        tokens,
                        heads,
                        head_dim: d,
                        pairing,
                        row_stride,
                    },
                    x: (0..n as u64)
                        .map(|i| 8.0 * uniform(seed, i) - 4.0)
                        .collect(),
                    // Up to 8192, plus some negative positions.
                    pos: (0..tokens as u64)
                        .map(|t| (uniform(seed ^ 1, t) * 8400.0) as i32 - 200)
                        .collect(),
                    inv_freq: (0..half)
                        .map(|i| base.powf(-2.0 * i as f32 / d as f32))
                        .collect(),
                }
            })
    }

    fn run(c: &Case, isa: Isa, threads: usize) -> Vec<f32> {
        let pool = ThreadPool::new(threads);
        let cx = Cx::strict(isa, &pool);
        let mut y = vec![f32::NAN; c.x.len()];
        rope(&cx, &c.p, &c.x, &c.pos, &c.inv_freq, &mut y);
        y
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn matches_reference_and_every_isa_gives_the_same_bits(c in case()) {
            let mut want = vec![f32::NAN; c.x.len()];
            reference::rope(&c.p, &c.x, &c.pos, &c.inv_freq, &mut want);
            let scalar = run(&c, Isa::Scalar, 1);
            let (d, half) = (c.p.head_dim, c.p.head_dim / 2);
            for (n, (g, w)) in scalar.iter().zip(&want).enumerate() {
                let col = n % c.p.row_stride;
                if col >= c.p.heads * d {
                    prop_assert!(g.to_bits() == c.x[n].to_bits() && w.to_bits() == g.to_bits(),
                        "y[{n}] past the rotated heads is {g} / {w}, not x's {}", c.x[n]);
                    continue;
                }
                let (o, k) = (n - col % d, col % d);
                let partner = match c.p.pairing {
                    RopePairing::RotateHalf => o + (k + half) % d,
                    RopePairing::Interleaved => o + (k ^ 1),
                };
                let tol = ROPE_TOL_EPS * f32::EPSILON * (c.x[n].abs() + c.x[partner].abs());
                prop_assert!((g - w).abs() <= tol, "y[{n}] = {g}, reference {w}, tol {tol}");
            }
            for isa in Isa::available() {
                for threads in [1, 2] {
                    let got = run(&c, isa, threads);
                    prop_assert!(
                        got.iter().zip(&scalar).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{} with {threads} threads differs from the scalar path", isa.name()
                    );
                }
            }
        }
    }

    /// A NaN input spoils exactly its pair.
    #[test]
    fn nan_stays_in_its_pair() {
        for pairing in [RopePairing::RotateHalf, RopePairing::Interleaved] {
            let p = RopeParams {
                tokens: 3,
                heads: 2,
                head_dim: 36,
                pairing,
                row_stride: 72,
            };
            let mut x: Vec<f32> = (0..3 * 2 * 36).map(|i| (i as f32 * 0.37).sin()).collect();
            x[36 + 5] = f32::NAN;
            let partner = match pairing {
                RopePairing::RotateHalf => 36 + 5 + 18,
                RopePairing::Interleaved => 36 + 4,
            };
            let inv: Vec<f32> = (0..18)
                .map(|i| 10_000f32.powf(-(i as f32) / 18.0))
                .collect();
            for isa in Isa::available() {
                let pool = ThreadPool::new(1);
                let cx = Cx::strict(isa, &pool);
                let mut y = vec![0f32; x.len()];
                rope(&cx, &p, &x, &[0, 7, 8191], &inv, &mut y);
                for (n, v) in y.iter().enumerate() {
                    assert_eq!(
                        v.is_nan(),
                        n == 36 + 5 || n == partner,
                        "{} y[{n}]",
                        isa.name()
                    );
                }
            }
        }
    }
}
