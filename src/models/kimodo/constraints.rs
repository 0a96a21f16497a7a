//! Kimodo's kinematic constraints: upstream's `constraints.json` read as hostile input, turned
//! into the observed motion and the mask the denoiser's constraint row sees, exactly as
//! upstream builds them (`kimodo/constraints.py`, `kimodo/motion_rep/conditioning.py`,
//! `KimodoMotionRep.create_conditions` in `kimodo/motion_rep/reps/kimodo_motionrep.py#L217-301`;
//! kimodo.md §7).
//!
//! The file is a JSON array of objects `{type, frame_indices, ...}`:
//!
//! * `root2d`: `smooth_root_2d [K, 2]` (x, z), optional `global_root_heading [K, 2]` (cos, sin);
//! * `fullbody`, `left-hand`, `right-hand`, `left-foot`, `right-foot`, and `end-effector` with
//!   `joint_names` (a list of `LeftHand`, `RightHand`, `LeftFoot`, `RightFoot`, `Hips`):
//!   `local_joints_rot [K, J, 3]` (axis-angle), `root_positions [K, 3]`, optional
//!   `smooth_root_2d [K, 2]`. SOMA files hold 30 or 77 joints.
//!
//! Upstream skips entries silently in some paths (a frame past the end is cropped away by the
//! CLI's multi-prompt route) and crashes in others; here every such file is refused with an
//! error naming the entry (index and type). A 3-wide `smooth_root_2d`, which upstream reads
//! as `[x, y]` (`kimodo/constraints.py#L92-93`), is refused too: JSON files never hold it.

use serde_json::Value;

use super::config::{MotionStats, SkeletonKind};
use super::motion::{self, FeatureLayout, matrix_to_rot6d};
use super::skeleton::{Mat3, Skeleton, Soma77Expansion};
use crate::{Error, Result};

/// The constraint types upstream knows (`TYPE_TO_CLASS`, `kimodo/constraints.py`).
pub const TYPES: [&str; 7] = [
    "root2d",
    "fullbody",
    "left-hand",
    "right-hand",
    "left-foot",
    "right-foot",
    "end-effector",
];

/// The end-effector names `expand_joint_names` accepts (`kimodo/skeleton/base.py#L135-173`).
pub const END_EFFECTORS: [&str; 5] = ["LeftFoot", "RightFoot", "LeftHand", "RightHand", "Hips"];

/// What one entry constrains.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstraintKind {
    /// The smooth root's (x, z) and optionally the heading.
    Root2d {
        /// `[K]` (cos, sin) pairs as given.
        heading: Option<Vec<[f32; 2]>>,
    },
    /// Every joint's position, the root and the heading (no rotations: upstream leaves them
    /// out, `kimodo_motionrep.py#L246` and `constraints.py` `update_constraints`).
    FullBody,
    /// The chains of the named end effectors (`END_EFFECTORS`).
    EndEffector { joint_names: Vec<String> },
}

/// One entry of a constraints file, checked for shape and finiteness but not yet against a
/// skeleton.
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    /// Position in the file's array.
    pub index: usize,
    /// The `type` string as written.
    pub type_name: String,
    pub kind: ConstraintKind,
    pub frame_indices: Vec<usize>,
    /// `[K]` (x, z); required for `root2d`, optional otherwise.
    pub smooth_root_2d: Option<Vec<[f32; 2]>>,
    /// Joints per frame of `local_joints_rot` (0 for `root2d`).
    pub num_joints: usize,
    /// `[K, J, 3]` axis-angle.
    pub local_joints_rot: Vec<f32>,
    /// `[K, 3]`.
    pub root_positions: Vec<[f32; 3]>,
}

impl Constraint {
    /// `entry N (type)`, the prefix of every error about this entry.
    pub fn label(&self) -> String {
        format!("entry {} ({})", self.index, self.type_name)
    }
}

fn entry_err(index: usize, ty: &str, msg: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("constraints: entry {index} ({ty}): {msg}"))
}

