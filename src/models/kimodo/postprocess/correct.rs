//! `Animation::CorrectMotion` and its steps (`MotionCorrection/src/cpp/AnimProcessing/
//! Utility.cpp`): root height and ground-plane warps, rotation warps toward full-body
//! keyframes, end-effector pins and foot-contact IK, each IK edit blended back into the motion
//! by a [`TrajectoryCorrector`] on the joints it touched.

use std::collections::BTreeMap;

use super::ik;
use super::math::{Quat, Transform, Vec3, joint_to_global, length3, normalized3, sub};
use super::trajectory::TrajectoryCorrector;

/// One pose: a local transform per joint (the root's translation is the root position).
pub type Pose = Vec<Transform>;

/// `Animation::IKType` (`Utility.h#L15-18`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IkType {
    OneBone,
    TwoBone,
}

/// `Animation::ContactInfo` (`Utility.h#L27-39`): a joint, the per-frame contact (or pin)
/// weights, the IK it gets, the knee/elbow hint for two-bone IK and the lowest height it may
/// be placed at.
#[derive(Clone, Debug)]
pub struct ContactInfo {
    pub joint: usize,
    pub mask: Vec<f32>,
    pub ik: IkType,
    pub hint_offset: Vec3,
    pub min_height: f32,
}

const POS_WEIGHT: f32 = 0.001;
const VEL_WEIGHT: f32 = 1.0;
const ACC_WEIGHT: f32 = 10.0;

/// `margins[i] = mask[i] ? 0 : -1` (pinned where masked), the form every step builds.
fn pin_margins(mask: &[f32]) -> Vec<f64> {
    mask.iter()
        .map(|&m| if m != 0.0 { 0.0 } else { -1.0 })
        .collect()
}

/// Everything `CorrectMotion` reads besides the poses.
pub struct CorrectionInputs<'a> {
    pub targets: &'a [Pose],
    pub fullbody_mask: &'a [f32],
    pub root_mask: &'a [f32],
    pub contacts: &'a [ContactInfo],
    pub pins: &'a [ContactInfo],
    pub parents: &'a [i32],
    pub default_pose: &'a [Transform],
    pub contact_threshold: f32,
    pub root_margin: f32,
    pub double_ankles: bool,
}

/// `Animation::CorrectMotion` (`Utility.cpp#L1103-1197`). Upstream also computes per-frame
/// root-speed weights (#L1118-1136) and hands them to the ground-plane corrector, where they
/// have no effect (see [`super::trajectory`]); they are not computed here.
/// With double ankles (G1) it returns what their two last passes (`double_ankle.rs`) take
/// over from the contact pass; the caller runs them next, as upstream's last step.
pub fn correct_motion(poses: &mut [Pose], inp: &CorrectionInputs) -> Option<AnklePasses> {
    correct_hips_y(poses, inp.targets, inp.fullbody_mask);
    correct_hips_xz(poses, inp);
    correct_joint_rotations(poses, inp.targets, inp.fullbody_mask);
    effector_ik(poses, inp);
    contact_ik(poses, inp)
}

/// What the double-ankle passes take over from the contact pass: its IK poses (upstream's
/// `ikFixedPoses`), the poses before it, the frames each foot got two-bone IK, and the toe
/// pass's correction masks.
pub struct AnklePasses {
    pub fixed: Vec<Pose>,
    pub original: Vec<Pose>,
    pub two_bone_frames: BTreeMap<usize, Vec<bool>>,
    pub masks: BTreeMap<usize, Vec<f32>>,
}

/// `CorrectHipsY` (#L222-263): warp the root height to the full-body keyframes.
fn correct_hips_y(poses: &mut [Pose], targets: &[Pose], fullbody: &[f32]) {
    let corrector = TrajectoryCorrector::new(
        &pin_margins(fullbody),
        POS_WEIGHT * 10.0,
        VEL_WEIGHT,
        ACC_WEIGHT * 0.1,
    );
    let x: Vec<f64> = poses
        .iter()
        .map(|p| f64::from(p[0].translation[1]))
        .collect();
    let obs: Vec<f64> = targets
        .iter()
        .map(|p| f64::from(p[0].translation[1]))
        .collect();
    let fixed = corrector.interpolate(&obs, &x, 1);
    for (p, v) in poses.iter_mut().zip(fixed) {
        p[0].translation[1] = v as f32;
    }
}

