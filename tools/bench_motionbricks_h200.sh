#!/usr/bin/env bash
# Whole MotionBricks plans on the GPU, side by side in one run: kinema on Vulkan (strict f32 and
# fast f16 weights) and upstream PyTorch `predict` on CUDA (reference/bench_motionbricks_torch.py:
# f32 with TF32 off, and fp16 autocast), batch 1 and 16, argmax and Gumbel, inputs to MuJoCo
# qpos, on the same deterministic synthetic weights and requests at the released widths; kinema
# and PyTorch alternate within each round. Then one batch-1 fast plan's per-op GPU time table.
# UPSTREAM_ROOT is the `motionbricks/` folder of NVlabs/GR00T-WholeBodyControl@1983e888, with
# its Python dependencies (reference/requirements-motionbricks.txt) importable.
#   UPSTREAM_ROOT=/path/to/motionbricks [PLANS=100] [ROUNDS=1] tools/bench_motionbricks_h200.sh [kinema] > gpu.jsonl
set -euo pipefail
k=${1:-target/release/kinema}
up=${UPSTREAM_ROOT:?set UPSTREAM_ROOT to the motionbricks/ folder of a pinned upstream checkout}
n=${PLANS:-100}
py="$(dirname "$0")/../reference/bench_motionbricks_torch.py"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "${ROUNDS:-1}"); do
  for b in 1 16; do
    for p in strict fast; do
      "$k" bench motionbricks --backend vulkan --precision "$p" --batch "$b" --plans "$n" --json
    done
    for ac in off fp16; do
      python3 "$py" --upstream "$up" --device cuda --batch "$b" --plans "$n" --autocast "$ac" \
        --json > "$out"
      # The report is the indented JSON at the end; anything upstream printed before it goes to stderr.
      sed '/^{/,$d' "$out" >&2
      sed -n '/^{/,$p' "$out" | tr -d '\n'; echo
    done
  done
done
KINEMA_PROFILE=1 "$k" bench motionbricks --backend vulkan --precision fast --batch 1 --plans 1 >&2
