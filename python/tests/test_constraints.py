"""Constraints and post-processing through kinema.Kimodo against `kinema generate
--constraints` on the tiny model: the same arrays, bit for bit, whether the constraints are a
path, JSON text or a list of dicts; upstream's `constraint_lst` and `post_processing`; bad
constraints raise with the command line's message."""

import json

import numpy as np
import pytest

import kinema
from conftest import assert_same_arrays, embedding_of, run_cli

FRAMES, STEPS = 16, 3


def fullbody(frame, x, joints=30):
    """A full-body keyframe of the tiny SOMA30 skeleton, its root at (x, 0.9, 0.3)."""
    return {
        "type": "fullbody",
        "frame_indices": [frame],
        "local_joints_rot": [[[0.01 * j, 0.0, -0.02 * j] for j in range(joints)]],
        "root_positions": [[x, 0.9, 0.3]],
    }


CONSTRAINTS = [
    {
        "type": "root2d",
        "frame_indices": [0, 4, 8],
        "smooth_root_2d": [[0, 0], [0.2, 0.1], [0.5, 0.2]],
        "global_root_heading": [[1, 0], [1, 0], [0.9, 0.43589]],
    },
    fullbody(6, 0.4),
]


@pytest.fixture(scope="module")
def model(kimodo_path):
    return kinema.Kimodo(kinema.Engine(backend="cpu", precision="strict"), kimodo_path)


def cli_generate(cli, model_path, tmp_path, emb, *extra):
    e = tmp_path / "embedding.npy"
    np.save(e, emb[None, :])
    out = tmp_path / "motion.npz"
    r = run_cli(
        cli, "generate", "--model", model_path, "--embedding", e, "--frames", FRAMES,
        "--steps", STEPS, "--seed", 5, "--backend", "cpu", "--precision", "strict", "--quiet",
        *extra, "-o", out,
    )
    assert r.returncode == 0, r.stderr
    return np.load(out)


@pytest.mark.parametrize("diagnostics", [False, True])
def test_constraints_equal_the_cli(model, kimodo_path, cli, tmp_path, diagnostics):
    emb = embedding_of(model.embedding_dim)
    path = tmp_path / "constraints.json"
    path.write_text(json.dumps(CONSTRAINTS))
    extra = ["--constraints", path] + (["--diagnostics"] if diagnostics else [])
    want = cli_generate(cli, kimodo_path, tmp_path, emb, *extra)
    if diagnostics:
        assert "constraint_mask" in want and want["root_stage_step0"].shape[0] == 3
    # A path (str or pathlib), the JSON text, a list of dicts (numpy arrays inside too).
    as_numpy = [dict(c, frame_indices=np.array(c["frame_indices"])) for c in CONSTRAINTS]
    for given in (path, str(path), path.read_text(), CONSTRAINTS, as_numpy):
        got = model.generate(
            emb, FRAMES, steps=STEPS, seed=5, diagnostics=diagnostics, constraints=given
        )
        assert_same_arrays(got, want)
    # The keyframe's root is pinned by the post-processing.
    r = want["root_positions"][6]
    assert abs(r[0] - 0.4) < 1e-3 and abs(r[2] - 0.3) < 1e-3, r


def test_postprocess_off_equals_no_postprocess(model, kimodo_path, cli, tmp_path):
    emb = embedding_of(model.embedding_dim, 1.0)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CONSTRAINTS))
    want = cli_generate(cli, kimodo_path, tmp_path, emb, "--constraints", path, "--no-postprocess")
    got = model.generate(emb, FRAMES, steps=STEPS, seed=5, constraints=CONSTRAINTS,
                         postprocess=False)
    assert_same_arrays(got, want)
    plain = cli_generate(cli, kimodo_path, tmp_path, emb, "--no-postprocess")
    assert_same_arrays(model.generate(emb, FRAMES, steps=STEPS, seed=5, postprocess=False), plain)


def test_upstream_call_takes_constraint_lst_and_post_processing(model):
    emb = embedding_of(model.embedding_dim)
    for post in (False, True):
        got = model(emb, FRAMES, STEPS, constraint_lst=CONSTRAINTS, post_processing=post, seed=5)
        want = model.generate(emb, FRAMES, steps=STEPS, seed=5, constraints=CONSTRAINTS,
                              postprocess=post)
        assert_same_arrays(got, want)
    # Two samples: each constrained, sample i from seed + i.
    two = model(emb, FRAMES, STEPS, constraint_lst=CONSTRAINTS, num_samples=2, seed=5,
                post_processing=True)
    second = model.generate(emb, FRAMES, steps=STEPS, seed=6, constraints=CONSTRAINTS)
    assert two["posed_joints"][1].tobytes() == second["posed_joints"].tobytes()
    # An empty list is no constraints.
    assert_same_arrays(model(emb, FRAMES, STEPS, constraint_lst=[], seed=5),
                       model(emb, FRAMES, STEPS, seed=5))
    with pytest.raises(ValueError, match=r"cfg_type=\"regular\" with constraint_lst"):
        model(emb, FRAMES, STEPS, constraint_lst=CONSTRAINTS, cfg_type="regular", cfg_weight=2.0)


def test_bad_constraints_raise_the_cli_message(model, kimodo_path, cli, tmp_path):
    emb = embedding_of(model.embedding_dim)
    for text, needle in [
        ("[{", "constraints: not valid JSON"),
        ('[{"type": "waypoint", "frame_indices": [0]}]', "entry 0 (waypoint): unknown constraint type"),
    ]:
        with pytest.raises(kinema.InvalidArgumentError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            model.generate(emb, FRAMES, steps=STEPS, constraints=text)
    with pytest.raises(ValueError, match=r"NaN is not a finite number"):
        model.generate(emb, FRAMES, steps=STEPS, constraints=[
            {"type": "root2d", "frame_indices": [0], "smooth_root_2d": [[float("nan"), 0]]}])
    with pytest.raises(TypeError, match="is not JSON"):
        model.generate(emb, FRAMES, steps=STEPS, constraints=[{"type": "root2d", "x": object()}])
    with pytest.raises(ValueError, match=r"GenerateRequest.cfg_rows = 2 with constraints"):
        model.generate(emb, FRAMES, steps=STEPS, cfg_rows=2, constraints=CONSTRAINTS)
    # What fits no model: a frame past the end, 31 joints. The file's message is the CLI's.
    np.save(tmp_path / "e.npy", emb[None, :])
    for i, (entries, needle) in enumerate([
        ([fullbody(FRAMES, 0.0)], f"entry 0 (fullbody): frame {FRAMES} is outside the motion's"),
        ([fullbody(0, 0.0, joints=31)], "local_joints_rot holds 31 joints per frame"),
    ]):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(entries))
        with pytest.raises(kinema.InvalidArgumentError) as e:
            model.generate(emb, FRAMES, steps=STEPS, constraints=path)
        assert needle in str(e.value) and str(path) in str(e.value)
        r = run_cli(cli, "generate", "--model", kimodo_path, "--embedding", tmp_path / "e.npy",
                    "--frames", FRAMES, "--steps", STEPS, "--backend", "cpu", "--quiet",
                    "--constraints", path, "-o", tmp_path / "x.npz")
        assert r.returncode != 0 and str(e.value) in r.stderr, r.stderr
    with pytest.raises(kinema.KinemaError, match="none.json"):
        model.generate(emb, FRAMES, steps=STEPS, constraints=tmp_path / "none.json")
