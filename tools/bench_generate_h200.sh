#!/usr/bin/env bash
# `kinema generate --prompt` end to end at the real sizes (#11's target): the 8B text encoder
# (`llm2vec_8b_shaped`'s Llama-3-8B-shaped file, bf16 and q8_0) and Kimodo at the released SOMA
# size (`kimodo_released_shaped`), T = 150 frames, 100 steps, fast precision on the GPU, one
# prompt, no embedding cache. Each run prints its JSON sidecar (one object per run): the text
# phase's and the motion phase's seconds and peak memory (device memory on Vulkan, the process's
# resident set on the CPU). The model files (15 + 8 + 1.1 GB) are written once into DIR.
#   cargo build --release --examples
#   [DIR=/tmp/kinema-shaped] [BACKEND=vulkan] [FRAMES=150] [STEPS=100] \
#     tools/bench_generate_h200.sh [kinema] [examples dir] > generate.json
set -euo pipefail
k=${1:-target/release/kinema}
ex=${2:-target/release/examples}
dir=${DIR:-${TMPDIR:-/tmp}/kinema-shaped}
mkdir -p "$dir"
[ -f "$dir/kimodo.gguf" ] || "$ex/kimodo_released_shaped" "$dir/kimodo.gguf" >&2
for d in bf16 q8_0; do
  [ -f "$dir/text-$d.gguf" ] || "$ex/llm2vec_8b_shaped" "$dir/text-$d.gguf" "$d" >&2
done
prompt="A person walks forward, turns around and sits down on a chair."
for d in bf16 q8_0; do
  "$k" generate --model "$dir/kimodo.gguf" --text-model "$dir/text-$d.gguf" \
    --prompt "$prompt" --backend "${BACKEND:-vulkan}" --precision fast \
    --frames "${FRAMES:-150}" --steps "${STEPS:-100}" --no-cache --json -o "$dir/out-$d.npz"
done
