//! Kimodo's skeletons and forward kinematics, as upstream computes them.
//!
//! The joint names, parents and rest ("neutral") joints come from `data/kimodo/skeletons/*.json`,
//! written once from the upstream assets by `reference/convert_skeletons.py` and embedded here:
//! nothing is read from disk at run time and no pickle is ever parsed.
//!
//! Rotations are 3x3 matrices in the column-vector convention (`p' = R p`), stored row-major,
//! 9 floats per joint; arrays are frame-major: `[T, J, 3, 3]` and `[T, J, 3]`.

use serde::Deserialize;

use super::config::SkeletonKind;
use crate::{Error, Result};

/// A 3x3 rotation matrix, row-major.
pub type Mat3 = [f32; 9];

const IDENTITY: Mat3 = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];

fn skeleton_json(kind: SkeletonKind) -> &'static str {
    match kind {
        SkeletonKind::Soma30 => include_str!("../../../data/kimodo/skeletons/soma30.json"),
        SkeletonKind::Soma77 => include_str!("../../../data/kimodo/skeletons/soma77.json"),
        SkeletonKind::G1 => include_str!("../../../data/kimodo/skeletons/g1.json"),
        SkeletonKind::Smplx22 => include_str!("../../../data/kimodo/skeletons/smplx22.json"),
    }
}

const SOMA30_TO_77_JSON: &str = include_str!("../../../data/kimodo/skeletons/soma30_to_77.json");

/// The fields of a skeleton data file that the runtime uses (the file also records its
/// sources' SHA-256 and a checksum of the neutral joints, checked by the tests).
#[derive(Deserialize)]
struct SkeletonFile {
    skeleton: String,
    joint_names: Vec<String>,
    parents: Vec<i64>,
    root: usize,
    hip_joints: [usize; 2],
    foot_joints: Vec<usize>,
    neutral_joints: Vec<[f64; 3]>,
}

#[derive(Deserialize)]
struct ExpansionFile {
    soma77_index_of_soma30_joint: Vec<usize>,
    relaxed_hands_rest_pose: Vec<[[f32; 3]; 3]>,
}

fn bad_data(kind: SkeletonKind, msg: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("embedded {} skeleton data: {msg}", kind.name()))
}

/// One skeleton: hierarchy, rest joints and the joints the motion representation singles out.
#[derive(Clone, Debug, PartialEq)]
pub struct Skeleton {
    pub kind: SkeletonKind,
    /// Joint names in upstream order (`kimodo/skeleton/definitions.py`).
    pub names: Vec<String>,
    /// Parent of each joint; `None` for the root. Parents precede their children.
    pub parents: Vec<Option<usize>>,
    pub root: usize,
    /// `[right, left]` hip joints, whose difference gives the heading
    /// (`kimodo/motion_rep/feature_utils.py#L111-126`).
    pub hips: [usize; 2],
    /// Left foot chain then right foot chain (`SkeletonBase.foot_joint_idx`); the four contact
    /// channels of the model skeletons are `[left heel, left toe, right heel, right toe]`.
    pub foot_joints: Vec<usize>,
    /// Rest joint positions exactly as upstream stores them (float64 for SOMA and G1, float32
    /// values for SMPL-X), in metres.
    pub neutral_joints: Vec<[f64; 3]>,
    /// FK's translation of each joint from its parent: the neutral joints cast to f32 (as
    /// `kimodo/skeleton/kinematics.py#L48` casts them to the rotation dtype), minus the
    /// root's (#L50-54), minus the parent's (#L156-161). The root's entry is zero.
    rel_offsets: Vec<[f32; 3]>,
}

