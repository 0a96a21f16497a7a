#!/usr/bin/env bash
# Reproduces the CPU numbers of BENCHMARKS.md in one run on one machine: kinema's kernel table
# (1 and 2 threads, strict and fast precision), the register-only FMA peak, and numpy/OpenBLAS
# sgemm at the same shapes, then prints the ratio tables.
#   tools/bench_cpu.sh [out.jsonl]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/bench-cpu.jsonl}
cargo build --release -q
python3 -c 'import numpy, threadpoolctl' 2>/dev/null || pip install -q numpy threadpoolctl
k=target/release/kinema
: > "$out"
for t in 1 2; do
  "$k" bench --threads "$t" --json >> "$out"
  "$k" bench --threads "$t" --json --op linear --dtype bf16 --precision fast >> "$out"
  # OPENBLAS_CORETYPE may be pinned on this kind of machine; unset it so numpy runs its
  # best kernel (tools/sgemm_numpy.py records which one ran).
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 tools/sgemm_numpy.py --threads "$t" >> "$out"
done
python3 tools/bench_report.py "$out"
