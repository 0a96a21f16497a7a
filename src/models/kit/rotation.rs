//! Rotation conversions that the models' upstreams each write once: Kimodo's
//! `kimodo/geometry.py` and MotionBricks' `motionbricks/geometry/quaternions.py` hold the same
//! `matrix_to_quaternion`, and both read quaternions into matrices with the textbook formula.

/// `matrix_to_quaternion` (`kimodo/geometry.py#L144-187`,
/// `motionbricks/geometry/quaternions.py#L9-50`) in f32, for the row-major 3x3 `m`: the
/// candidate of the largest `|q_k|` (the first on ties, as `argmax`), divided by
/// `2 max(|q_k|, 0.1)`. Real part first (`w x y z`); the sign is not standardised (upstream
/// does not either).
pub fn matrix_to_quaternion(m: &[f32; 9]) -> [f32; 4] {
    let [m00, m01, m02, m10, m11, m12, m20, m21, m22] = *m;
    let pos_sqrt = |x: f32| if x > 0.0 { x.sqrt() } else { 0.0 };
    let q_abs = [
        pos_sqrt(1.0 + m00 + m11 + m22),
        pos_sqrt(1.0 + m00 - m11 - m22),
        pos_sqrt(1.0 - m00 + m11 - m22),
        pos_sqrt(1.0 - m00 - m11 + m22),
    ];
    let rows = [
        [q_abs[0] * q_abs[0], m21 - m12, m02 - m20, m10 - m01],
        [m21 - m12, q_abs[1] * q_abs[1], m10 + m01, m02 + m20],
        [m02 - m20, m10 + m01, q_abs[2] * q_abs[2], m12 + m21],
        [m10 - m01, m20 + m02, m21 + m12, q_abs[3] * q_abs[3]],
    ];
    // `q_abs` holds no NaN (`x > 0` is false for NaN), so the strict `>` is `argmax`.
    let mut best = 0;
    for k in 1..4 {
        if q_abs[k] > q_abs[best] {
            best = k;
        }
    }
    let d = 2.0 * q_abs[best].max(0.1);
    rows[best].map(|v| v / d)
}

/// `quaternion_to_matrix` (`kimodo/geometry.py#L190-221`,
/// `motionlib/core/utils/rotations.py#L68-94`) in f32: the row-major matrix of the `w x y z`
/// quaternion `q`, any norm (`two_s = 2 / |q|^2`).
pub fn quaternion_to_matrix(q: [f32; 4]) -> [f32; 9] {
    let [r, i, j, k] = q;
    let two_s = 2.0 / (((r * r + i * i) + j * j) + k * k);
    [
        1.0 - two_s * (j * j + k * k),
        two_s * (i * j - k * r),
        two_s * (i * k + j * r),
        two_s * (i * j + k * r),
        1.0 - two_s * (i * i + k * k),
        two_s * (j * k - i * r),
        two_s * (i * k - j * r),
        two_s * (j * k + i * r),
        1.0 - two_s * (i * i + j * j),
    ]
}

/// The rotation matrix (row-major) of the unit quaternion `w x y z`, in f64.
pub fn unit_quaternion_to_matrix_f64([w, x, y, z]: [f64; 4]) -> [[f64; 3]; 3] {
    [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - z * w),
            2.0 * (x * z + y * w),
        ],
        [
            2.0 * (x * y + z * w),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - x * w),
        ],
        [
            2.0 * (x * z - y * w),
            2.0 * (y * z + x * w),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ]
}
