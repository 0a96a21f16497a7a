#!/usr/bin/env python3
"""The torch side of the H200 comparison (tools/bench_h200.sh): the same shapes as kinema's
Vulkan benches, timed with CUDA events, one JSON object per line.

- f32 matmul with TF32 disabled (the strict-mode baseline) and bf16 matmul (the fast-mode
  baseline) at 4096^3 and the Kimodo shapes (M = 3 CFG rows x 202 tokens);
- torch.nn.functional.scaled_dot_product_attention at Kimodo's attention shape (3 rows, 8
  heads of 128, S = 202 and 254): f32 (the strict-mode baseline) and f16/bf16 (fast mode).
  Besides the median of single calls (CUDA events around one call, as for matmul), the mean
  of 100 back-to-back calls is reported (`mean_s_back_to_back`): at these sizes launch gaps
  are a visible part of a single call.

`--only linear` or `--only sdpa` runs one part.
"""
import argparse
import json

import torch
import torch.nn.functional as F


def timed(fn, reps=50, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def back_to_back(fn, reps=100, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def linear(dev):
    for m, n, k in [(4096, 4096, 4096), (606, 3072, 1024), (606, 2048, 1024), (606, 1024, 2048)]:
        x = torch.randn(m, k, device=dev)
        w = torch.randn(n, k, device=dev)
        for dt, name in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
            xa, wa = x.to(dt), w.to(dt)
            s = timed(lambda: F.linear(xa, wa))
            print(json.dumps({"op": "torch_linear", "shape": f"{m}x{n}x{k}", "dtype": name,
                              "median_s": s, "gflops": 2 * m * n * k / s / 1e9,
                              "torch": torch.__version__, "tf32": False}))


def sdpa(dev):
    for s_len in (202, 254):
        q, k_, v = (torch.randn(3, 8, s_len, 128, device=dev) for _ in range(3))
        for dt, name in [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")]:
            qa, ka, va = q.to(dt), k_.to(dt), v.to(dt)
            fn = lambda qa=qa, ka=ka, va=va: F.scaled_dot_product_attention(qa, ka, va)
            t = timed(fn)
            print(json.dumps({"op": "torch_sdpa", "shape": f"3x{s_len}x8x128", "dtype": name,
                              "median_s": t, "mean_s_back_to_back": back_to_back(fn),
                              "gflops": 4 * 3 * 8 * s_len * s_len * 128 / t / 1e9,
                              "torch": torch.__version__}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["linear", "sdpa"])
    only = ap.parse_args().only
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    if only in (None, "linear"):
        linear(dev)
    if only in (None, "sdpa"):
        sdpa(dev)


if __name__ == "__main__":
    main()
