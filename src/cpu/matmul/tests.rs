//! The matmul kernels against the f64 reference, on every ISA, dtype and thread count.

use super::*;
use crate::cpu::ThreadPool;
use crate::tensor::{Q8_0_BLOCK, Q8_0_BLOCK_BYTES, q8_0_quantize_block};
use half::{bf16, f16};
use proptest::prelude::*;

/// f32 machine epsilon (2^-23 = 2u).
const EPS: f64 = f32::EPSILON as f64;
/// Error bound factor C in `|y - ref| <= C * (k + 2) * EPS * sum_k |x||w| + TINY`
/// (Higham, "Accuracy and Stability of Numerical Algorithms", eq. 3.5): one FMA chain per
/// KC block plus one add per block makes at most k + k / KC roundings of relative size
/// u = EPS / 2 on partial sums bounded by sum |x||w|; the alpha multiply, the bias add and
/// the f64 reference's own rounding add three more. C = 1 with EPS = 2u covers that with
/// room for the scalar path's unfused multiply-add (two roundings per step).
const GEMM_C: f64 = 1.0;
/// Absolute slack for underflow: products of the test data are never subnormal.
const TINY: f64 = 1e-30;
/// Fast bf16 dot products round x to bf16 (round to nearest even, relative 2^-9) before
/// multiplying; 2^-8 per product covers that and the dot instruction's internal rounding.
const BF16_X_REL: f64 = 1.0 / 256.0;
/// Headroom for the activation's own approximation error (the SIMD activations are tested
/// against their oracle in `cpu::activation`); wiring mistakes here (activation skipped,
/// or applied before the bias) show up as errors of order one.
const ACT_TOL: f64 = 1e-5;
/// Lipschitz constant of every activation (GELU's slope peaks at 1.13, SiLU's at 1.1).
const ACT_LIPSCHITZ: f64 = 1.2;

/// 48 cases by default; `PROPTEST_CASES` raises it (`with_cases` alone would ignore it).
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok());
    ProptestConfig::with_cases(cases.unwrap_or(48))
}

/// splitmix64: cheap deterministic test data from a proptest seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f()).collect()
    }
}

#[derive(Clone, Copy, Debug)]
enum Dt {
    F32,
    F16,
    Bf16,
    Q8,
}

/// Weights stored in one of the dtypes, owned.
enum Stored {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    Q8(Vec<u8>),
}

impl Stored {
    fn new(dt: Dt, v: &[f32]) -> Stored {
        match dt {
            Dt::F32 => Stored::F32(v.to_vec()),
            Dt::F16 => Stored::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
            Dt::Bf16 => Stored::Bf16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
            Dt::Q8 => {
                let mut q = vec![0u8; v.len() / Q8_0_BLOCK * Q8_0_BLOCK_BYTES];
                for (src, dst) in v.chunks(Q8_0_BLOCK).zip(q.chunks_mut(Q8_0_BLOCK_BYTES)) {
                    q8_0_quantize_block(src, dst);
                }
                Stored::Q8(q)
            }
        }
    }
    fn weights(&self) -> Weights<'_> {
        match self {
            Stored::F32(w) => Weights::F32(w),
            Stored::F16(w) => Weights::F16(w),
            Stored::Bf16(w) => Weights::BF16(w),
            Stored::Q8(w) => Weights::Q8_0(w),
        }
    }
}

fn activations() -> [Activation; 6] {
    [
        Activation::None,
        Activation::Relu,
        Activation::LeakyRelu(0.125),
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ]
}

/// `sum_k |x[i, l]| |w[j, l]|` for every output.
fn abs_dots(m: usize, n: usize, k: usize, x: &[f32], w: &[f32]) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|l| (x[i * k + l] as f64 * w[j * k + l] as f64).abs())
                .sum();
        }
    }
    out
}

#[derive(Debug)]
struct LinearCase {
    m: usize,
    n: usize,
    k: usize,
    dt: Dt,
    with_bias: bool,
    act: Activation,
    seed: u64,
}