impl Skeleton {
    /// The skeleton of `kind`, from the data embedded in the binary.
    pub fn load(kind: SkeletonKind) -> Result<Skeleton> {
        let file: SkeletonFile = serde_json::from_str(skeleton_json(kind))
            .map_err(|e| bad_data(kind, format!("unreadable JSON: {e}")))?;
        let n = file.joint_names.len();
        if file.skeleton != kind.name() || n != kind.num_joints() {
            return Err(bad_data(
                kind,
                format!("holds '{}' with {n} joints", file.skeleton),
            ));
        }
        if file.parents.len() != n || file.neutral_joints.len() != n {
            return Err(bad_data(
                kind,
                "parents or neutral joints do not match the names",
            ));
        }
        let mut parents = Vec::with_capacity(n);
        for (j, &p) in file.parents.iter().enumerate() {
            parents.push(match p {
                -1 => None,
                p if p >= 0 && (p as usize) < j => Some(p as usize),
                _ => return Err(bad_data(kind, format!("joint {j} has parent {p}"))),
            });
        }
        let roots: Vec<usize> = (0..n).filter(|&j| parents[j].is_none()).collect();
        if roots != [file.root] {
            return Err(bad_data(
                kind,
                format!("roots {roots:?}, declared {}", file.root),
            ));
        }
        let in_range = |j: &usize| *j < n;
        if !file.hip_joints.iter().all(in_range) || !file.foot_joints.iter().all(in_range) {
            return Err(bad_data(kind, "hip or foot joint index out of range"));
        }

        let cast: Vec<[f32; 3]> = file
            .neutral_joints
            .iter()
            .map(|p| p.map(|v| v as f32))
            .collect();
        let pelvis = cast[file.root];
        let centred: Vec<[f32; 3]> = cast
            .iter()
            .map(|p| [p[0] - pelvis[0], p[1] - pelvis[1], p[2] - pelvis[2]])
            .collect();
        let rel_offsets = (0..n)
            .map(|j| match parents[j] {
                None => centred[j],
                Some(p) => [
                    centred[j][0] - centred[p][0],
                    centred[j][1] - centred[p][1],
                    centred[j][2] - centred[p][2],
                ],
            })
            .collect();
        Ok(Skeleton {
            kind,
            names: file.joint_names,
            parents,
            root: file.root,
            hips: file.hip_joints,
            foot_joints: file.foot_joints,
            neutral_joints: file.neutral_joints,
            rel_offsets,
        })
    }

    pub fn num_joints(&self) -> usize {
        self.names.len()
    }

