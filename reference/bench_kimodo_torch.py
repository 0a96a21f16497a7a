#!/usr/bin/env python3
"""Time upstream Kimodo (PyTorch) on the deterministic synthetic weights that `kinema bench
kimodo` uses, so both sides run the same model (issue 4, part 9).

Builds upstream's `TwostageDenoiser` + `KimodoMotionRep` (SOMA30) at the released size (D 1024,
F 2048, 16 layers per stage, 8 heads, llm_dim 4096, 50 text tokens, heading token) inside
upstream's `Kimodo` (cfg separated), fills it with the synthetic values of
/work/wt/SYNTH.md (implemented below with numpy uint64 arithmetic), and times:

* a full generation (default T=150, 100 steps, 3-row separated CFG, weights [2, 2]) through
  upstream's own loop `Kimodo._generate` (`kimodo/model/kimodo_model.py#L533-605`), on CUDA when
  present (else CPU), float32 with TF32 off, twice: with PyTorch's fused encoder fast path as
  users get it by default, and with `torch.backends.mha.set_fastpath_enabled(False)` (the fast
  path on CUDA computes the FFN GELU with the tanh approximation; kimodo.md section 9 item 15);
* one DDIM step (`Kimodo.denoising_step`, the first step of the same run) on the CPU with
  torch threads = all cores, same weights, 3 rows, both fast-path settings.

`--dump PATH` writes the synthetic text feature, the noise x_T and the final features (both
fast-path settings) to an npz so the Rust side can be compared on the same weights.
`--write-vectors PATH` writes a few synthetic values (per name: stream seed, first uniforms and
tensor values) that `tests/kimodo_fixture_meta.rs` recomputes with `kinema::rng`; the
committed copy is `tests/fixtures/kimodo/synth_vectors.json`.

Usage:
    python reference/bench_kimodo_torch.py --upstream-root /tmp/up --json out.json
    python reference/bench_kimodo_torch.py --upstream-root /tmp/up --layers 1 --frames 20 --steps 2 --device cpu
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kimodo_upstream  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Synthetic weights (SYNTH.md), bit-identical to the Rust side.

SEED = 0x4B494D4F444F  # "KIMODO" in ASCII
GAMMA = np.uint64(0x9E3779B97F4A7C15)
MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & MASK64
    return h


def stream(name: str) -> int:
    return fnv1a64(name.encode("utf-8")) ^ SEED


def splitmix64(seed: int, n: int) -> np.ndarray:
    """Outputs 0..n of `mix(seed + (i+1) * GAMMA)` (src/rng.rs), wrapping mod 2^64."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + (np.arange(n, dtype=np.uint64) + np.uint64(1)) * GAMMA
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform(name: str, n: int) -> np.ndarray:
    """`src/rng.rs::uniform`: top 24 bits times 2^-24, exact in f32."""
    return (splitmix64(stream(name), n) >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)


def synth_values(name: str, shape) -> np.ndarray:
    """The SYNTH.md value of every element of tensor `name` (row-major)."""
    n = int(np.prod(shape)) if len(shape) else 1
    u = uniform(name, n)
    r = np.float32(2) * u - np.float32(1)  # exact in f32
    if name.endswith("norm1.weight") or name.endswith("norm2.weight"):
        v = r * np.float32(0.1) + np.float32(1)
    elif name.endswith("weight"):
        assert len(shape) == 2, name
        v = r * np.float32(np.sqrt(3.0 / shape[1]))
    elif name.endswith("bias"):
        v = r * np.float32(0.02)
    elif name.endswith(".mean"):
        v = r * np.float32(0.1)
    elif name.endswith(".std"):
        v = np.float32(0.5) + u
    elif name == "embedding":
        v = r
    else:
        raise ValueError(f"no synthetic rule for {name}")
    assert v.dtype == np.float32
    return v.reshape(shape)