/// Run `linear` on every ISA with 1 and 2 threads; check each against the reference with
/// the bound above and the 1- and 2-thread results for bit equality.
fn check_linear(c: &LinearCase, precision: Precision) {
    let (m, n, k) = (c.m, c.n, c.k);
    let mut rng = Rng(c.seed);
    let x = rng.vec(m * k);
    let stored = Stored::new(c.dt, &rng.vec(n * k));
    let w = stored.weights();
    let bias = c.with_bias.then(|| rng.vec(n));
    let p = LinearParams {
        m,
        n,
        k,
        activation: c.act,
    };
    let mut want = vec![0f32; m * n];
    reference::linear(&p, &x, w, bias.as_deref(), &mut want);
    let mut wide = vec![0f32; n * k];
    w.widen_into(0, &mut wide);
    let scale = abs_dots(m, n, k, &x, &wide);
    let pools = [ThreadPool::new(1), ThreadPool::new(2)];
    for isa in Isa::available() {
        let fast = precision == Precision::Fast
            && matches!(c.dt, Dt::Bf16)
            && isa == Isa::Avx512
            && crate::cpu::isa::has_avx512_bf16();
        let mut outs = Vec::new();
        for pool in &pools {
            let cx = Cx {
                isa,
                pool,
                precision,
            };
            let mut y = vec![f32::NAN; m * n];
            linear(&cx, &p, &x, w, bias.as_deref(), &mut y);
            for (idx, (&got, &want)) in y.iter().zip(&want).enumerate() {
                let b = bias.as_ref().map_or(0.0, |b| b[idx % n].abs() as f64);
                let rel = if fast { BF16_X_REL } else { 0.0 };
                let mut tol = (GEMM_C * (k + 2) as f64 * EPS + rel) * (scale[idx] + b) + TINY;
                if !matches!(c.act, Activation::None) {
                    tol = ACT_LIPSCHITZ * tol + ACT_TOL * (1.0 + want.abs() as f64);
                }
                let err = (got as f64 - want as f64).abs();
                assert!(
                    err <= tol,
                    "{isa:?} t={} {m}x{n}x{k} {:?} bias={} {:?} at ({}, {}): {got} vs {want} (err {err:e} > {tol:e})",
                    pool.threads(),
                    c.dt,
                    c.with_bias,
                    c.act,
                    idx / n,
                    idx % n
                );
            }
            outs.push(y);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&outs[0]),
            bits(&outs[1]),
            "{isa:?}: 1 and 2 threads differ"
        );
    }
}

