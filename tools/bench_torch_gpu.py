#!/usr/bin/env python3
"""The torch side of the H200 comparison (tools/bench_h200.sh): the same shapes as kinema's
Vulkan benches, timed with CUDA events, one JSON object per line.

- f32 matmul with TF32 disabled (the strict-mode baseline) and bf16 matmul (the fast-mode
  baseline) at 4096^3 and the Kimodo shapes (M = 3 CFG rows x 202 tokens);
- torch.nn.functional.scaled_dot_product_attention in f32 at Kimodo's attention shape
  (3 rows, 8 heads of 128, S = 202 and 254).
"""
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


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    for m, n, k in [(4096, 4096, 4096), (606, 3072, 1024), (606, 2048, 1024), (606, 1024, 2048)]:
        x = torch.randn(m, k, device=dev)
        w = torch.randn(n, k, device=dev)
        for dt, name in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
            xa, wa = x.to(dt), w.to(dt)
            s = timed(lambda: F.linear(xa, wa))
            print(json.dumps({"op": "torch_linear", "shape": f"{m}x{n}x{k}", "dtype": name,
                              "median_s": s, "gflops": 2 * m * n * k / s / 1e9,
                              "torch": torch.__version__, "tf32": False}))
    for s_len in (202, 254):
        q, k_, v = (torch.randn(3, 8, s_len, 128, device=dev) for _ in range(3))
        t = timed(lambda: F.scaled_dot_product_attention(q, k_, v))
        print(json.dumps({"op": "torch_sdpa", "shape": f"3x{s_len}x8x128", "dtype": "f32",
                          "median_s": t, "gflops": 4 * 3 * 8 * s_len * s_len * 128 / t / 1e9,
                          "torch": torch.__version__}))


if __name__ == "__main__":
    main()
