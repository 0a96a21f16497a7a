//! G1 qpos -> motion-space joint transforms, `mujoco_qpos_converter.
//! convert_mujoco_qpos_to_motion_transforms` (`motionbricks/helper/mujoco_helper.py#L335-427`).
//!
//! The constants are upstream's converter's own (`data/motionbricks/g1_kinematics.json`,
//! written by `reference/capture_motionbricks_agent.py` from `g1.xml` and the skeleton's
//! `joints.p`): per MuJoCo joint (pelvis, then the 29 hinges in document order) its parent,
//! accumulated neutral position, axis and body rotation (`_rot_offsets_q2t`); per skeleton joint
//! its MuJoCo joint (dead joints have none) and the dead joints' offsets from their parents.

use std::sync::OnceLock;

use super::math::{Mat, apply, mul, quat_to_matrix};
use crate::models::motionbricks::g1::{BONES, HINGES};

const JSON: &str = include_str!("../../../../data/motionbricks/g1_kinematics.json");

#[derive(serde::Deserialize)]
struct Raw {
    mujoco_parents: Vec<i64>,
    mujoco_neutral: Vec<f32>,
    hinge_axis: Vec<f32>,
    hinge_q2t: Vec<f32>,
    motion_to_mujoco: Vec<i64>,
    dead_joints: Vec<Dead>,
}

#[derive(serde::Deserialize)]
struct Dead {
    joint: usize,
    parent: usize,
    offset: [f32; 3],
}

/// The converter's constants.
#[derive(Clone, Debug)]
pub struct G1Kinematics {
    /// Per MuJoCo joint (30): its parent (`None` for the pelvis).
    pub parents: Vec<Option<usize>>,
    /// Per MuJoCo joint: the accumulated neutral position (MuJoCo frame).
    pub neutral: Vec<[f32; 3]>,
    /// Per hinge (29): its axis in MuJoCo space.
    pub axis: Vec<[f32; 3]>,
    /// Per hinge: its body rotation.
    pub q2t: Vec<Mat>,
    /// Per skeleton joint (34): its MuJoCo joint, or its parent and offset for a dead joint.
    pub source: Vec<Source>,
}

/// Where a skeleton joint's transform comes from.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// MuJoCo joint `i`.
    Mujoco(usize),
    /// A dead joint: identity world rotation at `parent`'s position plus `parent`'s rotation
    /// times `offset` (`mujoco_helper.py#L398-425`, the "dummy" scheme).
    Dead { parent: usize, offset: [f32; 3] },
}

/// One frame of motion-space global joint transforms (34 joints, skeleton order).
#[derive(Clone, Debug, PartialEq)]
pub struct Transforms {
    pub positions: Vec<[f32; 3]>,
    pub rotations: Vec<Mat>,
}

