#!/usr/bin/env python3
"""Time upstream PyTorch MotionBricks `predict` next to `kinema bench motionbricks` (issue 12, part 8).

Builds upstream's root `MotionModel`, pose `MotionModel` and pose `VQVAE` at the RELEASED widths
from the released `hparams.yaml` (`NVlabs/GR00T-WholeBodyControl`, `motionbricks/`, commit
1983e888; the recipe of `reference/capture_motionbricks.py`), with exactly the weights `kinema
bench motionbricks` plans with:

* every tensor from the counter-based formula `weight_value` of
  `reference/capture_motionbricks.py` (kinema's `models::motionbricks::synthetic`) under
  kinema's name for it (`released_models`),
* motion statistics of mean 0 and deviation 1 (`harness::synthetic_model`),

and the same requests (`harness::synthetic_inputs`): per plan the values
`2 u(fnv1a64(name), i) - 1` of kinema's counter-based stream for `global_root_values`,
`local_root_values` and `local_poses` (batch-major, as kinema fills `[B, 8, dim]`), keyframes
0, 3, 4 and 7 given, every length allowed, the root model choosing the length. Gumbel plans draw
kinema's SplitMix64 uniforms of seed `r * batch + i` (run r, plan i), injected into upstream's
own `gumbel_sample` through `Tensor.uniform_`.

One timed run = `predict` plus the features -> MuJoCo qpos conversion (what kinema times:
inputs to qpos), under `torch.no_grad()` in `eval()`. Upstream's `predict` handles one plan
at a time (a batch breaks its length gather, `motion_inference.py#L229-231`), so `--batch B`
times B plans in a row per run, the way a PyTorch host would serve B requests. kinema's synthetic model carries
synthetic G1 constants, upstream converts with the real `g1.xml`; the qpos values differ but
the conversion costs the same. Run 0 warms up and is not timed. Output, one line per sampling
mode in the shape of `kinema bench motionbricks`:

    motionbricks torch (cuda:0 NVIDIA H200, 16 threads, float32, tf32 off): released widths
    (synthetic), 183.1 M params, batch 1, 200 timed runs each: argmax p50 .. ms, p99 .. ms,
    mean .. ms; gumbel p50 .. ms, p99 .. ms, mean .. ms (weights .. s)

Usage:
    mkdir -p /tmp/mbup && git -C /work/.mirror/NVlabs+GR00T-WholeBodyControl/repo archive HEAD \\
        motionbricks | tar -x -C /tmp/mbup
    python reference/bench_motionbricks_torch.py --upstream /tmp/mbup/motionbricks \\
        [--device cuda] [--batch 16] [--plans 200] [--tf32] [--autocast fp16|bf16|off] [--json]
On CUDA the timings synchronise the device around each run. `--tf32` reproduces upstream's
`matmul_precision: high` (`exp_setup/experiment.py#L116-117`); off by default, to compare with
kinema's strict float32. `--autocast fp16` runs each plan under `torch.autocast(device,
dtype=torch.float16)` (f32 weights, cast per plan, as a PyTorch host would), to compare with
kinema's fast precision; off by default.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def released_models(upstream, cap):
    """capture_motionbricks.build with no width overrides and kinema's synthetic weights.

    kinema's bench model (`harness::synthetic_model`) fills each tensor from the formula under
    kinema's own tensor name, the converter's renaming of upstream's key
    (`models::motionbricks::convert`): root `backbone_net.X` -> `root.X`, pose
    `backbone_net.X` -> `pose.X`, VQVAE `decoder.X` -> `vq.decoder.X`,
    `quantizer.vq._codebook.embed` -> `vq.codebook` (same shapes), so upstream's tensors are
    filled from those names here."""
    saved = (dict(cap.ROOT_ARGS), dict(cap.POSE_ARGS), dict(cap.VQVAE_ARGS), cap.fill_weights)
    cap.ROOT_ARGS.clear()
    cap.POSE_ARGS.clear()
    cap.VQVAE_ARGS.clear()
    cap.fill_weights = lambda module, prefix="": None
    try:
        models, _ = cap.build(upstream)
    finally:
        cap.ROOT_ARGS.update(saved[0])
        cap.POSE_ARGS.update(saved[1])
        cap.VQVAE_ARGS.update(saved[2])
        cap.fill_weights = saved[3]

    def fill(module, rename):
        filled = 0
        with torch.no_grad():
            for k, v in module.state_dict().items():
                n = rename(k)
                if n is not None and v.is_floating_point():
                    v.copy_(torch.from_numpy(cap.weight_value(n, list(v.shape))))
                    filled += 1
        return filled

    bb = "backbone_net."
    fill(models["root"], lambda k: "root." + k[len(bb):] if k.startswith(bb) else None)
    fill(models["pose"], lambda k: "pose." + k[len(bb):] if k.startswith(bb) else None)
    vq = models["pose"].supporting_nets["pose_net"]
    fill(vq, lambda k: "vq.decoder." + k[len("decoder."):] if k.startswith("decoder.")
         else ("vq.codebook" if k == "quantizer.vq._codebook.embed" else None))
    return models


def unit_stats():
    """Make every upstream `Stats` load as mean 0, deviation 1 (kinema's synthetic model);
    `motionlib/core/utils/stats.py#L37-44`."""
    from motionbricks.motionlib.core.utils.stats import Stats
    orig = Stats.load

    def load(self):
        orig(self)
        self.register_from_tensors(torch.zeros_like(self.mean), torch.ones_like(self.std))
    Stats.load = load


def synthetic_inputs(cap, batch, device):
    k, classes = 8, 11

    def values(name, n):
        return (cap.uniforms(cap.fnv1a64(name), n).astype(np.float64) * 2.0 - 1.0).astype(np.float32)

    has = np.zeros((batch, k), bool)
    has[:, [0, 3, 4, 7]] = True
    t = lambda a: torch.from_numpy(a).to(device)
    return {
        "global_root_values": t(values("global_root_values", batch * k * 5).reshape(batch, k, 5)),
        "has_global_root_values": t(has.copy()),
        "local_root_values": t(values("local_root_values", batch * k * 4).reshape(batch, k, 4)),
        "has_local_root_values": t(has.copy()),
        "local_poses": t(values("local_poses", batch * k * 303).reshape(batch, k, 303)),
        "has_local_poses": t(has.copy()),
        "num_tokens": t(np.full((batch, 1), 18, np.int32)),
        "allowed_pred_num_tokens": t(np.ones((batch, classes), np.int64)),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True, type=Path, help="the upstream motionbricks/ folder")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--plans", type=int, default=200, help="timed runs per sampling mode (>= 200 for p99)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--autocast", choices=["off", "fp16", "bf16"], default="off")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not 1 <= a.batch <= 64:
        sys.exit("--batch: 1 to 64 plans")
    upstream = a.upstream.resolve()
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(upstream))
    os.chdir(upstream)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    import capture_motionbricks as cap
    import motionbricks.motion_backbone.inference.motion_inference as mi
    from motionbricks.helper.mujoco_helper import mujoco_qpos_converter

    device = torch.device(a.device)
    t0 = time.perf_counter()
    unit_stats()
    models = released_models(upstream, cap)
    inferencer = mi.motion_inference(models, models["pose"].args, device=str(device)).eval()
    converter = mujoco_qpos_converter(inferencer.motion_rep, "assets/skeletons/g1/g1.xml").to(device)
    weights_s = time.perf_counter() - t0
    params = sum(p.numel() for m in ("root", "pose") for p in models[m].backbone_net.parameters()
                 if p.dtype.is_floating_point)
    vq = models["pose"].supporting_nets["pose_net"]
    params += sum(p.numel() for n, p in vq.named_parameters() if not n.startswith("encoder"))
    inputs = synthetic_inputs(cap, a.batch, device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    n_logits = 16 * 8 * 10
    orig_uniform = torch.Tensor.uniform_
    cast = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.autocast)
    autocast = lambda: torch.autocast(device.type, dtype=cast, enabled=cast is not None)
    results = {}
    for mode in ("argmax", "gumbel"):
        config = {"num_inference_step": 1, "allow_pred_out_of_reach_num_tokens": False,
                  "pose_token_sampling_use_argmax": mode == "argmax", "skip_ending_target_cond": False}
        ms = []
        for r in range(a.plans + 1):
            sync()
            t = time.perf_counter()
            # Upstream's predict is batch-1 only: `pred_num_tokens.long().repeat([1, 4])` on its
            # 1-D length tensor (motion_inference.py#L229-231) mis-shapes the gather for B > 1.
            # So a "batch" of B is B plans in a row, plan i with kinema's stream r * B + i.
            for i in range(a.batch):
                u = torch.from_numpy(cap.uniforms(r * a.batch + i, n_logits)).to(device)

                def fake(self, lo=0.0, hi=1.0, u=u):
                    return self.copy_(u.view(self.shape))
                one = {k: v[i:i + 1] for k, v in inputs.items()}
                torch.Tensor.uniform_ = fake
                try:
                    with torch.no_grad(), autocast():
                        feats, n = inferencer.predict(
                            one["global_root_values"], one["has_global_root_values"],
                            one["local_root_values"], one["has_local_root_values"],
                            one["local_poses"], one["has_local_poses"], one["num_tokens"],
                            allowed_pred_num_tokens=one["allowed_pred_num_tokens"], config=config,
                            info={})
                        qpos = converter.convert_motion_features_to_mujoco_qpos(
                            feats, inferencer.motion_rep, False)
                finally:
                    torch.Tensor.uniform_ = orig_uniform
                assert qpos.shape[0] == 1
            sync()
            if r > 0:
                ms.append((time.perf_counter() - t) * 1e3)
        ms.sort()
        q = lambda p: ms[min(max(int(np.ceil(p * len(ms))), 1), len(ms)) - 1]  # nearest rank, as kinema
        results[mode] = {"sampling": mode, "p50_ms": q(0.5), "p99_ms": q(0.99),
                         "mean_ms": float(np.mean(ms))}
    name = str(device) + (f" {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "")
    report = {"backend": "torch", "device": name, "threads": torch.get_num_threads(),
              "precision": "tf32" if a.tf32 else "float32", "autocast": a.autocast,
              "model": "released widths (synthetic)",
              "parameters": params, "weights_s": weights_s, "batch": a.batch, "plans": a.plans,
              "argmax": results["argmax"], "gumbel": results["gumbel"], "torch": torch.__version__}
    if a.json:
        print(json.dumps(report, indent=1))
        return
    lat = lambda x: f"{x['sampling']} p50 {x['p50_ms']:.2f} ms, p99 {x['p99_ms']:.2f} ms, mean {x['mean_ms']:.2f} ms"
    print(f"motionbricks torch ({name}, {report['threads']} threads, {report['precision']}, f32 weights, "
          f"autocast {a.autocast}): "
          f"{report['model']}, {params / 1e6:.1f} M params, batch {a.batch}, {a.plans} timed runs each: "
          f"{lat(results['argmax'])}; {lat(results['gumbel'])} (weights {weights_s:.1f} s)")


if __name__ == "__main__":
    main()