/// Reads a JSON number as upstream's `torch.tensor(list)` does: float32 (the f64 JSON value
/// rounded once). Non-finite values (Python's `NaN` and `Infinity` tokens, which [`parse`]
/// turns into strings so that the entry can be named, or a number beyond f32) are refused.
fn number(v: &Value, what: &str, index: usize, ty: &str) -> Result<f32> {
    if let Value::String(s) = v
        && NON_FINITE.contains(&s.as_str())
    {
        return Err(entry_err(
            index,
            ty,
            format!("{what}: {s} is not a finite number"),
        ));
    }
    let x = v
        .as_f64()
        .ok_or_else(|| entry_err(index, ty, format!("{what}: {v} is not a number")))?;
    let f = x as f32;
    if !f.is_finite() {
        return Err(entry_err(
            index,
            ty,
            format!("{what}: {x} is not a finite float32"),
        ));
    }
    Ok(f)
}

/// A `[n, W]` array of numbers, any `n`.
fn any_rows<const W: usize>(v: &Value, key: &str, index: usize, ty: &str) -> Result<Vec<[f32; W]>> {
    let arr = v
        .as_array()
        .ok_or_else(|| entry_err(index, ty, format!("{key} is not an array")))?;
    arr.iter()
        .enumerate()
        .map(|(i, row)| {
            let r = row
                .as_array()
                .filter(|r| r.len() == W)
                .ok_or_else(|| entry_err(index, ty, format!("{key}[{i}] is not {W} numbers")))?;
            let mut out = [0.0f32; W];
            for (o, x) in out.iter_mut().zip(r) {
                *o = number(x, &format!("{key}[{i}]"), index, ty)?;
            }
            Ok(out)
        })
        .collect()
}

/// A `[k, W]` array of numbers, one row per constrained frame.
fn rows<const W: usize>(
    v: &Value,
    key: &str,
    k: usize,
    index: usize,
    ty: &str,
) -> Result<Vec<[f32; W]>> {
    let r = any_rows::<W>(v, key, index, ty)?;
    if r.len() != k {
        return Err(entry_err(
            index,
            ty,
            format!(
                "{key} holds {} rows; frame_indices holds {k} frames",
                r.len()
            ),
        ));
    }
    Ok(r)
}

/// The non-finite tokens Python's `json.dump` writes (and upstream's `json.load` reads).
const NON_FINITE: [&str; 3] = ["NaN", "Infinity", "-Infinity"];

/// Quotes the bare tokens `NaN`, `Infinity` and `-Infinity` outside strings, so that the JSON
/// parser accepts them as strings and [`number`] can refuse them naming the entry.
fn quote_non_finite(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let (mut i, mut in_str, mut escaped) = (0, false, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_str {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_str = false;
            }
        } else if b == b'"' {
            in_str = true;
        } else if let Some(tok) = NON_FINITE
            .iter()
            .rev()
            .find(|t| bytes[i..].starts_with(t.as_bytes()))
        {
            out.push(b'"');
            out.extend_from_slice(tok.as_bytes());
            out.push(b'"');
            i += tok.len();
            continue;
        }
        out.push(b);
        i += 1;
    }
    out
}

/// Parses a constraints file (JSON bytes). Checks the structure of every entry: known type,
/// known keys, non-empty integer `frame_indices`, arrays whose lengths agree, finite numbers,
/// the same joint count on every frame. Frames and joint counts are checked against the
/// model later, by [`build_conditions`].
pub fn parse(bytes: &[u8]) -> Result<Vec<Constraint>> {
    let v: Value = serde_json::from_slice(&quote_non_finite(bytes))
        .map_err(|e| Error::InvalidArgument(format!("constraints: not valid JSON: {e}")))?;
    let list = v.as_array().ok_or_else(|| {
        Error::InvalidArgument(
            "constraints: the file must hold a JSON array of {type, frame_indices, ...} objects"
                .into(),
        )
    })?;
    list.iter()
        .enumerate()
        .map(|(i, e)| parse_entry(i, e))
        .collect()
}

