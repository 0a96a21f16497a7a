#!/usr/bin/env bash
# A whole Kimodo generation on the GPU, side by side in one run: kinema on Vulkan (strict and
# split precision with upstream's 3 rows and the exact 2-row shortcut, fast) and upstream PyTorch
# on CUDA (its own `_generate` loop, 3 rows, f32, TF32 off, with and without the
# TransformerEncoderLayer fast path), T = 150 frames, 100 steps, on the same deterministic
# synthetic weights at the released SOMA size; then 16 motions in one batched generation (each
# its own text feature and seed: the #13 throughput target is <= 2 s for all 16). Then one
# step's per-op GPU time table, strict and split.
#   UPSTREAM_ROOT=/path/to/kimodo@7330e7e [ASSETS=.../kimodo/assets] tools/bench_kimodo_h200.sh [kinema] > gpu.jsonl
set -euo pipefail
k=${1:-target/release/kinema}
up=${UPSTREAM_ROOT:?set UPSTREAM_ROOT to a pinned upstream checkout}
for a in "--precision strict --rows 3" "--precision strict --rows 2" \
         "--precision split --rows 3" "--precision split --rows 2" \
         "--precision fast --rows 2" "--precision fast --rows 3"; do
  # shellcheck disable=SC2086
  "$k" bench kimodo --backend vulkan --frames 150 --steps 100 $a --json
done
for p in fast split strict; do
  "$k" bench kimodo --backend vulkan --frames 150 --steps 100 --rows 2 --precision "$p" \
    --samples 16 --json
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
python3 "$(dirname "$0")/../reference/bench_kimodo_torch.py" --upstream-root "$up" \
  ${ASSETS:+--assets "$ASSETS"} --device cuda --frames 150 --steps 100 --skip-cpu-step --json "$out" >&2
tr -d '\n' < "$out"; echo
KINEMA_PROFILE=1 "$k" bench kimodo --backend vulkan --frames 150 --steps 1 --rows 2 --precision strict >&2
KINEMA_PROFILE=1 "$k" bench kimodo --backend vulkan --frames 150 --steps 1 --rows 2 --precision split >&2
