#!/usr/bin/env python3
"""Constants and fixtures for kinema's Kimodo exporters, from the real upstream code (trusted, run
once).

Upstream's exporters read pickled skeleton assets and the G1 MJCF at run time
(`kimodo/exports/{bvh,mujoco,smplx}.py`); kinema embeds the few numbers they derive instead:

  data/kimodo/exports/soma77_bvh.json
      `bvh_joints.p` (f64 [77,3], the BVH rest layout, metres) and
      `standard_t_pose_global_offsets_rots.p` (f32 [77,3,3]) as `SOMASkeleton77` loads them.
  data/kimodo/exports/g1_mujoco.json
      from `MujocoQposConverter._prepare_transforms` (`kimodo/exports/mujoco.py#L64-212`): the
      hinge order of the CSV with each hinge's kimodo joint, its f2q-space axis (f32) and the
      per-joint f2q rotation offsets (f32 [34,3,3]), exactly the tensors `to_qpos` uses.
  data/kimodo/exports/smplx_amass.json
      `smplx22/beta.npy[:16]` (f32) and `smplx22/mean_hands.npy` (f64 [90]) as `AMASSConverter`
      loads them (`kimodo/exports/smplx.py#L63-87`).

Fixtures in tests/fixtures/kimodo/exports/ (outputs of the upstream functions):
  g1_qpos.npy          `MujocoQposConverter.to_qpos` of the first 40 frames of the shipped G1
                       clip 01 (locals from `global_rots_to_local_rots`, root = posed_joints[:, 0]).
  soma_bvh_locals.npy  `SOMASkeleton77.from_standard_tpose` of the first 20 frames of SOMA clip 01
                       expanded to 77 joints (`to_SOMASkeleton77`): the rotations the BVH writes.
  smplx_in_*.npy, amass_*.npy  a seeded random SMPL-X motion and its `get_amass_parameters`.
  meta.json            upstream commit, this script's SHA-256, package versions.

Usage:
    python reference/capture_kimodo_exports.py --upstream-root /tmp/up
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kimodo_upstream  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def sha256(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def lst(a):
    return np.asarray(a).tolist()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream-root", required=True)
    ap.add_argument("--assets", default=None)
    args = ap.parse_args()
    facts = kimodo_upstream.import_upstream(args.upstream_root, args.assets)
    assets = Path(facts["skeleton_assets"])
    demo = assets.parent / "demo" / "examples"

    from kimodo.exports.mujoco import MujocoQposConverter
    from kimodo.exports.smplx import get_amass_parameters
    from kimodo.skeleton import global_rots_to_local_rots
    from kimodo.skeleton.registry import build_skeleton

    data_dir = ROOT / "data" / "kimodo" / "exports"
    fix_dir = ROOT / "tests" / "fixtures" / "kimodo" / "exports"
    data_dir.mkdir(parents=True, exist_ok=True)
    fix_dir.mkdir(parents=True, exist_ok=True)
    common = {
        "upstream_commit": facts["upstream_commit"],
        "converter_sha256": sha256(__file__),
    }

    # --- SOMA77 BVH constants and the re-expressed rotations of a shipped clip.
    soma77 = build_skeleton(77, assets_folder=assets)
    soma30 = build_skeleton(30, assets_folder=assets)
    json.dump(
        common
        | {
            "bvh_joints": lst(soma77.bvh_neutral_joints.double()),
            "standard_t_pose_global_offsets_rots": lst(soma77.global_rot_offsets.float()),
            "sources_sha256": {
                n: sha256(assets / "somaskel77" / n) for n in ["bvh_joints.p", "standard_t_pose_global_offsets_rots.p"]
            },
        },
        open(data_dir / "soma77_bvh.json", "w"),
    )
    z = np.load(demo / "kimodo-soma-rp" / "01_single_text_prompt" / "motion.npz")
    g30 = torch.from_numpy(z["global_rot_mats"][:20])
    l30 = global_rots_to_local_rots(g30, soma30)
    l77 = soma30.to_SOMASkeleton77(l30)
    bvh_locals, _ = soma77.from_standard_tpose(l77)
    np.save(fix_dir / "soma_bvh_locals.npy", bvh_locals.float().numpy())

    # --- G1 MuJoCo constants and qpos of a shipped clip.
    g1 = build_skeleton(34, assets_folder=assets)
    conv = MujocoQposConverter(g1, xml_path=str(assets / "g1skel34" / "xml" / "g1.xml"))
    idx = conv._mujoco_indices_to_kimodo_indices.tolist()
    hinges = [
        {"kimodo_joint": int(j), "name": g1.bone_order_names[j], "axis_f2q": lst(conv._mujoco_joint_axis_values_f2q_space[i])}
        for i, j in enumerate(idx)
    ]
    json.dump(
        common
        | {
            "hinges": hinges,
            "rot_offsets_f2q": lst(conv._rot_offsets_f2q.float()),
            "kimodo_to_mujoco": lst(conv.kimodo_to_mujoco_matrix),
            "sources_sha256": {"g1.xml": sha256(assets / "g1skel34" / "xml" / "g1.xml")},
        },
        open(data_dir / "g1_mujoco.json", "w"),
    )
    z = np.load(demo / "kimodo-g1-rp" / "01_single_text_prompt" / "motion.npz")
    g = torch.from_numpy(z["global_rot_mats"][:40])
    local = global_rots_to_local_rots(g, g1)
    root = torch.from_numpy(z["posed_joints"][:40, 0])
    qpos = conv.to_qpos(local[None], root[None])[0]
    np.save(fix_dir / "g1_qpos.npy", qpos.float().numpy())

    # --- SMPL-X AMASS constants and parameters of a seeded random motion.
    betas = np.load(assets / "smplx22" / "beta.npy")[:16]
    hands = np.load(assets / "smplx22" / "mean_hands.npy")
    json.dump(
        common
        | {
            "betas_dtype": str(betas.dtype),
            "betas": lst(betas),
            "mean_hands_dtype": str(hands.dtype),
            "mean_hands": lst(hands),
            "sources_sha256": {n: sha256(assets / "smplx22" / n) for n in ["beta.npy", "mean_hands.npy"]},
        },
        open(data_dir / "smplx_amass.json", "w"),
    )
    smplx = build_skeleton(22, assets_folder=assets)
    gen = torch.Generator().manual_seed(7)
    aa = torch.randn(20, 22, 3, generator=gen) * 0.6
    from kimodo.geometry import axis_angle_to_matrix

    locals_ = axis_angle_to_matrix(aa).float()
    root = (torch.randn(20, 3, generator=gen) * 0.5 + torch.tensor([0.0, 0.9, 0.0])).float()
    trans, root_orient, pose_body = get_amass_parameters(locals_[None], root[None], smplx)
    np.save(fix_dir / "smplx_in_local_rot_mats.npy", locals_.numpy())
    np.save(fix_dir / "smplx_in_root_positions.npy", root.numpy())
    np.save(fix_dir / "amass_trans.npy", np.asarray(trans[0], dtype=np.float32))
    np.save(fix_dir / "amass_root_orient.npy", np.asarray(root_orient[0], dtype=np.float32))
    np.save(fix_dir / "amass_pose_body.npy", np.asarray(pose_body[0], dtype=np.float32))

    json.dump(
        common
        | {
            "script": "reference/capture_kimodo_exports.py",
            "stubbed_packages": facts["stubbed_packages"],
            "torch": torch.__version__,
            "numpy": np.__version__,
            "note": "BVH text is written by bvhio upstream; the fixture holds the rotations it is given",
        },
        open(fix_dir / "meta.json", "w"),
        indent=1,
    )
    print("wrote", data_dir, fix_dir)


if __name__ == "__main__":
    main()
