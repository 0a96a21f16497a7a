#!/usr/bin/env python3
"""Replay a `kinema agent --trace` on upstream MotionBricks' own modules (issue 12, part 5).

For every plan of the trace, runs upstream's `motion_inference.predict` (its root model, pose
model and VQ decoder; `NVlabs/GR00T-WholeBodyControl`, `motionbricks/`, commit 1983e888) on the
exact arguments kinema passed (`in.*`), with kinema's recorded uniforms injected into upstream's
own `gumbel_sample` (`motion_backbone/models/sampling.py#L4-14`), and checks that

* the length upstream's root model chooses equals kinema's (`num_tokens`),
* every sampled pose token at the valid positions equals kinema's (`pose_tokens`),
* the features agree within --features-tol (max abs, upstream vs kinema), relative to the
  plan's largest feature when that is above 1: with random weights the closed-loop motion
  drifts far from the data (features in the hundreds after a few seconds), and float32
  rounding scales with it,

then reports how many valid token slots the Gumbel picks moved away from the argmax of
upstream's logits (the run must really sample).

The model is the reduced-width fixture model of `reference/capture_motionbricks.py` (seeded
weights from its `weight_value` formula in upstream's real layout, the released statistics),
which is what the Rust tests convert into the fixture GGUF (`kinema convert motionbricks` on
the layout `capture_motionbricks.py --model-out DIR` writes gives the same file). Replay traces
recorded with that model.

Usage (after `kinema agent --model fixture.gguf --clips clips.npz --commands walk.json
--sampling gumbel -o run.npz --trace trace.npz`):
    python reference/replay_motionbricks_trace.py --upstream /tmp/mbup/motionbricks --trace trace.npz
Exit status 1 on any mismatch.
"""

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True, type=Path, help="the upstream motionbricks/ folder")
    ap.add_argument("--trace", required=True, type=Path)
    ap.add_argument("--features-tol", type=float, default=1e-5)
    ap.add_argument("--min-gumbel-share", type=float, default=0.2,
                    help="the least share of valid token slots whose Gumbel pick is not the argmax")
    a = ap.parse_args()
    trace = np.load(a.trace.resolve())
    upstream = a.upstream.resolve()
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(upstream))
    os.chdir(upstream)
    torch.set_num_threads(2)
    import capture_motionbricks as cap
    from motionbricks.motion_backbone.inference.motion_inference import motion_inference
    from motionbricks.helper.mujoco_helper import mujoco_qpos_converter

    models, _ = cap.build(upstream)
    inferencer = motion_inference(models, models["pose"].args, device="cpu")
    converter = mujoco_qpos_converter(inferencer.motion_rep, "assets/skeletons/g1/g1.xml")
    plans = trace["num_tokens"].shape[0]
    gumbel = "uniforms" in trace.files
    failures, slots, moved, worst = 0, 0, 0, 0.0
    for p in range(plans):
        inputs = {
            "global_root_values": torch.from_numpy(trace["in.global_root_values"][p:p + 1]),
            "has_global_root_values": torch.from_numpy(trace["in.has_global_root_values"][p:p + 1]),
            "local_root_values": torch.from_numpy(trace["in.local_root_values"][p:p + 1]),
            "has_local_root_values": torch.from_numpy(trace["in.has_local_root_values"][p:p + 1]),
            "local_poses": torch.from_numpy(trace["in.local_poses"][p:p + 1]),
            "has_local_poses": torch.from_numpy(trace["in.has_local_poses"][p:p + 1]),
            "num_tokens": torch.tensor([[int(trace["in.num_tokens"][p])]], dtype=torch.int32),
            "allowed_pred_num_tokens": torch.from_numpy(
                trace["in.allowed_pred_num_tokens"][p:p + 1].astype(np.int64)),
        }
        d = cap.run_case(inferencer, models, converter, inputs, "gumbel" if gumbel else "argmax",
                         uniforms_in=trace["uniforms"][p] if gumbel else None)
        n = int(np.asarray(d["pred_num_tokens"]).reshape(-1)[0])
        ok = n == int(trace["num_tokens"][p])
        up_tok = np.asarray(d["pose_tokens"]).reshape(16, 8)[:n]
        kin_tok = trace["pose_tokens"][p][:n]
        same = int((up_tok == kin_tok).sum())
        ok = ok and same == up_tok.size
        arg = np.asarray(d["pose_logits"]).reshape(16, 8, -1)[:n].argmax(-1)
        slots += arg.size
        moved += int((arg != up_tok).sum())
        f_up = np.asarray(d["features"]).reshape(64, -1)[: 4 * n]
        f_kin = trace["features"][p][: 4 * n]
        scale = max(1.0, float(np.abs(f_up).max()))
        diff = float(np.abs(f_up - f_kin).max()) / scale
        worst = max(worst, diff)
        ok = ok and diff <= a.features_tol
        failures += 0 if ok else 1
        print(f"plan {p}: tokens {n} (kinema {int(trace['num_tokens'][p])}), "
              f"{same}/{up_tok.size} pose tokens equal, features max |diff| {diff:.2e} "
              f"(of max(1, max |f|) = {scale:.1f})"
              + ("" if ok else "  MISMATCH"))
    share = moved / max(slots, 1)
    print(f"{plans} plans, {failures} mismatched; Gumbel picks differ from argmax on {moved}/{slots} "
          f"valid slots ({100 * share:.1f} %); worst relative features |diff| {worst:.2e}")
    if failures or (gumbel and share < a.min_gumbel_share):
        sys.exit(1)


if __name__ == "__main__":
    main()
