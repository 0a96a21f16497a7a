//! Rotation conversions the exporters share: upstream's quaternion and axis-angle forms (f32, as
//! torch computes them) and BVH Euler angles (f64, straight from the matrix).

use crate::models::kimodo::skeleton::Mat3;

/// `kimodo.geometry.matrix_to_quaternion` (`kimodo/geometry.py#L144-187`) in f32, real part
/// first: the kit's [`matrix_to_quaternion`](crate::models::kit::rotation::matrix_to_quaternion).
pub use crate::models::kit::rotation::matrix_to_quaternion as quat_wxyz_upstream;

/// `kimodo.geometry.matrix_to_axis_angle` (`kimodo/geometry.py#L80-136`) in f32: the
/// quaternion above, flipped to `w > 0` (or `x > 0` when `|w| <= 1e-6`), then
/// `xyz · 2 atan2(|xyz|, w) / |xyz|` (`2 xyz` below `|xyz| < 1e-6`).
pub fn axis_angle_upstream(m: &Mat3) -> [f32; 3] {
    const EPS: f32 = 1e-6;
    let mut q = quat_wxyz_upstream(m);
    if q[0] < -EPS || (q[0].abs() <= EPS && q[1] < 0.0) {
        q = q.map(|v| -v);
    }
    let xyz = [q[1], q[2], q[3]];
    let s = (xyz[0] * xyz[0] + xyz[1] * xyz[1] + xyz[2] * xyz[2]).sqrt();
    let angle = 2.0 * s.atan2(q[0]);
    let scale = if s.abs() < EPS {
        2.0
    } else {
        angle / s.max(EPS)
    };
    xyz.map(|v| v * scale)
}

/// A rotation channel's axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    X,
    Y,
    Z,
}

/// The rotation by `angle` radians about `axis`, row-major f64.
pub fn axis_rotation(axis: Axis, angle: f64) -> [f64; 9] {
    let (s, c) = angle.sin_cos();
    match axis {
        Axis::X => [1.0, 0.0, 0.0, 0.0, c, -s, 0.0, s, c],
        Axis::Y => [c, 0.0, s, 0.0, 1.0, 0.0, -s, 0.0, c],
        Axis::Z => [c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0],
    }
}

/// `a b`, row-major f64.
pub fn mul64(a: &[f64; 9], b: &[f64; 9]) -> [f64; 9] {
    let mut c = [0.0; 9];
    for i in 0..3 {
        for j in 0..3 {
            c[i * 3 + j] = (0..3).map(|k| a[i * 3 + k] * b[k * 3 + j]).sum();
        }
    }
    c
}

/// BVH angles `[z, y, x]` in radians with `m = Rz(z) Ry(y) Rx(x)` (the channel order
/// `Zrotation Yrotation Xrotation`), read directly off the matrix in f64: no quaternion in
/// between, so a frame's angles depend only on its own matrix (upstream's bvhio path goes
/// matrix -> quaternion -> Euler, the jitter of upstream PR #43).
///
/// The matrix is first replaced by its nearest rotation ([`nearest_rotation`]): f32 rotations
/// are orthonormal only to ~1e-5 down SOMA's long chains, and reading angles off single entries
/// of a sheared matrix would turn that shear into angle error (measured 2.5e-5 rad on the demo
/// clips without it). Then `m20 = -sin y`, `(m00, m10) = cos y (cos z, sin z)`,
/// `(m21, m22) = cos y (sin x, cos x)`. At gimbal lock (`cos y` below 1e-12) x is set to 0 and
/// z read from `(m11, -m01)`.
pub fn euler_zyx(m: &Mat3) -> [f64; 3] {
    let raw = m.map(f64::from);
    let m = nearest_rotation(&raw).unwrap_or(raw);
    let cy = m[0].hypot(m[3]);
    let y = (-m[6]).atan2(cy);
    if cy > 1e-12 {
        [m[3].atan2(m[0]), y, m[7].atan2(m[8])]
    } else {
        [(-m[1]).atan2(m[4]), y, 0.0]
    }
}

fn det64(m: &[f64; 9]) -> f64 {
    m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6])
        + m[2] * (m[3] * m[7] - m[4] * m[6])
}

/// The rotation nearest to `m` (its polar factor), by Newton's iteration
/// `X <- (X + X^-T) / 2`, which converges quadratically from a near-rotation. `None` when `m`
/// is singular or not near a proper rotation.
pub fn nearest_rotation(m: &[f64; 9]) -> Option<[f64; 9]> {
    let mut x = *m;
    for _ in 0..30 {
        let d = det64(&x);
        if !d.is_finite() || d <= 1e-12 {
            return None;
        }
        // X^-T = cofactor(X) / det(X).
        let cof = [
            x[4] * x[8] - x[5] * x[7],
            x[5] * x[6] - x[3] * x[8],
            x[3] * x[7] - x[4] * x[6],
            x[2] * x[7] - x[1] * x[8],
            x[0] * x[8] - x[2] * x[6],
            x[1] * x[6] - x[0] * x[7],
            x[1] * x[5] - x[2] * x[4],
            x[2] * x[3] - x[0] * x[5],
            x[0] * x[4] - x[1] * x[3],
        ];
        let next: [f64; 9] = std::array::from_fn(|k| 0.5 * (x[k] + cof[k] / d));
        let step = next
            .iter()
            .zip(&x)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        x = next;
        if step < 1e-15 {
            break;
        }
    }
    Some(x)
}

