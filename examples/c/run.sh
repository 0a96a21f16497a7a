#!/usr/bin/env bash
# Builds libkinema (cdylib + staticlib), the tiny models and examples/c/main.c with cc against
# include/kinema.h, then runs the program linked both ways. CI runs it (.ci/run).
# Usage: examples/c/run.sh [WORKDIR]   (CC overrides the compiler)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
work=${1:-$(mktemp -d)}
mkdir -p "$work"
cargo build -q --lib
cargo run -q --example tiny_models -- "$work" >/dev/null
lib="$root/target/debug"
cc=${CC:-cc}
flags=(-std=c11 -Wall -Wextra -Werror -O1 -I "$root/include")
"$cc" "${flags[@]}" examples/c/main.c -o "$work/kinema_example" \
    -L "$lib" -lkinema -Wl,-rpath,"$lib" -lm -lpthread
"$cc" "${flags[@]}" examples/c/main.c -o "$work/kinema_example_static" \
    "$lib/libkinema.a" -lm -lpthread -ldl
models=("$work/kimodo-soma30-tiny.gguf" "$work/motionbricks-tiny.gguf" "$work/llm2vec-tiny.gguf"
        "$work/clips.npz")
echo "== shared library"
"$work/kinema_example" "${models[@]}"
echo "== static library"
"$work/kinema_example_static" "${models[@]}"