def write_vectors(path):
    """A few values for the Rust cross-check: names chosen to cover every rule."""
    cases = [
        ("root_model.seqTransEncoder.layers.3.norm1.weight", [1024]),
        ("body_model.seqTransEncoder.layers.0.norm2.weight", [1024]),
        ("root_model.seqTransEncoder.layers.3.linear1.weight", [2048, 1024]),
        ("body_model.input_linear.weight", [1024, 737]),
        ("root_model.embed_timestep.time_embed.0.bias", [1024]),
        ("stats.global_root.mean", [5]),
        ("stats.body.std", [364]),
        ("embedding", [1, 4096]),
    ]
    out = []
    for name, shape in cases:
        vals = synth_values(name, shape).reshape(-1)
        idx = [0, 1, 2, len(vals) // 2, len(vals) - 1]
        out.append(
            {
                "name": name,
                "shape": shape,
                "stream": f"{stream(name):016x}",
                # f32 bit patterns, not decimals: JSON float parsers need not round-trip.
                "u_first_bits": [f"{int(x):08x}" for x in uniform(name, 4).view(np.uint32)],
                "index": idx,
                "value_bits": [f"{int(vals[i].view(np.uint32)):08x}" for i in idx],
            }
        )
    with open(path, "w") as f:
        json.dump({"seed": f"{SEED:x}", "cases": out}, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------------


def build(args, assets):
    from kimodo.model.kimodo_model import Kimodo
    from kimodo.model.twostage_denoiser import TwostageDenoiser
    from kimodo.motion_rep import KimodoMotionRep
    from kimodo.motion_rep.stats import Stats
    from kimodo.skeleton.registry import build_skeleton

    skeleton = build_skeleton(30, assets)
    motion_rep = KimodoMotionRep(skeleton, fps=30)
    dim = motion_rep.motion_rep_dim
    sizes = {"global_root": 5, "local_root": 4, "body": dim - 5}
    for part, n in sizes.items():
        st = Stats(folder=None, load=False)
        mean = torch.from_numpy(synth_values(f"stats.{part}.mean", [n]).astype(np.float64))
        std = torch.from_numpy(synth_values(f"stats.{part}.std", [n]).astype(np.float64))
        st.register_from_tensors(mean, std)  # float64, as upstream loads the .npy stats
        setattr(motion_rep, f"{part}_stats", st)
    den = TwostageDenoiser(
        motion_rep,
        "concat",
        llm_shape=[1, 4096],
        use_text_mask=False,
        latent_dim=1024,
        ff_size=2048,
        num_layers=args.layers,
        num_heads=8,
        activation="gelu",
        dropout=0.1,
        pe_dropout=0.1,
        norm_first=False,
        num_text_tokens_override=50,
        input_first_heading_angle=True,
    )
    sd = {k: torch.from_numpy(synth_values(k, list(v.shape))) for k, v in den.state_dict().items()}
    den.load_state_dict(sd, strict=True)
    nparams = sum(v.numel() for v in sd.values())
    return Kimodo(den, text_encoder=None, num_base_steps=1000, device="cpu", cfg_type="separated"), dim, nparams


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(kimodo, embedding, noise_seed, frames, steps, device):
    from kimodo.motion_rep.feature_utils import length_to_mask

    torch.manual_seed(noise_seed)
    return kimodo._generate(
        [""],
        frames,
        num_denoising_steps=steps,
        pad_mask=length_to_mask(torch.tensor([frames], device=device)),
        first_heading_angle=torch.zeros(1, device=device),
        motion_mask=None,
        observed_motion=None,
        cfg_weight=[2.0, 2.0],
        text_feat=embedding[:, None, :],
        text_pad_mask=torch.ones(1, 1, dtype=torch.bool, device=device),
        cfg_type="separated",
        progress_bar=lambda it: it,
    )


def time_full(kimodo, embedding, args, device, fastpath):
    torch.backends.mha.set_fastpath_enabled(fastpath)
    generate(kimodo, embedding, args.seed, args.frames, min(2, args.steps), device)  # warm-up
    sync(device)
    t0 = time.perf_counter()
    feats = generate(kimodo, embedding, args.seed, args.frames, args.steps, device)
    sync(device)
    return time.perf_counter() - t0, feats


def time_cpu_step(kimodo, embedding, noise, args, fastpath):
    """`Kimodo.denoising_step` for the first step (i = steps-1) with the 3 CFG rows."""
    torch.backends.mha.set_fastpath_enabled(fastpath)
    n = torch.tensor([args.steps])
    t = torch.tensor([args.steps - 1])
    from kimodo.motion_rep.feature_utils import length_to_mask

    kw = dict(
        pad_mask=length_to_mask(torch.tensor([args.frames])),
        text_feat=embedding[:, None, :],
        text_pad_mask=torch.ones(1, 1, dtype=torch.bool),
        t=t,
        first_heading_angle=torch.zeros(1),
        motion_mask=None,
        observed_motion=None,
        num_denoising_steps=n,
        cfg_weight=[2.0, 2.0],
        cfg_type="separated",
    )
    times = []
    with torch.inference_mode():
        for rep in range(args.step_reps + 1):
            t0 = time.perf_counter()
            kimodo.denoising_step(noise, **kw)
            if rep:  # the first call warms up
                times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream-root", help="pinned upstream checkout (7330e7e); not needed for --write-vectors")
    ap.add_argument("--assets", help="folder holding skeletons/ (default: shared/data/upstream/kimodo/assets)")
    ap.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--layers", type=int, default=16, help="encoder layers per stage (16 released)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed of the noise x_T")
    ap.add_argument("--step-reps", type=int, default=3, help="timed repetitions of the CPU step")
    ap.add_argument("--skip-full", action="store_true")
    ap.add_argument("--skip-cpu-step", action="store_true")
    ap.add_argument("--json", help="write the results as JSON here")
    ap.add_argument("--dump", help="write embedding, noise and final features to this npz")
    ap.add_argument("--write-vectors", help="write synthetic-weight test vectors (JSON) and exit")
    args = ap.parse_args()

    if args.write_vectors:
        write_vectors(args.write_vectors)
        print(f"wrote {args.write_vectors}")
        return

    if not args.upstream_root:
        ap.error("--upstream-root is required")
    facts = kimodo_upstream.import_upstream(args.upstream_root, args.assets)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    cores = os.cpu_count()
    torch.set_num_threads(cores)
    fastpath_default = torch.backends.mha.get_fastpath_enabled()

    t0 = time.perf_counter()
    kimodo, dim, nparams = build(args, Path(facts["skeleton_assets"]))
    build_s = time.perf_counter() - t0
    kimodo.eval()
    embedding = torch.from_numpy(synth_values("embedding", [1, 4096]))
    torch.manual_seed(args.seed)
    noise_cpu = torch.randn(1, args.frames, dim)  # what _generate draws on the CPU

    res = {
        "upstream_commit": facts["upstream_commit"],
        "stubbed_packages": facts["stubbed_packages"],
        "torch_version": torch.__version__,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "cpu_cores": cores,
        "torch_threads": torch.get_num_threads(),
        "mkl": torch.backends.mkl.is_available(),
        "tf32": False,
        "mha_fastpath_default": fastpath_default,
        "frames": args.frames,
        "steps": args.steps,
        "layers": args.layers,
        "params": nparams,
        "cfg_rows": 3,
        "build_s": build_s,
    }
    dump = {"embedding": embedding.numpy()}

    if not args.skip_full:
        kimodo.to(device)
        kimodo.device = device
        emb = embedding.to(device)
        torch.manual_seed(args.seed)
        noise = torch.randn(1, args.frames, dim, device=device)
        with torch.no_grad():
            for label, fp in (("default", fastpath_default), ("nofastpath", False)):
                secs, feats = time_full(kimodo, emb, args, device, fp)
                res[f"full_{label}_s"] = secs
                res[f"full_{label}_ms_per_step"] = 1e3 * secs / args.steps
                # `features`: the faithful run (exact GELU everywhere); the default run's
                # features are kept beside it to show what the fast path changes.
                dump["features" if label == "nofastpath" else "features_fastpath_default"] = feats.cpu().numpy()
                print(f"full generation ({label} fast path={fp}): {secs:.3f} s, {1e3 * secs / args.steps:.1f} ms/step")
        dump["noise"] = noise.cpu().numpy()
        torch.backends.mha.set_fastpath_enabled(fastpath_default)
        kimodo.to("cpu")
        kimodo.device = torch.device("cpu")

    if not args.skip_cpu_step:
        for label, fp in (("default", fastpath_default), ("nofastpath", False)):
            med, times = time_cpu_step(kimodo, embedding, noise_cpu, args, fp)
            res[f"cpu_step_{label}_s"] = med
            res[f"cpu_step_{label}_all_s"] = times
            print(f"one CPU DDIM step, 3 rows, T={args.frames}, {cores} threads ({label} fast path={fp}): {med:.3f} s")
        torch.backends.mha.set_fastpath_enabled(fastpath_default)
        dump.setdefault("noise", noise_cpu.numpy())

    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    if args.dump:
        dump["meta"] = np.frombuffer(json.dumps(res, sort_keys=True).encode(), dtype=np.uint8)
        np.savez(args.dump, **dump)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
