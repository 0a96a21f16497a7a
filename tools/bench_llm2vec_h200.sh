#!/usr/bin/env bash
# The LLM2Vec encoder (bidirectional Llama at the Llama-3-8B shapes, mean pooled) on the GPU, side
# by side in one run: kinema on Vulkan (bf16 weights strict and fast, q8_0 weights fast) and
# Hugging Face `LlamaModel` on CUDA (reference/bench_llm2vec_torch.py, SDPA: bf16, f32 with TF32
# off, and f32 under fp16 autocast), 32 tokens, batch 1 and 16, each side on its own seeded
# synthetic weights; kinema and PyTorch alternate within each round. Then a 4-layer fast run's
# per-op GPU time table. Needs torch and transformers and ~45 GB of GPU memory (PyTorch's f32
# model); nothing is downloaded.
#   [RUNS=100] [ROUNDS=1] tools/bench_llm2vec_h200.sh [kinema] > gpu.jsonl
set -euo pipefail
k=${1:-target/release/kinema}
n=${RUNS:-100}
py="$(dirname "$0")/../reference/bench_llm2vec_torch.py"
for _ in $(seq "${ROUNDS:-1}"); do
  for b in 1 16; do
    for a in "--dtype bf16 --precision strict" "--dtype bf16 --precision fast" \
             "--dtype q8_0 --precision fast"; do
      # shellcheck disable=SC2086
      "$k" bench llm2vec --backend vulkan --tokens 32 --batch "$b" --runs "$n" $a --json
    done
    for a in "--dtype bf16" "--dtype f32" "--dtype f32 --autocast fp16"; do
      # shellcheck disable=SC2086
      python3 "$py" --device cuda --tokens 32 --batch "$b" --runs "$n" $a --json
    done
  done
done
KINEMA_PROFILE=1 "$k" bench llm2vec --backend vulkan --precision fast --tokens 32 --layers 4 --runs 1 >&2
