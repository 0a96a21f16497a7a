//! Kimodo's post-processing: upstream's foot-skate and constraint cleanup (the
//! `MotionCorrection` C++ extension with its Python glue), ported to portable Rust.
//!
//! Upstream (`nv-tlabs/kimodo` at `0f6fccf`, main `7330e7e` plus the aarch64 fix):
//! `kimodo/postprocess.py` builds a "working rig" from the skeleton, per-frame constraint
//! masks and target poses from the constraint list, and calls
//! `MotionCorrection/python/motion_correction/motion_postprocess.py`, which hands flat f32
//! arrays to the binding `MotionCorrection/src/cpp/BindingsPython.cpp`. The binding builds
//! the contact and pin descriptions and runs `Animation::CorrectMotion`
//! (`AnimProcessing/Utility.cpp`): trajectory correction of the root and of every joint's
//! rotation toward full-body keyframes, root-path margins, two-bone IK for hand and foot
//! pins, and foot-contact IK (two-bone for the ankles, one-bone for the toes), each IK edit
//! blended back in by the ADMM trajectory corrector.
//!
//! [`postprocess_motion`] is the whole of `post_process_motion` for one motion;
//! [`correct`] is the binding. Upstream's CLI runs it for SOMA and SMPL-X models and never
//! for G1 (`kimodo/scripts/generate.py#L310-311`): see [`enabled_by_default`].
//!
//! Precision: the pose arithmetic is f32 and the trajectory solves f64, as upstream. See
//! `math.rs` for the two places where results can differ from upstream's by an ulp.

mod correct;
mod double_ankle;
mod ik;
pub mod math;
mod trajectory;

use super::config::SkeletonKind;
use super::constraints::{self, Constraint, ConstraintKind};
use super::export::rot::quat_wxyz_upstream;
use super::motion::Motion;
use super::skeleton::{Mat3, Skeleton, Soma77Expansion};
use crate::{Error, Result};
use correct::{ContactInfo, CorrectionInputs, IkType, Pose};
use math::{Quat, Transform, joint_to_global};

pub use trajectory::TrajectoryCorrector;

/// Upstream's defaults for `post_process_motion` (`kimodo/postprocess.py#L187-188`).
pub const CONTACT_THRESHOLD: f32 = 0.5;
/// How far (m) the root may stay from a root-path or end-effector target.
pub const ROOT_MARGIN: f32 = 0.04;

/// Whether `kinema generate` post-processes a model's output unless told not to: upstream's
/// CLI default (`kimodo/scripts/generate.py#L310-311`: on, except for G1 models, whose output
/// it "does not work well" for).
pub fn enabled_by_default(kind: SkeletonKind) -> bool {
    !matches!(kind, SkeletonKind::G1)
}

/// The working rig (`create_working_rig_from_skeleton`, `kimodo/postprocess.py#L112-178`,
/// turned into the binding's arguments by `motion_postprocess.py#L25-51`).
#[derive(Clone, Debug)]
pub struct Rig {
    /// Parent of each joint, `-1` for the root.
    pub parents: Vec<i32>,
    /// Rest translation of each joint from its parent (the root's: its rest position lifted
    /// so the lowest rest joint sits `above_ground_offset` above the floor), computed in f64
    /// from the neutral joints and cast to f32 as the binding reads it.
    pub translations: Vec<[f32; 3]>,
    pub left_hand: usize,
    pub right_hand: usize,
    pub left_foot: usize,
    pub right_foot: usize,
    /// G1's feet hang from two ankles (`has_double_ankle_joints`, `postprocess.py#L274`).
    pub double_ankles: bool,
}