/// Sizes that exercise single rows, vector tails, and more than one block of every kind.
fn dim_m() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 1usize..=20, 3 => 21usize..=80, 1 => 190usize..=215]
}
fn dim_n() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 1usize..=40, 2 => 41usize..=100]
}
fn dim_k() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 1usize..=40, 3 => 41usize..=300, 1 => 500usize..=560]
}
fn dtype() -> impl Strategy<Value = Dt> {
    prop_oneof![Just(Dt::F32), Just(Dt::F16), Just(Dt::Bf16), Just(Dt::Q8)]
}
fn case() -> impl Strategy<Value = LinearCase> {
    (
        dim_m(),
        dim_n(),
        dim_k(),
        dtype(),
        any::<bool>(),
        0..6usize,
        any::<u64>(),
    )
        .prop_map(|(m, n, k, dt, with_bias, a, seed)| LinearCase {
            m,
            n,
            // q8_0 needs whole 32-value blocks along k.
            k: if matches!(dt, Dt::Q8) {
                k.next_multiple_of(Q8_0_BLOCK)
            } else {
                k
            },
            dt,
            with_bias,
            act: activations()[a],
            seed,
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn linear_matches_reference(c in case()) {
        check_linear(&c, Precision::Strict);
    }

    /// Fast precision: bf16 dot products where the CPU has them, exact widening elsewhere.
    #[test]
    fn linear_fast_matches_reference(c in case()) {
        check_linear(&LinearCase { dt: Dt::Bf16, ..c }, Precision::Fast);
    }
}

#[test]
fn linear_every_dtype_and_activation_at_block_edges() {
    // Fixed shapes around the kernels' block sizes: MR 4/6/8/12, NR 8/12/16/32,
    // KC 128 (AVX-512), 256 (scalar, NEON, bf16 pairs), 384 (AVX2), MC 204/208.
    let mut seed = 1;
    for (m, n, k) in [
        (1, 1, 32),
        (6, 16, 384),
        (7, 17, 416),
        (12, 32, 128),
        (13, 33, 160),
        (8, 12, 256),
        (205, 3, 64),
        (209, 5, 288),
    ] {
        for dt in [Dt::F32, Dt::F16, Dt::Bf16, Dt::Q8] {
            for act in activations() {
                for with_bias in [false, true] {
                    seed += 1;
                    let c = LinearCase {
                        m,
                        n,
                        k,
                        dt,
                        with_bias,
                        act,
                        seed,
                    };
                    check_linear(&c, Precision::Strict);
                }
            }
        }
    }
}

/// The AVX2 transposing packers equal the portable ones bit for bit at every tile shape
/// the x86 kernels use (MR 6 and 12, NR 16 and 32: the AVX-512 kernels pack with them, so
/// this covers their packing on machines without AVX-512), with panels packed back to
/// back into one buffer as the driver does, so a partial row group's spill into the next
/// panel is checked too.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_packers_match_portable_packers() {
    if !Isa::Avx2.is_supported() {
        return;
    }
    /// Packs `count` rows (or columns) in panels of `r` with the AVX2 packer `avx2` (into one
    /// buffer, as the driver does) and the portable `portable`, and compares the bits.
    fn compare_panels(
        r: usize,
        count: usize,
        kc: usize,
        avx2: impl Fn(usize, usize, *mut f32),
        portable: impl Fn(usize, usize, &mut [f32]),
        what: &str,
    ) {
        let panels = count.div_ceil(r);
        let mut got = vec![f32::NAN; panels * r * kc + 8];
        let mut want = vec![0f32; panels * r * kc];
        for p in 0..panels {
            let (i, at) = (p * r, p * r * kc);
            avx2(i, r.min(count - i), got[at..].as_mut_ptr());
            portable(i, r.min(count - i), &mut want[at..at + r * kc]);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got[..want.len()]), bits(&want), "{what}");
    }
    fn a_panels<const MR: usize>(a: &[f32], m: usize, lda: usize, k0: usize, kc: usize) {
        compare_panels(
            MR,
            m,
            kc,
            // SAFETY: AVX2 was detected; `compare_panels` leaves room for every panel plus 8.
            |i, rows, dst| unsafe { avx2::pack_a::<MR>(a, lda, i, rows, k0, kc, dst) },
            |i, rows, dst| scalar::pack_a(a, lda, i, rows, k0, kc, MR, dst),
            &format!("A MR={MR} m={m} k0={k0} kc={kc}"),
        );
    }
    fn b_panels<const NR: usize>(b: &BSrc, n: usize, k0: usize, kc: usize) {
        compare_panels(
            NR,
            n,
            kc,
            // SAFETY: as above.
            |j, cols, dst| unsafe { avx2::pack_b::<NR>(b, j, cols, k0, kc, dst) },
            |j, cols, dst| scalar::pack_b_from(b, j, cols, k0, 0, kc, NR, dst),
            &format!("B {b:?} NR={NR} n={n} k0={k0} kc={kc}"),
        );
    }
    let mut rng = Rng(5);
    for rows in [1, 5, 6, 7, 12, 13, 16, 17, 31, 32, 33, 70] {
        for (k0, kc) in [
            (0, 1),
            (0, 7),
            (0, 8),
            (3, 9),
            (0, 16),
            (32, 33),
            (0, 64),
            (32, 96),
            (5, 100),
        ] {
            let ld = k0 + kc + 3;
            let a = rng.vec(rows * ld);
            a_panels::<6>(&a, rows, ld, k0, kc);
            a_panels::<12>(&a, rows, ld, k0, kc);
            // q8_0 needs whole blocks: k0, kc and the row stride multiples of 32.
            let q8 = k0 % 32 == 0 && kc % 32 == 0;
            let ld = if q8 {
                (k0 + kc).next_multiple_of(32)
            } else {
                ld
            };
            let wide = rng.vec(rows * ld);
            for dt in [Dt::F32, Dt::F16, Dt::Bf16, Dt::Q8] {
                if matches!(dt, Dt::Q8) && !q8 {
                    continue;
                }
                let stored = Stored::new(dt, &wide);
                let b = BSrc::RowsN {
                    w: stored.weights(),
                    ld,
                };
                b_panels::<16>(&b, rows, k0, kc);
                b_panels::<32>(&b, rows, k0, kc);
            }
            // b[k, n]: `rows` columns, row stride rows + 2.
            let bk = rng.vec((k0 + kc) * (rows + 2));
            let b = BSrc::RowsK {
                b: &bk,
                ld: rows + 2,
            };
            b_panels::<16>(&b, rows, k0, kc);
            b_panels::<32>(&b, rows, k0, kc);
        }
    }
}

