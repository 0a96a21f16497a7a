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

`--only linear` or `--only sdpa` runs one part. With --kinema FILE (kinema's `bench --json`
lines of the same run), also prints to stderr the ratios the Vulkan targets are stated in:
strict f32 GEMM / torch f32 (TF32 off), fast GEMM / torch bf16, at each shape both measured,
and the attention against SDPA f32. The ratio is torch time over kinema's GPU time (above 1:
kinema is faster).
"""
import argparse
import json
import sys

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


def ratios(kinema_file, torch_rows):
    """kinema over torch for each GEMM both measured (strict vs torch f32, fast vs torch bf16)
    and for the attention (vs SDPA f32, single calls and back to back). kinema's GPU time
    (device timestamps, `gpu_s`) is compared where it has one: CUDA-event timing measures the
    same thing; its wall time per submit (`median_s`) also holds the submission latency."""
    torch_by = {(r["op"], r["shape"], r["dtype"]): r for r in torch_rows}
    lines = [f"{'op':<10} {'shape':<16} {'kinema':<24} {'GPU us':>9} {'wall us':>9} "
             f"{'torch':<8} {'us':>9} {'ratio':>6}"]
    for line in open(kinema_file):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("backend") != "vulkan" or r.get("op") not in ("linear", "attention"):
            continue
        ours = r.get("gpu_s") or r["median_s"]
        path = f"{r['precision']}{'+coopmat' if r.get('cooperative_matrix') else ''} {r['dtype']}"
        if r["op"] == "linear":
            want = "f32" if r["precision"] == "strict" else "bf16"
            t = torch_by.get(("torch_linear", r["shape"], want))
            refs = [] if t is None else [(want, t["median_s"])]
        else:
            t = torch_by.get(("torch_sdpa", r["shape"], "f32"))
            refs = [] if t is None else [("f32", t["median_s"]), ("f32 b2b", t["mean_s_back_to_back"])]
        gpu = f"{r['gpu_s'] * 1e6:9.1f}" if r.get("gpu_s") else f"{'-':>9}"
        for name, ts in refs:
            lines.append(f"{r['op']:<10} {r['shape']:<16} {path:<24} {gpu} {r['median_s'] * 1e6:9.1f} "
                         f"{name:<8} {ts * 1e6:9.1f} {ts / ours:>6.2f}")
    return "\n".join(lines)


def linear(dev):
    rows = []
    for m, n, k in [(4096, 4096, 4096), (606, 3072, 1024), (606, 2048, 1024), (606, 1024, 2048)]:
        x = torch.randn(m, k, device=dev)
        w = torch.randn(n, k, device=dev)
        for dt, name in [(torch.float32, "f32"), (torch.bfloat16, "bf16")]:
            xa, wa = x.to(dt), w.to(dt)
            s = timed(lambda: F.linear(xa, wa))
            rows.append({"op": "torch_linear", "shape": f"{m}x{n}x{k}", "dtype": name,
                         "median_s": s, "gflops": 2 * m * n * k / s / 1e9,
                         "torch": torch.__version__, "tf32": False})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def sdpa(dev):
    rows = []
    for s_len in (202, 254):
        q, k_, v = (torch.randn(3, 8, s_len, 128, device=dev) for _ in range(3))
        for dt, name in [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16")]:
            qa, ka, va = q.to(dt), k_.to(dt), v.to(dt)
            fn = lambda qa=qa, ka=ka, va=va: F.scaled_dot_product_attention(qa, ka, va)
            t = timed(fn)
            rows.append({"op": "torch_sdpa", "shape": f"3x{s_len}x8x128", "dtype": name,
                         "median_s": t, "mean_s_back_to_back": back_to_back(fn),
                         "gflops": 4 * 3 * 8 * s_len * s_len * 128 / t / 1e9,
                         "torch": torch.__version__})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["linear", "sdpa"])
    ap.add_argument("--kinema", help="kinema bench --json output of the same run")
    args = ap.parse_args()
    only = args.only
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    rows = []
    if only in (None, "linear"):
        rows = linear(dev)
    if only in (None, "sdpa"):
        rows += sdpa(dev)
    if args.kinema and rows:
        print(ratios(args.kinema, rows), file=sys.stderr)


if __name__ == "__main__":
    main()
