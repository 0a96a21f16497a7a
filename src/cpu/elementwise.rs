//! Elementwise arithmetic: add/mul with a repeated second operand, scale, axpby, and the
//! masked activation chain ([`crate::ops::MaskedActParams`]).
//!
//! Every path is bit-identical to the reference: each output is the same sequence of
//! IEEE-rounded f32 operations in the same order (separate multiply and add, never a fused
//! multiply-add), which is also PyTorch's f32 op order for `a + b`, `a * b`, `s * x` and
//! `a * x + b * y`. (`masked_act` with a smooth activation, GELU or SiLU, uses the vector
//! activation of [`super::activation`], within its bounds of the reference.)

use super::Cx;
use super::simd::{self, Kernel, Simd, ZipFn, zip_map};
use crate::ops::{BinaryOp, BinaryParams, MaskedActParams};

pub mod reference {
    use crate::ops::{BinaryOp, BinaryParams, MaskedActParams};

    pub fn binary(p: &BinaryParams, a: &[f32], b: &[f32], y: &mut [f32]) {
        for i in 0..p.n {
            let bv = b[i % p.b_len];
            y[i] = match p.op {
                BinaryOp::Add => a[i] + bv,
                BinaryOp::Mul => a[i] * bv,
            };
        }
    }

    pub fn scale(s: f32, x: &[f32], y: &mut [f32]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = s * v;
        }
    }

    /// `a*x + b*y`, rounded as two products and one sum (no fused multiply-add), which is
    /// what the SIMD paths and PyTorch's `a*x + b*y` compute.
    pub fn axpby(a: f32, x: &[f32], b: f32, y: &[f32], out: &mut [f32]) {
        for ((o, xv), yv) in out.iter_mut().zip(x).zip(y) {
            *o = a * xv + b * yv;
        }
    }

    /// `y = (act(pre_mask ? x * m : x) + r * m) * m`, each step rounded as its own op (the
    /// chain of `binary` and `activation` it replaces).
    pub fn masked_act(p: &MaskedActParams, x: &[f32], m: &[f32], r: Option<&[f32]>, y: &mut [f32]) {
        for i in 0..p.n {
            let mut u = if p.pre_mask { x[i] * m[i] } else { x[i] };
            u = crate::cpu::activation::reference::apply(p.act, u);
            if let Some(r) = r {
                let rm = r[i] * m[i];
                u += rm;
            }
            y[i] = u * m[i];
        }
    }
}

/// Elements per parallel task (64 KiB of output).
const CHUNK: usize = 1 << 14;

/// A repeated operand shorter than this is unrolled into a local copy of at least this
/// many elements (a whole number of repeats), so the vector loop runs over long stretches
/// instead of one short row at a time.
const MIN_PERIOD: usize = 256;

/// `y[j] = a[j] op b[(phase + j) % b.len()]`, with `b` already unrolled to a whole number of
/// repeats (`b.len()` is still a period of the pattern).
struct Binary<'a> {
    op: BinaryOp,
    a: &'a [f32],
    b: &'a [f32],
    phase: usize,
    y: &'a mut [f32],
}

impl ZipFn<2> for BinaryOp {
    #[inline(always)]
    fn apply<S: Simd>(&self, s: S, [x, z]: [S::F; 2]) -> S::F {
        match self {
            BinaryOp::Add => s.add(x, z),
            BinaryOp::Mul => s.mul(x, z),
        }
    }
}

/// `y[i] = a[i] op b[i]` for `i < n`.
///
/// # Safety
/// `a`, `b` must be readable and `y` writable for `n` f32; `y` must not overlap them.
#[inline(always)]
pub(super) unsafe fn zip_op<S: Simd>(
    s: S,
    op: BinaryOp,
    a: *const f32,
    b: *const f32,
    y: *mut f32,
    n: usize,
) {
    // SAFETY: the caller's contract is zip_map's.
    unsafe { zip_map(s, &op, [a, b], y, n) }
}

impl Kernel for Binary<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let period = self.b.len();
        let n = self.y.len().min(self.a.len());
        let (a, b, y) = (self.a.as_ptr(), self.b.as_ptr(), self.y.as_mut_ptr());
        let (mut j, mut pos) = (0, self.phase % period);
        while j < n {
            let run = (period - pos).min(n - j);
            // SAFETY: j + run <= n (inside `a` and `y`), pos + run <= period (inside `b`);
            // `y` is an exclusive borrow, so it overlaps neither input.
            unsafe { zip_op(s, self.op, a.add(j), b.add(pos), y.add(j), run) };
            j += run;
            pos = 0;
        }
    }
    fn scalar(self) {
        let period = self.b.len();
        for (j, (o, x)) in self.y.iter_mut().zip(self.a).enumerate() {
            let bv = self.b[(self.phase + j) % period];
            *o = match self.op {
                BinaryOp::Add => x + bv,
                BinaryOp::Mul => x * bv,
            };
        }
    }
}