impl G1Kinematics {
    /// The embedded constants (parsed once).
    pub fn get() -> &'static G1Kinematics {
        static K: OnceLock<G1Kinematics> = OnceLock::new();
        K.get_or_init(|| {
            let raw: Raw = serde_json::from_str(JSON).expect("embedded g1_kinematics.json parses");
            G1Kinematics::from_raw(raw)
        })
    }

    fn from_raw(r: Raw) -> G1Kinematics {
        assert!(r.mujoco_parents.len() == HINGES + 1 && r.motion_to_mujoco.len() == BONES.len());
        let parents = r
            .mujoco_parents
            .iter()
            .map(|&p| usize::try_from(p).ok())
            .collect();
        let neutral = r
            .mujoco_neutral
            .chunks_exact(3)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        let axis = r
            .hinge_axis
            .chunks_exact(3)
            .map(|c| [c[0], c[1], c[2]])
            .collect();
        let q2t = r
            .hinge_q2t
            .chunks_exact(9)
            .map(|c| [[c[0], c[1], c[2]], [c[3], c[4], c[5]], [c[6], c[7], c[8]]])
            .collect();
        let source = r
            .motion_to_mujoco
            .iter()
            .enumerate()
            .map(|(j, &m)| match usize::try_from(m) {
                Ok(m) => Source::Mujoco(m),
                Err(_) => {
                    let d = r
                        .dead_joints
                        .iter()
                        .find(|d| d.joint == j)
                        .expect("every dead joint has an offset");
                    Source::Dead {
                        parent: d.parent,
                        offset: d.offset,
                    }
                }
            })
            .collect();
        G1Kinematics {
            parents,
            neutral,
            axis,
            q2t,
            source,
        }
    }

    /// One qpos frame (36 values, root quaternion `w x y z`) to motion-space transforms.
    pub fn transforms(&self, qpos: &[f32]) -> Transforms {
        let n = HINGES + 1;
        // Local rotations: the root's, then per hinge the quaternion about its MuJoCo axis
        // (sum over the axis components, #L347-355) as a matrix, premultiplied by the body's
        // rotation (#L356-358).
        let mut local = Vec::with_capacity(n);
        local.push(quat_to_matrix(&qpos[3..7]));
        for i in 0..HINGES {
            let d = qpos[7 + i];
            let (c, s) = ((d / 2.0).cos(), (d / 2.0).sin());
            let a = self.axis[i];
            let q = [
                c * a[0] + c * a[1] + c * a[2],
                s * a[0] + 0.0 * a[1] + 0.0 * a[2],
                0.0 * a[0] + s * a[1] + 0.0 * a[2],
                0.0 * a[0] + 0.0 * a[1] + s * a[2],
            ];
            local.push(mul(&self.q2t[i], &quat_to_matrix(&q)));
        }
        // Forward kinematics (`forward_kinematics`, #L49-103): child = parent [R | rel].
        let mut rot = vec![[[0f32; 3]; 3]; n];
        let mut pos = vec![[0f32; 3]; n];
        rot[0] = local[0];
        pos[0] = self.neutral[0];
        for j in 1..n {
            let p = self.parents[j].expect("only the pelvis is a root");
            let rel = [
                self.neutral[j][0] - self.neutral[p][0],
                self.neutral[j][1] - self.neutral[p][1],
                self.neutral[j][2] - self.neutral[p][2],
            ];
            rot[j] = mul(&rot[p], &local[j]);
            let r = apply(&rot[p], &rel);
            pos[j] = [r[0] + pos[p][0], r[1] + pos[p][1], r[2] + pos[p][2]];
        }
        // Root translation, then MuJoCo -> motion axes: motion (x, y, z) = MuJoCo (y, z, x),
        // R' = M R M^T (#L371, #L387-392); skeleton order and dead joints (#L394-425).
        const PERM: [usize; 3] = [1, 2, 0];
        let to_motion_p = |p: &[f32; 3]| {
            let q = [p[0] + qpos[0], p[1] + qpos[1], p[2] + qpos[2]];
            [q[PERM[0]], q[PERM[1]], q[PERM[2]]]
        };
        let to_motion_r = |r: &Mat| {
            let mut o = [[0f32; 3]; 3];
            for (a, row) in o.iter_mut().enumerate() {
                for (b, v) in row.iter_mut().enumerate() {
                    *v = r[PERM[a]][PERM[b]];
                }
            }
            o
        };
        let mut out = Transforms {
            positions: vec![[0.0; 3]; BONES.len()],
            rotations: vec![[[0.0; 3]; 3]; BONES.len()],
        };
        for (j, s) in self.source.iter().enumerate() {
            if let Source::Mujoco(m) = *s {
                out.positions[j] = to_motion_p(&pos[m]);
                out.rotations[j] = to_motion_r(&rot[m]);
            }
        }
        for (j, s) in self.source.iter().enumerate() {
            if let Source::Dead { parent, offset } = *s {
                let r = apply(&out.rotations[parent], &offset);
                let p = out.positions[parent];
                out.positions[j] = [p[0] + r[0], p[1] + r[1], p[2] + r[2]];
                out.rotations[j] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
            }
        }
        out
    }
}
