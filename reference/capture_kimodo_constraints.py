#!/usr/bin/env python3
"""Capture Kimodo constraint fixtures from the REAL upstream PyTorch modules (issue 14, part 1).

For each case this writes a `constraints.json` in upstream's format (`kimodo/constraints.py`
`get_save_info` / `load_constraints_lst`: a list of `{type, frame_indices, ...}`), loads it
back through upstream's own `load_constraints_lst` with the model's skeleton, builds the
observed motion and the mask with `create_conditions_from_constraints_batched(...,
to_normalize=True)` as `Kimodo.__call__` does (`kimodo/model/kimodo_model.py#L480-487`), and
runs upstream's sampling loop `Kimodo._generate` with them on the tiny seeded checkpoints of
`tests/fixtures/kimodo/<skel>/checkpoint` (written by `capture_kimodo.py`), recording the first
denoiser call's stage inputs and outputs (3 rows `[text, constraint, uncond]`) and the guided
prediction.

Upstream code is imported from `--upstream-root`, never copied. CPU, float32, eval, fused
encoder fast path off, one torch thread (as `capture_kimodo.py`).

Usage:
    mkdir -p /tmp/up && git -C /work/.mirror/nv-tlabs+kimodo/repo archive HEAD -- . \\
        ':(exclude)kimodo/assets' | tar -x -C /tmp/up
    python reference/capture_kimodo_constraints.py --upstream-root /tmp/up \\
        --fixtures tests/fixtures/kimodo
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import capture_kimodo as ck  # noqa: E402
import kimodo_upstream  # noqa: E402

SEED = 20261202
T = 12
STEPS = 3
HEADING = -0.4
NBJOINTS = {"soma30": 30, "g1": 34, "smplx22": 22}


def rand_pose(g, frames, joints, scale=0.3):
    """Axis-angle local rotations [K, J, 3] and root positions [K, 3] (plain lists)."""
    rot = g.normal(0.0, scale, (len(frames), joints, 3))
    root = np.stack([g.uniform(-1, 1, len(frames)), g.uniform(0.8, 1.0, len(frames)), g.uniform(-1, 1, len(frames))], -1)
    return rot.tolist(), root.tolist()


def body(kind, g, frames, joints, smooth=True, **extra):
    rot, root = rand_pose(g, frames, joints)
    c = {"type": kind, "frame_indices": list(frames), "local_joints_rot": rot, "root_positions": root}
    if smooth:
        c["smooth_root_2d"] = (np.array(root)[:, [0, 2]] + g.normal(0, 0.05, (len(frames), 2))).tolist()
    c.update(extra)
    return c


def root2d(g, frames, heading=False):
    c = {"type": "root2d", "frame_indices": list(frames), "smooth_root_2d": g.uniform(-2, 2, (len(frames), 2)).tolist()}
    if heading:
        a = g.uniform(-np.pi, np.pi, len(frames))
        c["global_root_heading"] = np.stack([np.cos(a), np.sin(a)], -1).tolist()
    return c


def cases():
    """(name, skeleton, constraint list) for every constraint type, SOMA with 30 and 77 joints,
    and an overlapping mix that shows which entry wins on a shared frame."""
    g = np.random.default_rng(SEED)
    return [
        ("root2d", "soma30", [root2d(g, [0, 3, 7, 11])]),
        ("root2d_heading", "soma30", [root2d(g, [1, 2, 9], heading=True)]),
        ("fullbody", "soma30", [body("fullbody", g, [2, 8], 30)]),
        ("fullbody_soma77", "soma30", [body("fullbody", g, [5], 77, smooth=False)]),
        ("left_hand", "soma30", [body("left-hand", g, [4, 10], 30)]),
        ("right_hand", "soma30", [body("right-hand", g, [0], 77)]),
        ("left_foot", "soma30", [body("left-foot", g, [6, 11], 30, smooth=False)]),
        ("right_foot", "soma30", [body("right-foot", g, [3], 30)]),
        ("end_effector", "soma30", [body("end-effector", g, [1, 9], 30, joint_names=["LeftHand", "Hips", "RightFoot"])]),
        (
            "mixed_overlap",
            "soma30",
            [
                root2d(g, [0, 1, 2, 3, 4, 5], heading=True),
                body("fullbody", g, [3], 30),
                body("left-hand", g, [3, 7], 30),
                root2d(g, [7, 8]),
            ],
        ),
        ("g1_mixed", "g1", [body("end-effector", g, [2, 6], 34, joint_names=["LeftHand", "RightFoot"]), root2d(g, [9, 10, 11], heading=True)]),
        ("smplx22_mixed", "smplx22", [body("fullbody", g, [4], 22), body("left-foot", g, [8], 22), body("right-hand", g, [10], 22, smooth=False)]),
    ]


def capture_case(name, skel, constraints, fixtures, out_dir, assets, facts, index):
    from kimodo.constraints import load_constraints_lst
    from kimodo.model.common import instantiate_from_dict
    from kimodo.motion_rep.feature_utils import length_to_mask

    nbj = NBJOINTS[skel]
    dim = 9 + 12 * nbj
    ckpt = fixtures / skel / "checkpoint"
    config = ck.model_config(nbj)
    kimodo = instantiate_from_dict(ck.resolve(config, ckpt, assets), overrides={"device": "cpu"})
    kimodo.eval()
    den = kimodo.denoiser.model
    motion_rep = kimodo.motion_rep

    json_path = out_dir / f"{name}.json"
    with open(json_path, "w") as f:
        json.dump(constraints, f)
    lst = load_constraints_lst(str(json_path), kimodo.skeleton)
    lengths = torch.tensor([T])
    observed, mask = motion_rep.create_conditions_from_constraints_batched(lst, lengths, to_normalize=True, device="cpu")
    assert observed.shape == (1, T, dim) and mask.shape == (1, T, dim) and mask.dtype == torch.bool

    taps = {}

    def first(tap):
        def hook(mod, args, output):
            if tap not in taps:
                x = args[0]
                x = x.detach().clone() if isinstance(x, torch.Tensor) else None
                taps[tap] = (x, output.detach().clone())

        return hook

    handles = [
        den.root_model.register_forward_hook(first("root")),
        den.body_model.register_forward_hook(first("body")),
        kimodo.denoiser.register_forward_hook(first("cfg")),
    ]
    g = torch.Generator().manual_seed(SEED + index)
    embedding = torch.randn(1, ck.MODEL["llm_shape"][1], generator=g)
    heading = torch.tensor([HEADING], dtype=torch.float32)
    torch.manual_seed(SEED + 1000 + index)
    noise = torch.randn(1, T, dim)
    torch.manual_seed(SEED + 1000 + index)
    with torch.no_grad():
        features = kimodo._generate(
            [""],
            T,
            num_denoising_steps=STEPS,
            pad_mask=length_to_mask(lengths),
            first_heading_angle=heading,
            motion_mask=mask,
            observed_motion=observed,
            cfg_weight=list(ck.CFG_WEIGHTS),
            text_feat=embedding[:, None, :],
            text_pad_mask=torch.ones(1, 1, dtype=torch.bool),
            cfg_type="separated",
            progress_bar=lambda it: it,
        )
    for h in handles:
        h.remove()
    root_in, root_out = taps["root"]
    assert torch.equal(root_in[0, :, :dim], noise[0]), "x_T mismatch"
    assert torch.equal(root_in[1, :, dim:], mask[0].float())

    out = {}

    def put(k, t, dtype=np.float32):
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        out[k] = np.ascontiguousarray(a.astype(dtype))

    put("constraint_features", observed[0])
    put("constraint_mask", mask[0], np.uint8)
    put("embedding", embedding)
    put("heading", heading)
    put("noise", noise)
    put("root_in", root_in)
    put("root_out", root_out)
    put("body_in", taps["body"][0])
    put("body_out", taps["body"][1])
    put("x0_step0", taps["cfg"][1])
    put("features", features)
    meta = {
        "fixture_format": 1,
        "case": name,
        "skeleton": skel,
        "num_joints": nbj,
        "motion_dim": dim,
        "constraints_file": json_path.name,
        "constraint_types": [c["type"] for c in constraints],
        "upstream_commit": facts["upstream_commit"],
        "upstream_note": "constraint, motion-rep and CFG code identical at 7330e7e and at the newest "
        "readable snapshot 0f6fccf (a merge touching only MotionCorrection/)",
        "upstream_stubbed_packages": facts["stubbed_packages"],
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "device": "cpu",
        "mha_fastpath": False,
        "checkpoint": f"../{skel}/checkpoint",
        "frames": T,
        "steps": STEPS,
        "heading": HEADING,
        "cfg_weights": {"text": ck.CFG_WEIGHTS[0], "constraint": ck.CFG_WEIGHTS[1]},
        "cfg_rows": ["text", "constraint", "uncond"],
        "seeds": {"embedding": SEED + index, "noise": SEED + 1000 + index, "constraints": SEED},
        "script_sha256": ck.sha256_file(__file__),
    }
    out["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez_compressed(out_dir / f"{name}.npz", **out)
    print(f"{name}: {int(mask.sum())} constrained entries")


def capture_demos(fixtures, out_dir, assets, facts):
    """The shipped demo examples' constraints.json (`kimodo/assets/demo/examples/*/*/`): the
    observed motion and mask upstream builds for them over the whole clip (frames = the sum of
    `int(duration * 30)` over meta.json's durations, as `kimodo/scripts/generate.py#L116-134`
    computes them) with the tiny checkpoint's statistics. Stored compactly: the mask and the
    normalised observed values where it is set, in row-major order."""
    from kimodo.constraints import load_constraints_lst
    from kimodo.model.common import instantiate_from_dict

    demo_root = assets / ".." / "demo" / "examples"
    skel_of = {"kimodo-soma-rp": "soma30", "kimodo-g1-rp": "g1"}
    for model_dir in sorted(demo_root.resolve().iterdir()):
        skel = skel_of[model_dir.name]
        nbj = NBJOINTS[skel]
        kimodo = instantiate_from_dict(
            ck.resolve(ck.model_config(nbj), fixtures / skel / "checkpoint", assets), overrides={"device": "cpu"}
        )
        for ex in sorted(model_dir.iterdir()):
            cpath = ex / "constraints.json"
            if not cpath.is_file():
                continue
            meta = json.loads((ex / "meta.json").read_text())
            durations = meta["durations"] if "durations" in meta else [meta["duration"]]
            frames = sum(int(d * 30) for d in durations)
            lst = load_constraints_lst(str(cpath), kimodo.skeleton)
            obs, mask = kimodo.motion_rep.create_conditions_from_constraints_batched(
                lst, torch.tensor([frames]), to_normalize=True, device="cpu"
            )
            m = mask[0].numpy()
            info = {
                "fixture_format": 1,
                "example": f"{model_dir.name}/{ex.name}",
                "skeleton": skel,
                "frames": frames,
                "constraints_sha256": ck.sha256_file(cpath),
                "upstream_commit": facts["upstream_commit"],
                "script_sha256": ck.sha256_file(__file__),
            }
            name = f"demo_{skel}_{ex.name}"
            np.savez_compressed(
                out_dir / f"{name}.npz",
                constraint_mask=m.astype(np.uint8),
                masked_values=obs[0].numpy()[m].astype(np.float32),
                meta=np.frombuffer(json.dumps(info, sort_keys=True).encode(), dtype=np.uint8),
            )
            print(f"{name}: {frames} frames, {int(m.sum())} constrained entries")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream-root", required=True)
    ap.add_argument("--fixtures", required=True, help="tests/fixtures/kimodo (holds <skel>/checkpoint)")
    ap.add_argument("--assets", help="folder holding skeletons/")
    args = ap.parse_args()
    facts = kimodo_upstream.import_upstream(args.upstream_root, args.assets)
    torch.backends.mha.set_fastpath_enabled(False)
    torch.set_num_threads(1)
    fixtures = Path(args.fixtures)
    out_dir = fixtures / "constraints"
    out_dir.mkdir(exist_ok=True)
    assets = Path(facts["skeleton_assets"])
    for i, (name, skel, cs) in enumerate(cases()):
        capture_case(name, skel, cs, fixtures, out_dir, assets, facts, i)
    capture_demos(fixtures, out_dir, assets, facts)


if __name__ == "__main__":
    main()
