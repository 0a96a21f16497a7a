//! Small f32 rotation helpers with upstream's operation order (torch float32 on the CPU).

pub use super::super::g1::Mat;
use crate::models::kit::rotation;

/// `torch.pi` as a float32 tensor operand.
pub const PI: f32 = std::f64::consts::PI as f32;
/// `2 * torch.pi` (a Python float, rounded to float32 when it meets a float32 tensor).
pub const TWO_PI: f32 = (2.0 * std::f64::consts::PI) as f32;

/// `quaternion_to_matrix` of a `w x y z` quaternion
/// (`motionlib/core/utils/rotations.py#L68-94`; `two_s = 2 / |q|^2`).
pub fn quat_to_matrix(q: &[f32]) -> Mat {
    let m = rotation::quaternion_to_matrix([q[0], q[1], q[2], q[3]]);
    [[m[0], m[1], m[2]], [m[3], m[4], m[5]], [m[6], m[7], m[8]]]
}

/// `matrix_to_quaternion` of `motionbricks/geometry/quaternions.py#L9-50` (`w x y z`).
pub fn matrix_to_quat(m: &Mat) -> [f32; 4] {
    super::super::g1::matrix_to_quaternion(m)
}

/// `a b`.
pub fn mul(a: &Mat, b: &Mat) -> Mat {
    let mut c = [[0f32; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            c[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
        }
    }
    c
}

/// `a v`.
pub fn apply(a: &Mat, v: &[f32; 3]) -> [f32; 3] {
    [
        a[0][0] * v[0] + a[0][1] * v[1] + a[0][2] * v[2],
        a[1][0] * v[0] + a[1][1] * v[1] + a[1][2] * v[2],
        a[2][0] * v[0] + a[2][1] * v[1] + a[2][2] * v[2],
    ]
}

/// `a^T`.
pub fn transpose(a: &Mat) -> Mat {
    [
        [a[0][0], a[1][0], a[2][0]],
        [a[0][1], a[1][1], a[2][1]],
        [a[0][2], a[1][2], a[2][2]],
    ]
}

/// `angle_to_Z_rotation_matrix` (`motion_backbone/demo/full_agent.py#L18-28`): yaw about
/// MuJoCo's Z (up).
pub fn rot_z(a: f32) -> Mat {
    let (c, s) = (a.cos(), a.sin());
    [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]
}

/// `angle_to_Y_rotation_matrix` (`motionlib/core/utils/rotations.py#L322-327`): yaw about
/// motion space's Y (up).
pub fn rot_y(a: f32) -> Mat {
    let (c, s) = (a.cos(), a.sin());
    [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]]
}

/// torch's float `%` (`remainder`): `fmod`, moved into the divisor's sign.
pub fn floor_mod(a: f32, b: f32) -> f32 {
    let m = a % b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        m + b
    } else {
        m
    }
}

/// `(x + pi) % (2 pi) - pi`, the agent's angle wrap (e.g. `full_agent.py#L267`).
pub fn wrap(x: f32) -> f32 {
    floor_mod(x + PI, TWO_PI) - PI
}

/// The Y-up heading of a motion-space rotation, `atan2(R02, R22)` (`full_agent.py#L401-402`).
pub fn heading_y(r: &Mat) -> f32 {
    r[0][2].atan2(r[2][2])
}

/// The Z-up heading of a MuJoCo rotation, `atan2(R10, R00)` (`full_agent.py#L530`).
pub fn heading_z(r: &Mat) -> f32 {
    r[1][0].atan2(r[0][0])
}

/// `matrix_to_cont6d` (`rotations.py#L63-65`): the first two columns.
pub fn cont6d(r: &Mat) -> [f32; 6] {
    [r[0][0], r[1][0], r[2][0], r[0][1], r[1][1], r[2][1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_mod_follows_the_divisor() {
        assert_eq!(floor_mod(-1.0, 3.0), 2.0);
        assert_eq!(floor_mod(4.0, 3.0), 1.0);
        assert_eq!(floor_mod(-3.0, 3.0), 0.0);
        assert!((wrap(3.5 * PI) - (-0.5 * PI)).abs() < 1e-6);
    }

    #[test]
    fn quaternion_round_trip() {
        let q = [0.8f32, 0.2, -0.5, 0.26];
        let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
        let q = q.map(|v| v / n);
        let back = matrix_to_quat(&quat_to_matrix(&q));
        for (a, b) in q.iter().zip(back) {
            assert!((a - b).abs() < 1e-6, "{q:?} {back:?}");
        }
    }
}