/// The bf16 pair packer of the AVX-512 BF16 kernel (AVX2 code, so it runs here): pairs
/// along k with the low half first, zero past the columns and past odd k, for odd row
/// strides (pairs at 2-byte alignment) too.
#[cfg(target_arch = "x86_64")]
#[test]
fn bf16_pair_packing_matches_definition() {
    if !Isa::Avx2.is_supported() {
        return;
    }
    const S: usize = 32;
    let mut rng = Rng(9);
    for n in [1, 7, 31, 32, 33, 64, 70] {
        for (k0, kc) in [
            (0, 1),
            (0, 2),
            (0, 15),
            (0, 16),
            (2, 17),
            (0, 33),
            (4, 100),
            (0, 256),
        ] {
            for pad in [0, 1] {
                let ld = k0 + kc + pad;
                let w: Vec<bf16> = rng.vec(n * ld).iter().map(|&v| bf16::from_f32(v)).collect();
                let kcu = kc.div_ceil(2);
                let panels = n.div_ceil(S);
                let mut got = vec![u32::MAX; panels * S * kcu + 8];
                let mut want = vec![0u32; panels * S * kcu];
                for jp in 0..panels {
                    let (j, at) = (jp * S, jp * S * kcu);
                    let cols = S.min(n - j);
                    // SAFETY: AVX2 was detected; `got` has room for every panel plus 8.
                    unsafe {
                        super::bf16::pack_b_pairs::<S>(
                            &w,
                            ld,
                            j,
                            cols,
                            k0,
                            kc,
                            got.as_mut_ptr().add(at),
                        )
                    };
                    for u in 0..kcu {
                        for r in 0..cols {
                            let v = |l: usize| {
                                if l < kc {
                                    w[(j + r) * ld + k0 + l].to_bits() as u32
                                } else {
                                    0
                                }
                            };
                            want[at + u * S + r] = v(2 * u) | v(2 * u + 1) << 16;
                        }
                    }
                }
                assert_eq!(
                    &got[..want.len()],
                    &want[..],
                    "n={n} k0={k0} kc={kc} ld={ld}"
                );
            }
        }
    }
}

#[test]
fn linear_wider_than_one_column_block() {
    // n beyond every kernel's NC (3072 at most), so the jc loop runs twice.
    let c = LinearCase {
        m: 3,
        n: 3072 + 37,
        k: 40,
        dt: Dt::F32,
        with_bias: true,
        act: Activation::None,
        seed: 7,
    };
    check_linear(&c, Precision::Strict);
}

#[test]
fn linear_propagates_nan_and_inf_and_keeps_large_values() {
    let (m, n, k) = (9, 21, 70);
    let mut rng = Rng(3);
    let mut x = rng.vec(m * k);
    let mut w = rng.vec(n * k);
    x[4 * k + 33] = f32::NAN; // row 4 of y is NaN
    w[5 * k + 69] = f32::INFINITY; // column 5 is +-inf (or NaN in row 4)
    let p = LinearParams {
        m,
        n,
        k,
        activation: Activation::None,
    };
    let pool = ThreadPool::new(2);
    for isa in Isa::available() {
        let cx = Cx::strict(isa, &pool);
        let mut y = vec![0f32; m * n];
        linear(&cx, &p, &x, Weights::F32(&w), None, &mut y);
        for i in 0..m {
            for j in 0..n {
                let v = y[i * n + j];
                if i == 4 {
                    assert!(v.is_nan(), "{isa:?} ({i}, {j}) = {v}");
                } else if j == 5 {
                    assert!(v.is_infinite(), "{isa:?} ({i}, {j}) = {v}");
                } else {
                    assert!(v.is_finite(), "{isa:?} ({i}, {j}) = {v}");
                }
            }
        }
    }
    // Magnitudes near the top of the f32 range keep their relative accuracy.
    let big = 1e18f32;
    let xs: Vec<f32> = rng.vec(m * k).iter().map(|v| v * big).collect();
    let ws: Vec<f32> = rng.vec(n * k).iter().map(|v| v * big).collect();
    let mut want = vec![0f32; m * n];
    reference::linear(&p, &xs, Weights::F32(&ws), None, &mut want);
    let scale = abs_dots(m, n, k, &xs, &ws);
    for isa in Isa::available() {
        let cx = Cx::strict(isa, &pool);
        let mut y = vec![0f32; m * n];
        linear(&cx, &p, &xs, Weights::F32(&ws), None, &mut y);
        for (idx, (g, r)) in y.iter().zip(&want).enumerate() {
            let tol = GEMM_C * (k + 2) as f64 * EPS * scale[idx];
            assert!(
                ((*g as f64) - (*r as f64)).abs() <= tol,
                "{isa:?} {g} vs {r}"
            );
        }
    }
}

#[test]
#[should_panic(expected = "linear: w holds")]
fn short_weights_panic_instead_of_reading_out_of_bounds() {
    let pool = ThreadPool::new(1);
    let cx = Cx::strict(Isa::best(), &pool);
    let p = LinearParams {
        m: 4,
        n: 16,
        k: 64,
        activation: Activation::None,
    };
    let mut y = vec![0f32; 4 * 16];
    linear(
        &cx,
        &p,
        &[0.0; 4 * 64],
        Weights::F32(&[0.0; 15 * 64]),
        None,
        &mut y,
    );
}

