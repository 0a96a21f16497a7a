//! The observed motion and mask that a constraint list gives the denoiser on a skeleton.

use super::super::config::{MotionStats, SkeletonKind};
use super::super::motion::{self, FeatureLayout, matrix_to_rot6d};
use super::super::skeleton::{Mat3, Skeleton, Soma77Expansion};
use super::entry::{Constraint, ConstraintKind};
use crate::{Error, Result};

/// The observed motion and mask of a constraint list over `frames` frames.
#[derive(Clone, Debug, PartialEq)]
pub struct Conditions {
    pub frames: usize,
    pub dim: usize,
    /// `[T, dim]`: the observed motion, normalised (upstream's `observed_motion` with
    /// `to_normalize=True`; unconstrained entries are the normalised zero); unnormalised
    /// (unconstrained entries 0) when built by [`build_raw`].
    pub features: Vec<f32>,
    /// `[T, dim]`: which entries are constrained.
    pub mask: Vec<bool>,
}

impl Conditions {
    /// The mask as the 0/1 floats the denoiser reads.
    pub fn mask_f32(&self) -> Vec<f32> {
        self.mask
            .iter()
            .map(|&m| if m { 1.0 } else { 0.0 })
            .collect()
    }

    /// `1 - mask`, the weight of the noisy motion in `x (1 - m) + observed m`.
    pub fn keep_f32(&self) -> Vec<f32> {
        self.mask
            .iter()
            .map(|&m| if m { 0.0 } else { 1.0 })
            .collect()
    }

    /// `observed * mask` (exact: the product with 0 or 1).
    pub fn observed_masked(&self) -> Vec<f32> {
        self.features
            .iter()
            .zip(&self.mask)
            .map(|(&f, &m)| if m { f } else { 0.0 })
            .collect()
    }

    /// How many entries are constrained.
    pub fn count(&self) -> usize {
        self.mask.iter().filter(|&&m| m).count()
    }
}

/// `axis_angle_to_matrix` (`kimodo/geometry.py#L53-77`), float32 as upstream: `angle = |v|`,
/// `axis = v / (angle + 1e-6)`, `R = I + sin(angle) K + (1 - cos(angle)) K K`, K the cross
/// matrix of the axis. A zero vector gives the identity.
pub fn axis_angle_to_matrix(v: [f32; 3]) -> Mat3 {
    let angle = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    let d = angle + 1e-6;
    let (x, y, z) = (v[0] / d, v[1] / d, v[2] / d);
    let k: Mat3 = [0.0, -z, y, z, 0.0, -x, -y, x, 0.0];
    let kk = super::super::skeleton::mat_mul(&k, &k);
    let (s, c) = (angle.sin(), angle.cos());
    let eye: Mat3 = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
    std::array::from_fn(|i| (eye[i] + s * k[i]) + (1.0 - c) * kk[i])
}

/// The end-effector chains of a model skeleton: `(left foot, right foot, left hand, right
/// hand)`, base joint first (`kimodo/skeleton/definitions.py`: SOMA30 #L187-202, G1
/// #L284-287, SMPL-X #L336-339).
fn chains(kind: SkeletonKind) -> Result<[&'static [&'static str]; 4]> {
    Ok(match kind {
        SkeletonKind::Soma30 => [
            &["LeftFoot", "LeftToeBase"],
            &["RightFoot", "RightToeBase"],
            &["LeftHand", "LeftHandMiddleEnd"],
            &["RightHand", "RightHandMiddleEnd"],
        ],
        SkeletonKind::G1 => [
            &["left_ankle_roll_skel", "left_toe_base"],
            &["right_ankle_roll_skel", "right_toe_base"],
            &["left_wrist_yaw_skel", "left_hand_roll_skel"],
            &["right_wrist_yaw_skel", "right_hand_roll_skel"],
        ],
        SkeletonKind::Smplx22 => [
            &["left_ankle", "left_foot"],
            &["right_ankle", "right_foot"],
            &["left_wrist"],
            &["right_wrist"],
        ],
        SkeletonKind::Soma77 => {
            return Err(Error::InvalidArgument(
                "constraints: no Kimodo model runs on the 77-joint SOMA skeleton".into(),
            ));
        }
    })
}