fn parse_entry(index: usize, e: &Value) -> Result<Constraint> {
    let obj = e.as_object().ok_or_else(|| {
        Error::InvalidArgument(format!("constraints: entry {index} is not a JSON object"))
    })?;
    let ty = match obj.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Error::InvalidArgument(format!(
                "constraints: entry {index}: type {other} is not a string"
            )));
        }
        None => {
            return Err(Error::InvalidArgument(format!(
                "constraints: entry {index} has no type"
            )));
        }
    };
    if !TYPES.contains(&ty.as_str()) {
        return Err(entry_err(
            index,
            &ty,
            format!(
                "unknown constraint type; expected one of {}",
                TYPES.join(", ")
            ),
        ));
    }
    let is_root = ty == "root2d";
    let allowed: &[&str] = match ty.as_str() {
        "root2d" => &[
            "type",
            "frame_indices",
            "smooth_root_2d",
            "global_root_heading",
        ],
        "end-effector" => &[
            "type",
            "frame_indices",
            "local_joints_rot",
            "root_positions",
            "smooth_root_2d",
            "joint_names",
        ],
        _ => &[
            "type",
            "frame_indices",
            "local_joints_rot",
            "root_positions",
            "smooth_root_2d",
        ],
    };
    if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(entry_err(
            index,
            &ty,
            format!(
                "unknown key '{k}'; this type takes {}",
                allowed[1..].join(", ")
            ),
        ));
    }
    let get = |key: &str| {
        obj.get(key)
            .ok_or_else(|| entry_err(index, &ty, format!("missing {key}")))
    };
    let frames = get("frame_indices")?
        .as_array()
        .ok_or_else(|| entry_err(index, &ty, "frame_indices is not an array"))?;
    if frames.is_empty() {
        return Err(entry_err(index, &ty, "frame_indices is empty"));
    }
    let frame_indices = frames
        .iter()
        .map(|f| {
            f.as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .ok_or_else(|| {
                    entry_err(
                        index,
                        &ty,
                        format!("frame index {f} is not a non-negative integer"),
                    )
                })
        })
        .collect::<Result<Vec<usize>>>()?;
    let k = frame_indices.len();
    let smooth_root_2d = match obj.get("smooth_root_2d") {
        Some(v) => Some(rows::<2>(v, "smooth_root_2d", k, index, &ty)?),
        None if is_root => return Err(entry_err(index, &ty, "missing smooth_root_2d")),
        None => None,
    };
    let mut c = Constraint {
        index,
        type_name: ty.clone(),
        kind: ConstraintKind::FullBody,
        frame_indices,
        smooth_root_2d,
        num_joints: 0,
        local_joints_rot: Vec::new(),
        root_positions: Vec::new(),
    };
    if is_root {
        let heading = match obj.get("global_root_heading") {
            Some(v) => Some(rows::<2>(v, "global_root_heading", k, index, &ty)?),
            None => None,
        };
        c.kind = ConstraintKind::Root2d { heading };
        return Ok(c);
    }
    c.root_positions = rows::<3>(get("root_positions")?, "root_positions", k, index, &ty)?;
    let rot = get("local_joints_rot")?
        .as_array()
        .ok_or_else(|| entry_err(index, &ty, "local_joints_rot is not an array"))?;
    if rot.len() != k {
        return Err(entry_err(
            index,
            &ty,
            format!(
                "local_joints_rot holds {} frames; frame_indices holds {k}",
                rot.len()
            ),
        ));
    }
    for (f, frame) in rot.iter().enumerate() {
        let r = any_rows::<3>(frame, &format!("local_joints_rot[{f}]"), index, &ty)?;
        if f == 0 {
            c.num_joints = r.len();
        } else if r.len() != c.num_joints {
            return Err(entry_err(
                index,
                &ty,
                format!(
                    "local_joints_rot[{f}] holds {} joints, frame 0 holds {}",
                    r.len(),
                    c.num_joints
                ),
            ));
        }
        c.local_joints_rot.extend(r.iter().flatten());
    }
    c.kind = match ty.as_str() {
        "fullbody" => ConstraintKind::FullBody,
        "left-hand" => ConstraintKind::EndEffector {
            joint_names: vec!["LeftHand".into()],
        },
        "right-hand" => ConstraintKind::EndEffector {
            joint_names: vec!["RightHand".into()],
        },
        "left-foot" => ConstraintKind::EndEffector {
            joint_names: vec!["LeftFoot".into()],
        },
        "right-foot" => ConstraintKind::EndEffector {
            joint_names: vec!["RightFoot".into()],
        },
        _ => {
            let names = get("joint_names")?
                .as_array()
                .ok_or_else(|| entry_err(index, &ty, "joint_names is not an array"))?;
            let joint_names = names
                .iter()
                .map(|n| {
                    let s = n.as_str().ok_or_else(|| {
                        entry_err(index, &ty, format!("joint name {n} is not a string"))
                    })?;
                    if !END_EFFECTORS.contains(&s) {
                        return Err(entry_err(
                            index,
                            &ty,
                            format!(
                                "unknown end effector '{s}'; expected one of {}",
                                END_EFFECTORS.join(", ")
                            ),
                        ));
                    }
                    Ok(s.to_string())
                })
                .collect::<Result<Vec<String>>>()?;
            ConstraintKind::EndEffector { joint_names }
        }
    };
    Ok(c)
}

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
    let kk = super::skeleton::mat_mul(&k, &k);
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

