//! The attention kernels against the f64 reference, on every ISA and thread count.

use super::*;
use crate::cpu::ThreadPool;
use crate::cpu::simd::testing::gamma;
use crate::cpu::simd::{self, Simd};
use crate::rng::uniform;
use proptest::prelude::*;

/// Multiplier on the first-order error bound of an output against the f64 reference,
/// `eps * max|v| * ((head_dim + 4) * sabs + kv_len + 4)`, where `sabs = scale * max_j
/// sum_t |q_t k_jt|`: a score carries the f32 dot product's `head_dim * eps/2 * sabs` plus
/// a few roundings (scale, max subtraction, exp), and a score error `delta` moves the
/// output by at most `2 delta max|v|` (softmax: `sum_j p_j |v_j - o| <= 2 max|v|`); the
/// P.V sum and the normaliser add `kv_len * eps/2` relative each.
const ATTN_TOL_ULPS: f32 = 2.0;

struct Case {
    p: AttentionParams,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Offsets of q, k and v in their buffers (a fused QKV buffer shares one).
    at: [usize; 3],
    mask: Option<Vec<u32>>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} at {:?} mask {:?}", self.p, self.at, self.mask)
    }
}

impl Case {
    fn operands(&self) -> (&[f32], &[f32], &[f32]) {
        (
            &self.q[self.at[0]..],
            &self.k[self.at[1]..],
            &self.v[self.at[2]..],
        )
    }
    fn run(&self, isa: Isa, threads: usize) -> Vec<f32> {
        let pool = ThreadPool::new(threads);
        let cx = Cx::strict(isa, &pool);
        let p = &self.p;
        let mut out = vec![f32::NAN; p.batch * p.q_len * p.q_heads * p.head_dim];
        let (q, k, v) = self.operands();
        attention(&cx, p, q, k, v, self.mask.as_deref(), &mut out);
        out
    }
    fn reference(&self) -> Vec<f32> {
        let p = &self.p;
        let mut out = vec![f32::NAN; p.batch * p.q_len * p.q_heads * p.head_dim];
        let (q, k, v) = self.operands();
        reference::attention(p, q, k, v, self.mask.as_deref(), &mut out);
        out
    }
    /// The bound of every output of row (b, i, h).
    fn tolerance(&self, b: usize, i: usize, h: usize) -> f32 {
        let p = &self.p;
        let (q, k, v) = self.operands();
        let (d, kh) = (p.head_dim, h / (p.q_heads / p.kv_heads));
        let (mut sabs, mut vmax) = (0f32, 0f32);
        for j in 0..p.kv_len {
            if reference::visible(p, self.mask.as_deref(), b, i, j) {
                let qo = (b * p.q_len + i) * p.q_row_stride + h * d;
                let ko = (b * p.kv_len + j) * p.kv_row_stride + kh * d;
                let dot: f32 = (0..d).map(|t| (q[qo + t] * k[ko + t]).abs()).sum();
                sabs = sabs.max(dot * p.scale);
                vmax = (0..d).fold(vmax, |m, t| m.max(v[ko + t].abs()));
            }
        }
        ATTN_TOL_ULPS * f32::EPSILON * vmax * ((d + 4) as f32 * sabs + (p.kv_len + 4) as f32)
    }
}