/// `(rotation joints, position joints)` of end-effector names (`expand_joint_names`,
/// `kimodo/skeleton/base.py#L135-173`): each chain's joints for positions, its base for the
/// rotation; `Hips` is the pelvis for both.
fn expand_joint_names(skel: &Skeleton, names: &[String]) -> Result<(Vec<usize>, Vec<usize>)> {
    let [lf, rf, lh, rh] = chains(skel.kind)?;
    let idx = |n: &str| {
        skel.joint_index(n).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "embedded {} skeleton lacks the joint {n}",
                skel.kind.name()
            ))
        })
    };
    let (mut rot, mut pos) = (Vec::new(), Vec::new());
    for n in names {
        let chain: &[&str] = match n.as_str() {
            "LeftFoot" => lf,
            "RightFoot" => rf,
            "LeftHand" => lh,
            "RightHand" => rh,
            _ => {
                rot.push(skel.root);
                pos.push(skel.root);
                continue;
            }
        };
        rot.push(idx(chain[0])?);
        for j in chain {
            pos.push(idx(j)?);
        }
    }
    Ok((rot, pos))
}

/// What one body entry contributes once decoded: per constrained frame its FK.
pub(crate) struct Posed {
    /// `[K, J, 3, 3]`.
    pub global_rots: Vec<f32>,
    /// `[K, J, 3]`.
    pub posed: Vec<f32>,
}

/// Axis-angle decode, the SOMA 77 -> 30 subset when needed
/// (`_convert_constraint_local_rots_to_skeleton`, `kimodo/constraints.py#L17-36`), then FK at
/// the given root positions (`FullBodyConstraintSet.from_dict`).
pub(crate) fn pose(
    c: &Constraint,
    skel: &Skeleton,
    soma77: &Option<Soma77Expansion>,
) -> Result<Posed> {
    let nj = skel.num_joints();
    let k = c.frame_indices.len();
    let subset: Option<&[usize]> = if c.num_joints == nj {
        None
    } else if skel.kind == SkeletonKind::Soma30 && c.num_joints == 77 {
        soma77.as_ref().map(|e| e.soma77_index.as_slice())
    } else {
        None
    };
    if c.num_joints != nj && subset.is_none() {
        let accepted = if skel.kind == SkeletonKind::Soma30 {
            "30 or 77".to_string()
        } else {
            nj.to_string()
        };
        return Err(Error::InvalidArgument(format!(
            "constraints: {}: local_joints_rot holds {} joints per frame; the {} skeleton takes \
             {accepted}",
            c.label(),
            c.num_joints,
            skel.kind.name()
        )));
    }
    let mut local = Vec::with_capacity(k * nj * 9);
    for f in 0..k {
        let frame = &c.local_joints_rot[f * c.num_joints * 3..(f + 1) * c.num_joints * 3];
        for j in 0..nj {
            let src = subset.map_or(j, |s| s[j]);
            let v = [frame[src * 3], frame[src * 3 + 1], frame[src * 3 + 2]];
            local.extend_from_slice(&axis_angle_to_matrix(v));
        }
    }
    let root: Vec<f32> = c.root_positions.iter().flatten().copied().collect();
    let (global_rots, posed) = skel.fk(&local, &root, k)?;
    Ok(Posed { global_rots, posed })
}

/// Upstream's `data_dict` / `index_dict` (`build_condition_dicts`,
/// `kimodo/motion_rep/conditioning.py#L10-15`), in the order the entries append to them.
#[derive(Default)]
struct Dicts {
    smooth_root_2d: Vec<(usize, [f32; 2])>,
    root_y: Vec<(usize, f32)>,
    heading: Vec<(usize, [f32; 2])>,
    /// `((frame, joint), rotation)`.
    rots: Vec<((usize, usize), Mat3)>,
    /// `((frame, joint), global position)`.
    positions: Vec<((usize, usize), [f32; 3])>,
}

/// Builds the observed motion and the mask of `constraints` for `frames` frames on `skel`
/// (the model's skeleton), normalised with `stats`, as upstream's
/// `create_conditions_from_constraints(..., to_normalize=True)` does.
///
/// Where several entries set the same value (same frame, or same frame and joint), the last
/// one in file order wins: upstream's `get_unique_index_and_data`
/// (`kimodo/motion_rep/conditioning.py#L18-30`) keeps the index `scatter_` writes last.
pub fn build_conditions(
    constraints: &[Constraint],
    skel: &Skeleton,
    stats: &MotionStats,
    frames: usize,
) -> Result<Conditions> {
    let mut c = build_raw(constraints, skel, frames)?;
    motion::normalize(stats, &mut c.features)?;
    Ok(c)
}

