//! MotionBricks features -> Unitree G1 MuJoCo `qpos` (`mujoco_qpos_converter.
//! convert_motion_features_to_mujoco_qpos`, `motionbricks/helper/mujoco_helper.py#L265-329`;
//! `../shared/docs/upstream/motionbricks.md` section 4.3).
//!
//! The constants come from the robot description `g1.xml` (read once by the converter and
//! stored in the model file): the 29 hinge joints in document order, each joint's axis (its
//! own `axis` or its default class's), and each joint body's `quat`, conjugated into motion
//! space and transposed (`_rot_offsets_f2q`, #L235-251). The joint tree is `G1Skeleton34`'s
//! (`motionbricks/motionlib/core/skeletons/g1.py#L161-205`).

use crate::models::kit::rotation;
use crate::{Error, Result};

/// `G1Skeleton34`'s joints in skeleton order with their parents.
pub const BONES: [(&str, Option<usize>); 34] = [
    ("pelvis_skel", None),
    ("left_hip_pitch_skel", Some(0)),
    ("left_hip_roll_skel", Some(1)),
    ("left_hip_yaw_skel", Some(2)),
    ("left_knee_skel", Some(3)),
    ("left_ankle_pitch_skel", Some(4)),
    ("left_ankle_roll_skel", Some(5)),
    ("left_toe_base", Some(6)),
    ("right_hip_pitch_skel", Some(0)),
    ("right_hip_roll_skel", Some(8)),
    ("right_hip_yaw_skel", Some(9)),
    ("right_knee_skel", Some(10)),
    ("right_ankle_pitch_skel", Some(11)),
    ("right_ankle_roll_skel", Some(12)),
    ("right_toe_base", Some(13)),
    ("waist_yaw_skel", Some(0)),
    ("waist_roll_skel", Some(15)),
    ("waist_pitch_skel", Some(16)),
    ("left_shoulder_pitch_skel", Some(17)),
    ("left_shoulder_roll_skel", Some(18)),
    ("left_shoulder_yaw_skel", Some(19)),
    ("left_elbow_skel", Some(20)),
    ("left_wrist_roll_skel", Some(21)),
    ("left_wrist_pitch_skel", Some(22)),
    ("left_wrist_yaw_skel", Some(23)),
    ("left_hand_roll_skel", Some(24)),
    ("right_shoulder_pitch_skel", Some(17)),
    ("right_shoulder_roll_skel", Some(26)),
    ("right_shoulder_yaw_skel", Some(27)),
    ("right_elbow_skel", Some(28)),
    ("right_wrist_roll_skel", Some(29)),
    ("right_wrist_pitch_skel", Some(30)),
    ("right_wrist_yaw_skel", Some(31)),
    ("right_hand_roll_skel", Some(32)),
];

/// Hinge joints of the G1.
pub const HINGES: usize = 29;
/// Offset of the 34 x 6 global rotations in the 414-wide global features.
const ROT_AT: usize = 104;

/// MuJoCo (Z-up, X-forward) to motion space (Y-up, Z-forward): motion x = MuJoCo y, motion
/// y = MuJoCo z, motion z = MuJoCo x (#L167-168).
const M: [[f64; 3]; 3] = [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]];

/// A 3 x 3 rotation, rows first.
pub type Mat = [[f32; 3]; 3];

/// The G1 constants of the qpos conversion.
#[derive(Clone, Debug, PartialEq)]
pub struct G1Qpos {
    /// Per hinge (MuJoCo order): its joint's index in the skeleton.
    pub joint: [usize; HINGES],
    /// Per hinge: its axis in motion space, 0 = x, 1 = y, 2 = z.
    pub axis: [usize; HINGES],
    /// Per skeleton joint: `_rot_offsets_f2q` (identity where the body has no `quat`).
    pub f2q: Vec<Mat>,
}

fn bad(msg: String) -> Error {
    Error::InvalidArgument(format!("g1.xml: {msg}"))
}

fn floats<const N: usize>(s: &str, what: &str) -> Result<[f64; N]> {
    let v: Vec<f64> = s
        .split_whitespace()
        .map(|x| x.parse::<f64>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad(format!("{what} {s:?} is not {N} numbers")))?;
    let a: [f64; N] = v
        .try_into()
        .map_err(|_| bad(format!("{what} {s:?} is not {N} numbers")))?;
    if a.iter().any(|x| !x.is_finite()) {
        return Err(bad(format!("{what} {s:?} is not finite")));
    }
    Ok(a)
}

