//! Context canonicalisation, un-canonicalisation and the first-frames blend
//! (`motion_backbone/demo/full_agent.py#L523-587`, #L489-499).

use super::math::{apply, heading_z, matrix_to_quat, mul, quat_to_matrix, rot_z, transpose};
use crate::models::kit::linspace::linspace_f32;
use crate::models::motionbricks::dims::QPOS;

/// What canonicalisation removed: the first frame's yaw and ground position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame0 {
    /// Yaw about MuJoCo Z, `atan2(R10, R00)` of the first frame's root (0 where NaN).
    pub heading: f32,
    /// The first frame's root position with z = 0.
    pub position: [f32; 3],
}

/// Canonicalise context qpos rows in place by the first frame's yaw and XY
/// (`_canonicalize_mujoco_qpos`, #L523-553): root positions relative to that ground point,
/// rotated by the inverse yaw; root quaternions rotated likewise.
pub fn canonicalize(qpos: &mut [f32]) -> Frame0 {
    let first = [qpos[0] * 1.0, qpos[1] * 1.0, qpos[2] * 0.0];
    let mut heading = heading_z(&quat_to_matrix(&qpos[3..7]));
    if heading.is_nan() {
        heading = 0.0;
    }
    let inv = transpose(&rot_z(heading));
    for row in qpos.chunks_exact_mut(QPOS) {
        let p = [row[0] - first[0], row[1] - first[1], row[2] - first[2]];
        let p = apply(&inv, &p);
        let q = matrix_to_quat(&mul(&inv, &quat_to_matrix(&row[3..7])));
        row[..3].copy_from_slice(&p);
        row[3..7].copy_from_slice(&q);
    }
    Frame0 {
        heading,
        position: first,
    }
}

/// A MuJoCo-frame direction into the canonical frame (#L547-550).
pub fn canonical_direction(f: &Frame0, d: &[f32; 3]) -> [f32; 3] {
    apply(&transpose(&rot_z(f.heading)), d)
}

/// A waypoint into the canonical frame (#L556-561): the heading minus the first yaw, the
/// position relative to the first ground point, rotated by the inverse yaw.
pub fn canonical_waypoint(f: &Frame0, position: &[f32; 3], heading: f32) -> ([f32; 3], f32) {
    let p = [
        position[0] - f.position[0],
        position[1] - f.position[1],
        position[2] - f.position[2],
    ];
    (
        apply(&transpose(&rot_z(f.heading)), &p),
        heading - f.heading,
    )
}

/// Put planned qpos rows back into the world in place (`_uncanonicalize_mujoco_qpos`,
/// #L563-587): remove the plan's own first-frame yaw, apply the context's, and move the
/// first frame's ground point onto the context's.
pub fn uncanonicalize(qpos: &mut [f32], f: &Frame0) {
    let first = rot_z(f.heading);
    let cur = heading_z(&quat_to_matrix(&qpos[3..7]));
    let cur_t = transpose(&rot_z(cur));
    let mut p0 = [0f32; 3];
    for (i, row) in qpos.chunks_exact_mut(QPOS).enumerate() {
        let r = mul(&first, &mul(&cur_t, &quat_to_matrix(&row[3..7])));
        let p = apply(&first, &apply(&cur_t, &[row[0], row[1], row[2]]));
        if i == 0 {
            p0 = p;
        }
        let p = [
            p[0] - p0[0] * 1.0 + f.position[0],
            p[1] - p0[1] * 1.0 + f.position[1],
            p[2] - p0[2] * 0.0 + f.position[2],
        ];
        row[..3].copy_from_slice(&p);
        row[3..7].copy_from_slice(&matrix_to_quat(&r));
    }
}

/// `torch.linspace(0.3, 0.7, n)` in float32 (the first half from the start, the second from
/// the end, as ATen's CPU kernel steps).
pub fn blend_weights(n: usize) -> Vec<f32> {
    linspace_f32(0.3, 0.7, n)
}

/// Blend the first context-many planned rows with the raw context (#L489-499): root
/// position and hinge angles `ctx (1 - w) + plan w`, the root quaternion kept.
pub fn blend(qpos: &mut [f32], raw_context: &[f32]) {
    let n = raw_context.len() / QPOS;
    let w = blend_weights(n);
    for (i, &w) in w.iter().enumerate() {
        let c = &raw_context[i * QPOS..(i + 1) * QPOS];
        let q = &mut qpos[i * QPOS..(i + 1) * QPOS];
        for j in (0..3).chain(7..QPOS) {
            q[j] = c[j] * (1.0 - w) + q[j] * w;
        }
    }
}