impl Rig {
    /// The rig of a model skeleton. SOMA lifts the rig 2 cm, the others 7 mm
    /// (`postprocess.py#L271`); hands and feet are SOMA's `LeftHand` ... joints and the first
    /// joint of the other skeletons' hand and foot chains (#L129-146).
    pub fn for_skeleton(skel: &Skeleton) -> Result<Rig> {
        let (names, offset) = match skel.kind {
            SkeletonKind::Soma30 | SkeletonKind::Soma77 => {
                (["LeftHand", "RightHand", "LeftFoot", "RightFoot"], 0.02)
            }
            SkeletonKind::Smplx22 => (
                ["left_wrist", "right_wrist", "left_ankle", "right_ankle"],
                0.007,
            ),
            SkeletonKind::G1 => (
                [
                    "left_wrist_yaw_skel",
                    "right_wrist_yaw_skel",
                    "left_ankle_roll_skel",
                    "right_ankle_roll_skel",
                ],
                0.007,
            ),
        };
        let idx = |n: &str| {
            skel.joint_index(n).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "post-processing: the {} skeleton has no joint '{n}'",
                    skel.kind.name()
                ))
            })
        };
        let parents: Vec<i32> = skel
            .parents
            .iter()
            .map(|p| p.map_or(-1, |p| p as i32))
            .collect();
        let nj = skel.num_joints();
        let toe_height = skel
            .neutral_joints
            .iter()
            .map(|p| p[1])
            .fold(f64::INFINITY, f64::min);
        let translations = (0..nj)
            .map(|j| {
                let p = skel.neutral_joints[j];
                match skel.parents[j] {
                    None => [p[0] + 0.0, p[1] + (-toe_height + offset), p[2] + 0.0],
                    Some(q) => {
                        let pp = skel.neutral_joints[q];
                        [p[0] - pp[0], p[1] - pp[1], p[2] - pp[2]]
                    }
                }
                .map(|v| v as f32)
            })
            .collect();
        let rig = Rig {
            parents,
            translations,
            left_hand: idx(names[0])?,
            right_hand: idx(names[1])?,
            left_foot: idx(names[2])?,
            right_foot: idx(names[3])?,
            double_ankles: skel.kind == SkeletonKind::G1,
        };
        rig.check()?;
        Ok(rig)
    }

    /// Refuses a rig the IK cannot walk: a parent that does not precede its joint (which
    /// would also allow a cycle), translations of another length, or a hand or foot without a
    /// parent and grandparent.
    pub fn check(&self) -> Result<()> {
        let nj = self.parents.len();
        let bad = |msg: String| {
            Err(Error::InvalidArgument(format!(
                "post-processing rig: {msg}"
            )))
        };
        if self.translations.len() != nj {
            return bad(format!(
                "{} translations for {nj} joints",
                self.translations.len()
            ));
        }
        for (j, &p) in self.parents.iter().enumerate() {
            if p < -1 || p >= j as i32 {
                return bad(format!(
                    "joint {j} has parent {p} (parents precede their joints)"
                ));
            }
        }
        for j in [
            self.left_hand,
            self.right_hand,
            self.left_foot,
            self.right_foot,
        ] {
            if j >= nj || self.parents[j] < 0 || self.parents[self.parents[j] as usize] < 0 {
                return bad(format!(
                    "hand or foot joint {j} needs a parent and a grandparent"
                ));
            }
        }
        Ok(())
    }

    fn default_pose(&self) -> Vec<Transform> {
        self.translations
            .iter()
            .map(|&t| Transform {
                rotation: Quat::IDENTITY,
                translation: t,
            })
            .collect()
    }
}

/// Per-frame constraint masks (`_build_constraint_masks_dict`, `postprocess.py#L213-247`):
/// 1 on the frames a constraint of that type covers.
#[derive(Clone, Debug, PartialEq)]
pub struct Masks {
    pub fullbody: Vec<f32>,
    pub left_hand: Vec<f32>,
    pub right_hand: Vec<f32>,
    pub left_foot: Vec<f32>,
    pub right_foot: Vec<f32>,
    pub root: Vec<f32>,
}

impl Masks {
    /// No constraint on any of `frames` frames.
    pub fn none(frames: usize) -> Masks {
        let z = vec![0.0; frames];
        Masks {
            fullbody: z.clone(),
            left_hand: z.clone(),
            right_hand: z.clone(),
            left_foot: z.clone(),
            right_foot: z.clone(),
            root: z,
        }
    }
}

/// What the motion should reach on constrained frames (`extract_input_motion_from_constraints`,
/// `postprocess.py#L27-109`): root positions `[T, 3]` (zero elsewhere) and local rotations
/// `[T, J, 4]` as `w, x, y, z` (identity elsewhere).
#[derive(Clone, Debug, PartialEq)]
pub struct Targets {
    pub root: Vec<f32>,
    pub rotations: Vec<f32>,
}