impl G1Qpos {
    /// Read the constants from the text of upstream's `assets/skeletons/g1/g1.xml`.
    pub fn from_xml(text: &str) -> Result<G1Qpos> {
        let doc = roxmltree::Document::parse(text).map_err(|e| bad(e.to_string()))?;
        // Default classes' joint axes (#L178-183).
        let mut class_axis = std::collections::HashMap::new();
        for d in doc.descendants().filter(|n| n.has_tag_name("default")) {
            if let Some(c) = d.attribute("class")
                && let Some(j) = d.children().find(|n| n.has_tag_name("joint"))
                && let Some(a) = j.attribute("axis")
            {
                class_axis.insert(c.to_string(), a.to_string());
            }
        }
        let world = doc
            .descendants()
            .find(|n| n.has_tag_name("worldbody"))
            .ok_or_else(|| bad("no <worldbody>".into()))?;
        let hinges: Vec<_> = world
            .descendants()
            .filter(|n| n.has_tag_name("joint"))
            .collect();
        if hinges.len() != HINGES {
            return Err(bad(format!(
                "{} joints under <worldbody>, expected the G1's {HINGES} hinges",
                hinges.len()
            )));
        }
        let mut joint = [0usize; HINGES];
        let mut axis = [0usize; HINGES];
        let mut f2q = vec![[[1.0f32, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]; BONES.len()];
        for (i, j) in hinges.iter().enumerate() {
            let name = j
                .attribute("name")
                .ok_or_else(|| bad(format!("joint {i} has no name")))?;
            let skel = name.replace("_joint", "_skel");
            let idx = BONES
                .iter()
                .position(|(n, _)| *n == skel)
                .ok_or_else(|| bad(format!("joint {name:?} is not a G1 skeleton joint")))?;
            joint[i] = idx;
            let a = match j.attribute("axis") {
                Some(a) => a.to_string(),
                None => {
                    let c = j.attribute("class").unwrap_or("");
                    class_axis
                        .get(c)
                        .cloned()
                        .ok_or_else(|| bad(format!("joint {name:?} has no axis")))?
                }
            };
            let v: [f64; 3] = floats(&a, "axis")?;
            // np.argmax over the MuJoCo axis, mapped to motion space (#L204-210):
            // MuJoCo x -> motion z, y -> x, z -> y.
            let mut am = 0;
            for k in 1..3 {
                if v[k] > v[am] {
                    am = k;
                }
            }
            axis[i] = [2, 0, 1][am];
            let body = j
                .parent()
                .filter(|p| p.has_tag_name("body"))
                .ok_or_else(|| bad(format!("joint {name:?} is not inside a <body>")))?;
            if let Some(q) = body.attribute("quat") {
                let q: [f64; 4] = floats(q, "quat")?;
                f2q[idx] = offset(q)?;
            }
        }
        let mut seen = joint.to_vec();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != HINGES {
            return Err(bad("a joint appears twice".into()));
        }
        Ok(G1Qpos { joint, axis, f2q })
    }

    /// Flat values for the model file: per hinge `[joint, axis]` and the 34 offsets.
    pub fn to_values(&self) -> (Vec<i32>, Vec<f32>) {
        let ja = self
            .joint
            .iter()
            .zip(&self.axis)
            .flat_map(|(&j, &a)| [j as i32, a as i32])
            .collect();
        let f = self
            .f2q
            .iter()
            .flat_map(|m| m.iter().flatten().copied())
            .collect();
        (ja, f)
    }

    /// The inverse of [`G1Qpos::to_values`], checked.
    pub fn from_values(ja: &[i32], f: &[f32]) -> Result<G1Qpos> {
        if ja.len() != 2 * HINGES || f.len() != 9 * BONES.len() {
            return Err(bad("qpos constants of the wrong size".into()));
        }
        let mut joint = [0usize; HINGES];
        let mut axis = [0usize; HINGES];
        for i in 0..HINGES {
            let (j, a) = (ja[2 * i], ja[2 * i + 1]);
            if !(0..BONES.len() as i32).contains(&j) || !(0..3).contains(&a) {
                return Err(bad(format!("hinge {i}: joint {j}, axis {a} out of range")));
            }
            joint[i] = j as usize;
            axis[i] = a as usize;
        }
        let f2q = f
            .chunks_exact(9)
            .map(|c| [[c[0], c[1], c[2]], [c[3], c[4], c[5]], [c[6], c[7], c[8]]])
            .collect();
        Ok(G1Qpos { joint, axis, f2q })
    }

    /// `frames` rows of 414 global features to `frames` rows of 36 qpos values (root xyz,
    /// root quaternion w x y z, 29 hinge angles), as `full_agent` writes them
    /// (`motion_backbone/demo/full_agent.py#L480-483`).
    pub fn features_to_qpos(&self, features: &[f32], frames: usize) -> Vec<f32> {
        let w = super::dims::GLOBAL_REP;
        let mut out = Vec::with_capacity(frames * 36);
        for f in 0..frames {
            let x = &features[f * w..(f + 1) * w];
            // Global rotations from 6-D (`rotations.py#L44-60`), local = parent^T global
            // (`mujoco_helper.py#L22-31`), then the f2q offsets.
            let global: [Mat; BONES.len()] =
                std::array::from_fn(|j| cont6d_to_matrix(&x[ROT_AT + 6 * j..ROT_AT + 6 * j + 6]));
            let local: [Mat; BONES.len()] = std::array::from_fn(|j| {
                let l = match BONES[j].1 {
                    Some(p) => matmul_tn(&global[p], &global[j]),
                    None => global[j],
                };
                matmul(&self.f2q[j], &l)
            });
            // Root translation into MuJoCo axes: (z, x, y).
            out.extend_from_slice(&[x[2], x[0], x[1]]);
            // Root rotation M^T R M, then the quaternion (w first).
            let mut r = [[0f32; 3]; 3];
            for (a, row) in r.iter_mut().enumerate() {
                for (b, v) in row.iter_mut().enumerate() {
                    // (M^T R M)[a][b] = R[pa][pb] with M^T's row a selecting motion axis pa.
                    *v = local[0][PERM[a]][PERM[b]];
                }
            }
            out.extend_from_slice(&matrix_to_quaternion(&r));
            for i in 0..HINGES {
                let m = &local[self.joint[i]];
                // The Euler angle about the hinge's axis (only that one is computed).
                let angle = match self.axis[i] {
                    0 => m[2][1].atan2(m[2][2]),
                    1 => m[0][2].atan2(m[0][0]),
                    _ => m[1][0].atan2(m[1][1]),
                };
                out.push(angle);
            }
        }
        out
    }
}

/// `M^T R M` reads motion axis `PERM[a]` for MuJoCo axis `a`: MuJoCo x = motion z, y = x,
/// z = y.
const PERM: [usize; 3] = [2, 0, 1];

/// `(M R_q M^T)^T` in f64, cast to f32, for a body `quat` (w x y z, normalised as scipy's
/// `Rotation.from_quat` does).
fn offset(q: [f64; 4]) -> Result<Mat> {
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    if n == 0.0 {
        return Err(bad("a zero quaternion".into()));
    }
    let r = rotation::unit_quaternion_to_matrix_f64(q.map(|v| v / n));
    let mut c = [[0f64; 3]; 3];
    for a in 0..3 {
        for b in 0..3 {
            let mut s = 0.0;
            for i in 0..3 {
                for j in 0..3 {
                    s += M[a][i] * r[i][j] * M[b][j];
                }
            }
            c[a][b] = s;
        }
    }
    let mut t = [[0f32; 3]; 3];
    for a in 0..3 {
        for b in 0..3 {
            t[a][b] = c[b][a] as f32;
        }
    }
    Ok(t)
}

fn cont6d_to_matrix(v: &[f32]) -> Mat {
    let (xr, yr) = ([v[0], v[1], v[2]], [v[3], v[4], v[5]]);
    let nx = (xr[0] * xr[0] + xr[1] * xr[1] + xr[2] * xr[2]).sqrt();
    let x = xr.map(|c| c / nx);
    let z = cross(&x, &yr);
    let nz = (z[0] * z[0] + z[1] * z[1] + z[2] * z[2]).sqrt();
    let z = z.map(|c| c / nz);
    let y = cross(&z, &x);
    [[x[0], y[0], z[0]], [x[1], y[1], z[1]], [x[2], y[2], z[2]]]
}

fn cross(a: &[f32; 3], b: &[f32; 3]) -> [f32; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn matmul(a: &Mat, b: &Mat) -> Mat {
    let mut c = [[0f32; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            c[i][j] = a[i][0] * b[0][j] + a[i][1] * b[1][j] + a[i][2] * b[2][j];
        }
    }
    c
}

/// `a^T b`.
fn matmul_tn(a: &Mat, b: &Mat) -> Mat {
    let mut c = [[0f32; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            c[i][j] = a[0][i] * b[0][j] + a[1][i] * b[1][j] + a[2][i] * b[2][j];
        }
    }
    c
}

/// `matrix_to_quaternion` (`motionbricks/geometry/quaternions.py#L9-50`), `w x y z`: the
/// kit's [`rotation::matrix_to_quaternion`] of the row-major `m`.
pub(crate) fn matrix_to_quaternion(m: &Mat) -> [f32; 4] {
    let [[m00, m01, m02], [m10, m11, m12], [m20, m21, m22]] = *m;
    rotation::matrix_to_quaternion(&[m00, m01, m02, m10, m11, m12, m20, m21, m22])
}