    pub fn joint_index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Translation of each joint from its parent in FK (the root's is zero: root positions are
    /// global, so the pelvis offset is removed from the rest joints).
    pub fn rel_offsets(&self) -> &[[f32; 3]] {
        &self.rel_offsets
    }

    fn check_frames(&self, what: &str, len: usize, per_joint: usize, frames: usize) -> Result<()> {
        let want = frames
            .checked_mul(self.num_joints() * per_joint)
            .ok_or_else(|| Error::Shape(format!("{what}: {frames} frames overflow")))?;
        if len != want {
            return Err(Error::Shape(format!(
                "{what}: {len} values for {frames} frames of {} joints x {per_joint} (want {want})",
                self.num_joints()
            )));
        }
        Ok(())
    }

    /// Forward kinematics (`kimodo/skeleton/kinematics.py#L14-73`, with
    /// `root_positions_is_global = True`, the only form the decode path uses): for each frame,
    /// `G_j = G_p L_j`, `P_j = P_p + G_p rel_j` (root: `G = L`, `P = 0`), then
    /// `posed = P + root_position`. G1's baked rest rotations are not applied, as upstream's
    /// FK never finds them (kimodo.md §4.7).
    ///
    /// `local_rot_mats` is `[T, J, 3, 3]`, `root_positions` `[T, 3]`; returns
    /// `(global_rot_mats [T, J, 3, 3], posed_joints [T, J, 3])`.
    pub fn fk(
        &self,
        local_rot_mats: &[f32],
        root_positions: &[f32],
        frames: usize,
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        self.check_frames("fk local_rot_mats", local_rot_mats.len(), 9, frames)?;
        if root_positions.len() != frames * 3 {
            return Err(Error::Shape(format!(
                "fk root_positions: {} values for {frames} frames x 3",
                root_positions.len()
            )));
        }
        let nj = self.num_joints();
        let mut global = vec![0.0f32; frames * nj * 9];
        let mut posed = vec![0.0f32; frames * nj * 3];
        let mut pos = vec![[0.0f32; 3]; nj];
        for t in 0..frames {
            let local = &local_rot_mats[t * nj * 9..(t + 1) * nj * 9];
            let g = &mut global[t * nj * 9..(t + 1) * nj * 9];
            for j in 0..nj {
                let l: &Mat3 = local[j * 9..j * 9 + 9].try_into().expect("9 values");
                let rel = self.rel_offsets[j];
                let (rot, p) = match self.parents[j] {
                    None => (*l, rel),
                    Some(par) => {
                        let gp: Mat3 = g[par * 9..par * 9 + 9].try_into().expect("9 values");
                        let pp = pos[par];
                        let r = mat_vec(&gp, &rel);
                        (mat_mul(&gp, l), [r[0] + pp[0], r[1] + pp[1], r[2] + pp[2]])
                    }
                };
                g[j * 9..j * 9 + 9].copy_from_slice(&rot);
                pos[j] = p;
            }
            let root = &root_positions[t * 3..t * 3 + 3];
            for (j, p) in pos.iter().enumerate() {
                for k in 0..3 {
                    posed[(t * nj + j) * 3 + k] = p[k] + root[k];
                }
            }
        }
        Ok((global, posed))
    }

    /// Local rotations from global ones, `L_j = G_parent^T G_j` with the identity as the
    /// root's parent (`kimodo/skeleton/transforms.py#L12-39`). `[T, J, 3, 3]` in and out.
    pub fn local_from_global(&self, global_rot_mats: &[f32], frames: usize) -> Result<Vec<f32>> {
        self.check_frames("global_rot_mats", global_rot_mats.len(), 9, frames)?;
        let nj = self.num_joints();
        let mut local = vec![0.0f32; global_rot_mats.len()];
        for t in 0..frames {
            let g = &global_rot_mats[t * nj * 9..(t + 1) * nj * 9];
            for j in 0..nj {
                let gj: &Mat3 = g[j * 9..j * 9 + 9].try_into().expect("9 values");
                let parent: &Mat3 = match self.parents[j] {
                    None => &IDENTITY,
                    Some(p) => g[p * 9..p * 9 + 9].try_into().expect("9 values"),
                };
                let l = mat_t_mul(parent, gj);
                local[(t * nj + j) * 9..(t * nj + j) * 9 + 9].copy_from_slice(&l);
            }
        }
        Ok(local)
    }
}

/// `a b` for row-major 3x3 matrices, each entry summed in index order.
pub fn mat_mul(a: &Mat3, b: &Mat3) -> Mat3 {
    let mut c = [0.0f32; 9];
    for i in 0..3 {
        for j in 0..3 {
            c[i * 3 + j] = a[i * 3] * b[j] + a[i * 3 + 1] * b[3 + j] + a[i * 3 + 2] * b[6 + j];
        }
    }
    c
}

/// `a^T b` for row-major 3x3 matrices.
pub fn mat_t_mul(a: &Mat3, b: &Mat3) -> Mat3 {
    let mut c = [0.0f32; 9];
    for i in 0..3 {
        for j in 0..3 {
            c[i * 3 + j] = a[i] * b[j] + a[3 + i] * b[3 + j] + a[6 + i] * b[6 + j];
        }
    }
    c
}

/// `a v` for a row-major 3x3 matrix.
pub fn mat_vec(a: &Mat3, v: &[f32; 3]) -> [f32; 3] {
    [
        a[0] * v[0] + a[1] * v[1] + a[2] * v[2],
        a[3] * v[0] + a[4] * v[1] + a[5] * v[2],
        a[6] * v[0] + a[7] * v[1] + a[8] * v[2],
    ]
}

/// The SOMA30 -> SOMA77 expansion data (`kimodo/skeleton/definitions.py#L246-277`).
#[derive(Clone, Debug, PartialEq)]
pub struct Soma77Expansion {
    /// For each SOMA30 joint, its index among the SOMA77 joints.
    pub soma77_index: Vec<usize>,
    /// `[77, 3, 3]` local rotations of the relaxed-hands rest pose, used for the joints SOMA30
    /// does not predict.
    pub relaxed_hands_rest_pose: Vec<f32>,
}

impl Soma77Expansion {
    pub fn load() -> Result<Soma77Expansion> {
        let kind = SkeletonKind::Soma77;
        let file: ExpansionFile = serde_json::from_str(SOMA30_TO_77_JSON)
            .map_err(|e| bad_data(kind, format!("unreadable expansion JSON: {e}")))?;
        let n30 = SkeletonKind::Soma30.num_joints();
        let n77 = kind.num_joints();
        let index = file.soma77_index_of_soma30_joint;
        if index.len() != n30 || index.iter().any(|&i| i >= n77) {
            return Err(bad_data(
                kind,
                "expansion indices do not map 30 joints into 77",
            ));
        }
        if file.relaxed_hands_rest_pose.len() != n77 {
            return Err(bad_data(
                kind,
                "the relaxed-hands pose does not hold 77 joints",
            ));
        }
        Ok(Soma77Expansion {
            soma77_index: index,
            relaxed_hands_rest_pose: file
                .relaxed_hands_rest_pose
                .iter()
                .flat_map(|m| m.iter().flatten().copied())
                .collect(),
        })
    }

