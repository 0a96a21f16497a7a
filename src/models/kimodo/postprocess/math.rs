//! The f32 vector, quaternion and rigid-transform arithmetic of upstream's MotionCorrection
//! (`MotionCorrection/src/cpp/Math/`), written as plain scalar Rust so it builds on every
//! target. Upstream computes it with SSE intrinsics (DirectXMath style, SIMDe on aarch64);
//! each function here performs the same f32 operations in the same order as the intrinsics
//! (additions are not reassociated), including upstream's polynomial `sin`/`cos`/`atan`
//! ([`dx_sin_cos`], [`dx_atan2`]); scalar `acosf`/`atan2f`/`expf` calls are libm's on both
//! sides. No FMA contraction happens on either side (upstream builds with `-msse4.1 -mavx`,
//! no `-mfma`; Rust never contracts).
//!
//! Conventions as upstream: quaternions are `[x, y, z, w]`; the product `a.then(b)` is
//! upstream's `a * b`, "rotate by `a`, then by `b`" (the Hamilton product `b a`); a transform
//! product `a.then(b)` applies `a` (a child's local transform) then `b` (its parent's).

use std::f32::consts::{FRAC_PI_2, PI, TAU};

/// Upstream's `Math::OneDivTwoPi` (`Constants.h#L20`, `0.159154943f`).
const ONE_DIV_TWO_PI: f32 = 0.159_154_94;

/// A 3-vector (upstream's `Vector` with its w lane unused).
pub type Vec3 = [f32; 3];