/// `SmoothChannels` (#L265-293), in place and in frame order as upstream: a masked frame
/// next to an unmasked one becomes the mean of its neighbours.
fn smooth_channels(x: &mut [f64], cols: usize, mask: &[f32]) {
    let n = mask.len();
    for i in 0..n {
        let prev = i.saturating_sub(1);
        let next = (i + 1).min(n - 1);
        if i > 0 && mask[i] > 0.0 && mask[prev] == 0.0 {
            for j in 0..cols {
                x[i * cols + j] = 0.5 * (x[prev * cols + j] + x[next * cols + j]);
            }
        }
        if mask[i] > 0.0 && mask[next] == 0.0 {
            for j in 0..cols {
                x[i * cols + j] = 0.5 * (x[prev * cols + j] + x[next * cols + j]);
            }
        }
    }
}

/// `CorrectHipsXZ` (#L296-366): pin the root's ground position on full-body keyframes and
/// keep it within `root_margin` of the target on root-path and end-effector frames.
fn correct_hips_xz(poses: &mut [Pose], inp: &CorrectionInputs) {
    let n = poses.len();
    let mut margins = pin_margins(inp.fullbody_mask);
    let mut combined = vec![0.0f32; n];
    let root_margin = f64::from(inp.root_margin);
    for i in 0..n {
        combined[i] = if inp.fullbody_mask[i] > 0.0 || inp.root_mask[i] > 0.0 {
            1.0
        } else {
            0.0
        };
        if inp.root_mask[i] > 0.0 && margins[i] != 0.0 {
            margins[i] = root_margin;
        }
        for c in inp.pins {
            if c.mask[i] != 0.0 && margins[i] != 0.0 {
                margins[i] = root_margin;
            }
        }
    }
    let corrector = TrajectoryCorrector::new(&margins, POS_WEIGHT, VEL_WEIGHT, ACC_WEIGHT);
    let mut x = Vec::with_capacity(2 * n);
    let mut obs = Vec::with_capacity(2 * n);
    for (p, t) in poses.iter().zip(inp.targets) {
        x.extend([
            f64::from(p[0].translation[0]),
            f64::from(p[0].translation[2]),
        ]);
        obs.extend([
            f64::from(t[0].translation[0]),
            f64::from(t[0].translation[2]),
        ]);
    }
    smooth_channels(&mut x, 2, &combined);
    let fixed = corrector.interpolate(&obs, &x, 2);
    for (f, p) in poses.iter_mut().enumerate() {
        p[0].translation[0] = fixed[2 * f] as f32;
        p[0].translation[2] = fixed[2 * f + 1] as f32;
    }
}

/// `CorrectRotationsForBone` (#L368-450): warp one joint's local rotation, as its forward
/// (z) and up (y) axes (6 channels, which do not flip sign the way quaternions do), toward
/// `targets` on the frames `mask` marks; then rebuild the quaternion with `LookRotation`.
fn correct_bone(
    poses: &mut [Pose],
    targets: &[Pose],
    mask: &[f32],
    corrector: &TrajectoryCorrector,
    bone: usize,
    smooth: bool,
) {
    let n = poses.len();
    let mut fu = vec![0.0f32; 6 * n];
    let mut tfu = vec![0.0f32; 6 * n];
    for f in 0..n {
        let q = poses[f][bone].rotation;
        let (fw, up) = (q.z_axis(), q.y_axis());
        let qt = targets[f][bone].rotation;
        let (tfw, tup) = (qt.z_axis(), qt.y_axis());
        for k in 0..3 {
            fu[n * k + f] = fw[k];
            fu[n * (3 + k) + f] = up[k];
            tfu[n * k + f] = tfw[k];
            tfu[n * (3 + k) + f] = tup[k];
        }
    }
    for dim in 0..6 {
        let mut x: Vec<f64> = fu[n * dim..n * (dim + 1)]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let obs: Vec<f64> = (0..n)
            .map(|f| f64::from(mask[f] * tfu[n * dim + f]))
            .collect();
        if smooth {
            smooth_channels(&mut x, 1, mask);
        }
        let fixed = corrector.interpolate(&obs, &x, 1);
        for (f, v) in fixed.into_iter().enumerate() {
            fu[n * dim + f] = v as f32;
        }
    }
    for (f, pose) in poses.iter_mut().enumerate() {
        let fw = normalized3([fu[f], fu[n + f], fu[2 * n + f]]);
        let up = normalized3([fu[3 * n + f], fu[4 * n + f], fu[5 * n + f]]);
        pose[bone].rotation = Quat::look_rotation(fw, up);
    }
}