    /// SOMA77 local rotations `[T, 77, 3, 3]` from SOMA30 ones `[T, 30, 3, 3]`: the relaxed
    /// hands rest pose with the 30 predicted joints written over it
    /// (`SOMASkeleton30.to_SOMASkeleton77`).
    pub fn expand_locals(&self, local30: &[f32], frames: usize) -> Result<Vec<f32>> {
        let n30 = self.soma77_index.len();
        if local30.len() != frames * n30 * 9 {
            return Err(Error::Shape(format!(
                "SOMA30 local rotations: {} values for {frames} frames x {n30} joints x 9",
                local30.len()
            )));
        }
        let n77 = self.relaxed_hands_rest_pose.len() / 9;
        let mut out = Vec::with_capacity(frames * n77 * 9);
        for t in 0..frames {
            let base = out.len();
            out.extend_from_slice(&self.relaxed_hands_rest_pose);
            for (j30, &j77) in self.soma77_index.iter().enumerate() {
                let src = &local30[(t * n30 + j30) * 9..(t * n30 + j30) * 9 + 9];
                out[base + j77 * 9..base + j77 * 9 + 9].copy_from_slice(src);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    const KINDS: [SkeletonKind; 4] = [
        SkeletonKind::Soma30,
        SkeletonKind::Soma77,
        SkeletonKind::G1,
        SkeletonKind::Smplx22,
    ];

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn embedded_data_parses_exactly() {
        for kind in KINDS {
            let sk = Skeleton::load(kind).unwrap();
            assert_eq!(sk.num_joints(), kind.num_joints());
            // The converter recorded a hash of the float64 bytes it wrote: equal only if every
            // decimal in the JSON parsed back to the identical double.
            let v: serde_json::Value = serde_json::from_str(skeleton_json(kind)).unwrap();
            let want = v["neutral_joints_f64_sha256"].as_str().unwrap();
            let bytes: Vec<u8> = sk
                .neutral_joints
                .iter()
                .flatten()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            assert_eq!(hex(&Sha256::digest(&bytes)), want, "{kind:?}");
            assert_eq!(sk.rel_offsets()[sk.root], [0.0; 3]);
            assert_eq!(
                sk.foot_joints.len(),
                if kind == SkeletonKind::Soma77 { 6 } else { 4 }
            );
        }
        let e = Soma77Expansion::load().unwrap();
        let v: serde_json::Value = serde_json::from_str(SOMA30_TO_77_JSON).unwrap();
        let bytes: Vec<u8> = e
            .relaxed_hands_rest_pose
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let want = v["relaxed_hands_rest_pose_f32_sha256"].as_str().unwrap();
        assert_eq!(hex(&Sha256::digest(&bytes)), want);
    }

    #[test]
    fn named_joints_match_upstream_roles() {
        let soma = Skeleton::load(SkeletonKind::Soma30).unwrap();
        let name = |sk: &Skeleton, i: usize| sk.names[i].clone();
        assert_eq!(name(&soma, soma.hips[0]), "RightLeg");
        assert_eq!(name(&soma, soma.hips[1]), "LeftLeg");
        let feet: Vec<String> = soma.foot_joints.iter().map(|&i| name(&soma, i)).collect();
        assert_eq!(
            feet,
            ["LeftFoot", "LeftToeBase", "RightFoot", "RightToeBase"]
        );
        let g1 = Skeleton::load(SkeletonKind::G1).unwrap();
        assert_eq!(name(&g1, g1.hips[0]), "right_hip_pitch_skel");
        let sx = Skeleton::load(SkeletonKind::Smplx22).unwrap();
        let feet: Vec<String> = sx.foot_joints.iter().map(|&i| name(&sx, i)).collect();
        assert_eq!(
            feet,
            ["left_ankle", "left_foot", "right_ankle", "right_foot"]
        );
        // SMPL-X keeps its pelvis off the origin; FK's offsets are relative to it.
        assert!(sx.neutral_joints[0][1] < -0.3);
    }

    #[test]
    fn fk_of_identity_is_the_rest_pose_at_the_root() {
        for kind in KINDS {
            let sk = Skeleton::load(kind).unwrap();
            let nj = sk.num_joints();
            let local: Vec<f32> = (0..nj).flat_map(|_| IDENTITY).collect();
            let root = [0.5f32, 1.0, -2.0];
            let (global, posed) = sk.fk(&local, &root, 1).unwrap();
            assert!(global.iter().zip(&local).all(|(a, b)| a == b));
            let n0 = sk.neutral_joints[sk.root];
            for j in 0..nj {
                for k in 0..3 {
                    let want = sk.neutral_joints[j][k] - n0[k] + f64::from(root[k]);
                    let got = f64::from(posed[j * 3 + k]);
                    assert!(
                        (got - want).abs() < 1e-6,
                        "{kind:?} joint {j}: {got} vs {want}"
                    );
                }
            }
            assert_eq!(sk.local_from_global(&global, 1).unwrap(), local);
        }
    }

    #[test]
    fn fk_and_local_from_global_check_shapes() {
        let sk = Skeleton::load(SkeletonKind::G1).unwrap();
        assert!(sk.fk(&[0.0; 9 * 34 * 2], &[0.0; 3], 2).is_err());
        assert!(sk.fk(&[0.0; 9 * 33], &[0.0; 3], 1).is_err());
        assert!(sk.local_from_global(&[0.0; 9 * 34], 2).is_err());
        let e = Soma77Expansion::load().unwrap();
        assert!(e.expand_locals(&[0.0; 9 * 29], 1).is_err());
    }

    #[test]
    fn expansion_keeps_the_30_joints_and_fills_the_rest() {
        let e = Soma77Expansion::load().unwrap();
        let soma30 = Skeleton::load(SkeletonKind::Soma30).unwrap();
        let soma77 = Skeleton::load(SkeletonKind::Soma77).unwrap();
        for (j30, &j77) in e.soma77_index.iter().enumerate() {
            assert_eq!(soma30.names[j30], soma77.names[j77]);
            assert_eq!(soma30.neutral_joints[j30], soma77.neutral_joints[j77]);
        }
        let local30: Vec<f32> = (0..2 * 30 * 9).map(|i| i as f32).collect();
        let local77 = e.expand_locals(&local30, 2).unwrap();
        for t in 0..2 {
            for j in 0..77 {
                let got = &local77[(t * 77 + j) * 9..(t * 77 + j) * 9 + 9];
                match e.soma77_index.iter().position(|&x| x == j) {
                    Some(j30) => assert_eq!(got, &local30[(t * 30 + j30) * 9..][..9]),
                    None => assert_eq!(got, &e.relaxed_hands_rest_pose[j * 9..j * 9 + 9]),
                }
            }
        }
    }
}
