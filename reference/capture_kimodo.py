#!/usr/bin/env python3
"""Capture Kimodo parity fixtures from the REAL upstream PyTorch modules (issue 4, part 7).

For each skeleton (soma30 = SOMASkeleton30, g1 = G1Skeleton34, smplx22 = SMPLXSkeleton22) this
builds upstream's `Kimodo` -> `TwostageDenoiser` -> `KimodoMotionRep` in a small configuration
with seeded random weights and statistics, writes them as a checkpoint directory in the
upstream Hugging Face layout, rebuilds the model FROM that directory through upstream's own
config instantiation (`kimodo/model/common.py::instantiate_from_dict`, the non-Hydra twin of
what `kimodo/model/load_model.py` does), runs upstream's sampling loop (`Kimodo._generate`,
`kimodo/model/kimodo_model.py#L533-605`) with a given text feature, and records every
boundary: both stage inputs and outputs of the first denoiser call, the root bridge, the CFG
combination, the first DDIM step, the schedules, the positional-encoding table, the final
features and their decode (including SOMA 30 -> 77).

Upstream code is imported from `--upstream-root`, never copied; `kimodo_upstream.py` says which
unused third-party imports are stubbed and how the skeleton assets are located.

Everything runs on the CPU in float32, eval mode, with PyTorch's fused encoder fast path off
(`torch.backends.mha.set_fastpath_enabled(False)`; kimodo.md section 9 item 15).

Usage (about a minute; needs torch, numpy, scipy, einops, pydantic, omegaconf, pyyaml,
safetensors):
    mkdir -p /tmp/up && git -C /work/.mirror/nv-tlabs+kimodo/repo archive HEAD -- . \\
        ':(exclude)kimodo/assets' | tar -x -C /tmp/up
    python reference/capture_kimodo.py --upstream-root /tmp/up --out tests/fixtures/kimodo
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import yaml
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kimodo_upstream  # noqa: E402

SEED = 20260320
SKELETONS = {"soma30": 30, "g1": 34, "smplx22": 22}
T = 10
STEPS = 10
SCHEDULE_STEPS = (10, 100)
HEADING = 0.3
CFG_WEIGHTS = [2.0, 2.0]  # [text, constraint]
# Plausible root statistics: the SOMA-RP-v1.1 values quoted in kimodo.md section 4.2.
GLOBAL_ROOT_MEAN = [0.00411, 0.93062, 0.00016, -0.00013, 0.00049]
GLOBAL_ROOT_STD = [1.4548, 0.17327, 1.4642, 0.70713, 0.70708]
LOCAL_ROOT_MEAN = [1.4e-5, -2.3e-4, -1.4e-4, 0.93062]
LOCAL_ROOT_STD = [0.75586, 0.45930, 0.46049, 0.17327]

MODEL = {
    "latent_dim": 64,
    "ff_size": 96,
    "num_layers": 2,
    "num_heads": 2,
    "llm_shape": [1, 48],
    "num_text_tokens_override": 50,
    "use_text_mask": False,
    "input_first_heading_angle": True,
    "motion_mask_mode": "concat",
    "activation": "gelu",
    "norm_first": False,
    "dropout": 0.1,
    "pe_dropout": 0.1,
    "num_base_steps": 1000,
    "fps": 30,
    "cfg_type": "separated",
}


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def model_config(nbjoints):
    """The checkpoint's `config.yaml`: a Hydra `_target_` graph Kimodo -> TwostageDenoiser ->
    KimodoMotionRep -> build_skeleton, with `${checkpoint_dir}` resolved at load time
    (`kimodo/model/load_model.py#L180-188` merges `checkpoint_dir` and `text_encoder` in, then
    pops `checkpoint_dir`). The CFG weights are not part of it: upstream takes them per call
    (`Kimodo.__call__(cfg_weight=[2.0, 2.0])`, `kimodo/model/kimodo_model.py#L350`), and an
    unknown key here would reach `Kimodo.__init__` and fail."""
    m = MODEL
    return {
        "_target_": "kimodo.model.Kimodo",
        "denoiser": {
            "_target_": "kimodo.model.TwostageDenoiser",
            "motion_rep": {
                "_target_": "kimodo.motion_rep.KimodoMotionRep",
                "skeleton": {"_target_": "kimodo.skeleton.registry.build_skeleton", "nbjoints": nbjoints},
                "fps": m["fps"],
                "stats_path": "${checkpoint_dir}/stats/motion",
            },
            "motion_mask_mode": m["motion_mask_mode"],
            "ckpt_path": "${checkpoint_dir}/model.safetensors",
            "llm_shape": list(m["llm_shape"]),
            "use_text_mask": m["use_text_mask"],
            "latent_dim": m["latent_dim"],
            "ff_size": m["ff_size"],
            "num_layers": m["num_layers"],
            "num_heads": m["num_heads"],
            "activation": m["activation"],
            "dropout": m["dropout"],
            "pe_dropout": m["pe_dropout"],
            "norm_first": m["norm_first"],
            "num_text_tokens_override": m["num_text_tokens_override"],
            "input_first_heading_angle": m["input_first_heading_angle"],
        },
        "num_base_steps": m["num_base_steps"],
        "cfg_type": m["cfg_type"],
    }


def resolve(config, ckpt_dir, assets, with_ckpt=True):
    """What `load_model` hands to instantiation: `${checkpoint_dir}` resolved through OmegaConf,
    `text_encoder` None (text features are given directly), plus the skeleton assets folder."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(
        OmegaConf.create(config), OmegaConf.create({"checkpoint_dir": str(ckpt_dir), "text_encoder": None})
    )
    cfg = OmegaConf.to_container(merged, resolve=True)
    cfg.pop("checkpoint_dir")
    cfg["denoiser"]["motion_rep"]["skeleton"]["assets_folder"] = str(assets)
    if not with_ckpt:
        cfg["denoiser"].pop("ckpt_path")
    return cfg


