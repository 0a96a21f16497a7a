#!/usr/bin/env python3
"""Convert Kimodo's skeleton assets into kinema's own plain data files (run once, trusted).

Upstream keeps the rest joints in torch zip-pickles (`kimodo/assets/skeletons/*/joints.p`,
loaded by `kimodo/skeleton/base.py#L72-87`) and the hierarchies as Python literals
(`kimodo/skeleton/definitions.py`). kinema never reads pickle: this script reads both once and
writes JSON that the runtime embeds with `include_str!` (`src/models/kimodo/skeleton.rs`).

Outputs, in `data/kimodo/skeletons/`:
  {soma30,soma77,g1,smplx22}.json
      joint names and parent indices (definitions.py order), root index, the hip pair
      [right, left] used for the heading, the foot joints (left chain then right chain, as
      `SkeletonBase.foot_joint_idx`), and the neutral joints with their exact stored values
      (JSON numbers written with Python's shortest round-trip repr; `neutral_joints_dtype`
      says whether upstream stores them as float64 or float32).
  soma30_to_77.json
      the SOMA30 -> SOMA77 expansion of `SOMASkeleton30.output_to_SOMASkeleton77`
      (definitions.py#L246-277): for each SOMA30 joint its SOMA77 index, and
      `relaxed_hands_rest_pose` [77,3,3] float32 local rotations for the joints SOMA30 lacks.
Every file records the SHA-256 of the upstream files it was built from and of this script.

Usage:
    mkdir -p /tmp/up && git -C <kimodo git dir> archive 7330e7e kimodo/skeleton | tar -x -C /tmp/up
    python reference/convert_skeletons.py --upstream-root /tmp/up \
        --assets ../shared/data/upstream/kimodo/assets/skeletons -o data/kimodo/skeletons
"""

import argparse
import ast
import hashlib
import json
import os

import numpy as np
import torch

UPSTREAM_COMMIT = "7330e7ebc08b3e90791cf17eefdc7f65bb2050d5"

# kinema's skeleton name -> (definitions.py class, asset folder)
SKELETONS = {
    "soma30": ("SOMASkeleton30", "somaskel30"),
    "soma77": ("SOMASkeleton77", "somaskel77"),
    "g1": ("G1Skeleton34", "g1skel34"),
    "smplx22": ("SMPLXSkeleton22", "smplx22"),
}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def class_literals(definitions_path):
    """The list-valued class attributes of every class in definitions.py, without importing
    it (it imports torch modules of the package): {class: {attr: value}}."""
    with open(definitions_path) as f:
        tree = ast.parse(f.read())
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        attrs = {}
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name):
                    try:
                        attrs[target.id] = ast.literal_eval(stmt.value)
                    except ValueError:
                        pass
        out[node.name] = attrs
    return out


def load_tensor(path):
    # weights_only refuses anything but tensors and plain containers: the files hold one tensor.
    t = torch.load(path, weights_only=True, map_location="cpu")
    assert isinstance(t, torch.Tensor), f"{path}: expected a tensor, got {type(t)}"
    # base.py#L77 squeezes after loading.
    return t.squeeze()


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream-root", required=True, help="extracted kimodo checkout at 7330e7e")
    ap.add_argument("--assets", required=True, help="kimodo/assets/skeletons folder")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    definitions = os.path.join(args.upstream_root, "kimodo", "skeleton", "definitions.py")
    literals = class_literals(definitions)
    script_sha = sha256(os.path.abspath(__file__))
    common = {"upstream_commit": UPSTREAM_COMMIT, "converter_sha256": script_sha}

    names_of = {}
    neutral_of = {}
    for kind, (cls, folder) in SKELETONS.items():
        lit = literals[cls]
        pairs = lit["bone_order_names_with_parents"]
        names = [n for n, _ in pairs]
        index = {n: i for i, n in enumerate(names)}
        parents = [-1 if p is None else index[p] for _, p in pairs]
        roots = [i for i, p in enumerate(parents) if p == -1]
        assert len(roots) == 1, f"{cls}: expected one root"
        # FK walks joints in index order (kinematics.py#L77-97 levels): parents come first.
        assert all(p < i for i, p in enumerate(parents) if p >= 0), f"{cls}: not topological"

        joints_path = os.path.join(args.assets, folder, "joints.p")
        joints = load_tensor(joints_path)
        assert tuple(joints.shape) == (len(names), 3), f"{joints_path}: shape {joints.shape}"
        dtype = {torch.float64: "float64", torch.float32: "float32"}[joints.dtype]
        neutral = joints.numpy()
        names_of[kind] = names
        neutral_of[kind] = neutral

        foot = [index[n] for n in lit["left_foot_joint_names"] + lit["right_foot_joint_names"]]
        data = {
            "skeleton": kind,
            "upstream_class": cls,
            "joint_names": names,
            "parents": parents,
            "root": roots[0],
            "hip_joints": [index[n] for n in lit["hip_joint_names"]],
            "foot_joints": foot,
            "neutral_joints_dtype": dtype,
            # float() of a float32 value is exact; json writes the shortest round-trip repr.
            "neutral_joints": [[float(v) for v in row] for row in neutral],
            # SHA-256 of the little-endian float64 bytes of neutral_joints, so a reader can
            # check that it parsed every value exactly.
            "neutral_joints_f64_sha256": hashlib.sha256(
                np.ascontiguousarray(neutral, dtype="<f8").tobytes()
            ).hexdigest(),
            "sources": {
                f"kimodo/assets/skeletons/{folder}/joints.p": sha256(joints_path),
                "kimodo/skeleton/definitions.py": sha256(definitions),
            },
            **common,
        }
        write_json(os.path.join(args.out, f"{kind}.json"), data)

    # SOMA30 -> SOMA77 (definitions.py#L246-277): SOMASkeleton30.get_skel_slice(somaskel77).
    index77 = {n: i for i, n in enumerate(names_of["soma77"])}
    subset = [index77[n] for n in names_of["soma30"]]
    # somaskel30/joints.p is the somaskel77 subset exactly; FK of the expansion relies on it.
    assert np.array_equal(neutral_of["soma77"][subset], neutral_of["soma30"])
    relaxed_path = os.path.join(args.assets, "somaskel77", "relaxed_hands_rest_pose.npy")
    relaxed = np.load(relaxed_path, allow_pickle=False).squeeze()
    assert relaxed.shape == (77, 3, 3) and relaxed.dtype == np.float32, relaxed.shape
    expansion = {
        "soma77_index_of_soma30_joint": subset,
        "relaxed_hands_rest_pose_dtype": "float32",
        "relaxed_hands_rest_pose": [[[float(v) for v in row] for row in m] for m in relaxed],
        "relaxed_hands_rest_pose_f32_sha256": hashlib.sha256(
            np.ascontiguousarray(relaxed, dtype="<f4").tobytes()
        ).hexdigest(),
        "sources": {
            "kimodo/assets/skeletons/somaskel77/relaxed_hands_rest_pose.npy": sha256(relaxed_path),
            "kimodo/skeleton/definitions.py": sha256(definitions),
        },
        **common,
    }
    write_json(os.path.join(args.out, "soma30_to_77.json"), expansion)


if __name__ == "__main__":
    main()
