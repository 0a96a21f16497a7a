#!/usr/bin/env bash
# Prints the SHA-256 of every array kinema generate writes on the Kimodo test fixtures, so a
# refactor can be checked bit for bit: run it with the binary before and after, then diff.
#
#   tools/kimodo_output_hashes.sh path/to/kinema > before.txt   # e.g. built from the base commit
#   tools/kimodo_output_hashes.sh target/release/kinema > after.txt
#   diff before.txt after.txt && echo bit-identical
#
# Covers each fixture (g1, smplx22, soma30), CPU strict on every ISA this machine has
# (scalar, avx2, avx512 where present), lavapipe/Vulkan strict when a Vulkan device exists,
# 3 and 2 guidance rows with --diagnostics and the fixture's noise, and one seeded run.
# Needs only python3's standard library (the npz members are hashed as stored).
# Since post-processing became the default (SOMA and SMPL-X), compare against a binary from
# before it with a wrapper that adds `--no-postprocess` after `generate`: those outputs are
# bit-identical to the raw decode.
set -euo pipefail
bin=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

info=$("$bin" info 2>/dev/null || true)
isas="scalar avx2"
if grep -q 'kernels available.*avx512' <<<"$info"; then isas="$isas avx512"; fi
backends="cpu"
if grep -q '^  \[0\] ' <<<"$info"; then backends="cpu vulkan"; fi

hash_npz() { # label file
  python3 - "$1" "$2" <<'PY'
import hashlib, sys, zipfile
label, path = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(path) as z:
    for n in sorted(z.namelist()):
        print(label, n, hashlib.sha256(z.read(n)).hexdigest())
PY
}

for fx in g1 smplx22 soma30; do
  d="$root/tests/fixtures/kimodo/$fx"
  "$bin" convert kimodo --quiet "$d/checkpoint" -o "$tmp/$fx.gguf" >/dev/null
  python3 - "$d/fixture.npz" "$tmp" "$fx" <<'PY'
import sys, zipfile
src, tmp, fx = sys.argv[1:]
with zipfile.ZipFile(src) as z:
    for k in ("embedding", "noise"):
        open(f"{tmp}/{fx}_{k}.npy", "wb").write(z.read(k + ".npy"))
PY
  for be in $backends; do
    for isa in $isas; do
      [ "$be" = vulkan ] && [ "$isa" != scalar ] && continue
      for rows in 3 2; do
        out="$tmp/$fx-$be-$isa-$rows.npz"
        KINEMA_CPU_ISA=$isa "$bin" generate --quiet --diagnostics --backend "$be" --precision strict \
          --model "$tmp/$fx.gguf" --embedding "$tmp/${fx}_embedding.npy" --noise "$tmp/${fx}_noise.npy" \
          --steps 10 --cfg-rows "$rows" --glb "$tmp/$fx-$be-$isa-$rows.glb" -o "$out" >/dev/null
        if [ "$be" = cpu ]; then label="$fx/cpu-$isa/rows$rows"; else label="$fx/vulkan/rows$rows"; fi
        hash_npz "$label" "$out"
        echo "$label glb $(sha256sum < "$tmp/$fx-$be-$isa-$rows.glb" | cut -d' ' -f1)"
      done
    done
    out="$tmp/$fx-$be-seed.npz"
    "$bin" generate --quiet --backend "$be" --precision strict --model "$tmp/$fx.gguf" \
      --embedding "$tmp/${fx}_embedding.npy" --frames 12 --steps 3 --seed 7 -o "$out" >/dev/null
    hash_npz "$fx/$be/seed7" "$out"
  done
done