def write_stats(stats_dir, dim, seed):
    """Seeded float64 statistics in the split layout `_require_split_stats_layout` demands
    (`kimodo/motion_rep/reps/base.py#L19-33`)."""
    g = np.random.default_rng(seed)
    body = dim - 5
    parts = {
        "global_root": (np.array(GLOBAL_ROOT_MEAN), np.array(GLOBAL_ROOT_STD)),
        "local_root": (np.array(LOCAL_ROOT_MEAN), np.array(LOCAL_ROOT_STD)),
        "body": (g.normal(0.0, 0.1, body), g.uniform(0.5, 1.5, body)),
    }
    for name, (mean, std) in parts.items():
        d = stats_dir / name
        d.mkdir(parents=True)
        np.save(d / "mean.npy", mean.astype(np.float64))
        np.save(d / "std.npy", std.astype(np.float64))


def init_weights(module, seed):
    """Seeded weights: 2-D weights ~ N(0, 1/fan_in) (std 1/sqrt(fan_in)), biases ~ N(0, 0.02),
    LayerNorm weights 1 + U(-0.1, 0.1). Visited in `named_parameters` order."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight"):
                p.copy_(1.0 + (torch.rand(p.shape, generator=gen) * 2 - 1) * 0.1)
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[1]))
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            else:
                raise ValueError(f"no initialiser for {name} {tuple(p.shape)}")


def capture(skel, nbjoints, index, out_root, assets, facts):
    """Build, run and record one skeleton into `out_root/skel/`, replaced only when complete."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{skel}.", dir=out_root))
    try:
        capture_into(tmp, skel, nbjoints, index, assets, facts)
    except BaseException:
        shutil.rmtree(tmp)
        raise
    tmp.chmod(0o755)
    out_dir = out_root / skel
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    size = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    print(f"{skel}: {size / 1e6:.2f} MB in {out_dir}")