/// Random values in [-2, 2) from a seed.
fn values(seed: u64, n: usize) -> Vec<f32> {
    (0..n as u64)
        .map(|i| 4.0 * uniform(seed, i) - 2.0)
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn make(
    batch: usize,
    q_len: usize,
    kv_len: usize,
    kv_heads: usize,
    group: usize,
    head_dim: usize,
    mask: MaskKind,
    fused: bool,
    pad: usize,
    seed: u64,
) -> Case {
    let q_heads = kv_heads * group;
    let d = head_dim;
    let (q_row_stride, kv_row_stride, at, lens);
    if fused {
        // One [tokens, (q_heads + 2 kv_heads) * d + pad] projection, q | k | v columns.
        assert_eq!(q_len, kv_len);
        q_row_stride = (q_heads + 2 * kv_heads) * d + pad;
        kv_row_stride = q_row_stride;
        at = [0, q_heads * d, (q_heads + kv_heads) * d];
        let n = batch * q_len * q_row_stride;
        lens = [n, n, n];
    } else {
        q_row_stride = q_heads * d + pad;
        kv_row_stride = kv_heads * d + 2 * pad;
        at = [0, pad, 0];
        let nkv = (batch * kv_len - 1) * kv_row_stride + kv_heads * d + pad;
        lens = [(batch * q_len - 1) * q_row_stride + q_heads * d, nkv, nkv];
    }
    let q = values(seed, lens[0]);
    let (k, v) = if fused {
        (q.clone(), q.clone())
    } else {
        (values(seed ^ 1, lens[1]), values(seed ^ 2, lens[2]))
    };
    let mask_buf = (mask == MaskKind::KeyPadding).then(|| {
        (0..batch)
            .flat_map(|b| {
                let mode = crate::rng::splitmix64(seed, 1000 + b as u64) % 4;
                (0..kv_len).map(move |j| match mode {
                    0 => 1,
                    1 => 0,
                    _ => (uniform(seed ^ 3, (b * kv_len + j) as u64) < 0.6) as u32 * 7,
                })
            })
            .collect()
    });
    Case {
        p: AttentionParams {
            batch,
            q_len,
            kv_len,
            q_heads,
            kv_heads,
            head_dim: d,
            scale: 1.0 / (d as f32).sqrt(),
            mask,
            q_row_stride,
            kv_row_stride,
        },
        q,
        k,
        v,
        at,
        mask: mask_buf,
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1..=3usize, 1..=40usize, 1..=45usize),
        (1..=3usize, 1..=3usize, 1..=40usize),
        prop_oneof![
            Just(MaskKind::None),
            Just(MaskKind::KeyPadding),
            Just(MaskKind::Causal)
        ],
        (any::<bool>(), 0..4usize, any::<u64>()),
        // Scores of order 1, or of order 1000 (near one-hot rows, where the max
        // subtraction and exp underflow matter).
        prop_oneof![Just(1f32), Just(40f32)],
    )
        .prop_map(
            |((b, lq, lk), (hkv, g, d), mask, (fused, pad, seed), amp)| {
                let mut c = make(
                    b,
                    lq,
                    if fused { lq } else { lk },
                    hkv,
                    g,
                    d,
                    mask,
                    fused,
                    pad,
                    seed,
                );
                c.q.iter_mut().for_each(|x| *x *= amp);
                c
            },
        )
}

fn assert_close(c: &Case, got: &[f32], want: &[f32], what: &str) {
    let p = &c.p;
    let d = p.head_dim;
    for (n, (g, w)) in got.iter().zip(want).enumerate() {
        let (row, t) = (n / d, n % d);
        let (bi, h) = (row / p.q_heads, row % p.q_heads);
        let (b, i) = (bi / p.q_len, bi % p.q_len);
        let tol = c.tolerance(b, i, h);
        assert!(
            (g - w).abs() <= tol,
            "{what}: out[b={b}, i={i}, h={h}, t={t}] = {g}, reference {w}, tol {tol}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn matches_reference_on_every_isa(c in case()) {
        let want = c.reference();
        for isa in Isa::available() {
            let one = c.run(isa, 1);
            assert_close(&c, &one, &want, isa.name());
            let two = c.run(isa, 2);
            prop_assert!(
                one.iter().zip(&two).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{}: 1 and 2 threads differ", isa.name()
            );
        }
    }
}

/// Hidden keys contribute exactly nothing: poisoning their K and V with NaN and huge
/// values leaves every output that cannot see them bit-identical (causal: also rows in
/// the same tile as rows that do see them), rows that see a NaN are NaN, and fully
/// hidden rows are +0.
#[test]
fn hidden_keys_are_skipped_exactly() {
    // (mask, q_len, kv_len, first poisoned key when causal)
    for (mask, lq, lk, from) in [
        (MaskKind::KeyPadding, 13, 37, 0),
        (MaskKind::Causal, 29, 29, 10),
        (MaskKind::Causal, 29, 21, 5),
        (MaskKind::Causal, 8, 40, 35),
    ] {
        let mut c = make(2, lq, lk, 2, 2, 24, mask, false, 1, 7);
        if let Some(m) = c.mask.as_mut() {
            for (j, x) in m.iter_mut().enumerate() {
                // Batch row 0: keys 3, 4, 7, 10, ... visible; batch row 1: none.
                *x = (j < lk && (j % 3 == 0 || j == 4)) as u32;
            }
        }
        let p = c.p;
        let hidden = |b: usize, j: usize| match &c.mask {
            Some(m) => m[b * lk + j] == 0,
            None => j >= from,
        };
        let mut dirty = Case {
            q: c.q.clone(),
            k: c.k.clone(),
            v: c.v.clone(),
            mask: c.mask.clone(),
            ..c
        };
        for b in 0..p.batch {
            for j in (0..lk).filter(|&j| hidden(b, j)) {
                let o = (b * lk + j) * p.kv_row_stride;
                for t in 0..p.kv_heads * p.head_dim {
                    dirty.k[c.at[1] + o + t] = if t % 2 == 0 { f32::NAN } else { 1e30 };
                    dirty.v[c.at[2] + o + t] = if t % 3 == 0 { f32::NAN } else { -1e30 };
                }
            }
        }
        for isa in Isa::available() {
            let (clean, poisoned) = (c.run(isa, 2), dirty.run(isa, 2));
            for (n, (a, z)) in clean.iter().zip(&poisoned).enumerate() {
                let row = n / p.head_dim / p.q_heads;
                let (b, i) = (row / lq, row % lq);
                let visible = |j: &usize| reference::visible(&p, c.mask.as_deref(), b, i, *j);
                let what = format!("{} {mask:?} out[b={b}, i={i}] #{n}", isa.name());
                if !(0..lk).any(|j| visible(&j)) {
                    assert_eq!((a.to_bits(), z.to_bits()), (0, 0), "{what}: not +0");
                } else if (0..lk).filter(visible).any(|j| hidden(b, j)) {
                    assert!(z.is_nan(), "{what}: a visible NaN must propagate");
                } else {
                    assert_eq!(a.to_bits(), z.to_bits(), "{what}: changed");
                }
            }
        }
    }
}

/// `tile::softmax` over `row[..n]` on `isa` through `simd::dispatch`; `None` for the scalar
/// path, which has no such kernel.
struct RowSoftmax<'a>(&'a mut [f32], usize);
impl simd::Kernel for RowSoftmax<'_> {
    type Output = Option<f32>;
    #[inline(always)]
    fn run<S: Simd>(self, s: S) -> Option<f32> {
        assert!(self.0.len() >= self.1);
        // SAFETY: the row holds n values (asserted).
        Some(unsafe { super::tile::softmax(s, self.0.as_mut_ptr(), self.1) })
    }
    fn scalar(self) -> Option<f32> {
        None
    }
}

