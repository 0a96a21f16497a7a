#!/usr/bin/env python3
"""Check that two kinema binaries generate bit-identical Kimodo outputs.

Usage: tools/kimodo_bitcheck.py OLD_KINEMA NEW_KINEMA [--backend cpu|vulkan]
                                [--precision strict|fast] [--steps N]

For each fixture under tests/fixtures/kimodo/<skeleton>/ (soma30, g1, smplx22) both binaries
convert the upstream checkpoint, then generate from the fixture's embedding and noise with
--diagnostics and --glb. The converted GGUF files, every array of the output npz (by the
SHA-256 of its .npy member) and the GLB files must be byte for byte the same; the JSON sidecar
is not compared (it holds timings). Prints one line per compared item and exits 1 on any
difference. Run it before and after a refactor that must not change results, e.g. with
`/work/main/target/debug/kinema` as OLD. Only the standard library is needed.
"""
import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKELETONS = ["soma30", "g1", "smplx22"]


def sha(data):
    return hashlib.sha256(data).hexdigest()


def run(binary, args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{binary} {' '.join(args)} failed:\n{r.stdout}{r.stderr}")


def outputs(binary, skeleton, work, opts):
    """Converts and generates with `binary`; returns {item: sha256}."""
    fixture = ROOT / "tests" / "fixtures" / "kimodo" / skeleton
    model = work / "model.gguf"
    run(binary, ["convert", "kimodo", "--quiet", str(fixture / "checkpoint"), "-o", str(model)])
    with zipfile.ZipFile(fixture / "fixture.npz") as z:
        for name in ["embedding", "noise"]:
            (work / f"{name}.npy").write_bytes(z.read(f"{name}.npy"))
    out, glb = work / "out.npz", work / "out.glb"
    run(
        binary,
        [
            "generate", "--quiet", "--diagnostics",
            "--backend", opts.backend, "--precision", opts.precision,
            "--model", str(model),
            "--embedding", str(work / "embedding.npy"),
            "--noise", str(work / "noise.npy"),
            "--steps", str(opts.steps),
            "--glb", str(glb), "-o", str(out),
        ],
    )
    items = {"model.gguf": sha(model.read_bytes()), "out.glb": sha(glb.read_bytes())}
    with zipfile.ZipFile(out) as z:
        for name in sorted(z.namelist()):
            items[f"out.npz:{name}"] = sha(z.read(name))
    return items


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--precision", default="strict")
    p.add_argument("--steps", type=int, default=10)
    opts = p.parse_args()
    differ = 0
    for skeleton in SKELETONS:
        got = []
        for binary in [opts.old, opts.new]:
            with tempfile.TemporaryDirectory() as d:
                got.append(outputs(binary, skeleton, Path(d), opts))
        old, new = got
        for item in sorted(set(old) | set(new)):
            same = old.get(item) == new.get(item)
            differ += not same
            print(f"{'same' if same else 'DIFFERS'}  {skeleton} {item}  {new.get(item)}")
    what = f"{opts.backend}/{opts.precision}, {opts.steps} steps"
    if differ:
        sys.exit(f"{differ} item(s) differ ({what})")
    print(f"all outputs bit-identical ({what})")


if __name__ == "__main__":
    main()