pub fn sub(a: Vec3, b: Vec3) -> Vec3 {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

pub fn add(a: Vec3, b: Vec3) -> Vec3 {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

pub fn scale(a: Vec3, s: f32) -> Vec3 {
    [a[0] * s, a[1] * s, a[2] * s]
}

/// `Vector::Dot3` (`Vector.inl#L1251-1266`): `(x + y) + z`.
pub fn dot3(a: Vec3, b: Vec3) -> f32 {
    (a[0] * b[0] + a[1] * b[1]) + a[2] * b[2]
}

/// `Vector::Length3` (`Vector.inl#L1667-1687`): note the order `(x + z) + y`.
pub fn length3(a: Vec3) -> f32 {
    ((a[0] * a[0] + a[2] * a[2]) + a[1] * a[1]).sqrt()
}

/// `Vector::Cross3` (`Vector.inl#L1226-1238`).
pub fn cross3(a: Vec3, b: Vec3) -> Vec3 {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// `Vector::Normalize3` (`Vector.inl#L1426-1456`): divide by the length (dot order
/// `(x + y) + z`); a zero vector stays zero, an infinite length gives NaN.
pub fn normalized3(a: Vec3) -> Vec3 {
    let len_sq = dot3(a, a);
    let len = len_sq.sqrt();
    if len_sq == f32::INFINITY {
        return [f32::NAN; 3];
    }
    if len == 0.0 {
        return [0.0; 3];
    }
    [a[0] / len, a[1] / len, a[2] / len]
}

/// `Vector::Lerp` (`Vector.inl#L135-146`): `(to - from) t + from`.
pub fn lerp3(from: Vec3, to: Vec3, t: f32) -> Vec3 {
    [
        (to[0] - from[0]) * t + from[0],
        (to[1] - from[1]) * t + from[1],
        (to[2] - from[2]) * t + from[2],
    ]
}

/// `Vector::Round` (`Vector.inl#L1578-1590`): add and subtract `2^23` with the value's sign
/// (round half to even); magnitudes above `2^23` are already integers.
fn dx_round(x: f32) -> f32 {
    const NO_FRACTION: f32 = 8_388_608.0;
    if x.abs() <= NO_FRACTION {
        let magic = NO_FRACTION.copysign(x);
        (x + magic) - magic
    } else {
        x
    }
}

/// `Vector::AngleMod2Pi` then the reflection into `[-pi/2, pi/2]` of `Vector::SinCos`
/// (`Vector.inl#L807-823`, #L878-885): the reduced angle and the cosine's sign.
fn dx_reduce(angle: f32) -> (f32, f32) {
    let x = angle - dx_round(angle * ONE_DIV_TWO_PI) * TAU;
    let c = PI.copysign(x);
    if x.abs() <= FRAC_PI_2 {
        (x, 1.0)
    } else {
        (c - x, -1.0)
    }
}

/// `Vector::SinCos` (`Vector.inl#L807-876`, DirectXMath's `XMVectorSinCos`): degree-11 and
/// degree-10 minimax polynomials, evaluated in upstream's order.
pub fn dx_sin_cos(angle: f32) -> (f32, f32) {
    const S0: [f32; 4] = [
        -0.166_666_67,
        0.008_333_331,
        -0.000_198_408_74,
        2.752_556_2e-6,
    ];
    const S1: f32 = -2.388_985_9e-8;
    const C0: [f32; 4] = [-0.5, 0.041_666_638, -0.001_388_837_8, 2.476_049_5e-5];
    const C1: f32 = -2.605_161_5e-7;
    let (x, sign) = dx_reduce(angle);
    let x2 = x * x;
    let mut s = S1 * x2;
    for k in [3, 2, 1, 0] {
        s = (s + S0[k]) * x2;
    }
    let sin = (s + 1.0) * x;
    let mut c = C1 * x2;
    for k in [3, 2, 1, 0] {
        c = (c + C0[k]) * x2;
    }
    let cos = (c + 1.0) * sign;
    (sin, cos)
}

/// `Vector::ATan` (`Vector.inl#L449-512`, `XMVectorATan`): odd degree-17 polynomial on
/// `[-1, 1]`, `±pi/2 - atan(1/v)` outside.
fn dx_atan(v: f32) -> f32 {
    const T0: [f32; 4] = [-0.333_331_45, 0.199_935_51, -0.142_089, 0.106_562_64];
    const T1: [f32; 4] = [
        -0.075_289_64,
        0.042_909_614,
        -0.016_165_737,
        0.002_866_225_7,
    ];
    let sign = if v.abs() <= 1.0 {
        0.0
    } else if v > 1.0 {
        1.0
    } else {
        -1.0
    };
    let x = if sign == 0.0 { v } else { 1.0 / v };
    let x2 = x * x;
    let mut r = T1[3] * x2;
    for k in [2, 1, 0] {
        r = (r + T1[k]) * x2;
    }
    for k in [3, 2, 1, 0] {
        r = (r + T0[k]) * x2;
    }
    let r = (r + 1.0) * x;
    if sign == 0.0 { r } else { sign * FRAC_PI_2 - r }
}

/// `Vector::ATan2` (`Vector.inl#L512-548`, `XMVectorATan2`) for finite arguments: the
/// special cases for zero arguments, then `atan(y / x)` plus `pi` (signed like `y`) when `x`
/// is negative. Infinite arguments do not occur here (they are zeroed on input).
pub fn dx_atan2(y: f32, x: f32) -> f32 {
    let x_positive = x.is_sign_positive();
    if y == 0.0 {
        return if x_positive {
            0.0f32.copysign(y)
        } else {
            PI.copysign(y)
        };
    }
    if x == 0.0 {
        return FRAC_PI_2.copysign(y);
    }
    let r0 = dx_atan(y / x);
    let r1 = if x_positive { -0.0 } else { PI.copysign(y) };
    r0 + r1
}

/// A quaternion `[x, y, z, w]` (upstream's `Math::Quaternion`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quat(pub [f32; 4]);

/// `Vector::Dot4` / `Length4` lane order: `(x + z) + (y + w)` (`Vector.inl#L1268-1277`).
fn dot4(a: [f32; 4], b: [f32; 4]) -> f32 {
    let p = [a[0] * b[0], a[1] * b[1], a[2] * b[2], a[3] * b[3]];
    (p[1] + p[3]) + (p[0] + p[2])
}

impl Quat {
    pub const IDENTITY: Quat = Quat([0.0, 0.0, 0.0, 1.0]);

    pub fn xyz(self) -> Vec3 {
        [self.0[0], self.0[1], self.0[2]]
    }

    /// `Quaternion::operator*` (`Quaternion.inl#L533-573`): `self` then `rhs`, summed as
    /// `(w-term + x-term) + (y-term + z-term)` like the SSE code.
    pub fn then(self, rhs: Quat) -> Quat {
        let a = self.0;
        let b = rhs.0;
        let w = [b[3] * a[0], b[3] * a[1], b[3] * a[2], b[3] * a[3]];
        let x = [b[0] * a[3], -(b[0] * a[2]), b[0] * a[1], -(b[0] * a[0])];
        let y = [b[1] * a[2], b[1] * a[3], -(b[1] * a[0]), -(b[1] * a[1])];
        let z = [-(b[2] * a[1]), b[2] * a[0], b[2] * a[3], -(b[2] * a[2])];
        Quat(std::array::from_fn(|i| (w[i] + x[i]) + (y[i] + z[i])))
    }

    /// `Quaternion::Conjugate` (`Quaternion.inl#L359-364`).
    pub fn conjugate(self) -> Quat {
        let q = self.0;
        Quat([-q[0], -q[1], -q[2], q[3]])
    }

    /// `Quaternion::Normalize` = `Vector::Normalize4` (`Vector.inl#L1458-1490`).
    pub fn normalized(self) -> Quat {
        let len_sq = dot4(self.0, self.0);
        let len = len_sq.sqrt();
        if len_sq == f32::INFINITY {
            return Quat([f32::NAN; 4]);
        }
        if len == 0.0 {
            return Quat([0.0; 4]);
        }
        Quat(self.0.map(|v| v / len))
    }

    /// `Quaternion::RotateVector` (`Quaternion.inl#L345-350`): `conj(q) * v * q` in
    /// upstream's product order.
    pub fn rotate(self, v: Vec3) -> Vec3 {
        let a = Quat([v[0], v[1], v[2], 0.0]);
        self.conjugate().then(a).then(self).xyz()
    }

    /// `Quaternion::RotateVectorInverse` (`Quaternion.inl#L352-357`).
    pub fn rotate_inverse(self, v: Vec3) -> Vec3 {
        let a = Quat([v[0], v[1], v[2], 0.0]);
        self.then(a).then(self.conjugate()).xyz()
    }

    /// `Quaternion::YAxis` (`Quaternion.inl#L437-457`).
    pub fn y_axis(self) -> Vec3 {
        let [x, y, z, w] = self.0;
        let s = 2.0 * w;
        let y2 = 2.0 * y;
        [y2 * x + s * -z, y2 * y + s * w - 1.0, y2 * z + s * x]
    }

    /// `Quaternion::ZAxis` (`Quaternion.inl#L459-479`).
    pub fn z_axis(self) -> Vec3 {
        let [x, y, z, w] = self.0;
        let s = 2.0 * w;
        let z2 = 2.0 * z;
        [x * z2 + s * y, y * z2 + s * -x, z * z2 + s * w - 1.0]
    }

    /// `Quaternion(axis, angle)` (`Quaternion.inl#L264-281`): `(axis sin(a/2), cos(a/2))`.
    pub fn from_axis_angle(axis: Vec3, angle: f32) -> Quat {
        let (s, c) = dx_sin_cos(0.5 * angle);
        Quat([axis[0] * s, axis[1] * s, axis[2] * s, c])
    }

    /// `Quaternion::FromRotationBetweenVectors` (`Quaternion.inl#L12-41`, #L69-74): both
    /// normalised; identity when parallel (dot >= 1 - 1e-6), 180 degrees about
    /// `(-z, y, x)` when opposite, else `normalize((cross, dot + |(cross, dot)|))`.
    pub fn between(from: Vec3, to: Vec3) -> Quat {
        const EPSILON: f32 = 1.0e-6;
        let from = normalized3(from);
        let to = normalized3(to);
        let dot = dot3(from, to);
        if dot >= 1.0 - EPSILON {
            Quat::IDENTITY
        } else if dot <= EPSILON - 1.0 {
            Quat([-from[2], from[1], from[0], 0.0]).normalized()
        } else {
            let c = cross3(from, to);
            let q = [c[0], c[1], c[2], dot];
            let len = dot4(q, q).sqrt();
            Quat([q[0], q[1], q[2], q[3] + len]).normalized()
        }
    }

    /// `Quaternion::NLerp` (`Quaternion.inl#L76-91`).
    pub fn nlerp(from: Quat, to: Quat, t: f32) -> Quat {
        let from = if dot4(from.0, to.0) < 0.0 {
            Quat(from.0.map(|v| -v))
        } else {
            from
        };
        Quat(std::array::from_fn(|i| {
            (to.0[i] - from.0[i]) * t + from.0[i]
        }))
        .normalized()
    }

    /// `Quaternion::SLerp` (`Quaternion.inl#L93-135`, DirectXMath's `XMQuaternionSlerpV`):
    /// not renormalised; linear weights when the angle is below ~0.26 degrees.
    pub fn slerp(from: Quat, to: Quat, t: f32) -> Quat {
        let cos0 = dot4(from.0, to.0);
        let sign = if cos0 < 0.0 { -1.0f32 } else { 1.0 };
        let cos_omega = cos0 * sign;
        let use_sin = cos_omega < 1.0 - 0.00001;
        let sin_omega = (1.0 - cos_omega * cos_omega).sqrt();
        let omega = dx_atan2(sin_omega, cos_omega);
        let v01 = [1.0 + -t, t];
        let s = if use_sin {
            [
                dx_sin_cos(v01[0] * omega).0 / sin_omega,
                dx_sin_cos(v01[1] * omega).0 / sin_omega,
            ]
        } else {
            v01
        };
        let s1 = s[1] * sign;
        Quat(std::array::from_fn(|i| from.0[i] * s[0] + s1 * to.0[i]))
    }

    /// `Quaternion::LookRotation` (`Quaternion.cpp#L19-23`): the rotation whose rows are
    /// `t = normalize(up x forward)`, `forward x t`, `forward`.
    pub fn look_rotation(forward: Vec3, up: Vec3) -> Quat {
        let t = normalized3(cross3(up, forward));
        rotation_from_rows([t, cross3(forward, t), forward])
    }
}

/// `Matrix::GetRotation` (`Matrix.inl#L462-523`, after RTM): the quaternion of a rotation
/// given by its rows (the axes), normalised.
fn rotation_from_rows(m: [Vec3; 3]) -> Quat {
    let trace = m[0][0] + m[1][1] + m[2][2];
    if trace > 0.0 {
        let inv_trace = 1.0 / (trace + 1.0).sqrt();
        let half = inv_trace * 0.5;
        Quat([
            (m[1][2] - m[2][1]) * half,
            (m[2][0] - m[0][2]) * half,
            (m[0][1] - m[1][0]) * half,
            (1.0 / inv_trace) * 0.5,
        ])
        .normalized()
    } else {
        let mut i0 = 0;
        if m[1][1] > m[0][0] {
            i0 = 1;
        }
        if m[2][2] > m[i0][i0] {
            i0 = 2;
        }
        let i1 = (i0 + 1) % 3;
        let i2 = (i1 + 1) % 3;
        let pseudo = 1.0 + m[i0][i0] - m[i1][i1] - m[i2][i2];
        let inv = 1.0 / pseudo.sqrt();
        let half = inv * 0.5;
        let mut q = [0.0f32; 4];
        q[i0] = (1.0 / inv) * 0.5;
        q[i1] = half * (m[i0][i1] + m[i1][i0]);
        q[i2] = half * (m[i0][i2] + m[i2][i0]);
        q[3] = half * (m[i1][i2] - m[i2][i1]);
        Quat(q).normalized()
    }
}

/// A rigid transform (upstream's `Math::Transform` with unit scale: every transform this
/// algorithm builds has scale 1, so the scale lane and the negative-scale matrix path of
/// `Transform::operator*=` never take part).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transform {
    pub rotation: Quat,
    pub translation: Vec3,
}

impl Transform {
    pub const IDENTITY: Transform = Transform {
        rotation: Quat::IDENTITY,
        translation: [0.0; 3],
    };

    /// `Transform::operator*=` (`Transform.inl#L436-472`, normal case): rotation
    /// `normalize(self.rot * rhs.rot)`, translation `rhs.rot(self.t) + rhs.t`.
    pub fn then(self, rhs: Transform) -> Transform {
        Transform {
            rotation: self.rotation.then(rhs.rotation).normalized(),
            translation: add(rhs.rotation.rotate(self.translation), rhs.translation),
        }
    }

    /// `Transform::TransformPoint` (`Transform.inl#L356-362`) at unit scale.
    pub fn transform_point(self, p: Vec3) -> Vec3 {
        add(self.translation, self.rotation.rotate(p))
    }

    /// `Transform::Delta(self, to)` (`Transform.inl#L70-111`, positive-scale case), i.e.
    /// `self.GetDeltaToOther(to)`: rotation `to.rot * inverse(self.rot)` and the translation
    /// difference rotated by that inverse. `GetInverse` divides the conjugate by the
    /// quaternion's length (`Quaternion.inl#L385-393`).
    pub fn delta_to(self, to: Transform) -> Transform {
        let q = self.rotation.0;
        let len = dot4(q, q).sqrt();
        let conj = self.rotation.conjugate().0;
        let inv = if len <= 1.0e-6 {
            Quat([0.0; 4])
        } else {
            Quat(conj.map(|v| v / len))
        };
        Transform {
            rotation: to.rotation.then(inv),
            translation: inv.rotate(sub(to.translation, self.translation)),
        }
    }
}

/// `Animation::JointLocalToGlobal` (`Utility.cpp#L1087-1101`): the product of the local
/// transforms from `index` up to the root, then times the identity root transform.
pub fn joint_to_global(parents: &[i32], index: i32, pose: &[Transform]) -> Transform {
    let mut world = Transform::IDENTITY;
    let mut i = index;
    while i > -1 {
        world = world.then(pose[i as usize]);
        i = parents[i as usize];
    }
    world.then(Transform::IDENTITY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_are_upstreams_f32_values() {
        // `Constants.h#L17-21`, as the C++ compiler rounds them to f32.
        for (text, ours) in [
            ("3.141592654", PI),
            ("6.283185307", TAU),
            ("0.159154943", ONE_DIV_TWO_PI),
            ("1.570796327", FRAC_PI_2),
        ] {
            assert_eq!(
                text.parse::<f32>().unwrap().to_bits(),
                ours.to_bits(),
                "{text}"
            );
        }
        // `SIMD.h#L91`, written shorter here (clippy): the same f32.
        assert_eq!("-0.1420889944".parse::<f32>().unwrap(), -0.142_089f32);
    }

    #[test]
    fn polynomials_track_libm() {
        for i in -2000..=2000 {
            let a = i as f32 * 0.005;
            let (s, c) = dx_sin_cos(a);
            assert!(
                (s - a.sin()).abs() < 1e-6 && (c - a.cos()).abs() < 1e-6,
                "{a}"
            );
            let (y, x) = (a.sin() * 2.0, a.cos() * 0.5);
            assert!((dx_atan2(y, x) - y.atan2(x)).abs() < 2e-6, "{a}");
        }
    }

    #[test]
    fn product_order_is_self_then_rhs() {
        // 90 degrees about z, then 90 degrees about x: x axis -> y axis -> z axis.
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let rz = Quat([0.0, 0.0, h, h]);
        let rx = Quat([h, 0.0, 0.0, h]);
        let v = rz.then(rx).rotate([1.0, 0.0, 0.0]);
        assert!((v[0]).abs() < 1e-6 && (v[1]).abs() < 1e-6 && (v[2] - 1.0).abs() < 1e-6);
        let back = rz.then(rx).rotate_inverse(v);
        assert!((back[0] - 1.0).abs() < 1e-6);
    }

    #[test]
    fn look_rotation_inverts_the_axes() {
        let q = Quat([0.1, -0.3, 0.2, 0.9]).normalized();
        let r = Quat::look_rotation(normalized3(q.z_axis()), normalized3(q.y_axis()));
        let d = dot4(q.0, r.0).abs();
        assert!((d - 1.0).abs() < 1e-6, "{q:?} {r:?}");
    }

    #[test]
    fn between_maps_the_source_onto_the_target() {
        let a = [0.3, 0.5, -0.2];
        let b = [-0.1, 0.4, 0.8];
        let q = Quat::between(a, b);
        let r = q.rotate(normalized3(a));
        let nb = normalized3(b);
        for k in 0..3 {
            assert!((r[k] - nb[k]).abs() < 1e-6, "{r:?} {nb:?}");
        }
    }
}
