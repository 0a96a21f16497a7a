#!/usr/bin/env python3
"""Capture fixtures of upstream MotionBricks' navigation-agent host math (issue 12, part 5).

Runs upstream's own functions (`NVlabs/GR00T-WholeBodyControl`, `motionbricks/`, commit
1983e888) on the CPU in float32 and records what kinema's agent (`src/models/motionbricks/
agent/`) must reproduce:

* `data/motionbricks/g1_kinematics.json`: the constants of upstream's
  `mujoco_qpos_converter` (`motionbricks/helper/mujoco_helper.py#L161-262`, #L335-427) that
  the agent's qpos -> joint transforms needs: per MuJoCo joint (pelvis + 29 hinges) its parent,
  its accumulated neutral position, its MuJoCo axis and its `_rot_offsets_q2t`; per skeleton
  joint its MuJoCo index (-1 = dead joint) and, for the dead joints, the float32 offset from
  their parent in `skeleton/joints.p`.
* `tests/fixtures/motionbricks/agent/fk.npz`: random qpos -> global joint positions and
  rotations (`convert_mujoco_qpos_to_motion_transforms`).
* `tests/fixtures/motionbricks/agent/step_<case>.npz`: one `full_navigation_agent.
  generate_new_frames` call (`motion_backbone/demo/full_agent.py#L109-166`) per case with a
  synthetic clip library and a stand-in inferencer whose `predict` records its arguments and
  returns the features of the committed `argmax.npz` plan fixture. Recorded: the command, the
  raw and canonicalised context, the context transforms, the spring outputs and the remapped
  mode, the target transforms and the realigned context, `predict`'s arguments, the features
  returned, the qpos before un-canonicalisation and the final (blended) qpos.
* `tests/fixtures/motionbricks/agent/clips.npz`: the synthetic clip library of those cases in
  kinema's `clips.npz` format (see `reference/motionbricks_clips_to_npz.py`).

`full_navigation_agent` is not constructible without upstream's clip checkpoint, so its
methods are called on a plain object carrying the attributes they read (the constructor's
demo settings: canonicalisation, spring model, both realignments, qpos filter, speed scale
[1, 1]). `clips.py` imports `mujoco` at module level only for its types; a stub module stands
in for it.

Usage (seconds; torch, numpy, scipy, einops, omegaconf, hydra-core, pytorch-lightning,
vector-quantize-pytorch):
    mkdir -p /tmp/mbup && git -C /work/.mirror/NVlabs+GR00T-WholeBodyControl/repo archive HEAD \\
        motionbricks | tar -x -C /tmp/mbup
    python reference/capture_motionbricks_agent.py --upstream /tmp/mbup/motionbricks \\
        --fixtures tests/fixtures/motionbricks --data data/motionbricks
"""

import argparse
import hashlib
import json
import os
import sys
import types
from pathlib import Path

import numpy as np
import torch

UPSTREAM_COMMIT = "1983e88888217f6c69283cf3a9d1af01e87f07af"


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_converter(upstream):
    from omegaconf import OmegaConf
    from motionbricks.helper.pl_util import load_motion_rep
    from motionbricks.helper.mujoco_helper import mujoco_qpos_converter
    conf = OmegaConf.load(upstream / "out/motionbricks_pose/version_1/hparams.yaml")
    motion_rep = load_motion_rep(conf)
    return mujoco_qpos_converter(motion_rep, "assets/skeletons/g1/g1.xml"), motion_rep


