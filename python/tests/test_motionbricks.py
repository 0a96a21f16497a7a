"""kinema.MotionBricks against `kinema plan` on the tiny model: the same arrays, bit for bit."""

import numpy as np
import pytest

import kinema
from conftest import assert_same_arrays, run_cli


@pytest.fixture(scope="module")
def mb(mb_path):
    return kinema.MotionBricks(kinema.Engine(backend="cpu"), mb_path)


def inputs_for(mb, batch=1):
    """A walk to a keyframe 1.5 m ahead (examples/motionbricks.rs), as predict's arguments."""
    k = mb.num_keyframes
    g = np.zeros((batch, k, 5), np.float32)
    g[:, -1, 0] = 1.5
    has_g = np.zeros((batch, k), bool)
    has_g[:, [0, -1]] = True
    rng = np.random.default_rng(1)
    return {
        "global_root_values": g,
        "has_global_root_values": has_g,
        "local_root_values": rng.standard_normal((batch, k, 4)).astype(np.float32) * 0.1,
        "has_local_root_values": np.zeros((batch, k), bool),
        "local_poses": rng.standard_normal((batch, k, 303)).astype(np.float32) * 0.1,
        "has_local_poses": np.zeros((batch, k), bool),
        "num_tokens": np.full((batch,), mb.max_tokens + 2, np.int64),
        "allowed_pred_num_tokens": np.ones((batch, mb.max_tokens - mb.min_tokens + 1), bool),
    }


@pytest.mark.parametrize("sampling", ["argmax", "gumbel"])
def test_plan_equals_the_cli(mb, mb_path, cli, tmp_path, sampling):
    x = inputs_for(mb)
    np.savez(tmp_path / "inputs.npz", **x)
    out = tmp_path / "plan.npz"
    r = run_cli(cli, "plan", "--model", mb_path, "--inputs", tmp_path / "inputs.npz",
                "--sampling", sampling, *(["--seed", 11] if sampling == "gumbel" else []),
                "--backend", "cpu", "--quiet",
                "--diagnostics", "-o", out)
    assert r.returncode == 0, r.stderr
    want = np.load(out)
    got = mb.plan(**x, sampling=sampling, seed=11, diagnostics=True)
    # The CLI drops the batch axis of a single plan but for num_tokens; the binding keeps it,
    # as predict does.
    assert_same_arrays(got, {k: want[k] if k == "num_tokens" else want[k][None] for k in want})
    feats, n = mb.predict(
        **x, config={"pose_token_sampling_use_argmax": sampling == "argmax"}, seed=11
    )
    assert feats.tobytes() == got["features"].tobytes() and feats.shape == got["features"].shape
    assert n.tobytes() == got["num_tokens"].tobytes()


def test_defaults_and_batches(mb):
    x = inputs_for(mb, batch=2)
    two = mb.plan(**x, sampling="gumbel", seed=3)
    assert two["features"].shape == (2, mb.max_frames, 414)
    assert two["qpos"].shape == (2, mb.max_frames, 36)
    assert two["pose_tokens"].dtype == np.int64
    # Plan b of a batch draws from seed + b.
    one = mb.plan(**{k: v[1:] for k, v in x.items()}, sampling="gumbel", seed=4)
    assert one["features"][0].tobytes() == two["features"][1].tobytes()
    # Nothing given: a batch of `batch` empty requests.
    assert mb.plan(batch=3, sampling="argmax")["num_tokens"].shape == (3,)


def test_bad_arguments_raise_with_the_rust_message(mb):
    x = inputs_for(mb)
    with pytest.raises(ValueError, match=r"local_poses has shape \[1, 8, 302\], expected \[1, 8, 303\]"):
        mb.plan(**{**x, "local_poses": x["local_poses"][..., :302]})
    with pytest.raises(ValueError, match=r"sampling \"top-k\": expected \"argmax\" or \"gumbel\""):
        mb.plan(**x, sampling="top-k")
    with pytest.raises(ValueError, match=r"has_local_poses\[3\] \(flat\) = 2: expected 0 or 1"):
        mb.plan(**{**x, "has_local_poses": np.array([[0, 0, 0, 2, 0, 0, 0, 0]])})
    nan = x["global_root_values"].copy()
    nan[0, 0, 0] = np.nan
    with pytest.raises(kinema.InvalidArgumentError) as e:
        mb.plan(**{**x, "global_root_values": nan})
    assert str(e.value).startswith("invalid argument: ")
    with pytest.raises(ValueError, match=r"config\[\"num_inference_step\"\] = 4"):
        mb.predict(**x, config={"num_inference_step": 4})
    with pytest.raises(ValueError, match=r"expected 1 to 64 plans"):
        mb.plan(batch=65)


def test_progress_cancels_a_plan(mb):
    seen = []
    mb.plan(**inputs_for(mb), progress=lambda *a: seen.append(a))
    assert seen == [("plan", 0, 1), ("plan", 1, 1)]
    with pytest.raises(kinema.Cancelled, match=r"at plan step 0 of 1"):
        mb.plan(**inputs_for(mb), progress=lambda *a: False)
