//! Upstream's analytic IK (`MotionCorrection/src/cpp/AnimProcessing/InverseKinematics.cpp`),
//! on a pose of local transforms with parents given as `i32` (`-1` for the root).

use super::math::{Quat, Transform, Vec3, cross3, dot3, length3, lerp3, normalized3, sub};

/// `Math::Clamp` (`Scalar.h#L73-77`): `Min(Max(v, lo), hi)` with `Max(a, b) = a >= b ? a : b`
/// and `Min(a, b) = a <= b ? a : b` (no panic when `lo > hi`, unlike `f32::clamp`).
pub fn clamp(v: f32, lo: f32, hi: f32) -> f32 {
    let m = if v >= lo { v } else { lo };
    if m <= hi { m } else { hi }
}

/// The world transform of `index`'s parent chain above `a` (the product of the locals of
/// `a`'s ancestors, child first), as the IK functions build it (#L79-87, #L179-187).
fn ancestors_world(pose: &[Transform], parents: &[i32], a: usize) -> Transform {
    let mut world = Transform::IDENTITY;
    let mut idx = parents[a];
    while idx >= 0 {
        world = world.then(pose[idx as usize]);
        idx = parents[idx as usize];
    }
    world.then(Transform::IDENTITY)
}

/// `getAngleWithTwoSideVectors` (#L16-25).
fn angle_between(l: Vec3, r: Vec3) -> f32 {
    let ln = normalized3(l);
    let rn = normalized3(r);
    let cosine = dot3(ln, rn);
    let sine = length3(cross3(ln, rn));
    sine.atan2(cosine)
}

/// `getAngleWithCosineRule` (#L27-34).
fn cosine_rule(left: f32, right: f32, across: f32) -> f32 {
    let v = (right * right + left * left - across * across) / (2.0 * left * right);
    clamp(v, -1.0, 1.0).acos()
}

/// `weight` clamped to `[0, 1]`, or `None` where it is 0 (the solver does nothing).
fn active_weight(weight: f32) -> Option<f32> {
    let weight = clamp(weight, 0.0, 1.0);
    (weight > 0.0).then_some(weight)
}

/// The parent `a` of joint `b` and the world transforms of `a`'s parent, `a` and `b`; `None`
/// when `b` is the root.
fn upper_chain(
    pose: &[Transform],
    parents: &[i32],
    b_idx: usize,
) -> Option<(usize, Transform, Transform, Transform)> {
    let a_idx = usize::try_from(parents[b_idx]).ok()?;
    let a_parent = ancestors_world(pose, parents, a_idx);
    let a_world = pose[a_idx].then(a_parent);
    let b_world = pose[b_idx].then(a_world);
    Some((a_idx, a_parent, a_world, b_world))
}

