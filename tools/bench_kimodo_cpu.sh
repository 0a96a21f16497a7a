#!/usr/bin/env bash
# One Kimodo DDIM step at T=150 on this machine's CPU, side by side in one run: upstream
# PyTorch (its own 3-row separated-CFG step, MKL/OpenBLAS, all cores) against kinema's strict
# mode (2 and 3 rows) and fast mode, on the same deterministic synthetic weights at the released
# SOMA size (SYNTH spec in src/models/kimodo/synthetic.rs). kinema runs first and last to
# bracket the machine's noise.
#   UPSTREAM_ROOT=/path/to/kimodo@7330e7e [PYTHON=python3] tools/bench_kimodo_cpu.sh [kinema] > cpu.jsonl
set -euo pipefail
k=${1:-target/release/kinema}
up=${UPSTREAM_ROOT:?set UPSTREAM_ROOT to a pinned upstream checkout}
py=${PYTHON:-python3}
ours() { "$k" bench kimodo --backend cpu --frames 150 --steps 3 --json "$@"; }
ours --rows 2
ours --rows 3
ours --rows 2 --precision fast
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$py" "$(dirname "$0")/../reference/bench_kimodo_torch.py" --upstream-root "$up" ${ASSETS:+--assets "$ASSETS"} \
  --device cpu --frames 150 --skip-full --step-reps 3 --json "$out" >&2
tr -d '\n' < "$out"; echo
ours --rows 2