/// The angle in radians between the rotations nearest to `a` and `b` (the geodesic distance:
/// `atan2(|vee(R - R^T)| / 2, (tr R - 1) / 2)` with `R = A^T B`); infinite when either is not
/// near a rotation. Rotation matrices computed in f32 are orthonormal only to about 1e-6 per
/// product (more down a joint chain), so this is how far apart two of them are as rotations,
/// free of that noise.
pub fn rotation_distance(a: &[f64; 9], b: &[f64; 9]) -> f64 {
    let (Some(a), Some(b)) = (nearest_rotation(a), nearest_rotation(b)) else {
        return f64::INFINITY;
    };
    let at = [a[0], a[3], a[6], a[1], a[4], a[7], a[2], a[5], a[8]];
    let r = mul64(&at, &b);
    let v = [r[7] - r[5], r[2] - r[6], r[3] - r[1]];
    let s = 0.5 * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let c = 0.5 * (r[0] + r[4] + r[8] - 1.0);
    s.atan2(c)
}

/// The largest [`rotation_distance`] between matching matrices of two `[N, 3, 3]` arrays
/// (infinite when the lengths differ).
pub fn max_rotation_distance(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    a.chunks_exact(9)
        .zip(b.chunks_exact(9))
        .map(|(x, y)| {
            let x: [f64; 9] = std::array::from_fn(|k| f64::from(x[k]));
            let y: [f64; 9] = std::array::from_fn(|k| f64::from(y[k]));
            rotation_distance(&x, &y)
        })
        .fold(
            0.0,
            |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to32(m: [f64; 9]) -> Mat3 {
        m.map(|v| v as f32)
    }

    #[test]
    fn euler_zyx_recovers_angles_and_matrices() {
        for &(z, y, x) in &[
            (0.3, -0.7, 1.1),
            (-2.9, 1.2, -3.0),
            (0.0, 0.0, 0.0),
            (1.0, std::f64::consts::FRAC_PI_2, 0.4),
        ] {
            let m = mul64(
                &mul64(&axis_rotation(Axis::Z, z), &axis_rotation(Axis::Y, y)),
                &axis_rotation(Axis::X, x),
            );
            let [a, b, c] = euler_zyx(&to32(m));
            let back = mul64(
                &mul64(&axis_rotation(Axis::Z, a), &axis_rotation(Axis::Y, b)),
                &axis_rotation(Axis::X, c),
            );
            for (p, q) in m.iter().zip(&back) {
                assert!((p - q).abs() < 1e-6, "{z} {y} {x}: {m:?} vs {back:?}");
            }
        }
    }

    #[test]
    fn rotation_distance_ignores_shear_and_measures_angle() {
        let a = axis_rotation(Axis::Y, 0.4);
        let b = mul64(&a, &axis_rotation(Axis::X, 1e-4));
        assert!((rotation_distance(&a, &b) - 1e-4).abs() < 1e-12);
        // A sheared copy of `a` is still `a` as a rotation.
        let mut sheared = a;
        sheared[1] += 3e-6;
        sheared[4] -= 2e-6;
        assert!(rotation_distance(&a, &sheared) < 3e-6);
        assert_eq!(rotation_distance(&a, &[0.0; 9]), f64::INFINITY);
    }

    #[test]
    fn quaternion_and_axis_angle_of_known_rotations() {
        let id = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        assert_eq!(quat_wxyz_upstream(&id), [1.0, 0.0, 0.0, 0.0]);
        assert_eq!(axis_angle_upstream(&id), [0.0, 0.0, 0.0]);
        // 90 degrees about z.
        let m = to32(axis_rotation(Axis::Z, std::f64::consts::FRAC_PI_2));
        let aa = axis_angle_upstream(&m);
        assert!(aa[0].abs() < 1e-7 && aa[1].abs() < 1e-7);
        assert!((aa[2] - std::f32::consts::FRAC_PI_2).abs() < 1e-6, "{aa:?}");
        // 180 degrees about x: the x branch; w = 0 and x > 0 after the flip.
        let aa = axis_angle_upstream(&[1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, -1.0]);
        assert!((aa[0] - std::f32::consts::PI).abs() < 1e-6, "{aa:?}");
    }
}
