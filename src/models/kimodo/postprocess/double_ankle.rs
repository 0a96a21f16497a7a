//! The double-ankle passes of `DoContactIK` (`Utility.cpp#L891-1081`), for skeletons whose
//! foot hangs from two ankle joints (G1: `ankle_pitch` -> `ankle_roll`). Upstream's CLI never
//! post-processes G1 (`kimodo/scripts/generate.py#L310-311`), but its Python API runs these
//! passes when asked (`post_process_motion(..., G1Skeleton34)`), so the port has them too.

use std::collections::BTreeMap;

use super::correct::{CorrectionInputs, IkType, Pose};
use super::correct::{add_pin_mask, blend_corrections, parent};
use super::ik;
use super::math::{Transform, Vec3, joint_to_global};

/// Phase 1 puts the second ankle (`ankle_pitch`) where the original motion's
/// first-to-second-ankle offset says, relative to the corrected first ankle, by two-bone IK
/// from the hip; phase 2 restores the first ankle and the toe to where the contact pass had
/// put them, by one-bone IK. `fixed` is the contact pass's IK pose (upstream's `ikFixedPoses`,
/// kept between the passes). `masks` holds the toe pass's correction masks: upstream does not
/// clear its map before phase 1 (#891-935), so phase 1 blends those joints once more.
pub fn correct(
    poses: &mut [Pose],
    fixed: &mut [Pose],
    original: &[Pose],
    two_bone_frames: &BTreeMap<usize, Vec<bool>>,
    mut masks: BTreeMap<usize, Vec<f32>>,
    inp: &CorrectionInputs,
) {
    let parents = inp.parents;
    let mut saved_ankle: BTreeMap<usize, BTreeMap<usize, Vec3>> = BTreeMap::new();
    let mut saved_toe: BTreeMap<usize, BTreeMap<usize, Vec3>> = BTreeMap::new();
    let mut toe_of: BTreeMap<usize, usize> = BTreeMap::new();
    for tc in inp.contacts.iter().filter(|c| c.ik == IkType::OneBone) {
        let p = parents[tc.joint];
        if p >= 0 {
            toe_of.insert(p as usize, tc.joint);
        }
    }

    for c in inp.contacts.iter().filter(|c| c.ik == IkType::TwoBone) {
        let first = c.joint;
        let second = parent(parents, first);
        let knee = parent(parents, second);
        let hip = parents[knee];
        if hip < 0 {
            continue;
        }
        let hip = hip as usize;
        let Some(frames) = two_bone_frames.get(&first) else {
            continue;
        };
        let mut joint_mask = inp.fullbody_mask.to_vec();
        add_pin_mask(inp.pins, first, second, &mut joint_mask);
        masks.entry(knee).or_insert_with(|| joint_mask.clone());
        masks.entry(hip).or_insert_with(|| joint_mask.clone());
        for f in 0..inp.fullbody_mask.len() {
            if !frames[f] {
                continue;
            }
            saved_ankle.entry(first).or_default().insert(
                f,
                joint_to_global(parents, first as i32, &fixed[f]).translation,
            );
            if let Some(&toe) = toe_of.get(&first) {
                saved_toe.entry(first).or_default().insert(
                    f,
                    joint_to_global(parents, toe as i32, &fixed[f]).translation,
                );
            }
            let o_first = joint_to_global(parents, first as i32, &original[f]);
            let o_second = joint_to_global(parents, second as i32, &original[f]);
            let delta: Transform = o_first.delta_to(o_second);
            let corrected_first = joint_to_global(parents, first as i32, &fixed[f]);
            let target = delta.then(corrected_first).translation;
            ik::two_bone(&mut fixed[f], second, 1.0, target, parents, c.hint_offset);
            for j in [knee, hip] {
                if let Some(m) = masks.get_mut(&j) {
                    m[f] = 1.0;
                }
            }
        }
    }
    blend_corrections(poses, fixed, &masks);

    masks.clear();
    for c in inp.contacts.iter().filter(|c| c.ik == IkType::TwoBone) {
        let first = c.joint;
        let second = parent(parents, first);
        let Some(frames) = two_bone_frames.get(&first) else {
            continue;
        };
        let mut joint_mask = inp.fullbody_mask.to_vec();
        add_pin_mask(inp.pins, first, second, &mut joint_mask);
        masks.entry(second).or_insert_with(|| joint_mask.clone());
        masks.entry(first).or_insert_with(|| joint_mask.clone());
        for f in 0..inp.fullbody_mask.len() {
            if !frames[f] {
                continue;
            }
            // `savedFirstAnkleTargets[first][f]` exists for every corrected frame (phase 1).
            let ankle_target = saved_ankle
                .get(&first)
                .and_then(|m| m.get(&f))
                .copied()
                .unwrap_or([0.0; 3]);
            ik::one_bone(&mut fixed[f], first, 1.0, ankle_target, parents);
            if let Some(m) = masks.get_mut(&second) {
                m[f] = 1.0;
            }
            if let (Some(&toe), Some(t)) = (
                toe_of.get(&first),
                saved_toe.get(&first).and_then(|m| m.get(&f)),
            ) {
                ik::one_bone(&mut fixed[f], toe, 1.0, *t, parents);
                if let Some(m) = masks.get_mut(&first) {
                    m[f] = 1.0;
                }
            }
        }
    }
    blend_corrections(poses, fixed, &masks);
}
