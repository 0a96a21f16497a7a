#!/usr/bin/env python3
"""Capture Kimodo multi-prompt fixtures from the REAL upstream code (issue 14, part 2).

Runs upstream's own `Kimodo.__call__(..., multi_prompt=True)` (`Kimodo._multiprompt`,
`kimodo/model/kimodo_model.py#L123-341`) on the tiny seeded checkpoints of
`tests/fixtures/kimodo/<skel>/checkpoint` (written by `capture_kimodo.py`), with upstream's
defaults for the transitions (`num_transition_frames=5`, `share_transition=True`,
`percentage_transition_override=0.10`) and no post-processing. The text encoder is replaced by
a table of seeded random text features (one per segment, keyed by the sanitized prompt), and
every `torch.randn` draw (one per segment, in `_generate`) is recorded, so that the port can
replay the same noise. Per segment it records what `_generate` received (normalised observed
motion, mask, first heading angle, frame count) and returned (normalised features); at the
end the stitched unnormalised features `_multiprompt` decodes and the decoded motion.

Upstream code is imported from `--upstream-root`, never copied. CPU, float32, eval, fused
encoder fast path off, one torch thread (as `capture_kimodo.py`).

Usage:
    mkdir -p /tmp/up && git -C /work/.mirror/nv-tlabs+kimodo/repo archive HEAD -- . \\
        ':(exclude)kimodo/assets' | tar -x -C /tmp/up
    python reference/capture_kimodo_multiprompt.py --upstream-root /tmp/up \\
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
import capture_kimodo_constraints as cc  # noqa: E402
import kimodo_upstream  # noqa: E402

SEED = 20261203
STEPS = 3
HEADING = -0.4
TRANSITION = 5


def cases():
    """(name, skeleton, prompts, frames per segment, constraints over the whole timeline)."""
    g = np.random.default_rng(SEED)
    return [
        ("soma30_three", "soma30", ["walk forward", "turn left", "sit down"], [30, 20, 25], None),
        (
            "g1_constrained",
            "g1",
            ["jump", "wave both hands"],
            [20, 16],
            [cc.root2d(g, [3, 18, 25, 33], heading=True), cc.body("fullbody", g, [22], 34)],
        ),
        ("smplx22_two", "smplx22", ["run", "stop and look around"], [14, 12], None),
    ]


def capture_case(name, skel, prompts, frames, constraints, fixtures, out_dir, assets, facts, index):
    from kimodo.constraints import load_constraints_lst
    from kimodo.model.common import instantiate_from_dict
    from kimodo.sanitize import sanitize_texts

    nbj = cc.NBJOINTS[skel]
    dim = 9 + 12 * nbj
    ckpt = fixtures / skel / "checkpoint"
    kimodo = instantiate_from_dict(ck.resolve(ck.model_config(nbj), ckpt, assets), overrides={"device": "cpu"})
    kimodo.eval()

    g = torch.Generator().manual_seed(SEED + index)
    llm = ck.MODEL["llm_shape"][1]
    embeddings = torch.randn(len(prompts), llm, generator=g)
    table = {t: embeddings[i] for i, t in enumerate(sanitize_texts(prompts))}
    assert len(table) == len(prompts), "prompts must differ after sanitizing"

    def text_encoder(texts):
        feat = torch.stack([table[t] for t in texts])[:, None, :]
        return feat, [1] * len(texts)

    kimodo.text_encoder = text_encoder

    segments = []
    orig_generate = kimodo._generate

    def generate(texts, max_frames, **kw):
        out = orig_generate(texts, max_frames, **kw)
        segments.append(
            {
                "frames": int(max_frames),
                "observed": kw["observed_motion"].detach().clone(),
                "mask": kw["motion_mask"].detach().clone(),
                "heading": torch.as_tensor(kw["first_heading_angle"]).detach().clone(),
                "out": out.detach().clone(),
            }
        )
        return out

    kimodo._generate = generate

    inverse_inputs = []
    orig_inverse = kimodo.motion_rep.inverse

    def inverse(features, *a, **kw):
        inverse_inputs.append(features.detach().clone())
        return orig_inverse(features, *a, **kw)

    kimodo.motion_rep.inverse = inverse

    noises = []
    orig_randn = torch.randn

    def randn(*a, **kw):
        out = orig_randn(*a, **kw)
        noises.append(out.detach().clone())
        return out

    constraint_lst = []
    json_name = None
    if constraints is not None:
        json_name = f"{name}.json"
        with open(out_dir / json_name, "w") as f:
            json.dump(constraints, f)
        constraint_lst = load_constraints_lst(str(out_dir / json_name), kimodo.skeleton)

    torch.manual_seed(SEED + 1000 + index)
    torch.randn = randn
    try:
        with torch.no_grad():
            output = kimodo(
                prompts,
                frames,
                STEPS,
                multi_prompt=True,
                constraint_lst=constraint_lst,
                cfg_weight=list(ck.CFG_WEIGHTS),
                num_samples=1,
                cfg_type="separated",
                first_heading_angle=torch.tensor([HEADING]),
                num_transition_frames=TRANSITION,
                post_processing=False,
            )
    finally:
        torch.randn = orig_randn
    assert len(noises) == len(prompts) == len(segments)
    stitched = inverse_inputs[-1]
    assert stitched.shape == (1, sum(frames), dim), stitched.shape

    out = {}

    def put(k, t, dtype=np.float32):
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        out[k] = np.ascontiguousarray(a.astype(dtype))

    put("embeddings", embeddings)
    for i, (s, n) in enumerate(zip(segments, noises)):
        assert n.shape == (1, s["frames"], dim)
        put(f"seg{i}_noise", n[0])
        put(f"seg{i}_observed", s["observed"][0])
        put(f"seg{i}_mask", s["mask"][0], np.uint8)
        put(f"seg{i}_heading", s["heading"].reshape(-1))
        put(f"seg{i}_out", s["out"][0])
    put("stitched", stitched[0])
    for k in ("posed_joints", "local_rot_mats", "root_positions", "smooth_root_pos", "foot_contacts"):
        put(k, output[k][0], np.uint8 if k == "foot_contacts" else np.float32)
    meta = {
        "fixture_format": 1,
        "case": name,
        "skeleton": skel,
        "num_joints": nbj,
        "motion_dim": dim,
        "prompts": prompts,
        "sanitized": sanitize_texts(prompts),
        "segment_frames": frames,
        "generated_frames": [s["frames"] for s in segments],
        "constraints_file": json_name,
        "upstream_commit": facts["upstream_commit"],
        "upstream_note": "multi-prompt as Kimodo._multiprompt at 7330e7e (share_transition=True, "
        "percentage_transition_override=0.10, a FullBody transition constraint on positions, root and "
        "heading, blended in feature space). 0f6fccf, the newest snapshot readable here, is a merge "
        "touching only MotionCorrection/; upstream's later PR #32 (5-frame transitions, global "
        "rotations and an end-effector constraint in the transition, per-segment post-processing) "
        "is not readable here and is not followed.",
        "upstream_stubbed_packages": facts["stubbed_packages"],
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "device": "cpu",
        "mha_fastpath": False,
        "checkpoint": f"../{skel}/checkpoint",
        "steps": STEPS,
        "heading": HEADING,
        "num_transition_frames": TRANSITION,
        "share_transition": True,
        "percentage_transition_override": 0.10,
        "post_processing": False,
        "cfg_weights": {"text": ck.CFG_WEIGHTS[0], "constraint": ck.CFG_WEIGHTS[1]},
        "cfg_type": "separated",
        "seeds": {"embeddings": SEED + index, "noise": SEED + 1000 + index, "constraints": SEED},
        "script_sha256": ck.sha256_file(__file__),
    }
    out["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez_compressed(out_dir / f"{name}.npz", **out)
    print(f"{name}: segments {frames}, generated {meta['generated_frames']}, total {sum(frames)}")


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
    out_dir = fixtures / "multiprompt"
    out_dir.mkdir(exist_ok=True)
    assets = Path(facts["skeleton_assets"])
    for i, (name, skel, prompts, frames, cons) in enumerate(cases()):
        capture_case(name, skel, prompts, frames, cons, fixtures, out_dir, assets, facts, i)


if __name__ == "__main__":
    main()
