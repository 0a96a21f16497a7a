//! The 8 keyframes of one plan, `predict`'s arguments
//! (`full_navigation_agent._generate_inbetween_frames`, `motion_backbone/demo/full_agent.py#L399-465`).

use super::clips::TargetFrames;
use super::kinematics::Transforms;
use super::math::{cont6d, heading_y, wrap};
use super::spring::FPT;
use crate::models::motionbricks::dims::{EXTERNAL_POSE, GLOBAL_ROOT, LOCAL_ROOT};
use crate::models::motionbricks::plan::PlanInputs;

/// Root values and local poses of 4 frames: `global [4, 5]`, `local [4, 4]`, `poses [4, 303]`.
struct Half {
    global: Vec<f32>,
    local: Vec<f32>,
    poses: Vec<f32>,
}

/// 33 non-root joint positions (XZ relative to the root unless `relative` already holds),
/// then the 34 rotations as 6-D (#L414-423, #L444-447).
fn pose(t: &Transforms, recentre: bool) -> Vec<f32> {
    let r = t.positions[0];
    let mut v = Vec::with_capacity(EXTERNAL_POSE);
    for p in &t.positions[1..] {
        if recentre {
            v.extend_from_slice(&[p[0] - r[0], p[1], p[2] - r[2]]);
        } else {
            v.extend_from_slice(p);
        }
    }
    for m in &t.rotations {
        v.extend_from_slice(&cont6d(m));
    }
    v
}

/// Frames' root values from root positions and headings; the local root of frames 0..2 from
/// frame differences (angles wrapped with torch's floor-mod), height in the last column.
fn half(
    root: &[[f32; 3]; FPT],
    angle: &[f32; FPT],
    poses: Vec<f32>,
    fps: f32,
    last_vel: bool,
) -> Half {
    let mut global = Vec::with_capacity(FPT * GLOBAL_ROOT);
    for f in 0..FPT {
        global.extend_from_slice(&[
            root[f][0],
            root[f][1],
            root[f][2],
            angle[f].cos(),
            angle[f].sin(),
        ]);
    }
    let mut local = vec![0f32; FPT * LOCAL_ROOT];
    for f in 0..FPT - 1 {
        local[f * 4] = wrap(angle[f + 1] - angle[f]) * fps;
        local[f * 4 + 1] = (root[f + 1][0] - root[f][0]) * fps;
        local[f * 4 + 2] = (root[f + 1][2] - root[f][2]) * fps;
        local[f * 4 + 3] = global[f * 5 + 1];
    }
    if last_vel {
        // Target frames: the last velocity copied from the one before, every height set (#L441-442).
        let l = FPT - 1;
        for j in 0..3 {
            local[l * 4 + j] = local[(l - 1) * 4 + j];
        }
        local[l * 4 + 3] = global[l * 5 + 1];
    }
    Half {
        global,
        local,
        poses,
    }
}

/// `predict`'s arguments for one plan: the realigned context, the target window and its
/// headings (the spring's), the length left to the root model among `allowed`.
pub fn plan_inputs(
    context: &[Transforms],
    target: &TargetFrames,
    target_headings: &[f32; FPT],
    allowed: &[bool],
    masked_num_tokens: usize,
    fps: f32,
) -> PlanInputs {
    let mut croot = [[0f32; 3]; FPT];
    let mut cangle = [0f32; FPT];
    let mut cposes = Vec::with_capacity(FPT * EXTERNAL_POSE);
    for f in 0..FPT {
        croot[f] = context[f].positions[0];
        cangle[f] = heading_y(&context[f].rotations[0]);
        cposes.extend(pose(&context[f], true));
    }
    let c = half(&croot, &cangle, cposes, fps, false);
    let mut troot = [[0f32; 3]; FPT];
    let mut tposes = Vec::with_capacity(FPT * EXTERNAL_POSE);
    for (f, root) in troot.iter_mut().enumerate() {
        // target_global_root_positions + the root joint's own (root-relative) position.
        let (a, b) = (target.root_positions[f], target.joints[f].positions[0]);
        *root = [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
        tposes.extend(pose(&target.joints[f], false));
    }
    let t = half(&troot, target_headings, tposes, fps, true);
    let k = 2 * FPT;
    let mut has_local = vec![true; k];
    // The context's last velocity is unknown (#L457).
    has_local[FPT - 1] = false;
    PlanInputs {
        batch: 1,
        global_root_values: [c.global, t.global].concat(),
        has_global_root_values: vec![true; k],
        local_root_values: [c.local, t.local].concat(),
        has_local_root_values: has_local,
        local_poses: [c.poses, t.poses].concat(),
        has_local_poses: vec![true; k],
        num_tokens: vec![masked_num_tokens as i64],
        allowed_pred_num_tokens: allowed.to_vec(),
    }
}
