#!/usr/bin/env python3
"""Capture post-processing fixtures from upstream's REAL MotionCorrection extension (issue 14,
part 3).

Each case feeds a motion (a shipped demo motion cropped to a few seconds, or a small synthetic
walk for SMPL-X, which ships no demo) and optionally a constraint list through upstream's own
`kimodo.postprocess.post_process_motion` (the function `Kimodo.__call__` calls when
`post_processing=True`, `kimodo/model/kimodo_model.py#L322-331`), which calls the compiled
extension `motion_correction._motion_correction.correct_motion`. A recording wrapper around that
binding stores exactly what it receives (rig, masks, targets, quaternions) and what it returns,
so the Rust port is compared both at the binding and at the end of `post_process_motion`.

Upstream code is imported from `--upstream-root` (a temporary export of the mirror) and the
extension from `--extension` (built from the same export with cmake; see
tests/fixtures/kimodo/postprocess/README.md); neither is copied here. CPU, float32.

Usage:
    python reference/capture_kimodo_postprocess.py --upstream-root /tmp/kimodo-export \\
        --extension /work/wt/mc-venv/site --demos ../shared/data/upstream/kimodo/assets/demo/examples \\
        --out tests/fixtures/kimodo/postprocess
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch

UPSTREAM_COMMIT = "0f6fccf142ca57fa82212ddd26201b2ed4b328fd"
NBJOINTS = {"soma30": 30, "g1": 34, "smplx22": 22}

# (case, skeleton, demo folder or None for synthetic, frames kept, constraints)
CASES = [
    ("soma30_single", "soma30", "kimodo-soma-rp/01_single_text_prompt", 100, None),
    ("soma30_fullbody", "soma30", "kimodo-soma-rp/03_full_body_keyframes", 140, "demo"),
    ("soma30_end_effectors", "soma30", "kimodo-soma-rp/04_ee_constraint", 100, "demo"),
    ("soma30_root_path", "soma30", "kimodo-soma-rp/05_root_path", 90, "demo"),
    ("soma30_mixed", "soma30", "kimodo-soma-rp/07_mixed_constraints", 120, "demo"),
    ("smplx22_walk", "smplx22", None, 90, None),
    ("smplx22_constrained", "smplx22", None, 90, "synthetic"),
    ("g1_single", "g1", "kimodo-g1-rp/01_single_text_prompt", 100, None),
]


def synthetic_smplx_walk(skel, frames):
    """A plausible SMPL-X walk: the root moves forward at 1 m/s with a small bob, hips and
    knees swing in antiphase, arms counter-swing; contacts alternate heel/toe per half cycle."""
    names = skel.bone_order_names
    t = np.arange(frames) / 30.0
    phase = 2 * np.pi * t / 1.1
    aa = np.zeros((frames, len(names), 3))
    def set_x(name, v):
        aa[:, names.index(name), 0] = v
    set_x("left_hip", 0.45 * np.sin(phase))
    set_x("right_hip", -0.45 * np.sin(phase))
    set_x("left_knee", 0.6 * np.clip(np.sin(phase + 1.2), 0, None))
    set_x("right_knee", 0.6 * np.clip(-np.sin(phase + 1.2), 0, None))
    set_x("left_ankle", -0.2 * np.sin(phase + 0.5))
    set_x("right_ankle", 0.2 * np.sin(phase + 0.5))
    aa[:, names.index("left_shoulder"), 2] = -1.2
    aa[:, names.index("right_shoulder"), 2] = 1.2
    aa[:, names.index("left_shoulder"), 0] = -0.3 * np.sin(phase)
    aa[:, names.index("right_shoulder"), 0] = 0.3 * np.sin(phase)
    aa[:, 0, 1] = 0.1 * np.sin(0.5 * phase)
    from kimodo.geometry import axis_angle_to_matrix

    local = axis_angle_to_matrix(torch.tensor(aa, dtype=torch.float32))
    pelvis_y = float(skel.neutral_joints[0, 1]) - float(skel.neutral_joints[:, 1].min()) + 0.01
    root = np.stack([0.05 * np.sin(0.5 * phase), pelvis_y + 0.02 * np.cos(2 * phase), 1.0 * t], -1)
    s = np.sin(phase)
    contacts = np.stack([s > 0.1, s > -0.2, s < -0.1, s < 0.2], -1)
    return local, torch.tensor(root, dtype=torch.float32), torch.tensor(contacts)


def synthetic_constraints(skel, local, root, frames):
    """A root path on every 6th frame (within 5 cm of the walk), a full-body keyframe at frame
    45 (the walk's own pose, lifted 3 cm) and a left-hand pin at frames 60-62."""
    from kimodo.geometry import matrix_to_axis_angle

    path = list(range(0, frames, 6))
    r = root.numpy()
    aa = matrix_to_axis_angle(local).numpy()
    return [
        {"type": "root2d", "frame_indices": path,
         "smooth_root_2d": (r[path][:, [0, 2]] + np.array([0.05, -0.03])).tolist()},
        {"type": "fullbody", "frame_indices": [45], "local_joints_rot": aa[[45]].tolist(),
         "root_positions": (r[[45]] + np.array([0.0, 0.03, 0.0])).tolist(),
         "smooth_root_2d": r[[45]][:, [0, 2]].tolist()},
        {"type": "left-hand", "frame_indices": [60, 61, 62], "local_joints_rot": aa[[60, 61, 62]].tolist(),
         "root_positions": r[[60, 61, 62]].tolist(),
         "smooth_root_2d": r[[60, 61, 62]][:, [0, 2]].tolist()},
    ]


def matrix_to_quaternion_ieee(m):
    """`kimodo.geometry.matrix_to_quaternion` (#L144-187) evaluated in numpy float32, whose
    sqrt is correctly rounded. torch's CPU sqrt is not (it differs by an ulp on ~1 value in 10
    here), and a few cases amplify that ulp (near-straight limbs in IK), so the fixture also
    holds upstream's output for these IEEE quaternions: the Rust port computes them."""
    m = m.reshape(-1, 9)
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = [m[:, i] for i in range(9)]
    one = np.float32(1)
    qa = np.stack([one + m00 + m11 + m22, one + m00 - m11 - m22, one - m00 + m11 - m22, one - m00 - m11 + m22], -1)
    qa = np.sqrt(qa * (qa > 0))
    rows = np.stack([
        np.stack([qa[:, 0] * qa[:, 0], m21 - m12, m02 - m20, m10 - m01], -1),
        np.stack([m21 - m12, qa[:, 1] * qa[:, 1], m10 + m01, m02 + m20], -1),
        np.stack([m02 - m20, m10 + m01, qa[:, 2] * qa[:, 2], m12 + m21], -1),
        np.stack([m10 - m01, m20 + m02, m21 + m12, qa[:, 3] * qa[:, 3]], -1),
    ], -2)
    best = qa.argmax(-1)
    idx = np.arange(len(best))
    den = np.float32(2) * np.maximum(qa[idx, best], np.float32(0.1))
    return (rows[idx, best] / den[:, None]).astype(np.float32)


def demo_motion(skel, folder, frames):
    d = np.load(folder / "motion.npz")
    glob_rots = torch.tensor(d["global_rot_mats"][:frames])
    local = skel.global_rots_to_local_rots(glob_rots)
    root = torch.tensor(d["posed_joints"][:frames, skel.root_idx])
    contacts = torch.tensor(d["foot_contacts"][:frames])
    return local, root, contacts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream-root", required=True)
    ap.add_argument("--extension", required=True)
    ap.add_argument("--demos", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.extension)
    sys.path.insert(0, args.upstream_root)
    torch.set_num_threads(1)

    import motion_correction
    from kimodo.constraints import load_constraints_lst
    from kimodo.postprocess import post_process_motion
    from kimodo.skeleton.registry import build_skeleton

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    demos = Path(args.demos)
    binding = motion_correction.correct_motion
    meta_cases = {}
    for name, skel_name, demo, frames, constraints in CASES:
        skel = build_skeleton(NBJOINTS[skel_name])
        if demo is None:
            local, root, contacts = synthetic_smplx_walk(skel, frames)
        else:
            local, root, contacts = demo_motion(skel, demos / demo, frames)
        constraint_lst = []
        source = None
        if constraints == "demo":
            source = str(Path(demo) / "constraints.json")
            constraint_lst = load_constraints_lst(str(demos / demo / "constraints.json"), skel)
            constraints_json = json.loads((demos / demo / "constraints.json").read_text())
        elif constraints == "synthetic":
            constraints_json = synthetic_constraints(skel, local, root, frames)
            constraint_lst = load_constraints_lst(constraints_json, skel)

        calls = []

        def recording(*a):
            rec = {
                "hips_in": a[0].copy(), "rot_in": a[1].copy(), "hips_target": a[2].copy(),
                "rot_target": a[3].copy(),
                "masks": [np.asarray(m, dtype=np.float32).copy() for m in a[4:10]],
                "contacts": a[10].copy(), "parents": list(a[11]),
                "ref_translations": np.array(a[12], dtype=np.float32),
                "ref_translations_f64": np.array(a[12], dtype=np.float64),
                "indices": list(a[14:18]), "threshold": a[18], "root_margin": a[19],
                "double_ankle": a[20],
            }
            binding(*a)
            rec["hips_out"] = a[0].copy()
            rec["rot_out"] = a[1].copy()
            calls.append(rec)

        motion_correction.correct_motion = recording
        try:
            res = post_process_motion(local[None], root[None], contacts[None], skel, constraint_lst)
        finally:
            motion_correction.correct_motion = binding
        assert len(calls) == 1
        c = calls[0]
        nj = local.shape[1]
        # The same binding call on IEEE-rounded input quaternions (see matrix_to_quaternion_ieee).
        from kimodo.geometry import quaternion_to_matrix
        from kimodo.skeleton import fk

        q_ieee = matrix_to_quaternion_ieee(local.numpy()).flatten()
        q_ieee_in = q_ieee.copy()
        hips_ieee = c["hips_in"].copy()
        binding(hips_ieee, q_ieee, c["hips_target"], c["rot_target"], *[torch.tensor(m) for m in c["masks"]],
                c["contacts"], c["parents"], [list(map(float, r)) for r in c["ref_translations_f64"]],
                [[0.0, 0.0, 0.0, 1.0]] * nj, *c["indices"], c["threshold"], c["root_margin"], c["double_ankle"])
        local_ieee = quaternion_to_matrix(torch.tensor(q_ieee.reshape(frames, nj, 4)))
        _, posed_ieee, _ = fk(local_ieee, torch.tensor(hips_ieee.reshape(frames, 3)), skel)
        arrays = {
            "input_local_rot_mats": local.numpy().astype(np.float32),
            "input_root_positions": root.numpy().astype(np.float32),
            "input_foot_contacts": contacts.numpy().astype(bool),
            "binding_hips_in": c["hips_in"].reshape(frames, 3),
            "binding_rot_in": c["rot_in"].reshape(frames, nj, 4),
            "binding_hips_target": c["hips_target"].reshape(frames, 3),
            "binding_rot_target": c["rot_target"].reshape(frames, nj, 4),
            "binding_masks": np.stack(c["masks"]),
            "binding_contacts": c["contacts"].reshape(frames, 4),
            "binding_ref_translations": c["ref_translations"],
            "binding_hips_out": c["hips_out"].reshape(frames, 3),
            "binding_rot_out": c["rot_out"].reshape(frames, nj, 4),
            "output_local_rot_mats": res["local_rot_mats"][0].numpy().astype(np.float32),
            "output_root_positions": res["root_positions"][0].numpy().astype(np.float32),
            "output_posed_joints": res["posed_joints"][0].numpy().astype(np.float32),
            "ieee_rot_in": q_ieee_in.reshape(frames, nj, 4),
            "ieee_local_rot_mats": local_ieee.numpy().astype(np.float32),
            "ieee_root_positions": hips_ieee.reshape(frames, 3),
            "ieee_posed_joints": posed_ieee.numpy().astype(np.float32),
        }
        np.savez_compressed(out / f"{name}.npz", **arrays)
        if constraints is not None:
            (out / f"{name}.constraints.json").write_text(json.dumps(constraints_json))
        meta_cases[name] = {
            "skeleton": skel_name,
            "frames": frames,
            "motion": f"demo {demo}" if demo else "synthetic walk (capture script)",
            "constraints": source or constraints,
            "parents": c["parents"],
            "hand_foot_indices": c["indices"],
            "contact_threshold": c["threshold"],
            "root_margin": c["root_margin"],
            "has_double_ankle_joints": c["double_ankle"],
            "masks_order": ["fullbody", "left_hand", "right_hand", "left_foot", "right_foot", "root"],
            "changed_root_max_abs": float(np.abs(c["hips_out"] - c["hips_in"]).max()),
            "changed_rot_max_abs": float(np.abs(c["rot_out"] - c["rot_in"]).max()),
        }
        print(name, meta_cases[name]["changed_root_max_abs"], meta_cases[name]["changed_rot_max_abs"])
    script = Path(__file__).read_bytes()
    meta = {
        "upstream_commit": UPSTREAM_COMMIT,
        "upstream_note": "refs/pull/3/merge of nv-tlabs/kimodo: main 7330e7e plus the aarch64 (SIMDe) fix; "
        "MotionCorrection sources identical to main apart from the SIMD header and CMake",
        "extension_build": "cmake Release (-O3 -msse4.1 -mavx), Eigen 3.4.0 (Debian), pybind11 (PyPI), x86_64",
        "script_sha256": hashlib.sha256(script).hexdigest(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cases": meta_cases,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