pub fn binary(cx: &Cx, p: &BinaryParams, a: &[f32], b: &[f32], y: &mut [f32]) {
    let b = &b[..p.b_len];
    // The scalar path reads `b` as is; the vector path gets long runs.
    let unrolled: Vec<f32>;
    let b = if p.b_len < MIN_PERIOD && cx.isa != super::Isa::Scalar {
        unrolled = b
            .iter()
            .copied()
            .cycle()
            .take(MIN_PERIOD.div_ceil(p.b_len) * p.b_len)
            .collect();
        &unrolled[..]
    } else {
        b
    };
    cx.pool.par_chunks_mut(&mut y[..p.n], CHUNK, |i, out| {
        let start = i * CHUNK;
        simd::dispatch(
            cx.isa,
            Binary {
                op: p.op,
                a: &a[start..start + out.len()],
                b,
                phase: start % b.len(),
                y: out,
            },
        );
    });
}

/// `y = s * x`.
struct Scale<'a> {
    s: f32,
    x: &'a [f32],
    y: &'a mut [f32],
}

/// `k * x` per lane.
struct Times(f32);

impl ZipFn<1> for Times {
    #[inline(always)]
    fn apply<S: Simd>(&self, s: S, [x]: [S::F; 1]) -> S::F {
        s.mul(s.splat(self.0), x)
    }
}

impl Kernel for Scale<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.y.len().min(self.x.len());
        // SAFETY: n is within both slices; `y` is an exclusive borrow.
        unsafe { zip_map(s, &Times(self.s), [self.x.as_ptr()], self.y.as_mut_ptr(), n) };
    }
    fn scalar(self) {
        reference::scale(self.s, self.x, self.y);
    }
}

pub fn scale(cx: &Cx, s: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    cx.pool.par_chunks_mut(&mut y[..n], CHUNK, |i, out| {
        let x = &x[i * CHUNK..i * CHUNK + out.len()];
        simd::dispatch(cx.isa, Scale { s, x, y: out });
    });
}

/// `out = a*x + b*y` as two products and a sum.
struct Axpby<'a> {
    a: f32,
    x: &'a [f32],
    b: f32,
    y: &'a [f32],
    out: &'a mut [f32],
}

/// `a x + b y` per lane, as two products and a sum.
struct Lincomb(f32, f32);

impl ZipFn<2> for Lincomb {
    #[inline(always)]
    fn apply<S: Simd>(&self, s: S, [x, y]: [S::F; 2]) -> S::F {
        s.add(s.mul(s.splat(self.0), x), s.mul(s.splat(self.1), y))
    }
}

impl Kernel for Axpby<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.out.len().min(self.x.len()).min(self.y.len());
        let src = [self.x.as_ptr(), self.y.as_ptr()];
        // SAFETY: n is within every slice; `out` is an exclusive borrow.
        unsafe { zip_map(s, &Lincomb(self.a, self.b), src, self.out.as_mut_ptr(), n) };
    }
    fn scalar(self) {
        reference::axpby(self.a, self.x, self.b, self.y, self.out);
    }
}

pub fn axpby(cx: &Cx, a: f32, x: &[f32], b: f32, y: &[f32], out: &mut [f32]) {
    let n = x.len().min(y.len()).min(out.len());
    cx.pool.par_chunks_mut(&mut out[..n], CHUNK, |i, o| {
        let r = i * CHUNK..i * CHUNK + o.len();
        simd::dispatch(
            cx.isa,
            Axpby {
                a,
                x: &x[r.clone()],
                b,
                y: &y[r],
                out: o,
            },
        );
    });
}

/// [`reference::masked_act`] on one chunk.
struct MaskedAct<'a> {
    p: MaskedActParams,
    x: &'a [f32],
    m: &'a [f32],
    r: Option<&'a [f32]>,
    y: &'a mut [f32],
}

/// One vector of [`reference::masked_act`]'s chain, in its order: x, m (and r).
struct MaskedActLanes(MaskedActParams);