#[derive(Clone, Copy)]
struct ExpNonpositive;
impl simd::LaneFn for ExpNonpositive {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::F) -> S::F {
        simd::exp_nonpositive(s, x)
    }
}

/// `x[i] = simd::exp_nonpositive(x[i])`, through `simd::dispatch`.
struct MapExp<'a>(&'a mut [f32]);
impl simd::Kernel for MapExp<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let p = self.0.as_mut_ptr();
        // SAFETY: source and destination are the same slice of `len` values.
        unsafe { simd::map(s, ExpNonpositive, p, p, self.0.len()) }
    }
    fn scalar(self) {
        self.0.iter_mut().for_each(|x| *x = x.exp());
    }
}

/// The softmax numerators are the shared `simd::exp_nonpositive` of `score - max`, bit for
/// bit, on every ISA, so all ISAs compute the same numerators (the sums differ in their order
/// only), down to subnormal results and the underflow to 0. Values past the row end (NaN and
/// huge, as hidden keys of a causal row can score) reach neither the numerators nor the sum,
/// and the sum is the numerators' within its rounding.
#[test]
fn softmax_numerators_are_the_shared_exp_on_every_isa() {
    for n in (1..=80).chain([127, 200]) {
        // Scores of order 1, and spreads that reach the subnormal range (score - max in
        // [-104, -87]) and the clamp at -104 below it.
        for (amp, seed) in [(1f32, 1u64), (60.0, 2), (300.0, 3)] {
            let mut row: Vec<f32> = values((seed << 16) | n as u64, n)
                .iter()
                .map(|x| x * amp)
                .collect();
            if n >= 4 {
                // A tie with the first score and a -inf score (an overflowed product).
                row[n - 1] = row[0];
                row[1] = f32::NEG_INFINITY;
            }
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut first: Option<(Isa, Vec<f32>)> = None;
            for isa in Isa::available() {
                let mut s = vec![0f32; n.next_multiple_of(MAX_NR)];
                s[..n].copy_from_slice(&row);
                for (i, x) in s[n..].iter_mut().enumerate() {
                    *x = [f32::NAN, 1e30, -1e30, f32::INFINITY][i % 4];
                }
                let tail = s[n..].to_vec();
                let Some(z) = simd::dispatch(isa, RowSoftmax(&mut s, n)) else {
                    continue;
                };
                let mut want: Vec<f32> = row.iter().map(|x| x - m).collect();
                simd::dispatch(isa, MapExp(&mut want));
                let what = format!("{} n {n} amp {amp}", isa.name());
                for (j, (g, w)) in s.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{what}: e[{j}] = {g}, want {w}");
                }
                assert!(
                    s[n..]
                        .iter()
                        .zip(&tail)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{what}: wrote past the row"
                );
                // One accumulator of at least 4 lanes, then at most 4 tree levels.
                let exact: f64 = want.iter().map(|&e| e as f64).sum();
                let tol = gamma(n.div_ceil(4) + 4) * exact;
                assert!(
                    (z as f64 - exact).abs() <= tol,
                    "{what}: sum {z}, want {exact}"
                );
                match &first {
                    None => first = Some((isa, s[..n].to_vec())),
                    Some((isa0, e0)) => assert!(
                        e0.iter().zip(&s).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{what}: numerators differ from {}",
                        isa0.name()
                    ),
                }
            }
        }
    }
}
