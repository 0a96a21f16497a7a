//! Gumbel-max sampling exactly as MotionBricks' `gumbel_sample`
//! (`motionbricks/motion_backbone/models/sampling.py#L4-14`).
//!
//! The noise is computed per element with the scalar `f32::ln`, exactly as the reference:
//! the token is an argmax, and a vector logarithm that differs from the platform's `lnf` by
//! even one ulp could flip a near-tie, so only the rest is vectorised (the division by the
//! temperature and the addition, both exact IEEE operations, and the argmax). The uniforms
//! stay scalar too: SplitMix64 needs 64-bit lane multiplies that AVX2 and NEON lack, and
//! it costs less than the two logarithms per element.

use super::Cx;
use super::simd::{self, Kernel, Simd, load_n, store_n};
use crate::ops::GumbelParams;

pub mod reference {
    use crate::ops::GumbelParams;

    pub use crate::sampling::{gumbel_noise, log_safe};

    pub fn gumbel(p: &GumbelParams, logits: &[f32], uniforms: Option<&[f32]>, out: &mut [u32]) {
        let t = p.temperature.max(1e-10);
        let mut row = vec![0f32; p.cols];
        for (r, o) in out[..p.rows].iter_mut().enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                let i = r * p.cols + c;
                let u = match uniforms {
                    Some(u) => u[i],
                    None => crate::rng::uniform(p.seed, p.counter + i as u64),
                };
                *v = logits[i] / t + gumbel_noise(u);
            }
            *o = super::super::argmax::reference::argmax_row(&row);
        }
    }
}

/// Rows per task: at least this many elements.
const TASK_ELEMS: usize = 1 << 12;

/// Rows `first_row..` of the sample: `logits` and `uniforms` hold just these rows.
struct GumbelRows<'a> {
    p: GumbelParams,
    first_row: usize,
    logits: &'a [f32],
    uniforms: Option<&'a [f32]>,
    out: &'a mut [u32],
}

impl GumbelRows<'_> {
    /// The noise of row `r` (of this task) into `buf`, as the reference computes it.
    fn noise(&self, r: usize, buf: &mut [f32]) {
        let cols = self.p.cols;
        for (c, v) in buf.iter_mut().enumerate() {
            let i = r * cols + c;
            let u = match self.uniforms {
                Some(u) => u[i],
                None => {
                    let global = (self.first_row + r) * cols + c;
                    crate::rng::uniform(self.p.seed, self.p.counter + global as u64)
                }
            };
            *v = reference::gumbel_noise(u);
        }
    }
}

impl Kernel for GumbelRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let cols = self.p.cols;
        let t = s.splat(self.p.temperature.max(1e-10));
        let mut buf = vec![0f32; cols];
        let l = S::LANES;
        for r in 0..self.out.len() {
            self.noise(r, &mut buf);
            let lg = self.logits[r * cols..(r + 1) * cols].as_ptr();
            let b = buf.as_mut_ptr();
            let mut i = 0;
            while i < cols {
                let m = l.min(cols - i);
                // SAFETY: lanes i..i + m are inside the row of logits and `buf` (cols each).
                unsafe {
                    let v = s.add(s.div(load_n(s, lg.add(i), m), t), load_n(s, b.add(i), m));
                    store_n(s, b.add(i), m, v);
                }
                i += l;
            }
            self.out[r] = super::argmax::argmax_row(s, &buf);
        }
    }
    fn scalar(self) {
        let p = GumbelParams {
            rows: self.out.len(),
            ..self.p
        };
        let t = p.temperature.max(1e-10);
        let mut buf = vec![0f32; p.cols];
        for r in 0..p.rows {
            self.noise(r, &mut buf);
            for (v, l) in buf.iter_mut().zip(&self.logits[r * p.cols..]) {
                *v += l / t;
            }
            self.out[r] = super::argmax::reference::argmax_row(&buf);
        }
    }
}

pub fn gumbel(
    cx: &Cx,
    p: &GumbelParams,
    logits: &[f32],
    uniforms: Option<&[f32]>,
    out: &mut [u32],
) {
    if p.cols == 0 {
        return;
    }
    let per = simd::rows_per_task(p.cols, TASK_ELEMS);
    cx.pool.par_chunks_mut(&mut out[..p.rows], per, |t, o| {
        let r = t * per * p.cols..(t * per + o.len()) * p.cols;
        simd::dispatch(
            cx.isa,
            GumbelRows {
                p: *p,
                first_row: t * per,
                logits: &logits[r.clone()],
                uniforms: uniforms.map(|u| &u[r]),
                out: o,
            },
        );
    });
}

#[cfg(test)]
mod tests {
    use super::super::simd::testing::*;
    use super::*;
    use proptest::prelude::*;

    fn check(p: &GumbelParams, logits: &[f32], uniforms: Option<&[f32]>) {
        let mut want = vec![0u32; p.rows];
        reference::gumbel(p, logits, uniforms, &mut want);
        for_each_cx(|cx| {
            let mut got = vec![u32::MAX; p.rows];
            gumbel(cx, p, logits, uniforms, &mut got);
            assert_eq!(got, want, "{}", name(cx));
        });
    }

    /// Uniforms at the edges of the clamps and of [0, 1).
    fn uniform() -> impl Strategy<Value = f32> {
        prop_oneof![
            6 => 0.0f32..1.0,
            1 => proptest::sample::select(vec![
                0.0, 1e-45, 1e-38, 1e-30, 1e-20, 1.1e-20, 9e-21, 1e-10, 0.5,
                0.999_999_9, 1.0 - f32::EPSILON / 2.0, 1.0 - f32::EPSILON,
            ]),
        ]
    }

    proptest! {
        #![proptest_config(config())]

        /// The same token as the reference, with the counter-based stream and with
        /// injected uniforms, at any temperature (including 0, clamped to 1e-10).
        #[test]
        fn tokens_match_the_reference(
            (rows, cols, logits, u) in (1usize..5, 1usize..150).prop_flat_map(|(r, c)| (
                Just(r), Just(c),
                proptest::collection::vec(prop_oneof![9 => -5.0f32..5.0, 1 => (-3i32..3).prop_map(|v| v as f32)], r * c),
                proptest::collection::vec(uniform(), r * c),
            )),
            temperature in prop_oneof![Just(1.0f32), Just(0.0f32), 1e-3f32..5.0],
            seed in any::<u64>(),
            counter in 0u64..1 << 40,
        ) {
            let p = GumbelParams { rows, cols, temperature, seed, counter };
            check(&p, &logits, None);
            check(&p, &logits, Some(&u));
        }
    }

    /// Many rows of a codebook-sized vocabulary (several parallel tasks; each task must
    /// index the stream from its own first row).
    #[test]
    fn many_rows_split_over_threads() {
        let (rows, cols) = (64, 512);
        let logits: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.01)
            .collect();
        let p = GumbelParams {
            rows,
            cols,
            temperature: 0.7,
            seed: 42,
            counter: 1000,
        };
        check(&p, &logits, None);
    }
}
