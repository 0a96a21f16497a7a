"""examples/python/ray_generate.py on a local Ray cluster of two CPU workers and the tiny
model: a partial run, then a rerun that writes only the missing (or broken) clips, every clip
equal to a direct kinema call. Skipped without Ray unless KINEMA_REQUIRE_RAY=1."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import kinema
from conftest import ROOT, embedding_of

SCRIPT = ROOT / "examples" / "python" / "ray_generate.py"
FRAMES, STEPS, CLIPS = 16, 3, 5

try:
    import ray

    # Not a stray `ray/` folder in the working directory (Ray's own /tmp/ray, for one).
    HAVE_RAY = hasattr(ray, "remote")
except ImportError:
    HAVE_RAY = False
if not HAVE_RAY and os.environ.get("KINEMA_REQUIRE_RAY") == "1":
    raise ImportError("KINEMA_REQUIRE_RAY=1 but ray cannot be imported (pip install ray)")

pytestmark = pytest.mark.skipif(
    not HAVE_RAY, reason="ray is not installed (pip install ray; KINEMA_REQUIRE_RAY=1 fails instead)"
)


def run(model, embeddings, out, *extra):
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(model), "--embeddings", str(embeddings),
         "--out", str(out), "--frames", str(FRAMES), "--steps", str(STEPS), "--seed", "10",
         "--backend", "cpu", "--num-cpus", "2", "--workers", "2", "--threads-per-worker", "1",
         *extra],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_fans_out_and_resumes(kimodo_path, tmp_path):
    model = kinema.Kimodo(kinema.Engine(backend="cpu"), kimodo_path)
    emb = np.stack([embedding_of(model.embedding_dim, i) for i in range(CLIPS)])
    e = tmp_path / "embeddings.npy"
    np.save(e, emb)
    out = tmp_path / "clips"

    # A partial run (as if stopped after two clips).
    log = run(kimodo_path, e, out, "--max-clips", "2")
    assert f"{CLIPS} clips: 0 already done, 2 to generate" in log
    assert sorted(p.name for p in out.iterdir()) == ["clip_00000.npz", "clip_00001.npz"]
    done = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    # A broken clip (as a copy interrupted outside this script would leave) is made again.
    (out / "clip_00004.npz").write_bytes(b"PK\x03\x04 truncated")

    log = run(kimodo_path, e, out)
    assert f"{CLIPS} clips: 2 already done, 3 to generate" in log
    assert "worker: kinema.Engine(backend=\"cpu\"" in log
    assert sorted(p.name for p in out.iterdir()) == [f"clip_{i:05d}.npz" for i in range(CLIPS)]
    for p, mtime in done.items():
        assert p.stat().st_mtime_ns == mtime, f"{p.name} was rewritten"
    for i in range(CLIPS):
        want = model.generate(emb[i], FRAMES, steps=STEPS, seed=10 + i)
        with np.load(out / f"clip_{i:05d}.npz") as got:
            assert sorted(got.keys()) == sorted(want)
            for k, v in want.items():
                assert got[k].tobytes() == v.tobytes(), (i, k)

    # Nothing left: no cluster is started.
    log = run(kimodo_path, e, out)
    assert f"{CLIPS} clips: {CLIPS} already done, 0 to generate" in log
    assert "worker:" not in log