/// Warps every joint in `masks` (ascending joint order, as upstream's `std::map`) from
/// `poses` toward `fixed` on the frames its mask marks (#L585-605, #L793-808, #L871-889).
pub(super) fn blend_corrections(
    poses: &mut [Pose],
    fixed: &[Pose],
    masks: &BTreeMap<usize, Vec<f32>>,
) {
    for (&joint, mask) in masks {
        let corrector = TrajectoryCorrector::new(
            &pin_margins(mask),
            POS_WEIGHT * 10.0,
            VEL_WEIGHT,
            ACC_WEIGHT,
        );
        correct_bone(poses, fixed, mask, &corrector, joint, false);
    }
}

/// `CorrectJointRotations` (#L452-486): every joint toward the full-body keyframes, with
/// channel smoothing at keyframe edges.
fn correct_joint_rotations(poses: &mut [Pose], targets: &[Pose], fullbody: &[f32]) {
    let corrector = TrajectoryCorrector::new(
        &pin_margins(fullbody),
        POS_WEIGHT * 10.0,
        VEL_WEIGHT,
        ACC_WEIGHT,
    );
    let joints = poses.first().map_or(0, Vec::len);
    for bone in 0..joints {
        correct_bone(poses, targets, fullbody, &corrector, bone, true);
    }
}

pub(super) fn parent(parents: &[i32], j: usize) -> usize {
    // The hand and foot joints the rig names always have a parent and grandparent (checked
    // when the rig is built).
    parents[j] as usize
}

/// `DoEffectorIK` (#L488-606): on pinned frames, two-bone IK puts the hand or foot on the
/// target pose's joint and copies the target's global rotation; then the three joints are
/// blended back into the motion.
fn effector_ik(poses: &mut [Pose], inp: &CorrectionInputs) {
    let mut masks: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
    let mut fixed: Vec<Pose> = poses.to_vec();
    for c in inp.pins {
        let joint = c.joint;
        let p = parent(inp.parents, joint);
        let pp = parent(inp.parents, p);
        masks
            .entry(joint)
            .or_insert_with(|| inp.fullbody_mask.to_vec());
        masks.entry(p).or_insert_with(|| inp.fullbody_mask.to_vec());
        if c.ik == IkType::TwoBone {
            masks
                .entry(pp)
                .or_insert_with(|| inp.fullbody_mask.to_vec());
        }
        for (f, pose) in fixed.iter_mut().enumerate() {
            if c.mask[f] == 0.0 {
                continue;
            }
            let target = joint_to_global(inp.parents, joint as i32, &inp.targets[f]);
            set(&mut masks, p, f);
            match c.ik {
                IkType::OneBone => ik::one_bone(pose, joint, 1.0, target.translation, inp.parents),
                IkType::TwoBone => {
                    set(&mut masks, pp, f);
                    ik::two_bone(
                        pose,
                        joint,
                        1.0,
                        target.translation,
                        inp.parents,
                        c.hint_offset,
                    );
                }
            }
            set(&mut masks, joint, f);
            let parent_world = joint_to_global(inp.parents, p as i32, pose);
            pose[joint].rotation = target.rotation.then(parent_world.rotation.conjugate());
        }
    }
    blend_corrections(poses, &fixed, &masks);
}

fn set(masks: &mut BTreeMap<usize, Vec<f32>>, joint: usize, frame: usize) {
    if let Some(m) = masks.get_mut(&joint) {
        m[frame] = 1.0;
    }
}

