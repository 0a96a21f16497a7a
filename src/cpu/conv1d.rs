//! 1-D convolution (stride 1, zero padding, dilation) and nearest x2 upsampling, as used by
//! MotionBricks' conv upsampler (kernels 1 and 3).

use super::Cx;
use crate::ops::{Conv1dParams, UpsampleParams};

pub mod reference {
    use crate::ops::{Conv1dParams, UpsampleParams};

    pub fn conv1d(p: &Conv1dParams, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
        let out_len = p
            .out_len()
            .expect("conv1d parameters were checked when recorded");
        for b in 0..p.batch {
            for co in 0..p.c_out {
                for t in 0..out_len {
                    let mut acc = bias.map_or(0.0, |b| b[co] as f64);
                    for ci in 0..p.c_in {
                        for kk in 0..p.kernel {
                            let src = (t + kk * p.dilation) as isize - p.padding as isize;
                            if src < 0 || src as usize >= p.len {
                                continue;
                            }
                            acc += w[(co * p.c_in + ci) * p.kernel + kk] as f64
                                * x[(b * p.c_in + ci) * p.len + src as usize] as f64;
                        }
                    }
                    y[(b * p.c_out + co) * out_len + t] = acc as f32;
                }
            }
        }
    }

    pub fn upsample_nearest2x(p: &UpsampleParams, x: &[f32], y: &mut [f32]) {
        for r in 0..p.rows {
            for i in 0..p.len {
                let v = x[r * p.len + i];
                y[r * 2 * p.len + 2 * i] = v;
                y[r * 2 * p.len + 2 * i + 1] = v;
            }
        }
    }
}

pub fn conv1d(
    cx: &Cx,
    p: &Conv1dParams,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
) {
    let out_len = p
        .out_len()
        .expect("conv1d parameters were checked when recorded");
    cx.pool.par_chunks_mut(
        &mut y[..p.batch * p.c_out * out_len],
        p.c_out * out_len,
        |b, out| {
            let one = Conv1dParams { batch: 1, ..*p };
            reference::conv1d(
                &one,
                &x[b * p.c_in * p.len..(b + 1) * p.c_in * p.len],
                w,
                bias,
                out,
            );
        },
    );
}

pub fn upsample_nearest2x(cx: &Cx, p: &UpsampleParams, x: &[f32], y: &mut [f32]) {
    let _ = cx;
    reference::upsample_nearest2x(p, x, y);
}
