#!/usr/bin/env bash
# Prints the SHA-256 of every array `kinema plan` writes for a MotionBricks model, so a change
# to the plan plumbing can be checked bit for bit: run it with the binary before and after,
# then diff.
#
#   tools/motionbricks_output_hashes.sh path/to/old/kinema MODEL.gguf > before.txt
#   tools/motionbricks_output_hashes.sh target/release/kinema MODEL.gguf > after.txt
#   diff before.txt after.txt && echo bit-identical
#
# MODEL.gguf: e.g. `cargo run --release --example tiny_models -- DIR` leaves
# DIR/motionbricks-tiny.gguf (reduced widths, synthetic weights).
# Covers one plan (the argmax parity fixture's inputs) and a batch of 5 mixed requests (given
# and chosen lengths, partial allowed masks), argmax and Gumbel (--seed) with --diagnostics, on
# the CPU (strict and fast) and, when a Vulkan device exists, Vulkan strict and fast, the
# latter also with KINEMA_VK_FORCE_STAGING=1 (the staged transfers of a discrete GPU).
# Needs python3 with numpy (the inputs) and only the standard library for the hashes.
set -euo pipefail
bin=$(realpath "$1")
model=$(realpath "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$py" - "$root/tests/fixtures/motionbricks/argmax.npz" "$tmp" <<'PY'
import sys
import numpy as np
src, tmp = sys.argv[1:]
z = np.load(src)
names = ["global_root_values", "has_global_root_values", "local_root_values",
         "has_local_root_values", "local_poses", "has_local_poses", "num_tokens",
         "allowed_pred_num_tokens"]
np.savez(f"{tmp}/one.npz", **{n: z[f"in.{n}"] for n in names})
r = np.random.default_rng(12)
b, k = 5, 8
has = r.random((b, k)) < 0.5
has[:, 0] = True
allowed = r.random((b, 11)) < 0.6
allowed[:, 3] = True
np.savez(f"{tmp}/batch.npz",
         global_root_values=r.uniform(-1, 1, (b, k, 5)).astype(np.float32),
         has_global_root_values=has,
         local_root_values=r.uniform(-1, 1, (b, k, 4)).astype(np.float32),
         has_local_root_values=has[:, ::-1].copy(),
         local_poses=r.uniform(-1, 1, (b, k, 303)).astype(np.float32),
         has_local_poses=has,
         num_tokens=np.array([18, 7, 18, 16, 18], dtype=np.int64),
         allowed_pred_num_tokens=allowed)
PY

hash_npz() { # label file
  python3 - "$1" "$2" <<'PY'
import hashlib, sys, zipfile
label, path = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(path) as z:
    for n in sorted(z.namelist()):
        print(label, n, hashlib.sha256(z.read(n)).hexdigest())
PY
}

backends="cpu"
info=$("$bin" info 2>/dev/null || true)
if grep -q '^  \[0\] ' <<<"$info"; then backends="cpu vulkan vulkan-staged"; fi
for be in $backends; do
  for prec in strict fast; do
    for inp in one batch; do
      for s in argmax gumbel; do
        extra=()
        [ "$s" = gumbel ] && extra=(--seed 3)
        out="$tmp/$be.$prec.$inp.$s.npz"
        name=$be
        env=()
        if [ "$be" = vulkan-staged ]; then name=vulkan; env=(KINEMA_VK_FORCE_STAGING=1); fi
        env "${env[@]}" "$bin" plan --model "$model" --inputs "$tmp/$inp.npz" \
          --backend "$name" --precision "$prec" --sampling "$s" "${extra[@]}" \
          --diagnostics -o "$out" >/dev/null
        hash_npz "$be/$prec/$inp/$s" "$out"
      done
    done
  done
done