/// The mask of `joint` (or, for a toe, of its parent) among the end-effector pins, or'ed into
/// `mask` (the `addEndEffectorMask` lambda, #L632-672).
pub(super) fn add_pin_mask(pins: &[ContactInfo], joint: usize, parent: usize, mask: &mut [f32]) {
    let pin = pins
        .iter()
        .find(|c| c.joint == joint)
        .or_else(|| pins.iter().find(|c| c.joint == parent));
    if let Some(pin) = pin {
        for (m, &v) in mask.iter_mut().zip(&pin.mask) {
            if v != 0.0 {
                *m = 1.0;
            }
        }
    }
}

/// `ComputeContactIntervals` (#L82-120): half-open frame ranges where the contact exceeds the
/// threshold, masked frames excluded.
fn contact_intervals(contact: &[f32], mask: &[f32], threshold: f32) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for f in 0..mask.len() {
        let value = if mask[f] != 0.0 { 0.0 } else { contact[f] };
        let on = value > threshold;
        match (on, start) {
            (true, None) => start = Some(f),
            (false, Some(s)) => {
                out.push((s, f));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, mask.len()));
    }
    out
}

/// Whether an interval starts right after / ends right at a masked frame (#L49-52).
fn interval_constrained(iv: (usize, usize), mask: &[f32]) -> (bool, bool) {
    let start = iv.0 != 0 && mask[iv.0 - 1] != 0.0;
    let end = iv.1 != mask.len() && mask[iv.1] != 0.0;
    (start, end)
}

/// `FilterContactIntervals` (#L39-80): two-bone contacts drop intervals masked at both ends,
/// one-bone contacts those masked at either end.
fn filter_intervals(ivs: &mut Vec<(usize, usize)>, mask: &[f32], one_bone: bool) {
    ivs.retain(|&iv| {
        let (s, e) = interval_constrained(iv, mask);
        if one_bone { !(s || e) } else { !(s && e) }
    });
}

/// `FindContactPoints` (#L122-192): each interval's frames get one target: the joint's
/// position on the masked frame it touches, else at the interval's middle frame with the
/// height of each frame's own joint, raised to `min_height`.
fn contact_points(
    parents: &[i32],
    joint: usize,
    poses: &[Pose],
    ivs: &[(usize, usize)],
    mask: &[f32],
    min_height: f32,
) -> Vec<Option<Vec3>> {
    let mut points = vec![None; mask.len()];
    for &iv in ivs {
        let (s, e) = interval_constrained(iv, mask);
        let frame = if s {
            iv.0 - 1
        } else if e {
            iv.1
        } else {
            (iv.0 + iv.1) / 2
        };
        let target = joint_to_global(parents, joint as i32, &poses[frame]).translation;
        for f in iv.0..iv.1 {
            let mut p = target;
            if !s && !e {
                let y = joint_to_global(parents, joint as i32, &poses[f]).translation[1];
                // std::max(y, min_height): `y < min_height ? min_height : y`.
                p[1] = if y < min_height { min_height } else { y };
            }
            points[f] = Some(p);
        }
    }
    points
}

/// `TargetReachFalloff` (#L194-220): 1 while the target is within 99% of the limb's rest
/// reach from its base joint, falling to 0 over the next 1%.
fn reach_falloff(
    inp: &CorrectionInputs,
    joint: usize,
    ik: IkType,
    target: Vec3,
    pose: &[Transform],
) -> f32 {
    let mut j = joint;
    let mut reach = length3(inp.default_pose[j].translation);
    if ik == IkType::TwoBone {
        j = parent(inp.parents, j);
        reach += length3(inp.default_pose[j].translation);
    }
    let base = inp.parents[j];
    let world = joint_to_global(inp.parents, base, pose);
    let dist = length3(sub(world.translation, target));
    let over = dist / reach - 0.99;
    let tmp = (if over >= 0.0 { over } else { 0.0 }) / 0.01;
    let tmp = tmp * tmp;
    (-2.0 * tmp * tmp).exp()
}

