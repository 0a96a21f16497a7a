#!/usr/bin/env python3
"""Turn the JSON lines of tools/bench_cpu.sh into the ratio tables of BENCHMARKS.md.

Reads objects with op, shape, dtype, isa, threads, precision, median_s, gflops/gbps (kinema),
op == "sgemm_numpy" (numpy baseline) and op == "fma_peak" (register-only FMA loop).
"""
import json
import sys
from collections import defaultdict


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    by = defaultdict(list)
    for r in rows:
        by[r["op"]].append(r)
    peak = {(r["isa"], r["threads"]): r["gflops"] for r in by["fma_peak"]}
    numpy = {(r["shape"], r["threads"]): r["gflops"] for r in by["sgemm_numpy"]}
    copy_bw = {(r["isa"], r["threads"]): r["gbps"] for r in by["copy"]}

    print("### f32 GEMM (linear, f32 weights) vs numpy/OpenBLAS sgemm and the FMA peak\n")
    print("| shape MxNxK | threads | isa | kinema GFLOP/s | numpy GFLOP/s | kinema/numpy | FMA peak GFLOP/s | % of peak |")
    print("|---|---|---|---|---|---|---|---|")
    for r in by["linear"]:
        if r["dtype"] != "f32" or r["precision"] != "strict":
            continue
        n = numpy.get((r["shape"], r["threads"]))
        p = peak.get((r["isa"], r["threads"]))
        print(f"| {r['shape']} | {r['threads']} | {r['isa']} | {r['gflops']:.1f} | "
              f"{n:.1f} | {r['gflops'] / n:.2f}x | " if n else f"| {r['shape']} | {r['threads']} | {r['isa']} | {r['gflops']:.1f} | - | - | ", end="")
        print(f"{p:.1f} | {100 * r['gflops'] / p:.0f}% |" if p else "- | - |")

    print("\n### Weight dtypes (linear): GFLOP/s and ratio to f32 weights, same shape and threads\n")
    print("| shape | threads | isa | dtype | precision | GFLOP/s | vs f32 |")
    print("|---|---|---|---|---|---|---|")
    f32 = {(r["shape"], r["threads"], r["isa"]): r["gflops"] for r in by["linear"] if r["dtype"] == "f32" and r["precision"] == "strict"}
    for r in by["linear"]:
        if r["dtype"] == "f32":
            continue
        base = f32.get((r["shape"], r["threads"], r["isa"]))
        ratio = f"{r['gflops'] / base:.2f}x" if base else "-"
        print(f"| {r['shape']} | {r['threads']} | {r['isa']} | {r['dtype']} | {r['precision']} | {r['gflops']:.1f} | {ratio} |")

    print("\n### Other kernels: time against the floor (max of bytes / copy bandwidth and FLOPs / FMA peak)\n")
    print("| op | shape | threads | isa | median ms | rate | floor ms | time / floor |")
    print("|---|---|---|---|---|---|---|---|")
    for op, rs in by.items():
        if op in ("linear", "sgemm_numpy", "fma_peak", "bf16_dot_peak"):
            continue
        for r in rs:
            bw = copy_bw.get((r["isa"], r["threads"]))
            p = peak.get((r["isa"], r["threads"]))
            floors = []
            if bw and r.get("gbps"):
                floors.append(r["gbps"] * r["median_s"] / bw)
            if p and r.get("gflops"):
                floors.append(r["gflops"] * r["median_s"] / p)
            floor = max(floors) if floors else None
            rate = f"{r['gflops']:.1f} GFLOP/s" if r.get("gflops") else f"{r.get('gbps', 0):.1f} GB/s"
            fl = f"{floor * 1e3:.3f} | {r['median_s'] / floor:.2f}x" if floor else "- | -"
            print(f"| {op} | {r['shape']} | {r['threads']} | {r['isa']} | {r['median_s'] * 1e3:.3f} | {rate} | {fl} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/bench-cpu.jsonl")
