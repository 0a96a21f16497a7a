#!/usr/bin/env bash
# The GPU comparison behind BENCHMARKS.md's Vulkan section: kinema's Vulkan kernels and torch
# (CUDA) at the same shapes, in one run on one machine. Needs a Vulkan driver and torch.
#   tools/bench_h200.sh [path/to/kinema] > results.jsonl
set -euo pipefail
k=${1:-target/release/kinema}
for s in 4096x4096x4096 606x3072x1024 606x2048x1024 606x1024x2048; do
  "$k" bench --backend vulkan --op linear --shape "$s" --json
done
for s in 3x202x8x128 3x254x8x128; do
  "$k" bench --backend vulkan --op attention --shape "$s" --json
done
for op in "layer_norm 606x1024" "softmax 4848x254" "gelu 1861632"; do
  set -- $op
  "$k" bench --backend vulkan --op "$1" --shape "$2" --json
done
python3 "$(dirname "$0")/bench_torch_gpu.py"