impl Targets {
    /// The unconstrained targets.
    pub fn none(frames: usize, joints: usize) -> Targets {
        let mut rotations = vec![0.0; frames * joints * 4];
        for q in rotations.chunks_exact_mut(4) {
            q[0] = 1.0;
        }
        Targets {
            root: vec![0.0; frames * 3],
            rotations,
        }
    }
}

/// `strip_nan_inf` (`BindingsPython.cpp#L21-26`).
fn finite_or_zero(x: f32) -> f32 {
    if x.is_finite() { x } else { 0.0 }
}

fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(Error::Shape(format!(
            "post-processing: {what} holds {got} values, want {want}"
        )));
    }
    Ok(())
}

/// The binding `correct_motion` (`BindingsPython.cpp#L28-359`) for one motion: corrects
/// `root` `[T, 3]` and `rotations` `[T, J, 4]` (local, `w, x, y, z`) in place. `contacts` is
/// `[T, 4]` (left heel, left toe, right heel, right toe; 0 or 1).
pub fn correct(
    rig: &Rig,
    root: &mut [f32],
    rotations: &mut [f32],
    targets: &Targets,
    masks: &Masks,
    contacts: &[f32],
    contact_threshold: f32,
    root_margin: f32,
) -> Result<()> {
    rig.check()?;
    let nj = rig.parents.len();
    let frames = masks.fullbody.len();
    for (what, m) in [
        ("the left hand mask", &masks.left_hand),
        ("the right hand mask", &masks.right_hand),
        ("the left foot mask", &masks.left_foot),
        ("the right foot mask", &masks.right_foot),
        ("the root mask", &masks.root),
    ] {
        check_len(what, m.len(), frames)?;
    }
    check_len("root", root.len(), frames * 3)?;
    check_len("rotations", rotations.len(), frames * nj * 4)?;
    check_len("the root targets", targets.root.len(), frames * 3)?;
    check_len(
        "the rotation targets",
        targets.rotations.len(),
        frames * nj * 4,
    )?;
    check_len("contacts", contacts.len(), frames * 4)?;
    if frames == 0 {
        return Ok(());
    }
    let fb = &masks.fullbody;
    // #L168-191: hand and foot pins, active where their mask is and no full-body keyframe is.
    let pin = |joint: usize, mask: &[f32], hint: f32| ContactInfo {
        joint,
        mask: (0..frames).map(|i| (1.0 - fb[i]) * mask[i]).collect(),
        ik: IkType::TwoBone,
        hint_offset: [0.0, 0.0, hint],
        min_height: 0.0,
    };
    let pins = [
        pin(rig.left_hand, &masks.left_hand, -0.1),
        pin(rig.right_hand, &masks.right_hand, -0.1),
        pin(rig.left_foot, &masks.left_foot, 0.1),
        pin(rig.right_foot, &masks.right_foot, 0.1),
    ];
    let default_pose = rig.default_pose();
    let height = |j: usize| joint_to_global(&rig.parents, j as i32, &default_pose).translation[1];
    // #L193-229: ankle contacts, unless pinned; a toe contact counts for the ankle too.
    let ankle = |joint: usize, mask: &[f32], heel: usize, toe: usize| {
        let c = (0..frames)
            .map(|i| {
                let h = if mask[i] != 0.0 {
                    0.0
                } else {
                    contacts[4 * i + heel]
                };
                let t = if mask[i] != 0.0 {
                    0.0
                } else {
                    contacts[4 * i + toe]
                };
                (t + h).min(1.0)
            })
            .collect();
        ContactInfo {
            joint,
            mask: c,
            ik: IkType::TwoBone,
            hint_offset: [0.0, 0.0, 0.1],
            min_height: height(joint),
        }
    };
    let mut contact_info = vec![
        ankle(rig.right_foot, &masks.right_foot, 2, 3),
        ankle(rig.left_foot, &masks.left_foot, 0, 1),
    ];
    // #L231-275: the toes (the last child of each foot) get one-bone contacts. Upstream gives
    // both toes the right toe's rest height (#L256-260).
    let last_child = |foot: usize| (0..nj).rfind(|&i| rig.parents[i] == foot as i32);
    if let (Some(lt), Some(rt)) = (last_child(rig.left_foot), last_child(rig.right_foot)) {
        let toe_height = height(rt);
        let toe = |joint: usize, mask: &[f32], ch: usize| ContactInfo {
            joint,
            mask: (0..frames)
                .map(|i| {
                    if mask[i] != 0.0 {
                        0.0
                    } else {
                        contacts[4 * i + ch]
                    }
                })
                .collect(),
            ik: IkType::OneBone,
            hint_offset: [0.0; 3],
            min_height: toe_height,
        };
        contact_info.push(toe(rt, &masks.right_foot, 3));
        contact_info.push(toe(lt, &masks.left_foot, 1));
    }
    // #L278-314: poses from the flat arrays (w, x, y, z -> x, y, z, w), non-finite values
    // zeroed, rotations normalised; the other joints keep the rig's rest translations.
    let to_poses = |root: &[f32], rots: &[f32]| -> Vec<Pose> {
        (0..frames)
            .map(|f| {
                let mut pose = default_pose.clone();
                pose[0].translation = std::array::from_fn(|k| finite_or_zero(root[3 * f + k]));
                for (j, t) in pose.iter_mut().enumerate() {
                    let q = &rots[4 * (nj * f + j)..][..4];
                    t.rotation = Quat([
                        finite_or_zero(q[1]),
                        finite_or_zero(q[2]),
                        finite_or_zero(q[3]),
                        finite_or_zero(q[0]),
                    ])
                    .normalized();
                }
                pose
            })
            .collect()
    };
    let mut poses = to_poses(root, rotations);
    let target_poses = to_poses(&targets.root, &targets.rotations);
    let inputs = CorrectionInputs {
        targets: &target_poses,
        fullbody_mask: fb,
        root_mask: &masks.root,
        contacts: &contact_info,
        pins: &pins,
        parents: &rig.parents,
        default_pose: &default_pose,
        contact_threshold,
        root_margin,
        double_ankles: rig.double_ankles,
    };
    // G1's double ankles: two more passes after the contact pass (`Utility.cpp#L891-1081`).
    if let Some(mut a) = correct::correct_motion(&mut poses, &inputs) {
        double_ankle::correct(
            &mut poses,
            &mut a.fixed,
            &a.original,
            &a.two_bone_frames,
            a.masks,
            &inputs,
        );
    }
    for (f, pose) in poses.iter().enumerate() {
        root[3 * f..3 * f + 3].copy_from_slice(&pose[0].translation);
        for (j, t) in pose.iter().enumerate() {
            let q = t.rotation.0;
            rotations[4 * (nj * f + j)..][..4].copy_from_slice(&[q[3], q[0], q[1], q[2]]);
        }
    }
    Ok(())
}

