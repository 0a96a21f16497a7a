"""kinema.TextEncoder against `kinema encode`, and Kimodo with a text encoder: a prompt gives
the motion of its embedding and of `kinema generate --prompt`, bit for bit."""

import numpy as np
import pytest

import kinema
from conftest import assert_same_arrays, run_cli

FRAMES, STEPS = 12, 3
PROMPTS = ["A person walks forward.", "Someone jumps twice"]


@pytest.fixture(scope="module")
def engine():
    return kinema.Engine(backend="cpu", precision="strict")


@pytest.fixture(scope="module")
def encoder(engine, text_path):
    return kinema.TextEncoder(engine, text_path)


def test_encode_equals_kinema_encode(engine, encoder, text_path, cli, tmp_path):
    got = encoder.encode(PROMPTS)
    assert got.dtype == np.float32 and got.shape == (2, encoder.dim)
    out = tmp_path / "e.npy"
    args = ["encode", "--text-model", text_path, "--backend", "cpu", "--precision", "strict",
            "--quiet", "-o", out]
    for p in PROMPTS:
        args += ["--prompt", p]
    r = run_cli(cli, *args)
    assert r.returncode == 0, r.stderr
    assert got.tobytes() == np.load(out).reshape(got.shape).tobytes()
    assert encoder.encode(PROMPTS[1]).tobytes() == got[1:].tobytes()
    off = kinema.TextEncoder(engine, text_path, chat_template="off")
    assert off.chat_template is False
    with pytest.raises(ValueError, match='chat-template "maybe": expected auto, on or off'):
        kinema.TextEncoder(kinema.Engine(backend="cpu"), text_path, chat_template="maybe")
    with pytest.raises(ValueError, match="no prompt given"):
        encoder.encode([])


def test_kimodo_from_a_prompt(engine, encoder, kimodo_path, text_path, cli, tmp_path):
    model = kinema.Kimodo(engine, kimodo_path, text_encoder=encoder)
    assert model.has_text_encoder
    emb = encoder.encode(PROMPTS[0])[0]
    got = model.generate(PROMPTS[0], FRAMES, steps=STEPS, seed=2)
    assert_same_arrays(got, model.generate(emb, FRAMES, steps=STEPS, seed=2))
    out = tmp_path / "m.npz"
    r = run_cli(cli, "generate", "--model", kimodo_path, "--text-model", text_path, "--prompt",
                PROMPTS[0], "--no-cache", "--frames", FRAMES, "--steps", STEPS, "--seed", 2,
                "--backend", "cpu", "--precision", "strict", "--quiet", "-o", out)
    assert r.returncode == 0, r.stderr
    assert_same_arrays(got, np.load(out))
    # Upstream's call with prompts: one, or a batch (sample i from seed + i).
    assert_same_arrays(model(PROMPTS[0], FRAMES, STEPS, seed=2, post_processing=True), got)
    batch = model(PROMPTS, FRAMES, STEPS, seed=2)
    second = model.generate(PROMPTS[1], FRAMES, steps=STEPS, seed=3, postprocess=False)
    assert batch["posed_joints"][1].tobytes() == second["posed_joints"].tobytes()
    # load_model with an encoder.
    m2 = kinema.load_model(kimodo_path, engine=engine, text_encoder=encoder)
    assert m2.has_text_encoder
    # Without an encoder a prompt is refused with the way out.
    plain = kinema.Kimodo(engine, kimodo_path)
    with pytest.raises(ValueError, match="no text encoder"):
        plain.generate(PROMPTS[0], FRAMES, steps=STEPS)
    with pytest.raises(TypeError, match="takes text features, not prompts"):
        plain(PROMPTS[0], FRAMES, STEPS)
