//! Row argmax, first index on ties, NaN above every number (as `torch.argmax`).
//!
//! The vector path keeps, per lane, the largest value seen and its index (a strict `>`
//! keeps the first occurrence within a lane), in two independent sets to hide the
//! compare/select latency; then it takes the largest value over the lanes and, among the
//! lanes holding it (`==`, so -0 ties +0 as in the reference), the smallest index; then the
//! tail. A NaN anywhere is tracked on the side and, if seen, the first NaN's index is the
//! answer. The result is the reference's index exactly.

use super::Cx;
use super::simd::{self, Kernel, Simd};
use crate::ops::ArgmaxParams;

pub mod reference {
    use crate::ops::ArgmaxParams;

    pub use crate::sampling::argmax_row;

    pub fn argmax(p: &ArgmaxParams, x: &[f32], out: &mut [u32]) {
        for r in 0..p.rows {
            out[r] = argmax_row(&x[r * p.cols..(r + 1) * p.cols]);
        }
    }
}

/// Rows per task: at least this many elements.
const TASK_ELEMS: usize = 1 << 13;

/// Index of the first maximum of `row` (the first NaN wins), as
/// [`reference::argmax_row`].
#[inline(always)]
pub(crate) fn argmax_row<S: Simd>(s: S, row: &[f32]) -> u32 {
    let n = row.len();
    let l = S::LANES;
    if n < 2 * l {
        return reference::argmax_row(row);
    }
    let p = row.as_ptr();
    let step = s.i_splat(2 * l as i32);
    // SAFETY: n >= 2l, so the first two vectors are inside the row.
    let (mut b0, mut b1) = unsafe { (s.load(p), s.load(p.add(l))) };
    let mut i0 = s.i_iota();
    let mut i1 = s.i_add(i0, s.i_splat(l as i32));
    let (mut x0, mut x1) = (s.i_add(i0, step), s.i_add(i1, step));
    let mut nan = s.m_or(s.is_nan(b0), s.is_nan(b1));
    let mut i = 2 * l;
    while i + 2 * l <= n {
        // SAFETY: lanes i..i + 2l are inside the row.
        let (v0, v1) = unsafe { (s.load(p.add(i)), s.load(p.add(i + l))) };
        let (g0, g1) = (s.gt(v0, b0), s.gt(v1, b1));
        b0 = s.select(g0, v0, b0);
        b1 = s.select(g1, v1, b1);
        i0 = s.select_i(g0, x0, i0);
        i1 = s.select_i(g1, x1, i1);
        nan = s.m_or(nan, s.m_or(s.is_nan(v0), s.is_nan(v1)));
        x0 = s.i_add(x0, step);
        x1 = s.i_add(x1, step);
        i += 2 * l;
    }
    if s.m_any(nan) || row[i..].iter().any(|v| v.is_nan()) {
        return row.iter().position(|v| v.is_nan()).unwrap_or(0) as u32;
    }
    let (mut vals, mut idxs) = ([0f32; 32], [0i32; 32]);
    // SAFETY: LANES <= 16, so two vectors fit the 32-element buffers.
    unsafe {
        s.store(vals.as_mut_ptr(), b0);
        s.store(vals.as_mut_ptr().add(l), b1);
        s.store_i(idxs.as_mut_ptr(), i0);
        s.store_i(idxs.as_mut_ptr().add(l), i1);
    }
    let (mut bv, mut bi) = (vals[0], idxs[0]);
    for k in 1..2 * l {
        if vals[k] > bv || (vals[k] == bv && idxs[k] < bi) {
            (bv, bi) = (vals[k], idxs[k]);
        }
    }
    let mut best = bi as usize;
    for (j, &v) in row.iter().enumerate().skip(i) {
        if v > bv {
            (bv, best) = (v, j);
        }
    }
    best as u32
}

struct ArgmaxRows<'a> {
    cols: usize,
    x: &'a [f32],
    out: &'a mut [u32],
}

impl Kernel for ArgmaxRows<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        for (o, row) in self.out.iter_mut().zip(self.x.chunks_exact(self.cols)) {
            *o = argmax_row(s, row);
        }
    }
    fn scalar(self) {
        for (o, row) in self.out.iter_mut().zip(self.x.chunks_exact(self.cols)) {
            *o = reference::argmax_row(row);
        }
    }
}

pub fn argmax(cx: &Cx, p: &ArgmaxParams, x: &[f32], out: &mut [u32]) {
    if p.cols == 0 {
        return;
    }
    let per = simd::rows_per_task(p.cols, TASK_ELEMS);
    cx.pool.par_chunks_mut(&mut out[..p.rows], per, |t, o| {
        let x = &x[t * per * p.cols..(t * per + o.len()) * p.cols];
        simd::dispatch(
            cx.isa,
            ArgmaxRows {
                cols: p.cols,
                x,
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

    fn check(p: &ArgmaxParams, x: &[f32]) {
        let mut want = vec![0u32; p.rows];
        reference::argmax(p, x, &mut want);
        for_each_cx(|cx| {
            let mut got = vec![u32::MAX; p.rows];
            argmax(cx, p, x, &mut got);
            assert_eq!(got, want, "{}", name(cx));
        });
    }

    /// Few distinct values (many ties, both zeros), occasional NaN and infinities.
    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![
            20 => (-4i32..4).prop_map(|v| v as f32),
            4 => -100.0f32..100.0,
            1 => Just(-0.0f32),
            1 => Just(f32::NEG_INFINITY),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NAN),
        ]
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn argmax_is_the_reference_index(
            (rows, cols, x) in (1usize..6, 1usize..200)
                .prop_flat_map(|(r, c)| (Just(r), Just(c), proptest::collection::vec(value(), r * c))),
            nan_free in any::<bool>(),
        ) {
            let x: Vec<f32> = if nan_free { x.iter().map(|v| if v.is_nan() { 1.0 } else { *v }).collect() } else { x };
            check(&ArgmaxParams { rows, cols }, &x);
        }
    }

    /// Ties across lanes and vectors, NaN placement, all -inf, long rows over tasks.
    #[test]
    fn ties_nan_and_long_rows() {
        let cols = 97;
        let mut rows: Vec<Vec<f32>> = Vec::new();
        for (a, b) in [(5, 70), (70, 5), (40, 41), (3, 96)] {
            let mut r = vec![0f32; cols];
            r[a] = 9.0;
            r[b] = 9.0;
            rows.push(r);
        }
        for at in [0, 1, 15, 16, 33, 64, 95, 96] {
            let mut r: Vec<f32> = (0..cols).map(|i| i as f32).collect();
            r[at] = f32::NAN;
            r[(at + 50) % cols] = f32::NAN;
            rows.push(r);
        }
        rows.push(vec![f32::NEG_INFINITY; cols]);
        let mut z = vec![-0.0f32; cols];
        z[60] = 0.0;
        rows.push(z);
        let x = rows.concat();
        check(
            &ArgmaxParams {
                rows: rows.len(),
                cols,
            },
            &x,
        );
        let long: Vec<f32> = (0..300 * 1000usize)
            .map(|i| ((i * 7919) % 10007) as f32)
            .collect();
        check(
            &ArgmaxParams {
                rows: 300,
                cols: 1000,
            },
            &long,
        );
    }
}
