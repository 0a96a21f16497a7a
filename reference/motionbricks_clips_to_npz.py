#!/usr/bin/env python3
"""Convert upstream MotionBricks' clip library checkpoint (`out/G1-clip.ckpt`) to kinema's
`clips.npz` (run once, in a trusted Python environment: the checkpoint is a torch pickle).

Upstream's `clip_holder` saves its `state_dict` (`motion_backbone/demo/clips.py#L108-123`,
`NVlabs/GR00T-WholeBodyControl` at 1983e888) and loads it back as buffers (#L48-55; the legacy
key `mfm_feature` is `motion_feature`): per clip row, in `clip_holder_G1.CLIPS` order
(#L131-207), `global_root_positions [15, F, 3]`, `global_joint_positions [15, F, 34, 3]`,
`global_joint_rotations [15, F, 34, 3, 3]`, `global_headings [15, F]`, `motion_feature
[15, F, 414]`, `mujoco_qpos [15, F, 36]` (root quaternion w x y z, already reordered,
#L84-85) and `num_frames_per_clip [15]`, every clip zero-padded to the longest F. The allowed
lengths and `avg_root_vel` are not in the checkpoint: they are the class attribute `CLIPS`.

kinema's `clips.npz` (`src/models/motionbricks/agent/clips.rs`) keeps per style `S`:
`S.qpos` float32 `[F_S, 36]` (the unpadded rows of `mujoco_qpos`), `S.allowed_pred_num_tokens`
bool `[11]` and `S.avg_root_vel` float32 scalar. kinema recomputes the joint transforms and
headings from the qpos with upstream's own converter math, as `clips.py#L91-106` does when it
builds the checkpoint, so those buffers are only cross-checked here (`--check`, which needs the
upstream tree and reports the largest difference of upstream's converter run on the stored
qpos against the stored transforms).

Usage:
    python reference/motionbricks_clips_to_npz.py --ckpt G1-clip.ckpt -o clips.npz \\
        [--upstream /tmp/mbup/motionbricks] [--check]
"""

import argparse
import os
import sys
import types
from pathlib import Path

import numpy as np
import torch

STYLES = ["idle", "slow_walk", "walk", "hand_crawling", "walk_boxing", "elbow_crawling",
          "stealth_walk", "injured_walk", "walk_stealth", "walk_happy_dance", "walk_zombie",
          "walk_gun", "walk_scared", "walk_left", "walk_right"]


def upstream_clips(upstream):
    """clip_holder_G1.CLIPS from the upstream tree (mujoco is only a type import there)."""
    sys.path.insert(0, str(upstream))
    sys.modules.setdefault("mujoco", types.ModuleType("mujoco"))
    from motionbricks.motion_backbone.demo.clips import clip_holder_G1
    return clip_holder_G1.CLIPS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True, type=Path)
    ap.add_argument("-o", "--output", required=True, type=Path)
    ap.add_argument("--upstream", type=Path, default=None,
                    help="the upstream motionbricks/ folder (for CLIPS and --check)")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    sd = torch.load(a.ckpt, map_location="cpu", weights_only=True)
    sd = {{"mfm_feature": "motion_feature"}.get(k, k): v for k, v in sd.items()}
    for k in ("mujoco_qpos", "num_frames_per_clip"):
        if k not in sd:
            sys.exit(f"{a.ckpt}: no {k!r} buffer; keys: {sorted(sd)}")
    qpos = sd["mujoco_qpos"].float().numpy()
    lens = sd["num_frames_per_clip"].long().numpy()
    if qpos.ndim != 3 or qpos.shape[0] != len(STYLES) or qpos.shape[2] != 36:
        sys.exit(f"mujoco_qpos is {list(qpos.shape)}, expected [{len(STYLES)}, F, 36]")
    if a.upstream is not None:
        clips = upstream_clips(a.upstream.resolve())
        if list(clips) != STYLES:
            sys.exit(f"upstream CLIPS order {list(clips)} differs from {STYLES}")
        allowed = {s: clips[s]["allowed_pred_num_tokens"] for s in STYLES}
        avg = {s: clips[s]["avg_root_vel"] for s in STYLES}
    else:
        # The values of clips.py#L131-207 at 1983e888.
        six, eleven, four = [1] * 6 + [0] * 5, [1] * 11, [1] * 4 + [0] * 7
        allowed = {s: six for s in STYLES}
        allowed.update(walk_boxing=eleven, elbow_crawling=eleven, walk_left=four, walk_right=four)
        avg = dict(zip(STYLES, [0.0, 0.6, 2.0, 1.0, 2.0, 1.6, 2.0, 1.0, 1.4, 2.0, 1.2, 1.2, 1.2, 0.4, 0.4]))
    out = {}
    for i, s in enumerate(STYLES):
        n = int(lens[i])
        if not 5 <= n <= qpos.shape[1]:
            sys.exit(f"clip {s}: {n} frames, expected 5..{qpos.shape[1]}")
        out[f"{s}.qpos"] = np.ascontiguousarray(qpos[i, :n], dtype=np.float32)
        out[f"{s}.allowed_pred_num_tokens"] = np.asarray(allowed[s], dtype=bool)
        out[f"{s}.avg_root_vel"] = np.asarray(avg[s], dtype=np.float32)
    if a.check:
        if a.upstream is None:
            sys.exit("--check needs --upstream")
        os.chdir(a.upstream.resolve())
        from omegaconf import OmegaConf
        from motionbricks.helper.pl_util import load_motion_rep
        from motionbricks.helper.mujoco_helper import mujoco_qpos_converter
        conf = OmegaConf.load("out/motionbricks_pose/version_1/hparams.yaml")
        conv = mujoco_qpos_converter(load_motion_rep(conf), "assets/skeletons/g1/g1.xml")
        worst = 0.0
        for i, s in enumerate(STYLES):
            n = int(lens[i])
            gp, gr = conv.convert_mujoco_qpos_to_motion_transforms(torch.from_numpy(out[f"{s}.qpos"])[None])
            root = gp[0, :, 0] * torch.tensor([[1.0, 0.0, 1.0]])
            worst = max(worst,
                        float((gp[0] - root[:, None] - sd["global_joint_positions"][i, :n]).abs().max()),
                        float((gr[0] - sd["global_joint_rotations"][i, :n]).abs().max()))
        print(f"transforms recomputed from the stored qpos: max |diff| {worst:.2e}")
    np.savez_compressed(a.output, **out)
    print(f"wrote {a.output}: {len(STYLES)} styles, {int(lens.sum())} frames")


if __name__ == "__main__":
    main()
