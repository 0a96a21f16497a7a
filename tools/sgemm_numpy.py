#!/usr/bin/env python3
"""numpy/OpenBLAS sgemm baseline for benches/gemm.rs.

Times `x @ w.T` with x [M, K] and w [N, K] in f32 (nn.Linear's layout, the exact problem
`kinema::cpu::matmul::linear` solves; OpenBLAS reads the transposed operand in place) at the
bench's shapes, on 1 and 2 threads, and prints one JSON object per line:

    {"op": "sgemm_numpy", "shape": "MxNxK", "threads": T, "median_s": ..., "gflops": ...,
     "median_cpu_s": ..., "gflops_per_cpu_s": ..., "kernel": "<OpenBLAS core>", ...}

Medians of --runs timed calls after --warmup calls. Run it right after the Rust bench so both
see the same machine state.

OPENBLAS_CORETYPE may be set in this environment to an older core (it slows numpy down): it is
removed before numpy loads, and the core OpenBLAS then picked is reported when threadpoolctl is
installed (`pip install numpy threadpoolctl`).
"""

import argparse
import json
import os
import sys
import time

# Must happen before numpy (and OpenBLAS) load.
CORETYPE_WAS = os.environ.pop("OPENBLAS_CORETYPE", None)

import numpy as np  # noqa: E402

try:
    from threadpoolctl import threadpool_info, threadpool_limits
except ImportError:  # pragma: no cover - reported in the output
    threadpool_info = threadpool_limits = None

SHAPES = [
    (1024, 1024, 1024),
    (202, 3072, 1024),
    (202, 1024, 1024),
    (202, 2048, 1024),
    (202, 1024, 2048),
]


def parse_shape(s):
    m, n, k = (int(v) for v in s.lower().split("x"))
    return m, n, k


def blas_kernel():
    if threadpool_info is None:
        return None
    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas":
            return lib.get("architecture")
    return None


def measure(m, n, k, runs, warmup):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    out = np.empty((m, n), dtype=np.float32)
    for _ in range(warmup):
        np.matmul(x, w.T, out=out)
    times, cpu = [], []
    for _ in range(runs):
        c0 = time.process_time()
        t0 = time.perf_counter()
        np.matmul(x, w.T, out=out)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    times.sort()
    cpu.sort()
    return times[len(times) // 2], cpu[len(cpu) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="*", default=None, help="MxNxK (default: the bench's)")
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    if args.runs < 15:
        sys.exit("--runs must be at least 15")
    shapes = [parse_shape(s) for s in args.shapes] if args.shapes else SHAPES
    if threadpool_limits is None and len(args.threads) > 1:
        print("threadpoolctl missing: set OPENBLAS_NUM_THREADS and pass one --threads", file=sys.stderr)
    for t in args.threads:
        for m, n, k in shapes:
            if threadpool_limits is not None:
                with threadpool_limits(limits=t, user_api="blas"):
                    med, med_cpu = measure(m, n, k, args.runs, args.warmup)
            else:
                med, med_cpu = measure(m, n, k, args.runs, args.warmup)
            print(
                json.dumps(
                    {
                        "op": "sgemm_numpy",
                        "shape": f"{m}x{n}x{k}",
                        "threads": t,
                        "median_s": med,
                        "gflops": 2.0 * m * n * k / med / 1e9,
                        # CPU seconds of all threads (process time): on a shared machine
                        # FLOPs per CPU-second show the kernel's efficiency apart from
                        # time lost to other processes (OpenBLAS threads that spin count).
                        "median_cpu_s": med_cpu,
                        "gflops_per_cpu_s": 2.0 * m * n * k / med_cpu / 1e9,
                        "kernel": blas_kernel(),
                        "layout": "x[M,K] @ w[N,K].T",
                        "runs": args.runs,
                        "openblas_coretype_unset": CORETYPE_WAS,
                        "numpy": np.__version__,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
