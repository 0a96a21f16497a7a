#!/usr/bin/env python3
"""Generate a motion dataset with kinema on every GPU (or CPU worker) of a Ray cluster.

One kinema engine per Ray actor; one npz per clip (the arrays of ``kinema generate``'s npz),
written atomically (a temporary file renamed into place), so a crash never leaves half a
clip. A rerun resumes: clips whose npz exists and loads with the expected arrays are skipped,
anything else (missing, truncated, of another length) is generated again.

Inputs are text features (the LLM2Vec embeddings of the prompts, e.g. from ``kinema encode``):
an ``.npy`` of shape [N, D] (clips ``clip_00000`` ...), or an ``.npz`` holding either one [N, D]
array or one [D] array per clip (the key names the clip). With a kinema build whose Python
package has ``kinema.TextEncoder``, ``--prompts FILE --text-model GGUF`` embeds one prompt per
line instead.

Clip ``i`` (its index in the input) starts from seed ``--seed + i``, so a clip is the same
whichever worker makes it and however often the run is resumed.

    python examples/python/ray_generate.py --model kimodo-soma-rp.gguf \\
        --embeddings prompts.npy --out dataset/ --frames 150 --steps 100
    # on a running cluster: --address auto; on CPUs only: --workers 8 --threads-per-worker 4

GPU actors ask Ray for one GPU each and open the Vulkan device of the GPU id Ray gives them
(``Engine(backend="vulkan", device=id)``): kinema's device indices follow the Vulkan loader's
order (``kinema info``), which on one-vendor machines is the CUDA order; set
``--devices-from-ray off`` to let every actor take the first discrete GPU instead.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time
import zipfile

import numpy as np

#: The arrays a finished clip holds (``kinema generate``'s npz keys).
KEYS = (
    "local_rot_mats",
    "global_rot_mats",
    "posed_joints",
    "root_positions",
    "smooth_root_pos",
    "foot_contacts",
    "global_root_heading",
    "features",
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Kimodo GGUF (kinema convert kimodo)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--embeddings", help=".npy [N, D] or .npz of text features")
    src.add_argument("--prompts", help="text file, one prompt per line (needs kinema.TextEncoder)")
    p.add_argument("--text-model", help="LLM2Vec GGUF for --prompts")
    p.add_argument("--out", required=True, help="output folder (one npz per clip)")
    p.add_argument("--frames", type=int, default=150)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0, help="clip i starts from seed + i")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start one here)")
    p.add_argument("--num-cpus", type=int, default=None,
                   help="CPUs of the cluster started here (default: the machine's)")
    p.add_argument("--workers", type=int, default=None,
                   help="CPU actors when the cluster has no GPU (default: one per 2 CPUs)")
    p.add_argument("--threads-per-worker", type=int, default=2, help="CPU threads per actor")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "vulkan"])
    p.add_argument("--precision", default="auto", choices=["auto", "strict", "fast"])
    p.add_argument("--devices-from-ray", default="on", choices=["on", "off"])
    p.add_argument("--max-clips", type=int, default=None,
                   help="stop after this many new clips (a partial run; rerun to resume)")
    return p.parse_args(argv)


def load_embeddings(path: str):
    """(names, [N, D] float32) from an .npy or .npz."""
    if path.endswith(".npz"):
        with np.load(path) as z:
            keys = list(z.keys())
            if len(keys) == 1 and z[keys[0]].ndim == 2:
                e = z[keys[0]]
                names = [f"clip_{i:05d}" for i in range(len(e))]
            else:
                names = keys
                e = np.stack([z[k].reshape(-1) for k in keys])
    else:
        e = np.load(path)
        if e.ndim == 3 and e.shape[1] == 1:
            e = e[:, 0]
        names = [f"clip_{i:05d}" for i in range(len(e))]
    if e.ndim != 2:
        sys.exit(f"{path}: expected text features of shape [N, D], got {e.shape}")
    return names, np.ascontiguousarray(e, dtype=np.float32)


def clip_is_valid(path: pathlib.Path, frames: int) -> bool:
    """Whether a previous run finished this clip: it loads, with every array, at `frames`."""
    try:
        with np.load(path) as z:
            return all(k in z for k in KEYS) and z["posed_joints"].shape[0] == frames
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        return False


def write_atomic(path: pathlib.Path, arrays: dict) -> None:
    """np.savez to a temporary file in the same folder, flushed, then renamed over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Worker:
    """One kinema engine and model per actor (the Ray actor class is made in main())."""

    def __init__(self, model: str, backend: str, precision: str, threads, use_ray_gpu: bool,
                 text_model=None):
        import kinema

        device = None
        if use_ray_gpu:
            import ray

            ids = ray.get_gpu_ids()
            device = int(ids[0]) if ids else None
        if threads is not None:  # a CPU actor
            engine = kinema.Engine(backend="cpu", precision=precision, threads=threads)
        else:  # a GPU actor
            engine = kinema.Engine(backend=backend, precision=precision, device=device)
        self.engine = engine
        self.model = kinema.Kimodo(engine, model)
        self.encoder = None
        if text_model is not None:
            self.encoder = kinema.TextEncoder(engine, text_model)

    def describe(self) -> str:
        return repr(self.engine)

    def generate(self, name: str, index: int, embedding, prompt, out: str, frames: int,
                 steps: int, seed: int):
        if embedding is None:
            embedding = np.asarray(self.encoder.encode([prompt]), dtype=np.float32)[0]
        t0 = time.perf_counter()
        arrays = self.model.generate(embedding, frames, steps=steps, seed=seed + index)
        write_atomic(pathlib.Path(out) / f"{name}.npz", arrays)
        return name, time.perf_counter() - t0