def kinematics(conv):
    skel = conv.motion_rep.skeleton
    m2q = conv._motion_indices_to_mujoco_indices.tolist()
    neutral = skel.neutral_joints
    dead = []
    for j, q in enumerate(m2q):
        if q == -1:
            p = int(skel.joint_parents[j])
            off = neutral[j].float() - neutral[p].float()  # both cast first (#L419-421)
            dead.append({"joint": j, "parent": p, "offset": [float(x) for x in off.tolist()]})
    f32 = lambda t: [float(x) for x in t.reshape(-1).tolist()]
    q2t = conv._rot_offsets_q2t[conv._mujoco_indices_to_motion_indices.long()]
    return {
        "upstream": "NVlabs/GR00T-WholeBodyControl@" + UPSTREAM_COMMIT,
        "source": "motionbricks/helper/mujoco_helper.py mujoco_qpos_converter (g1.xml, "
                  "out/motionbricks_pose/version_1/skeleton/joints.p)",
        "mujoco_parents": [int(x) for x in conv._mujoco_joint_including_root_parent_list.tolist()],
        "mujoco_neutral": f32(conv._capture_neutral_joints_mujoco),
        "hinge_axis": f32(conv._mujoco_joint_axis_values_mujoco_space),
        "hinge_q2t": f32(q2t),
        "motion_to_mujoco": [int(x) for x in m2q],
        "dead_joints": dead,
    }


STYLES = ["idle", "slow_walk", "walk", "hand_crawling", "walk_boxing", "elbow_crawling",
          "stealth_walk", "injured_walk", "walk_stealth", "walk_happy_dance", "walk_zombie",
          "walk_gun", "walk_scared", "walk_left", "walk_right"]


def synthetic_qpos(rng, frames, speed, yaw0):
    """A plausible G1 qpos stream: root at 0.78 m moving along its heading at `speed` m/s,
    slight yaw drift and tilt, hinges swinging around a random offset."""
    t = np.arange(frames) / 30.0
    yaw = yaw0 + 0.05 * np.sin(2.0 * t)
    q = np.zeros((frames, 36))
    q[:, 0] = speed * t * np.cos(yaw0)
    q[:, 1] = speed * t * np.sin(yaw0)
    q[:, 2] = 0.78 + 0.01 * np.sin(6.0 * t)
    roll = 0.03 * np.sin(3.0 * t)
    q[:, 3] = np.cos(yaw / 2) * np.cos(roll / 2)
    q[:, 4] = np.cos(yaw / 2) * np.sin(roll / 2)
    q[:, 5] = np.sin(yaw / 2) * np.sin(roll / 2)
    q[:, 6] = np.sin(yaw / 2) * np.cos(roll / 2)
    base = rng.uniform(-0.3, 0.3, 29)
    amp = rng.uniform(0.05, 0.3, 29)
    ph = rng.uniform(0, 2 * np.pi, 29)
    q[:, 7:] = base + amp * np.sin(6.0 * t[:, None] + ph)
    return q.astype(np.float32)


def clip_library(rng, conv):
    from motionbricks.motion_backbone.demo.clips import clip_holder_G1
    lens = [int(rng.integers(12, 40)) for _ in STYLES]
    lens[0] = 30
    qs = []
    for i, s in enumerate(STYLES):
        spd = 0.0 if s == "idle" else clip_holder_G1.CLIPS[s]["avg_root_vel"] / 2.0
        qs.append(synthetic_qpos(rng, lens[i], spd, 0.0 if i == 0 else rng.uniform(-0.3, 0.3)))
    fmax = max(lens)
    holder = clip_holder_G1.__new__(clip_holder_G1)
    torch.nn.Module.__init__(holder)
    buf = {k: [] for k in ("global_root_positions", "global_joint_positions",
                           "global_joint_rotations", "global_headings", "mujoco_qpos")}
    for q in qs:
        qt = torch.from_numpy(q)
        # What clips.py#L91-106 computes from a clip's qpos.
        gp, gr = conv.convert_mujoco_qpos_to_motion_transforms(qt[None])
        root = gp[0, :, 0] * torch.tensor([[1.0, 0.0, 1.0]])
        d = torch.matmul(gr[0, :, 0], torch.tensor([0.0, 0.0, 1.0]).view([1, -1, 1]))
        d = d.view([-1, 3]) * torch.tensor([1.0, 0.0, 1.0]).view([1, -1])
        d = d / torch.norm(d, dim=1, keepdim=True)
        vals = {"global_root_positions": root, "global_joint_positions": gp[0] - root[:, None, :],
                "global_joint_rotations": gr[0], "global_headings": torch.atan2(d[:, 0], d[:, 2]),
                "mujoco_qpos": qt}
        for k, v in vals.items():
            pad = torch.zeros((fmax,) + tuple(v.shape[1:]))
            pad[: v.shape[0]] = v
            buf[k].append(pad)
    for k, v in buf.items():
        holder.register_buffer(k, torch.stack(v))
    holder.register_buffer("num_frames_per_clip", torch.tensor(lens, dtype=torch.int32))
    holder._apply_root_headings_correction()
    return holder, qs


