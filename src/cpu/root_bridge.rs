//! Kimodo's bridge between the denoiser stages, `global_root_to_local_root`
//! (`kimodo/motion_rep/reps/base.py#L107-151`): the root stage's normalised global root
//! (smooth root xyz, heading cos and sin) becomes the body stage's normalised local root
//! (heading velocity, planar velocity, root height).
//!
//! The op touches `rows * frames * 9` floats once per denoiser call (a few thousand), next to
//! GEMMs of billions of flops, so every ISA runs the scalar reference: a vector body would
//! need vector atan2/sin/cos that differ from libm by an ulp, for no measurable gain.

use super::Cx;
use crate::ops::RootBridgeParams;

pub mod reference {
    use crate::ops::RootBridgeParams;

    /// `x [rows, frames, 5]` -> `out [rows, frames, 4]`, every step an f32 operation in
    /// upstream's order (see [`RootBridgeParams`]).
    pub fn root_bridge(p: &RootBridgeParams, x: &[f32], out: &mut [f32]) {
        let t_n = p.frames;
        let g_scale = p.global_std.map(RootBridgeParams::scale);
        let l_scale = p.local_std.map(RootBridgeParams::scale);
        // Unnormalised root x, y, z and the heading's cos and sin of `theta`, per frame.
        let mut pos = vec![[0f32; 3]; t_n];
        let mut cs = vec![[0f32; 2]; t_n];
        for r in 0..p.rows {
            let xr = &x[r * t_n * 5..(r + 1) * t_n * 5];
            for t in 0..t_n {
                // `kimodo/motion_rep/stats.py#L74-77`: data * sqrt(std^2 + eps) + mean.
                let g: [f32; 5] =
                    std::array::from_fn(|k| xr[t * 5 + k] * g_scale[k] + p.global_mean[k]);
                pos[t] = [g[0], g[1], g[2]];
                let theta = g[4].atan2(g[3]);
                cs[t] = [theta.cos(), theta.sin()];
            }
            let or = &mut out[r * t_n * 4..(r + 1) * t_n * 4];
            for t in 0..t_n {
                // `compute_vel_angle` / `compute_vel_xyz`: frame len-1 repeats frame len-2.
                let a = t.min(t_n - 2);
                let ([c0, s0], [c1, s1]) = (cs[a], cs[a + 1]);
                // `diff_angles` (`feature_utils.py#L15-35`).
                let cos_diff = c1 * c0 + s1 * s0;
                let sin_diff = s1 * c0 - c1 * s0;
                let local = [
                    p.fps * sin_diff.atan2(cos_diff),
                    p.fps * (pos[a + 1][0] - pos[a][0]),
                    p.fps * (pos[a + 1][2] - pos[a][2]),
                    pos[t][1],
                ];
                for k in 0..4 {
                    or[t * 4 + k] = (local[k] - p.local_mean[k]) / l_scale[k];
                }
            }
        }
    }
}

/// The entry point of every ISA (see the module note).
pub fn root_bridge(_cx: &Cx, p: &RootBridgeParams, x: &[f32], out: &mut [f32]) {
    reference::root_bridge(p, x, out);
}

#[cfg(test)]
mod tests {
    use super::reference::root_bridge;
    use crate::ops::RootBridgeParams;

    fn params(rows: usize, frames: usize) -> RootBridgeParams {
        RootBridgeParams {
            rows,
            frames,
            fps: 30.0,
            global_mean: [0.0; 5],
            global_std: [1.0; 5],
            local_mean: [0.0; 4],
            local_std: [1.0; 4],
        }
    }

    /// Raw (unnormalised) features with unit stats: the output is the local root scaled by
    /// 1 / sqrt(1 + 1e-5).
    #[test]
    fn walking_in_a_turn() {
        let frames = 5;
        let p = params(1, frames);
        let step = 0.1f32;
        let mut x = Vec::new();
        for t in 0..frames {
            // Heading crosses +-pi between frames 2 and 3: the wrapped difference stays small.
            let theta = 3.0 + step * t as f32;
            let theta = if theta > std::f32::consts::PI {
                theta - 2.0 * std::f32::consts::PI
            } else {
                theta
            };
            x.extend([
                0.5 * t as f32,
                0.9,
                -0.25 * t as f32,
                theta.cos(),
                theta.sin(),
            ]);
        }
        let mut out = vec![0f32; frames * 4];
        root_bridge(&p, &x, &mut out);
        let s = RootBridgeParams::scale(1.0);
        for t in 0..frames {
            let got = &out[t * 4..t * 4 + 4];
            let want = [30.0 * step, 15.0, -7.5, 0.9].map(|v| v / s);
            for k in 0..4 {
                assert!(
                    (got[k] - want[k]).abs() < 2e-4,
                    "frame {t} feature {k}: {} vs {}",
                    got[k],
                    want[k]
                );
            }
        }
        // The last frame repeats the one before, bit for bit.
        assert_eq!(out[16..19], out[12..15]);
    }

    /// Each row is independent, and the stats apply as `x * scale + mean` then
    /// `(v - mean) / scale`.
    #[test]
    fn rows_and_stats() {
        let mut p = params(2, 3);
        p.global_mean = [0.1, 0.9, -0.2, 0.0, 0.0];
        p.global_std = [1.5, 0.2, 1.4, 0.7, 0.7];
        p.local_mean = [0.01, -0.02, 0.03, 0.93];
        p.local_std = [0.75, 0.46, 0.46, 0.17];
        let row: Vec<f32> = (0..15)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.13)
            .collect();
        let mut x = row.clone();
        x.extend(row.iter().map(|v| -v));
        let mut both = vec![0f32; 24];
        root_bridge(&p, &x, &mut both);
        let mut one = vec![0f32; 12];
        let p1 = RootBridgeParams { rows: 1, ..p };
        root_bridge(&p1, &row, &mut one);
        assert_eq!(both[..12], one[..]);
        // Root y of frame 1: unnormalised, then normalised with the local stats.
        let y = row[5 + 1] * RootBridgeParams::scale(0.2) + 0.9;
        assert_eq!(one[4 + 3], (y - 0.93) / RootBridgeParams::scale(0.17));
        let mut neg = vec![0f32; 12];
        root_bridge(&p1, &x[15..], &mut neg);
        assert_eq!(both[12..], neg[..]);
    }
}
