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

mod conditions;
mod entry;
mod parse;

pub(crate) use conditions::pose;
pub use conditions::{Conditions, axis_angle_to_matrix, build_conditions, build_raw};
pub use entry::{Constraint, ConstraintKind, END_EFFECTORS, TYPES};
pub use parse::parse;

use super::config::MotionStats;
use super::skeleton::Skeleton;
use crate::{Error, Result};

/// Reads and checks a constraints file for a model: [`parse`], then [`build_conditions`].
pub fn load(
    path: &std::path::Path,
    skel: &Skeleton,
    stats: &MotionStats,
    frames: usize,
) -> Result<(Vec<Constraint>, Conditions)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let in_file = |e: Error| match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(format!("{}: {m}", path.display())),
        e => e,
    };
    let list = parse(&bytes).map_err(in_file)?;
    let cond = build_conditions(&list, skel, stats, frames).map_err(in_file)?;
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

    #[test]
    fn bad_files_name_the_entry() {
        let cases = [
            ("{}", "JSON array"),
            (
                r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,0]]},{"type":"hand"}]"#,
                "entry 1 (hand): unknown constraint type",
            ),
            (
                r#"[{"type":"root2d","frame_indices":[0,1],"smooth_root_2d":[[0,0]]}]"#,
                "entry 0 (root2d): smooth_root_2d holds 1 rows; frame_indices holds 2",
            ),
            (
                r#"[{"type":"root2d","frame_indices":[-1],"smooth_root_2d":[[0,0]]}]"#,
                "entry 0 (root2d): frame index -1 is not a non-negative integer",
            ),
            (
                r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,1e39]]}]"#,
                "not a finite float32",
            ),
            (
                r#"[{"type":"end-effector","frame_indices":[0],"local_joints_rot":[[[0,0,0]]],"root_positions":[[0,0,0]],"joint_names":["Nose"]}]"#,
                "entry 0 (end-effector): unknown end effector 'Nose'",
            ),
            (
                r#"[{"type":"fullbody","frame_indices":[0,1],"local_joints_rot":[[[0,0,0]],[[0,0,0],[0,0,0]]],"root_positions":[[0,0,0],[0,0,0]]}]"#,
                "local_joints_rot[1] holds 2 joints, frame 0 holds 1",
            ),
            (
                r#"[{"type":"fullbody","frame_indices":[0],"root_positions":[[0,0,0]]}]"#,
                "entry 0 (fullbody): missing local_joints_rot",
            ),
            (
                r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,NaN]]}]"#,
                "entry 0 (root2d): smooth_root_2d[0]: NaN is not a finite number",
            ),
            (
                r#"[{"type":"root2d","frame_indices":[0],"smooth_root_2d":[[0,0]],"heading":1}]"#,
                "unknown key 'heading'",
            ),
        ];
        for (json, want) in cases {
            let got = parse(json.as_bytes()).unwrap_err().to_string();
            assert!(got.contains(want), "{json}: {got}");
        }
    }
}
