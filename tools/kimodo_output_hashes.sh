#!/usr/bin/env bash
# Usage: tools/kimodo_output_hashes.sh KINEMA_BINARY OUT_DIR
#
# Converts the three Kimodo fixture checkpoints (tests/fixtures/kimodo/*/checkpoint) and runs
# `kinema generate` on each: CPU and Vulkan (lavapipe is enough), strict and fast precision,
# 2 and 3 guidance rows, with diagnostics and a GLB; prints the SHA-256 of every GGUF, npz and
# GLB written. Run it with the binary of a refactor's base and with the refactored one and
# diff the two listings: a refactor that promises bit-identical outputs must print the same
# lines. With only a CPU, set KINEMA_HASH_BACKENDS=cpu.
set -euo pipefail
BIN=$(realpath "$1"); OUT=$2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
# A fixed [1, 48] float32 text feature (the fixtures' text width), written without numpy.
python3 - "$OUT/emb.npy" <<'PY'
import math, struct, sys
hdr = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 48), }"
hdr += b" " * (64 - (10 + len(hdr) + 1) % 64) + b"\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr)
    f.write(struct.pack("<48f", *[math.sin(i * 0.37) for i in range(48)]))
PY
for s in soma30 g1 smplx22; do
  "$BIN" convert kimodo --quiet "$ROOT/tests/fixtures/kimodo/$s/checkpoint" -o "$OUT/$s.gguf"
  for be in ${KINEMA_HASH_BACKENDS:-cpu vulkan}; do
    for rows in 2 3; do
      for prec in strict fast; do
        name="$s-$be-$rows-$prec"
        "$BIN" generate --quiet --backend "$be" --precision "$prec" --model "$OUT/$s.gguf" \
          --embedding "$OUT/emb.npy" --frames 20 --steps 5 --seed 3 --cfg-rows "$rows" \
          --diagnostics --glb "$OUT/$name.glb" -o "$OUT/$name.npz"
      done
    done
  done
done
cd "$OUT" && sha256sum ./*.gguf ./*.npz ./*.glb
