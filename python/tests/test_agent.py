"""kinema.Agent against `kinema agent` on the tiny model and the synthetic clips: a script
pushed at the frames it switches commands gives the CLI's qpos bit for bit."""

import json

import numpy as np
import pytest

import kinema
from conftest import run_cli

SCRIPT = [
    {"style": "idle", "duration": 0.7},
    {"style": "walk", "duration": 1.5, "movement": [1, 0], "facing": [1, 0], "seed": 11},
    {"style": "walk", "duration": 1.2, "movement": [0, 1], "facing": [0, 1], "speed": 0.6,
     "seed": 12},
    {"style": "walk", "duration": 1.0, "movement": [0, 1], "facing": [1, 0], "seed": 13},
    {"style": "walk_zombie", "duration": 1.6,
     "waypoint": {"position": [3, 4], "heading": 1.5}, "seed": 14},
]


@pytest.fixture(scope="module")
def mb(mb_path):
    return kinema.MotionBricks(kinema.Engine(backend="cpu", precision="strict", threads=2), mb_path)


def spans(script, fps=30.0):
    """Frames each command holds, as `kinema agent` switches (`commands::at`)."""
    total = round(sum(c["duration"] for c in script) * fps)
    n = [0] * len(script)
    for tick in range(total):
        t, end = tick / fps, 0.0
        for i, c in enumerate(script):
            end += c["duration"]
            if t < end:
                break
        n[i] += 1
    return n


def push_args(c):
    a = {k: c[k] for k in ("movement", "facing", "speed", "seed") if k in c}
    if "waypoint" in c:
        a["waypoint"] = c["waypoint"]["position"]
        a["heading"] = c["waypoint"]["heading"]
    return a


@pytest.mark.parametrize("sampling", ["argmax", "gumbel"])
def test_a_pushed_script_equals_the_cli(mb, mb_path, clips_path, cli, tmp_path, sampling):
    (tmp_path / "commands.json").write_text(json.dumps({"commands": SCRIPT}))
    out = tmp_path / "run.npz"
    r = run_cli(cli, "agent", "--model", mb_path, "--clips", clips_path,
                "--commands", tmp_path / "commands.json", "--sampling", sampling,
                "--backend", "cpu", "--precision", "strict", "--threads", 2, "--quiet", "-o", out)
    assert r.returncode == 0, r.stderr
    want = np.load(out)
    agent = kinema.Agent(mb, clips_path, sampling=sampling)
    qpos, plans = [], []
    for c, n in zip(SCRIPT, spans(SCRIPT)):
        agent.push(c["style"], **push_args(c))
        got = agent.step(n)
        assert got["qpos"].shape == (n, 36) and got["qpos"].dtype == np.float32
        qpos.append(got["qpos"])
        plans += got["plans"]
    qpos = np.concatenate(qpos)
    assert qpos.shape == want["qpos"].shape
    assert qpos.tobytes() == want["qpos"].tobytes()
    assert np.isfinite(qpos).all()
    assert [p["frame"] for p in plans] == want["plan_frame"].tolist()
    assert [p["num_tokens"] for p in plans] == want["plan_num_tokens"].tolist()
    assert [p["command"] for p in plans] == want["plan_command"].tolist()
    assert any(p["style"] == "walk_left" for p in plans)
    assert agent.frames_played == len(qpos) and agent.plans_made == len(plans)


def test_poll_progress_and_errors(mb, clips_path):
    agent = kinema.Agent(mb, clips_path)
    assert "walk_zombie" in agent.styles and agent.fps == 30.0
    first = agent.poll()
    assert first["qpos"].shape == (16, 36) and [p["frame"] for p in first["plans"]] == [16]
    agent.push("walk", movement=[0, 1], seed=2)
    with pytest.raises(kinema.Cancelled):
        agent.step(40, progress=lambda stage, step, total: False)
    assert agent.frames_played == 16
    with pytest.raises(kinema.InvalidArgumentError, match="is not a style"):
        agent.push("run")
    with pytest.raises(kinema.InvalidArgumentError, match="speed is -1"):
        agent.push("walk", speed=-1.0)
    with pytest.raises(kinema.InvalidArgumentError, match="expected 2"):
        agent.push("walk", movement=[1, 0, 0])
    got = agent.poll()
    # The idle plan made at frame 16 plays 16 frames before the walk's first plan.
    assert got["first_frame"] == 16 and got["qpos"].shape == (16, 36)
    # Moving along +y while facing +x walks sideways: upstream switches to walk_left.
    assert [(p["frame"], p["style"]) for p in got["plans"]] == [(32, "walk_left")]
    with pytest.raises(kinema.KinemaError):
        kinema.Agent(mb, clips_path.parent / "no-such-clips.npz")
