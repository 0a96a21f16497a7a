//! Row argmax, first index on ties, NaN above every number (as `torch.argmax`).

use super::Cx;
use crate::ops::ArgmaxParams;

pub mod reference {
    use crate::ops::ArgmaxParams;

    /// Index of the first maximum of `row`; the first NaN wins over any number.
    pub fn argmax_row(row: &[f32]) -> u32 {
        let mut best = 0usize;
        for (i, &v) in row.iter().enumerate().skip(1) {
            let b = row[best];
            if b.is_nan() {
                break;
            }
            if v.is_nan() || v > b {
                best = i;
            }
        }
        best as u32
    }

    pub fn argmax(p: &ArgmaxParams, x: &[f32], out: &mut [u32]) {
        for r in 0..p.rows {
            out[r] = argmax_row(&x[r * p.cols..(r + 1) * p.cols]);
        }
    }
}

pub fn argmax(cx: &Cx, p: &ArgmaxParams, x: &[f32], out: &mut [u32]) {
    let _ = cx;
    reference::argmax(p, x, out);
}
