#!/usr/bin/env bash
# The GPU comparison behind BENCHMARKS.md's Vulkan section: kinema's Vulkan kernels and torch
# (CUDA) at the same shapes, in one run on one machine, then a table of ratios. Needs a Vulkan
# driver and torch.
#   tools/bench_h200.sh [path/to/kinema] > results.jsonl   (the ratio table goes to stderr)
#
# GEMM shapes are kinema's linear notation MxNxK: x [M,K] . W[N,K]^T, so the Kimodo shapes
# M = 606 (3 CFG rows x 202 tokens) with (K, N) = (1024, 3072), (1024, 2048), (2048, 1024) are
# 606x3072x1024, 606x2048x1024 and 606x1024x2048.
# - strict: f32 weights, f32 arithmetic, against torch f32 with TF32 off;
# - fast: f16 weights (what fast precision narrows a model's weights to on Vulkan) and bf16
#   weights on cooperative matrices, against torch bf16;
# - attention in both precisions against SDPA f32.
# kinema's GPU time (device timestamps) is what the ratio table compares with torch's CUDA
# events; its wall time per submit is in the JSON too.
set -euo pipefail
k=${1:-target/release/kinema}
here="$(dirname "$0")"
ours=$(mktemp)
trap 'rm -f "$ours"' EXIT
run() { "$k" bench --backend vulkan --json "$@" | tee -a "$ours"; }
run --op linear --shape 4096x4096x4096 --dtype f32 --precision strict
for s in 4096x4096x4096 606x3072x1024 606x2048x1024 606x1024x2048; do
  run --op linear --shape "$s" --dtype f16 --precision fast
  run --op linear --shape "$s" --dtype bf16 --precision fast
done
for op in batched_matmul batched_matmul_tb; do
  run --op "$op" --shape 24x202x202x128 --precision strict
done
for s in 3x202x8x128 3x254x8x128; do
  run --op attention --shape "$s" --precision strict
  run --op attention --shape "$s" --precision fast
done
for op in "layer_norm 606x1024" "softmax 4848x254" "gelu 1861632"; do
  set -- $op
  run --op "$1" --shape "$2"
done
python3 "$here/bench_torch_gpu.py" --kinema "$ours"