def capture_into(tmp, skel, nbjoints, index, assets, facts):
    from kimodo.model.common import instantiate_from_dict
    from kimodo.model.diffusion import Diffusion
    from kimodo.motion_rep.feature_utils import length_to_mask
    from kimodo.skeleton import SOMASkeleton30

    seeds = {
        "weights": SEED + 100 * index + 1,
        "stats": SEED + 100 * index + 2,
        "embedding": SEED + 100 * index + 3,
        "noise": SEED + 100 * index + 4,
    }
    dim = 9 + 12 * nbjoints
    config = model_config(nbjoints)
    ckpt = tmp / "checkpoint"
    ckpt.mkdir()
    with open(ckpt / "config.yaml", "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    write_stats(ckpt / "stats" / "motion", dim, seeds["stats"])

    # Seeded weights in an upstream TwostageDenoiser built without a checkpoint, saved with the
    # file prefix `denoiser.backbone.` that `TwostageDenoiser.load_ckpt` strips (#L66-71).
    fresh = instantiate_from_dict(resolve(config, ckpt, assets, with_ckpt=False)["denoiser"])
    assert fresh.motion_rep.motion_rep_dim == dim
    init_weights(fresh, seeds["weights"])
    sd = {f"denoiser.backbone.{k}": v.detach().contiguous() for k, v in fresh.state_dict().items()}
    for stage in ("root_model", "body_model"):
        n = sum(1 for k in sd if k.startswith(f"denoiser.backbone.{stage}."))
        assert n == 12 + 12 * MODEL["num_layers"], (stage, n)
    save_file(sd, str(ckpt / "model.safetensors"))

    # The model under test: rebuilt from the checkpoint directory alone.
    kimodo = instantiate_from_dict(resolve(config, ckpt, assets), overrides={"device": "cpu"})
    kimodo.eval()
    den = kimodo.denoiser.model  # TwostageDenoiser inside ClassifierFreeGuidedModel
    for k, v in den.state_dict().items():
        assert torch.equal(v, sd[f"denoiser.backbone.{k}"]), k
    motion_rep = kimodo.motion_rep
    assert type(motion_rep.skeleton).__name__ == {30: "SOMASkeleton30", 34: "G1Skeleton34", 22: "SMPLXSkeleton22"}[
        nbjoints
    ]

    out = {}

    def put(name, t, dtype=np.float32):
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        out[name] = np.ascontiguousarray(a.astype(dtype))

    # Inputs.
    g = torch.Generator().manual_seed(seeds["embedding"])
    embedding = torch.randn(1, MODEL["llm_shape"][1], generator=g)
    heading = torch.tensor([HEADING], dtype=torch.float32)
    put("embedding", embedding)
    put("heading", heading)

    # Schedules: upstream's respacing and calc_diffusion_vars (kimodo/model/diffusion.py#L50-94).
    for n in SCHEDULE_STEPS:
        diff = Diffusion(num_base_steps=MODEL["num_base_steps"])
        use, _ = diff.space_timesteps(n)
        diff.calc_diffusion_vars(use)
        put(f"sched{n}_use_timesteps", use[:n], np.int32)
        put(f"sched{n}_alphas_cumprod", diff.alphas_cumprod[:n])
        put(f"sched{n}_prev", diff.alphas_cumprod_prev[:n])

    # Positional encoding: upstream's own buffer (kimodo/model/backbone.py#L235-280).
    pe = den.root_model.sequence_pos_encoder.pe[0]
    assert torch.equal(pe, den.body_model.sequence_pos_encoder.pe[0])
    put("pe_first", pe[: MODEL["latent_dim"] + 1])
    put("pe_time", pe[out["sched10_use_timesteps"].astype(np.int64)])

    # Boundary taps on the first denoiser call (step i = n-1). Hooks and a wrapper only
    # observe; they return nothing, so upstream's values flow on unchanged.
    taps = {}

    def first(name):
        def hook(mod, args, output):
            if name not in taps:
                x = args[0]  # the CFG wrapper's first argument is cfg_weight, not a tensor
                x = x.detach().clone() if isinstance(x, torch.Tensor) else None
                taps[name] = (x, output.detach().clone())

        return hook

    handles = [
        den.root_model.register_forward_hook(first("root")),
        den.body_model.register_forward_hook(first("body")),
        den.register_forward_hook(first("denoiser")),
        kimodo.denoiser.register_forward_hook(first("cfg")),
    ]
    bridge = motion_rep.global_root_to_local_root

    def bridge_tap(*a, **k):
        y = bridge(*a, **k)
        taps.setdefault("bridge", y.detach().clone())
        return y

    motion_rep.global_root_to_local_root = bridge_tap
    step = kimodo.denoising_step

    def step_tap(*a, **k):
        y = step(*a, **k)
        taps.setdefault("step", y.detach().clone())
        return y

    kimodo.denoising_step = step_tap

    # x_T: `_generate` draws `torch.randn((B, T, dim))` from the global generator, and nothing
    # else consumes it once the text feature is given (kimodo/model/kimodo_model.py#L578-582).
    torch.manual_seed(seeds["noise"])
    noise = torch.randn(1, T, dim)
    torch.manual_seed(seeds["noise"])
    lengths = torch.tensor([T])
    with torch.no_grad():
        features = kimodo._generate(
            [""],
            T,
            num_denoising_steps=STEPS,
            pad_mask=length_to_mask(lengths),
            first_heading_angle=heading,
            motion_mask=None,  # no constraints, as `Kimodo.__call__` passes (#L480-487)
            observed_motion=None,
            cfg_weight=list(CFG_WEIGHTS),
            text_feat=embedding[:, None, :],
            text_pad_mask=torch.ones(1, 1, dtype=torch.bool),
            cfg_type="separated",
            progress_bar=lambda it: it,
        )
    for h in handles:
        h.remove()
    del motion_rep.global_root_to_local_root
    del kimodo.denoising_step

    root_in, root_out = taps["root"]
    assert root_in.shape == (3, T, 2 * dim) and torch.equal(root_in[0, :, :dim], noise[0]), "x_T mismatch"
    assert torch.equal(root_in[:, :, dim:], torch.zeros_like(root_in[:, :, dim:]))
    put("noise", noise)
    put("root_in", root_in)
    put("root_out", root_out)
    put("bridge_out", taps["bridge"])
    put("body_in", taps["body"][0])
    put("body_out", taps["body"][1])
    put("denoiser_out", taps["denoiser"][1])
    put("x0_step0", taps["cfg"][1])
    put("x_step1", taps["step"])
    put("features", features)

    # Decode as `Kimodo.__call__` does without post-processing (#L490-517): unnormalize +
    # motion_rep.inverse, then SOMA30 -> SOMA77.
    with torch.no_grad():
        dec = motion_rep.inverse(features, is_normalized=True, return_numpy=False)
        for k in ("local_rot_mats", "global_rot_mats", "posed_joints", "root_positions", "smooth_root_pos"):
            put(k, dec[k][0])
        put("foot_contacts", dec["foot_contacts"][0], np.uint8)
        put("global_root_heading", dec["global_root_heading"][0])
        if isinstance(motion_rep.skeleton, SOMASkeleton30):
            d77 = motion_rep.skeleton.output_to_SOMASkeleton77(dec)
            for k in ("local_rot_mats", "global_rot_mats", "posed_joints"):
                put(f"{k}_77", d77[k][0])

    expect = {
        "embedding": (1, MODEL["llm_shape"][1]),
        "noise": (1, T, dim),
        "heading": (1,),
        "root_in": (3, T, 2 * dim),
        "root_out": (3, T, 5),
        "bridge_out": (3, T, 4),
        "body_in": (3, T, 2 * dim - 1),
        "body_out": (3, T, dim - 5),
        "denoiser_out": (3, T, dim),
        "x0_step0": (1, T, dim),
        "x_step1": (1, T, dim),
        "features": (1, T, dim),
        "local_rot_mats": (T, nbjoints, 3, 3),
        "posed_joints": (T, nbjoints, 3),
        "foot_contacts": (T, 4),
        "global_root_heading": (T, 2),
    }
    for k, shape in expect.items():
        assert out[k].shape == shape, (k, out[k].shape, shape)

    files = sorted(p for p in ckpt.rglob("*") if p.is_file())
    meta = {
        "fixture_format": 1,
        "skeleton": skel,
        "skeleton_class": type(motion_rep.skeleton).__name__,
        "num_joints": nbjoints,
        "motion_dim": dim,
        "upstream_commit": facts["upstream_commit"],
        "upstream_stubbed_packages": facts["stubbed_packages"],
        "torch_version": torch.__version__,
        "numpy_version": np.__version__,
        "device": "cpu",
        "dtype": "float32",
        "mha_fastpath": False,
        "torch_threads": torch.get_num_threads(),
        "config": config,
        "model": MODEL,
        "seeds": seeds,
        "frames": T,
        "steps": STEPS,
        "cfg_type": "separated",
        "cfg_weights": {"text": CFG_WEIGHTS[0], "constraint": CFG_WEIGHTS[1]},
        "cfg_rows": ["text", "constraint", "uncond"],
        "heading": HEADING,
        "constraints": None,
        "script_sha256": sha256_file(__file__),
        "helper_sha256": sha256_file(kimodo_upstream.__file__),
        "checkpoint_sha256": {str(p.relative_to(ckpt)): sha256_file(p) for p in files},
    }
    out["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez_compressed(tmp / "fixture.npz", **out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream-root", required=True, help="pinned upstream checkout (7330e7e)")
    ap.add_argument("--out", required=True, help="fixture folder, e.g. tests/fixtures/kimodo")
    ap.add_argument("--assets", help="folder holding skeletons/ (default: shared/data/upstream/kimodo/assets)")
    ap.add_argument("--only", choices=sorted(SKELETONS), action="append", help="capture only these skeletons")
    args = ap.parse_args()

    facts = kimodo_upstream.import_upstream(args.upstream_root, args.assets)
    torch.backends.mha.set_fastpath_enabled(False)
    torch.set_num_threads(1)
    out_root = Path(args.out)
    out_root.mkdir(parents=True, exist_ok=True)
    assets = Path(facts["skeleton_assets"])
    for index, (skel, nbjoints) in enumerate(SKELETONS.items()):
        if args.only and skel not in args.only:
            continue
        capture(skel, nbjoints, index, out_root, assets, facts)


if __name__ == "__main__":
    main()