#[test]
fn empty_outputs_are_left_alone() {
    let pool = ThreadPool::new(2);
    for isa in Isa::available() {
        let cx = Cx::strict(isa, &pool);
        let mut y: Vec<f32> = Vec::new();
        let p = LinearParams {
            m: 0,
            n: 5,
            k: 3,
            activation: Activation::Relu,
        };
        linear(&cx, &p, &[], Weights::F32(&[0.0; 15]), None, &mut y);
        let p = BatchedMatmulParams {
            batch: 2,
            m: 3,
            n: 2,
            k: 0,
            trans_b: false,
            alpha: 2.0,
            a_batch_stride: 0,
            b_batch_stride: 0,
        };
        let mut c = vec![f32::NAN; 12];
        batched_matmul(&cx, &p, &[], &[], &mut c);
        assert!(c.iter().all(|&v| v == 0.0), "{isa:?}: k = 0 gives zeros");
    }
}

#[derive(Debug)]
struct BatchedCase {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    trans_b: bool,
    alpha: f32,
    /// 0: broadcast, 1: packed, 2: padded stride.
    a_stride: u8,
    b_stride: u8,
    seed: u64,
}

fn batched_case() -> impl Strategy<Value = BatchedCase> {
    (
        1usize..=4,
        dim_m(),
        dim_n(),
        dim_k(),
        any::<bool>(),
        -2.0f32..2.0,
        0u8..3,
        0u8..3,
        any::<u64>(),
    )
        .prop_map(
            |(batch, m, n, k, trans_b, alpha, a_stride, b_stride, seed)| BatchedCase {
                batch,
                m,
                n,
                k,
                trans_b,
                alpha,
                a_stride,
                b_stride,
                seed,
            },
        )
}

fn check_batched(c: &BatchedCase) {
    let (m, n, k) = (c.m, c.n, c.k);
    let stride = |kind: u8, len: usize| match kind {
        0 => 0,
        1 => len,
        _ => len + 5,
    };
    let p = BatchedMatmulParams {
        batch: c.batch,
        m,
        n,
        k,
        trans_b: c.trans_b,
        alpha: c.alpha,
        a_batch_stride: stride(c.a_stride, m * k),
        b_batch_stride: stride(c.b_stride, k * n),
    };
    let mut rng = Rng(c.seed);
    let a = rng.vec((c.batch - 1) * p.a_batch_stride + m * k);
    let b = rng.vec((c.batch - 1) * p.b_batch_stride + k * n);
    let mut want = vec![0f32; c.batch * m * n];
    reference::batched_matmul(&p, &a, &b, &mut want);
    let mut scale = Vec::with_capacity(c.batch * m * n);
    for bi in 0..c.batch {
        let ab = &a[bi * p.a_batch_stride..][..m * k];
        let bb = &b[bi * p.b_batch_stride..][..k * n];
        // abs_dots wants B as rows of n x k.
        let bt: Vec<f32> = if c.trans_b {
            bb.to_vec()
        } else {
            (0..n * k).map(|idx| bb[idx % k * n + idx / k]).collect()
        };
        scale.extend(
            abs_dots(m, n, k, ab, &bt)
                .iter()
                .map(|s| s * c.alpha.abs() as f64),
        );
    }
    let pools = [ThreadPool::new(1), ThreadPool::new(2)];
    for isa in Isa::available() {
        let mut outs = Vec::new();
        for pool in &pools {
            let cx = Cx::strict(isa, pool);
            let mut out = vec![f32::NAN; c.batch * m * n];
            batched_matmul(&cx, &p, &a, &b, &mut out);
            for (idx, (&got, &want)) in out.iter().zip(&want).enumerate() {
                let tol = GEMM_C * (k + 2) as f64 * EPS * scale[idx] + TINY;
                let err = (got as f64 - want as f64).abs();
                assert!(
                    err <= tol,
                    "{isa:?} t={} {c:?} at {idx}: {got} vs {want} ({err:e} > {tol:e})",
                    pool.threads()
                );
            }
            outs.push(out);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&outs[0]),
            bits(&outs[1]),
            "{isa:?}: 1 and 2 threads differ"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn batched_matmul_matches_reference(c in batched_case()) {
        check_batched(&c);
    }
}

#[test]
fn batched_matmul_attention_shape() {
    for trans_b in [false, true] {
        check_batched(&BatchedCase {
            batch: 8,
            m: 202,
            n: 128,
            k: 202,
            trans_b,
            alpha: 0.125,
            a_stride: 1,
            b_stride: 1,
            seed: 11,
        });
    }
}