/// `DoContactIK` (#L608-1082): two-bone IK plants each foot (ankle) on its contact target,
/// keeping the foot's global rotation; one-bone IK then keeps each toe on the floor; each
/// pass is blended back into the motion. G1's double ankles get two more passes.
fn contact_ik(poses: &mut [Pose], inp: &CorrectionInputs) -> Option<AnklePasses> {
    let n = poses.len();
    let fullbody = inp.fullbody_mask;
    let mut masks: BTreeMap<usize, Vec<f32>> = BTreeMap::new();
    let mut fixed: Vec<Pose> = poses.to_vec();
    let original: Vec<Pose> = poses.to_vec();
    let mut two_bone_frames: BTreeMap<usize, Vec<bool>> = BTreeMap::new();

    for c in inp.contacts.iter().filter(|c| c.ik == IkType::TwoBone) {
        let joint = c.joint;
        let p = parent(inp.parents, joint);
        let pp = parent(inp.parents, p);
        let mut joint_mask = fullbody.to_vec();
        add_pin_mask(inp.pins, joint, p, &mut joint_mask);
        for j in [p, pp, joint] {
            masks.entry(j).or_insert_with(|| joint_mask.clone());
        }
        let mut ivs = contact_intervals(&c.mask, &joint_mask, inp.contact_threshold);
        filter_intervals(&mut ivs, &joint_mask, false);
        let points = contact_points(inp.parents, joint, poses, &ivs, &joint_mask, c.min_height);
        for f in 0..fullbody.len() {
            let Some(target) = points[f] else { continue };
            for j in [p, pp, joint] {
                set(&mut masks, j, f);
            }
            if inp.double_ankles {
                two_bone_frames
                    .entry(joint)
                    .or_insert_with(|| vec![false; n])[f] = true;
            }
            let joint_rot = joint_to_global(inp.parents, joint as i32, &fixed[f]).rotation;
            let w = reach_falloff(inp, joint, c.ik, target, &fixed[f]);
            let orig_p = fixed[f][p].rotation;
            let orig_pp = fixed[f][pp].rotation;
            ik::two_bone(
                &mut fixed[f],
                joint,
                1.0,
                target,
                inp.parents,
                c.hint_offset,
            );
            fixed[f][p].rotation = Quat::slerp(orig_p, fixed[f][p].rotation, w);
            fixed[f][pp].rotation = Quat::slerp(orig_pp, fixed[f][pp].rotation, w);
            let parent_rot = joint_to_global(inp.parents, p as i32, &fixed[f]).rotation;
            fixed[f][joint].rotation = joint_rot.then(parent_rot.conjugate());
        }
    }
    blend_corrections(poses, &fixed, &masks);
    masks.clear();

    for c in inp.contacts.iter().filter(|c| c.ik == IkType::OneBone) {
        let joint = c.joint;
        let p = parent(inp.parents, joint);
        let mut joint_mask = fullbody.to_vec();
        add_pin_mask(inp.pins, joint, p, &mut joint_mask);
        masks.entry(p).or_insert_with(|| joint_mask.clone());
        let mut ivs = contact_intervals(&c.mask, &joint_mask, inp.contact_threshold);
        filter_intervals(&mut ivs, &joint_mask, true);
        for (s, e) in ivs {
            for (f, pose) in fixed.iter_mut().enumerate().take(e).skip(s) {
                // Project the joint onto the floor at its bone length from the parent
                // (10 fixed-point steps, #L844-855).
                let parent_pos = joint_to_global(inp.parents, p as i32, pose).translation;
                let mut target = joint_to_global(inp.parents, joint as i32, pose).translation;
                let len = length3(sub(target, parent_pos));
                for _ in 0..10 {
                    target[1] = c.min_height;
                    let dir = normalized3(sub(target, parent_pos));
                    target = [
                        parent_pos[0] + dir[0] * len,
                        parent_pos[1] + dir[1] * len,
                        parent_pos[2] + dir[2] * len,
                    ];
                }
                ik::one_bone(pose, joint, 1.0, target, inp.parents);
                set(&mut masks, p, f);
            }
        }
    }
    blend_corrections(poses, &fixed, &masks);

    inp.double_ankles.then_some(AnklePasses {
        fixed,
        original,
        two_bone_frames,
        masks,
    })
}