/// [`build_conditions`] without the normalisation: upstream's
/// `create_conditions_from_constraints(..., to_normalize=False)`, the observed motion in
/// metres and radians with unconstrained entries 0 (what the multi-prompt path crops, moves
/// and normalises itself, `kimodo/model/kimodo_model.py#L172-177`).
pub fn build_raw(constraints: &[Constraint], skel: &Skeleton, frames: usize) -> Result<Conditions> {
    let nj = skel.num_joints();
    let layout = FeatureLayout::new(nj);
    let dim = layout.dim();
    let soma77 =
        if skel.kind == SkeletonKind::Soma30 && constraints.iter().any(|c| c.num_joints == 77) {
            Some(Soma77Expansion::load()?)
        } else {
            None
        };
    let mut d = Dicts::default();
    for c in constraints {
        if let Some(&f) = c.frame_indices.iter().find(|&&f| f >= frames) {
            return Err(Error::InvalidArgument(format!(
                "constraints: {}: frame {f} is outside the motion's {frames} frames (0..={})",
                c.label(),
                frames - 1
            )));
        }
        match &c.kind {
            ConstraintKind::Root2d { heading } => {
                let s = c
                    .smooth_root_2d
                    .as_ref()
                    .expect("root2d has smooth_root_2d");
                d.smooth_root_2d
                    .extend(c.frame_indices.iter().copied().zip(s.iter().copied()));
                if let Some(h) = heading {
                    d.heading
                        .extend(c.frame_indices.iter().copied().zip(h.iter().copied()));
                }
            }
            kind => {
                let p = pose(c, skel, &soma77)?;
                let (rot_joints, pos_joints) = match kind {
                    ConstraintKind::EndEffector { joint_names } => {
                        expand_joint_names(skel, joint_names)?
                    }
                    _ => (Vec::new(), (0..nj).collect()),
                };
                let r = skel.root;
                for (i, &f) in c.frame_indices.iter().enumerate() {
                    let at = |j: usize| {
                        let b = (i * nj + j) * 3;
                        [p.posed[b], p.posed[b + 1], p.posed[b + 2]]
                    };
                    // Upstream's update_constraints order: positions, (rotations), smooth
                    // root, root y, heading; each goes to its own list, so only the order
                    // within a list matters.
                    for &j in &pos_joints {
                        d.positions.push(((f, j), at(j)));
                    }
                    for &j in &rot_joints {
                        let b = (i * nj + j) * 9;
                        let m: Mat3 = p.global_rots[b..b + 9].try_into().expect("9 values");
                        d.rots.push(((f, j), m));
                    }
                    let root = at(r);
                    let s = match &c.smooth_root_2d {
                        Some(s) => s[i],
                        None => [root[0], root[2]],
                    };
                    d.smooth_root_2d.push((f, s));
                    d.root_y.push((f, root[1]));
                }
                // compute_global_heading (kimodo/constraints.py#L49-54): atan2 of the hip
                // vector, then cos and sin in f32.
                let angles = motion::heading_from_joints(skel, &p.posed)?;
                d.heading.extend(
                    c.frame_indices
                        .iter()
                        .zip(angles)
                        .map(|(&f, a)| (f, [a.cos(), a.sin()])),
                );
            }
        }
    }

    // create_conditions (kimodo_motionrep.py#L217-301), block by block, later entries over
    // earlier ones.
    let mut obs = vec![0.0f32; frames * dim];
    let mut mask = vec![false; frames * dim];
    let mut set = |t: usize, i: usize, v: f32| {
        obs[t * dim + i] = v;
        mask[t * dim + i] = true;
    };
    let sr = FeatureLayout::SMOOTH_ROOT;
    for &(t, [x, z]) in &d.smooth_root_2d {
        set(t, sr, x);
        set(t, sr + 2, z);
    }
    for &(t, y) in &d.root_y {
        set(t, sr + 1, y);
    }
    for &(t, [c, s]) in &d.heading {
        set(t, FeatureLayout::HEADING, c);
        set(t, FeatureLayout::HEADING + 1, s);
    }
    for &((t, j), m) in &d.rots {
        for (k, v) in matrix_to_rot6d(&m).into_iter().enumerate() {
            set(t, layout.rot6d() + j * 6 + k, v);
        }
    }
    // Positions are stored relative to the smooth root's (x, 0, z) of their frame, as the
    // observed motion holds it once every smooth-root entry is in (#L281-293).
    let smooth: Vec<(f32, f32)> = (0..frames)
        .map(|t| (obs[t * dim + sr], obs[t * dim + sr + 2]))
        .collect();
    for &((t, j), p) in &d.positions {
        let (sx, sz) = smooth[t];
        let b = FeatureLayout::LOCAL_POSITIONS + j * 3;
        obs[t * dim + b] = p[0] - sx;
        obs[t * dim + b + 1] = p[1] - 0.0;
        obs[t * dim + b + 2] = p[2] - sz;
        for k in 0..3 {
            mask[t * dim + b + k] = true;
        }
    }
    Ok(Conditions {
        frames,
        dim,
        features: obs,
        mask,
    })
}