/// `matrix_to_quaternion` (`kimodo/geometry.py#L144-187`) in f32, `w, x, y, z`: the exporters'
/// [`quat_wxyz_upstream`].
pub fn matrix_to_quaternion(m: &Mat3) -> [f32; 4] {
    quat_wxyz_upstream(m)
}

/// `quaternion_to_matrix` (`kimodo/geometry.py#L190-221`) in f32, from `w, x, y, z`.
pub use crate::models::kit::rotation::quaternion_to_matrix;

/// The masks and targets of a constraint list for `frames` frames on `skel`
/// (`_build_constraint_masks_dict` and `extract_input_motion_from_constraints`,
/// `postprocess.py#L27-109`, #L213-247). Frames past the end are ignored, as upstream does.
/// Root paths set the target root's x and z; full-body and end-effector entries set the
/// whole pose (local rotations recovered from the entry's FK, the root at the entry's root
/// with x, z from its smooth root). A generic `end-effector` entry sets targets but no mask,
/// as upstream (its name matches none of the mask keys).
pub fn constraint_targets(
    list: &[Constraint],
    skel: &Skeleton,
    frames: usize,
) -> Result<(Targets, Masks)> {
    let nj = skel.num_joints();
    let mut targets = Targets::none(frames, nj);
    let mut masks = Masks::none(frames);
    let soma77 = if skel.kind == SkeletonKind::Soma30 && list.iter().any(|c| c.num_joints == 77) {
        Some(Soma77Expansion::load()?)
    } else {
        None
    };
    for c in list {
        let mask = match c.type_name.as_str() {
            "fullbody" => Some(&mut masks.fullbody),
            "left-foot" => Some(&mut masks.left_foot),
            "right-foot" => Some(&mut masks.right_foot),
            "left-hand" => Some(&mut masks.left_hand),
            "right-hand" => Some(&mut masks.right_hand),
            "root2d" => Some(&mut masks.root),
            _ => None,
        };
        if let Some(m) = mask {
            for &f in c.frame_indices.iter().filter(|&&f| f < frames) {
                m[f] = 1.0;
            }
        }
        match &c.kind {
            ConstraintKind::Root2d { .. } => {
                let s2d = c.smooth_root_2d.as_deref().unwrap_or(&[]);
                for (k, &f) in c.frame_indices.iter().enumerate() {
                    if f < frames
                        && let Some(s) = s2d.get(k)
                    {
                        targets.root[3 * f] = s[0];
                        targets.root[3 * f + 2] = s[1];
                    }
                }
            }
            ConstraintKind::FullBody | ConstraintKind::EndEffector { .. } => {
                let posed = constraints::pose(c, skel, &soma77)?;
                let k = c.frame_indices.len();
                let local = skel.local_from_global(&posed.global_rots, k)?;
                for (row, &f) in c.frame_indices.iter().enumerate() {
                    if f >= frames {
                        continue;
                    }
                    let root = &posed.posed[(row * nj + skel.root) * 3..][..3];
                    let (x, z) = match &c.smooth_root_2d {
                        Some(s) => (s[row][0], s[row][1]),
                        None => (root[0], root[2]),
                    };
                    targets.root[3 * f..3 * f + 3].copy_from_slice(&[x, root[1], z]);
                    for j in 0..nj {
                        let m: &Mat3 = local[(row * nj + j) * 9..][..9]
                            .try_into()
                            .expect("9 values");
                        targets.rotations[(f * nj + j) * 4..][..4]
                            .copy_from_slice(&matrix_to_quaternion(m));
                    }
                }
            }
        }
    }
    Ok((targets, masks))
}