def main(argv=None) -> int:
    args = parse_args(argv)
    import kinema
    import ray

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.prompts is not None:
        if not hasattr(kinema, "TextEncoder"):
            sys.exit("--prompts needs kinema.TextEncoder, which this kinema build lacks; embed "
                     "the prompts with `kinema encode` and pass --embeddings")
        if args.text_model is None:
            sys.exit("--prompts needs --text-model (an LLM2Vec GGUF)")
        prompts = [line.strip() for line in open(args.prompts, encoding="utf-8") if line.strip()]
        names = [f"clip_{i:05d}" for i in range(len(prompts))]
        embeddings = [None] * len(prompts)
    else:
        names, e = load_embeddings(args.embeddings)
        prompts = [None] * len(names)
        embeddings = list(e)

    todo = [i for i, n in enumerate(names) if not clip_is_valid(out / f"{n}.npz", args.frames)]
    skipped = len(names) - len(todo)
    if args.max_clips is not None:
        todo = todo[: args.max_clips]
    print(f"{len(names)} clips: {skipped} already done, {len(todo)} to generate", flush=True)
    if not todo:
        return 0

    if args.address is None:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=args.address, log_to_driver=False)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus and args.backend != "cpu":
        n, opts, threads = gpus, {"num_gpus": 1}, None
        use_ray_gpu = args.devices_from_ray == "on"
    else:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        n = args.workers or max(1, cpus // args.threads_per_worker)
        opts, threads, use_ray_gpu = {"num_cpus": args.threads_per_worker}, args.threads_per_worker, False
        if args.workers and args.workers * args.threads_per_worker > cpus:
            opts = {"num_cpus": cpus / args.workers}
    n = min(n, len(todo))
    actor = ray.remote(**opts)(Worker)
    workers = [
        actor.remote(args.model, args.backend, args.precision, threads, use_ray_gpu,
                     args.text_model)
        for _ in range(n)
    ]
    for d in ray.get([w.describe.remote() for w in workers]):
        print(f"worker: {d}", flush=True)
    pool = ray.util.ActorPool(workers)
    tasks = [(names[i], i, embeddings[i], prompts[i]) for i in todo]
    done = 0
    for name, seconds in pool.map_unordered(
        lambda w, t: w.generate.remote(*t, str(out), args.frames, args.steps, args.seed), tasks
    ):
        done += 1
        print(f"[{done}/{len(tasks)}] {name} ({seconds:.2f} s)", flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