class FakeInferencer:
    """Records predict's arguments, returns a fixed plan."""

    def __init__(self, features, n_tokens):
        self.features = features
        self.n_tokens = n_tokens
        self.calls = []

    def predict(self, *args, config=None, info=None, allowed_pred_num_tokens=None):
        self.calls.append([a.clone() for a in args] + [allowed_pred_num_tokens.clone()])
        return self.features.clone(), torch.tensor([self.n_tokens])


def agent_object(holder, conv, motion_rep, inferencer):
    from motionbricks.motion_backbone.demo.full_agent import full_navigation_agent as A
    o = types.SimpleNamespace()
    o.NUM_FRAMES_PER_TOKEN, o.PRED_OFFSETS = 4, 4
    o.FORCE_CANONICALIZATION, o.BYPASS_SPRING_MODEL = True, False
    o.SKIP_ENDING_TARGET_COND, o.FILTER_QPOS = False, True
    o._target_root_realignment = o._source_root_realignment = True
    o._speed_scale_min = o._speed_scale_max = 1.0
    o._fps, o._device = 30, "cpu"
    o._clip_holder, o._converter, o._motion_rep = holder, conv, motion_rep
    o._inferencer = types.SimpleNamespace(
        predict=inferencer.predict,
        _root_model=types.SimpleNamespace(backbone_net=types.SimpleNamespace(MASKED_NUM_TOKENS=18)),
        local_motion_rep=types.SimpleNamespace(fps=30))
    o.frames = {}
    for name in ("_canonicalize_mujoco_qpos", "_uncanonicalize_mujoco_qpos",
                 "_process_input_to_joint_transforms", "_generate_spring_model_position_and_heading",
                 "_override_target_transforms", "_generate_target_joint_transforms",
                 "_generate_inbetween_frames"):
        setattr(o, name, types.MethodType(getattr(A, name), o))
    return o