impl MaskedActLanes {
    #[inline(always)]
    fn step<S: Simd>(&self, s: S, x: S::F, m: S::F, r: Option<S::F>) -> S::F {
        let mut u = if self.0.pre_mask { s.mul(x, m) } else { x };
        u = super::activation::lane(s, self.0.act, u);
        if let Some(r) = r {
            u = s.add(u, s.mul(r, m));
        }
        s.mul(u, m)
    }
}

impl ZipFn<2> for MaskedActLanes {
    #[inline(always)]
    fn apply<S: Simd>(&self, s: S, [x, m]: [S::F; 2]) -> S::F {
        self.step(s, x, m, None)
    }
}

impl ZipFn<3> for MaskedActLanes {
    #[inline(always)]
    fn apply<S: Simd>(&self, s: S, [x, m, r]: [S::F; 3]) -> S::F {
        self.step(s, x, m, Some(r))
    }
}

impl Kernel for MaskedAct<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let n = self.y.len().min(self.x.len()).min(self.m.len());
        let n = self.r.map_or(n, |r| n.min(r.len()));
        let (x, m, y) = (self.x.as_ptr(), self.m.as_ptr(), self.y.as_mut_ptr());
        let f = MaskedActLanes(self.p);
        // SAFETY: n is the shortest length, so every slice holds it; `y` is an exclusive
        // borrow, so it overlaps no input.
        unsafe {
            match self.r {
                Some(r) => zip_map(s, &f, [x, m, r.as_ptr()], y, n),
                None => zip_map(s, &f, [x, m], y, n),
            }
        }
    }
    fn scalar(self) {
        let p = MaskedActParams {
            n: self.y.len(),
            ..self.p
        };
        reference::masked_act(&p, self.x, self.m, self.r, self.y);
    }
}

pub fn masked_act(
    cx: &Cx,
    p: &MaskedActParams,
    x: &[f32],
    m: &[f32],
    r: Option<&[f32]>,
    y: &mut [f32],
) {
    cx.pool.par_chunks_mut(&mut y[..p.n], CHUNK, |i, out| {
        let c = i * CHUNK..i * CHUNK + out.len();
        simd::dispatch(
            cx.isa,
            MaskedAct {
                p: *p,
                x: &x[c.clone()],
                m: &m[c.clone()],
                r: r.map(|r| &r[c]),
                y: out,
            },
        );
    });
}

#[cfg(test)]
mod tests {
    use super::super::simd::testing::*;
    use super::*;
    use crate::ops::Activation;
    use proptest::prelude::*;

    fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(same_bits(*g, *w), "{what}: [{i}] = {g:e}, want {w:e}");
        }
    }

    /// Values with a wide exponent range (so rounding happens), plus specials.
    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            6 => -100.0f32..100.0,
            2 => -1e30f32..1e30,
            1 => proptest::sample::select(vec![0.0, -0.0, f32::NAN, f32::INFINITY,
                f32::NEG_INFINITY, f32::MAX, 1e-40, -3e-39]),
        ]
    }

    proptest! {
        #![proptest_config(config())]

        /// Exact equality (bits; NaN = NaN): same rounded operations in the same order.
        #[test]
        fn binary_is_bit_identical(
            (a, b) in (1usize..40, 1usize..12)
                .prop_flat_map(|(b_len, reps)| (
                    proptest::collection::vec(value(), b_len * reps),
                    proptest::collection::vec(value(), b_len),
                )),
            mul in any::<bool>(),
        ) {
            let p = BinaryParams {
                op: if mul { BinaryOp::Mul } else { BinaryOp::Add },
                n: a.len(),
                b_len: b.len(),
            };
            let mut want = vec![0f32; p.n];
            reference::binary(&p, &a, &b, &mut want);
            for_each_cx(|cx| {
                let mut y = vec![0f32; p.n];
                binary(cx, &p, &a, &b, &mut y);
                assert_bits(&name(cx), &y, &want);
            });
        }

        #[test]
        fn scale_and_axpby_are_bit_identical(
            (x, y) in (1usize..300).prop_flat_map(|n| (
                proptest::collection::vec(value(), n),
                proptest::collection::vec(value(), n),
            )),
            a in value(),
            b in value(),
        ) {
            let mut want_s = vec![0f32; x.len()];
            reference::scale(a, &x, &mut want_s);
            let mut want_a = vec![0f32; x.len()];
            reference::axpby(a, &x, b, &y, &mut want_a);
            for_each_cx(|cx| {
                let mut out = vec![0f32; x.len()];
                scale(cx, a, &x, &mut out);
                assert_bits(&format!("{} scale", name(cx)), &out, &want_s);
                axpby(cx, a, &x, b, &y, &mut out);
                assert_bits(&format!("{} axpby", name(cx)), &out, &want_a);
            });
        }
    }

    proptest! {
        #![proptest_config(config())]

        /// Every ISA against the reference, bit for bit (NaN = NaN), for the exact activations,
        /// with and without the pre-mask and the residual.
        #[test]
        fn masked_act_is_bit_identical(
            (x, m, r) in (1usize..200).prop_flat_map(|n| (
                proptest::collection::vec(value(), n),
                proptest::collection::vec(prop_oneof![2 => Just(0.0f32), 2 => Just(1.0f32), 1 => value()], n),
                proptest::collection::vec(value(), n),
            )),
            act in proptest::sample::select(vec![
                Activation::None, Activation::Relu, Activation::LeakyRelu(0.1),
            ]),
            pre_mask in any::<bool>(),
            with_r in any::<bool>(),
        ) {
            let p = MaskedActParams { n: x.len(), act, pre_mask };
            let r = with_r.then_some(&r[..]);
            let mut want = vec![0f32; p.n];
            reference::masked_act(&p, &x, &m, r, &mut want);
            for_each_cx(|cx| {
                let mut y = vec![0f32; p.n];
                masked_act(cx, &p, &x, &m, r, &mut y);
                assert_bits(&name(cx), &y, &want);
            });
        }
    }

    /// The reference is the chain of the ops it replaces: mul, activation, mul, add, mul.
    #[test]
    fn masked_act_reference_is_the_op_chain() {
        let n = 64;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 - 30.0) * 0.37).collect();
        let m: Vec<f32> = (0..n).map(|i| [0.0, 1.0, 1.0, 0.5][i % 4]).collect();
        let r: Vec<f32> = (0..n).map(|i| (i as f32 * 1.3).sin()).collect();
        let mul = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| a * b).collect::<Vec<_>>();
        let add = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| a + b).collect::<Vec<_>>();
        let relu = |a: &[f32]| {
            let mut y = vec![0f32; a.len()];
            super::super::activation::reference::activation(Activation::Relu, a, &mut y);
            y
        };
        let x0 = mul(&x, &m);
        let want = mul(&add(&relu(&x0), &mul(&r, &m)), &m);
        let p = MaskedActParams {
            n,
            act: Activation::Relu,
            pre_mask: true,
        };
        let mut y = vec![0f32; n];
        reference::masked_act(&p, &x, &m, Some(&r), &mut y);
        assert_bits("relu, pre-mask, residual", &y, &want);
    }

    /// Long inputs cross parallel chunks, with a repeat length that does not divide the
    /// chunk (so chunks start mid-pattern) and one longer than the unroll threshold.
    #[test]
    fn long_inputs_cross_chunks() {
        for b_len in [1usize, 3, 7, 300, 1000] {
            let n = b_len * (3 * CHUNK / b_len + 5);
            let a: Vec<f32> = (0..n).map(|i| (i % 977) as f32 * 0.37 - 100.0).collect();
            let b: Vec<f32> = (0..b_len).map(|i| 1.0 + i as f32 * 0.013).collect();
            for op in [BinaryOp::Add, BinaryOp::Mul] {
                let p = BinaryParams { op, n, b_len };
                let mut want = vec![0f32; n];
                reference::binary(&p, &a, &b, &mut want);
                for_each_cx(|cx| {
                    let mut y = vec![0f32; n];
                    binary(cx, &p, &a, &b, &mut y);
                    assert_bits(&format!("{} b_len {b_len}", name(cx)), &y, &want);
                });
            }
            let p = MaskedActParams {
                n,
                act: Activation::Relu,
                pre_mask: true,
            };
            let mut want = vec![0f32; n];
            reference::masked_act(&p, &a, &a, Some(&a), &mut want);
            for_each_cx(|cx| {
                let mut y = vec![0f32; n];
                masked_act(cx, &p, &a, &a, Some(&a), &mut y);
                assert_bits(&format!("{} masked_act", name(cx)), &y, &want);
            });
            let mut want = vec![0f32; n];
            reference::axpby(0.3, &a, -1.7, &a, &mut want);
            for_each_cx(|cx| {
                let mut y = vec![0f32; n];
                axpby(cx, 0.3, &a, -1.7, &a, &mut y);
                assert_bits(&name(cx), &y, &want);
            });
        }
    }
}