/// Reads and checks a constraints file for a model: [`parse`], then [`build_conditions`].
pub fn load(
    path: &std::path::Path,
    skel: &Skeleton,
    stats: &MotionStats,
    frames: usize,
) -> Result<(Vec<Constraint>, Conditions)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let list = parse(&bytes).map_err(|e| match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{}: {m}", path.display())),
        e => e,
    })?;
    let cond = build_conditions(&list, skel, stats, frames).map_err(|e| match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{}: {m}", path.display())),
        e => e,
    })?;
    Ok((list, cond))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_angle_matches_rodrigues() {
        assert_eq!(
            axis_angle_to_matrix([0.0; 3]),
            [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        );
        let a = 0.7f32;
        let m = axis_angle_to_matrix([0.0, a, 0.0]);
        let want = [a.cos(), 0.0, a.sin(), 0.0, 1.0, 0.0, -a.sin(), 0.0, a.cos()];
        for (x, y) in m.iter().zip(want) {
            assert!((x - y).abs() < 2e-6, "{m:?}");
        }
    }

    fn err(json: &str) -> String {
        parse(json.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn bad_files_name_the_entry() {
        assert!(err("{}").contains("JSON array"));
        assert!(err(r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,0]]},{"type":"hand"}]"#)
            .contains("entry 1 (hand): unknown constraint type"));
        assert!(
            err(r#"[{"type":"root2d","frame_indices":[0,1],"smooth_root_2d":[[0,0]]}]"#)
                .contains("entry 0 (root2d): smooth_root_2d holds 1 rows; frame_indices holds 2")
        );
        assert!(
            err(r#"[{"type":"root2d","frame_indices":[-1],"smooth_root_2d":[[0,0]]}]"#)
                .contains("entry 0 (root2d): frame index -1 is not a non-negative integer")
        );
        assert!(
            err(r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,1e39]]}]"#)
                .contains("not a finite float32")
        );
        assert!(err(r#"[{"type":"end-effector","frame_indices":[0],"local_joints_rot":[[[0,0,0]]],"root_positions":[[0,0,0]],"joint_names":["Nose"]}]"#)
            .contains("entry 0 (end-effector): unknown end effector 'Nose'"));
        assert!(err(r#"[{"type":"fullbody","frame_indices":[0,1],"local_joints_rot":[[[0,0,0]],[[0,0,0],[0,0,0]]],"root_positions":[[0,0,0],[0,0,0]]}]"#)
            .contains("local_joints_rot[1] holds 2 joints, frame 0 holds 1"));
        assert!(
            err(r#"[{"type":"fullbody","frame_indices":[0],"root_positions":[[0,0,0]]}]"#)
                .contains("entry 0 (fullbody): missing local_joints_rot")
        );
        assert!(
            err(r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,NaN]]}]"#)
                .contains("entry 0 (root2d): smooth_root_2d[0]: NaN is not a finite number")
        );
        assert!(
            err(r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,0]],"heading":1}]"#)
                .contains("unknown key 'heading'")
        );
    }
}