def run_step(o, ctx, cmd):
    """generate_new_frames' body (full_agent.py#L130-166) with every intermediate recorded."""
    rec = {"ctx_qpos": ctx.copy()}
    inp = {"context_mujoco_qpos": torch.from_numpy(ctx)[None].clone(),
           "mode": torch.tensor([cmd["mode"]]),
           "movement_direction": torch.tensor([cmd["movement"]], dtype=torch.float32),
           "facing_direction": torch.tensor([cmd["facing"]], dtype=torch.float32),
           "random_seed": torch.tensor([cmd["seed"]]),
           "allowed_pred_num_tokens": torch.tensor([cmd["allowed"]])}
    if "target_vel" in cmd:
        inp["target_vel"] = torch.tensor([cmd["target_vel"]], dtype=torch.float32)
    if "target_pos" in cmd:
        inp["specific_target_positions"] = torch.tensor([[cmd["target_pos"]]], dtype=torch.float32)
        inp["specific_target_headings"] = torch.tensor([[cmd["target_heading"]]], dtype=torch.float32)
        inp["has_specific_target"] = torch.tensor([[True]]).int()
    for k in ("mode", "movement", "facing", "seed", "allowed", "target_vel", "target_pos", "target_heading"):
        if k in cmd:
            rec["cmd_" + k] = np.asarray(cmd[k])
    gp, gr = o._process_input_to_joint_transforms(inp)
    inp["context_global_joint_positions"], inp["context_global_joint_rotations"] = gp, gr
    rec["canon_qpos"] = inp["context_mujoco_qpos"][0].numpy()
    rec["first_heading"] = inp["first_frame_heading_angle"].numpy()
    rec["first_position"] = inp["first_frame_position"][0].numpy()
    rec["canon_movement"] = inp["movement_direction"][0].numpy()
    rec["canon_facing"] = inp["facing_direction"][0].numpy()
    if "specific_target_positions" in inp:
        rec["canon_target_pos"] = inp["specific_target_positions"][0].numpy()
        rec["canon_target_heading"] = inp["specific_target_headings"][0].numpy()
    rec["ctx_positions"], rec["ctx_rotations"] = gp[0].numpy().copy(), gr[0].numpy().copy()
    (inp["target_root_position"], inp["target_root_positions"], inp["target_root_headings"],
     inp["target_root_heading"], inp["start_root_positions"], inp["start_root_headings"]) = \
        o._generate_spring_model_position_and_heading(inp)
    for k in ("target_root_positions", "target_root_headings", "start_root_positions",
              "start_root_headings"):
        rec["spring_" + k] = inp[k][0].numpy()
    rec["mode_remapped"] = np.asarray(int(inp["mode"].view(-1)[0]))
    (inp["target_global_joint_positions"], inp["target_global_joint_rotations"],
     inp["target_global_root_positions"]) = o._generate_target_joint_transforms(inp)
    rec["target_positions"] = inp["target_global_joint_positions"][0].numpy()
    rec["target_rotations"] = inp["target_global_joint_rotations"][0].numpy()
    rec["target_root_positions"] = inp["target_global_root_positions"][0].numpy()
    rec["realigned_ctx_positions"] = inp["context_global_joint_positions"][0].numpy()
    rec["realigned_ctx_rotations"] = inp["context_global_joint_rotations"][0].numpy()
    uncanon = o._uncanonicalize_mujoco_qpos

    def spy(inp2):
        rec["plan_qpos_canonical"] = inp2["mujoco_qpos"][0].numpy().copy()
        return uncanon(inp2)
    o._uncanonicalize_mujoco_qpos = spy
    _, qpos, n_frames = o._generate_inbetween_frames(inp)
    o._uncanonicalize_mujoco_qpos = uncanon
    rec["raw_qpos"] = o.frames["raw_mujoco_qpos"][0].numpy()
    rec["qpos"] = qpos[0].numpy()
    rec["num_frames"] = np.asarray(int(n_frames.view(-1)[0]))
    names = ["global_root_values", "has_global_root_values", "local_root_values",
             "has_local_root_values", "local_poses", "has_local_poses", "num_tokens",
             "allowed_pred_num_tokens"]
    for n, v in zip(names, o._inferencer_calls[-1]):
        rec["in." + n] = v.numpy()
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True, type=Path)
    ap.add_argument("--fixtures", required=True, type=Path, help="tests/fixtures/motionbricks")
    ap.add_argument("--data", required=True, type=Path, help="data/motionbricks")
    a = ap.parse_args()
    fixtures, data = a.fixtures.resolve(), a.data.resolve()
    upstream = a.upstream.resolve()
    sys.path.insert(0, str(upstream))
    sys.modules.setdefault("mujoco", types.ModuleType("mujoco"))
    os.chdir(upstream)
    torch.set_num_threads(2)
    conv, motion_rep = load_converter(upstream)

    data.mkdir(parents=True, exist_ok=True)
    k = kinematics(conv)
    k["script_sha256"] = sha256(Path(__file__).resolve())
    (data / "g1_kinematics.json").write_text(json.dumps(k, indent=1) + "\n")

    out = fixtures / "agent"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    n = 24
    q = np.zeros((n, 36), np.float32)
    q[:, :3] = rng.uniform(-2, 2, (n, 3))
    axis = rng.normal(size=(n, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    ang = rng.uniform(-np.pi, np.pi, n)
    q[:, 3] = np.cos(ang / 2)
    q[:, 4:7] = axis * np.sin(ang / 2)[:, None]
    q[:, 7:] = rng.uniform(-1.0, 1.0, (n, 29))
    gp, gr = conv.convert_mujoco_qpos_to_motion_transforms(torch.from_numpy(q)[None])
    np.savez_compressed(out / "fk.npz", qpos=q, positions=gp[0].numpy(), rotations=gr[0].numpy())

    holder, clip_qpos = clip_library(rng, conv)
    from motionbricks.motion_backbone.demo.clips import clip_holder_G1
    clips = {}
    for i, s in enumerate(STYLES):
        clips[s + ".qpos"] = clip_qpos[i]
        clips[s + ".allowed_pred_num_tokens"] = np.asarray(
            clip_holder_G1.CLIPS[s]["allowed_pred_num_tokens"], bool)
        clips[s + ".avg_root_vel"] = np.asarray(clip_holder_G1.CLIPS[s]["avg_root_vel"], np.float32)
    np.savez_compressed(out / "clips.npz", **clips)

    plan = np.load(fixtures / "argmax.npz")
    inferencer = FakeInferencer(torch.from_numpy(plan["features"]).float(),
                                int(np.asarray(plan["pred_num_tokens"]).reshape(-1)[0]))
    o = agent_object(holder, conv, motion_rep, inferencer)
    o._inferencer_calls = inferencer.calls

    def ctx_from(style, start, yaw, at):
        c = synthetic_qpos(np.random.default_rng(start), 4, 1.0 if style else 0.0, yaw)
        c[:, :2] += np.asarray(at, np.float32)
        return c

    allowed = lambda s: clip_holder_G1.CLIPS[s]["allowed_pred_num_tokens"]
    cases = {
        "walk": (ctx_from(1, 1, 0.4, [1.0, -2.0]),
                 dict(mode=2, movement=[0.6, 0.8, 0.0], facing=[0.6, 0.8, 0.0], seed=1234,
                      allowed=allowed("walk"))),
        "turn": (ctx_from(1, 2, 2.9, [-3.0, 0.5]),
                 dict(mode=6, movement=[-1.0, -0.1, 0.0], facing=[0.2, -1.0, 0.0], seed=77,
                      allowed=allowed("stealth_walk"), target_vel=0.9)),
        "idle": (ctx_from(0, 3, -1.2, [0.3, 0.3]),
                 dict(mode=0, movement=[0.0, 0.0, 0.0], facing=[0.0, 1.0, 0.0], seed=9,
                      allowed=allowed("idle"))),
        "sideways": (ctx_from(1, 4, 0.0, [0.0, 0.0]),
                     dict(mode=2, movement=[0.0, 1.0, 0.0], facing=[1.0, 0.0, 0.0], seed=4321,
                          allowed=allowed("walk"))),
        "waypoint": (ctx_from(1, 5, -2.5, [2.0, 2.0]),
                     dict(mode=10, movement=[1.0, 0.0, 0.0], facing=[1.0, 0.0, 0.0], seed=5,
                          allowed=allowed("walk_zombie"), target_pos=[3.5, 1.0, 0.0],
                          target_heading=3.0)),
    }
    for name, (ctx, cmd) in cases.items():
        rec = run_step(o, ctx, cmd)
        np.savez_compressed(out / f"step_{name}.npz", **rec)
        print(name, "mode", int(rec["mode_remapped"]), "frames", int(rec["num_frames"]))
    meta = {"upstream_commit": UPSTREAM_COMMIT, "script_sha256": sha256(Path(__file__).resolve()),
            "torch": torch.__version__, "plan_features_from": "argmax.npz",
            "cases": list(cases)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