/// `IK::TwoBoneIk` (#L39-158): bend `a` (grandparent of `c`) and `b` (parent) so that
/// `|a c|` matches `|a t|` in the plane given by the hint offset, then swing `a` so that `c`
/// points at `t`. `weight` is clamped to `[0, 1]`; 0 does nothing.
pub fn two_bone(
    pose: &mut [Transform],
    c_idx: usize,
    weight: f32,
    target: Vec3,
    parents: &[i32],
    hint_offset: Vec3,
) {
    let Some(weight) = active_weight(weight) else {
        return;
    };
    let Ok(b_idx) = usize::try_from(parents[c_idx]) else {
        return;
    };
    let Some((a_idx, a_parent, a_world, b_world)) = upper_chain(pose, parents, b_idx) else {
        return;
    };
    let c_world = pose[c_idx].then(b_world);
    let a = a_world.translation;
    let b = b_world.translation;
    let c = c_world.translation;
    let t = lerp3(c, target, weight);

    let eps = 0.0001f32;
    let l_ab = length3(sub(b, a));
    let l_bc = length3(sub(c, b));
    let l_at = clamp(length3(sub(a, t)), eps, (l_ab + l_bc) * 0.999);
    let bac_now = angle_between(sub(a, b), sub(a, c));
    let abc_now = angle_between(sub(b, a), sub(b, c));
    if l_ab < eps || l_bc < eps || l_at < eps {
        return;
    }
    let bac_want = cosine_rule(l_ab, l_at, l_bc);
    let abc_want = cosine_rule(l_ab, l_bc, l_at);

    let axis = cross3(sub(c, a), sub(b_world.transform_point(hint_offset), a));
    let l = length3(axis);
    let axis = if l == 0.0 {
        [0.0, 0.0, 1.0]
    } else {
        [axis[0] / l, axis[1] / l, axis[2] / l]
    };
    let in_b = b_world.rotation.rotate_inverse(axis);
    let rot_b = Transform {
        rotation: Quat::from_axis_angle(in_b, abc_want - abc_now),
        translation: [0.0; 3],
    };
    pose[b_idx] = rot_b.then(pose[b_idx]);
    let in_a = a_world.rotation.rotate_inverse(axis);
    let rot_a = Transform {
        rotation: Quat::from_axis_angle(in_a, bac_want - bac_now),
        translation: [0.0; 3],
    };
    pose[a_idx] = rot_a.then(pose[a_idx]);

    // Stage 2 (#L144-156) swings with the end point as it was before stage 1 (upstream
    // reuses `c`), in the frame of the updated `a`.
    let a_world = pose[a_idx].then(a_parent);
    let ac = a_world.rotation.rotate_inverse(sub(c, a));
    let at = a_world.rotation.rotate_inverse(sub(target, a));
    let swing = Transform {
        rotation: Quat::between(ac, at),
        translation: [0.0; 3],
    };
    pose[a_idx] = swing.then(pose[a_idx]);
}

/// `IK::OneBoneIk` (#L160-200): rotate the parent `a` of `b` so that `b` points at the target
/// (the rotation is pre-multiplied onto `a`'s local rotation, not renormalised).
pub fn one_bone(pose: &mut [Transform], b_idx: usize, weight: f32, target: Vec3, parents: &[i32]) {
    let Some(weight) = active_weight(weight) else {
        return;
    };
    let Some((a_idx, _, a_world, b_world)) = upper_chain(pose, parents, b_idx) else {
        return;
    };
    let ab = a_world
        .rotation
        .rotate_inverse(sub(b_world.translation, a_world.translation));
    let at = a_world
        .rotation
        .rotate_inverse(sub(target, a_world.translation));
    let delta = Quat::nlerp(Quat::IDENTITY, Quat::between(ab, at), weight);
    pose[a_idx].rotation = delta.then(pose[a_idx].rotation);
}

#[cfg(test)]
mod tests {
    use super::super::math::joint_to_global;
    use super::*;

    fn leg() -> (Vec<Transform>, Vec<i32>) {
        let t = |y: f32| Transform {
            rotation: Quat::IDENTITY,
            translation: [0.0, y, 0.0],
        };
        (
            vec![t(1.0), t(-0.45), t(-0.42), t(-0.05)],
            vec![-1, 0, 1, 2],
        )
    }

    #[test]
    fn two_bone_reaches_a_reachable_target() {
        let (mut pose, parents) = leg();
        let target = [0.1, 0.35, 0.2];
        two_bone(&mut pose, 2, 1.0, target, &parents, [0.0, 0.0, 0.1]);
        let c = joint_to_global(&parents, 2, &pose).translation;
        for k in 0..3 {
            assert!((c[k] - target[k]).abs() < 1e-4, "{c:?} vs {target:?}");
        }
        // The knee bends toward the hint (+z).
        assert!(joint_to_global(&parents, 1, &pose).translation[2] > 0.0);
    }

    #[test]
    fn one_bone_points_the_child_at_the_target() {
        let (mut pose, parents) = leg();
        let target = [0.3, 0.0, 0.1];
        one_bone(&mut pose, 3, 1.0, target, &parents);
        let a = joint_to_global(&parents, 2, &pose).translation;
        let b = joint_to_global(&parents, 3, &pose).translation;
        let dir = normalized3(sub(b, a));
        let want = normalized3(sub(target, a));
        assert!(dot3(dir, want) > 1.0 - 1e-6);
        assert!((length3(sub(b, a)) - 0.05).abs() < 1e-6);
    }
}