/// `post_process_motion` (`kimodo/postprocess.py#L181-346`) for one motion on its model
/// skeleton (SOMA30, SMPL-X or G1; before the SOMA77 expansion, as `KimodoModel` runs it):
/// corrects the local rotations and root positions, then recomputes the global rotations and
/// posed joints by FK. Contacts, smooth root and heading are left as they were, as upstream.
pub fn postprocess_motion(
    motion: &mut Motion,
    skel: &Skeleton,
    constraints: &[Constraint],
) -> Result<()> {
    if motion.skeleton != skel.kind {
        return Err(Error::InvalidArgument(format!(
            "post-processing: a {} motion on the {} skeleton",
            motion.skeleton.name(),
            skel.kind.name()
        )));
    }
    let frames = motion.frames;
    let nj = skel.num_joints();
    check_len(
        "local_rot_mats",
        motion.local_rot_mats.len(),
        frames * nj * 9,
    )?;
    check_len("foot_contacts", motion.foot_contacts.len(), frames * 4)?;
    let rig = Rig::for_skeleton(skel)?;
    let (targets, masks) = constraint_targets(constraints, skel, frames)?;
    let mut rotations: Vec<f32> = motion
        .local_rot_mats
        .chunks_exact(9)
        .flat_map(|m| matrix_to_quaternion(m.try_into().expect("9 values")))
        .collect();
    let mut root = motion.root_positions.clone();
    let contacts: Vec<f32> = motion
        .foot_contacts
        .iter()
        .map(|&c| if c { 1.0 } else { 0.0 })
        .collect();
    correct(
        &rig,
        &mut root,
        &mut rotations,
        &targets,
        &masks,
        &contacts,
        CONTACT_THRESHOLD,
        ROOT_MARGIN,
    )?;
    let local: Vec<f32> = rotations
        .chunks_exact(4)
        .flat_map(|q| quaternion_to_matrix([q[0], q[1], q[2], q[3]]))
        .collect();
    let (global, posed) = skel.fk(&local, &root, frames)?;
    motion.local_rot_mats = local;
    motion.root_positions = root;
    motion.global_rot_mats = global;
    motion.posed_joints = posed;
    Ok(())
}
