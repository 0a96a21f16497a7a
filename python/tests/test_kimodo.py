"""kinema.Kimodo against `kinema generate` on the tiny model: the same arrays, bit for bit."""

import numpy as np
import pytest

import kinema
from conftest import assert_same_arrays, embedding_of, run_cli

FRAMES, STEPS = 24, 4


@pytest.fixture(scope="module")
def model(kimodo_path):
    return kinema.Kimodo(kinema.Engine(backend="cpu"), kimodo_path)


def cli_generate(cli, model_path, tmp_path, emb, *extra):
    e = tmp_path / "embedding.npy"
    np.save(e, emb[None, :])
    out = tmp_path / "motion.npz"
    r = run_cli(
        cli, "generate", "--model", model_path, "--embedding", e, "--frames", FRAMES,
        "--steps", STEPS, "--backend", "cpu", "--quiet", *extra, "-o", out,
    )
    assert r.returncode == 0, r.stderr
    return np.load(out)


@pytest.mark.parametrize("diagnostics", [False, True])
def test_generate_equals_the_cli(model, kimodo_path, cli, tmp_path, diagnostics):
    emb = embedding_of(model.embedding_dim)
    extra = ["--seed", 7, "--heading", 0.5, "--cfg-text", 2.5]
    if diagnostics:
        extra.append("--diagnostics")
    want = cli_generate(cli, kimodo_path, tmp_path, emb, *extra)
    got = model.generate(
        emb, FRAMES, steps=STEPS, seed=7, heading=0.5, cfg_text=2.5, diagnostics=diagnostics
    )
    assert_same_arrays(got, want)
    # Upstream's keys and dtypes (kimodo/model/kimodo_model.py#L412-420), SOMA30 -> SOMA77.
    assert got["posed_joints"].shape == (FRAMES, 77, 3)
    assert got["foot_contacts"].dtype == np.bool_
    assert got["local_rot_mats"].dtype == np.float32


def test_given_noise_equals_the_cli(model, kimodo_path, cli, tmp_path):
    emb = embedding_of(model.embedding_dim, 1.0)
    noise = np.random.default_rng(3).standard_normal((FRAMES, model.feature_dim)).astype(np.float32)
    n = tmp_path / "noise.npy"
    np.save(n, noise[None])
    want = cli_generate(cli, kimodo_path, tmp_path, emb, "--noise", n)
    assert_same_arrays(model.generate(emb, FRAMES, steps=STEPS, noise=noise), want)


def test_upstream_call_shapes_and_samples(model):
    emb = embedding_of(model.embedding_dim)
    # One prompt, no num_samples: no batch axis (upstream squeezes it).
    # post_processing defaults to False, as upstream's.
    one = model(emb, FRAMES, STEPS, seed=4)
    assert_same_arrays(one, model.generate(emb, FRAMES, steps=STEPS, seed=4, postprocess=False))
    # num_samples = 2: a batch axis; sample i from seed + i (as `kinema generate --samples`).
    two = model(emb, FRAMES, STEPS, num_samples=2, cfg_weight=[2.0, 2.0], seed=4)
    second = model.generate(emb, FRAMES, steps=STEPS, seed=5, postprocess=False)
    assert sorted(two) == sorted(one)
    for k, v in two.items():
        assert v.shape == (2,) + one[k].shape
        assert v[0].tobytes() == one[k].tobytes(), k
        assert v[1].tobytes() == second[k].tobytes(), k
    # [B, D] features: one sample per row.
    rows = np.stack([emb, embedding_of(model.embedding_dim, 2.0)])
    batch = model(rows, [FRAMES, FRAMES], STEPS, seed=4)
    other = model.generate(rows[1], FRAMES, steps=STEPS, seed=5, postprocess=False)
    assert batch["posed_joints"][1].tobytes() == other["posed_joints"].tobytes()
    # Regular guidance with weight w is separated guidance with text weight w.
    reg = model(emb, FRAMES, STEPS, cfg_type="regular", cfg_weight=3.0, seed=4)
    sep = model.generate(emb, FRAMES, steps=STEPS, seed=4, cfg_text=3.0, postprocess=False)
    assert_same_arrays(reg, sep)


def test_outputs_are_writable_numpy_arrays_not_copies_of_a_shared_buffer(model):
    out = model.generate(embedding_of(model.embedding_dim), FRAMES, steps=1)
    for v in out.values():
        assert isinstance(v, np.ndarray) and v.flags.c_contiguous
    assert not np.shares_memory(out["posed_joints"], out["global_rot_mats"])


def test_bad_arguments_raise_with_the_rust_message(model, kimodo_path, cli, tmp_path):
    emb = embedding_of(model.embedding_dim)
    with pytest.raises(kinema.InvalidArgumentError) as e:
        model.generate(emb, 1, steps=STEPS)
    assert isinstance(e.value, ValueError) and isinstance(e.value, RuntimeError)
    assert str(e.value).startswith("invalid argument: GenerateRequest.frames = 1: expected 2 to ")
    with pytest.raises(ValueError, match=r"GenerateRequest.steps = 0"):
        model.generate(emb, FRAMES, steps=0)
    with pytest.raises(ValueError, match=r"embedding has shape \[3\]"):
        model.generate(np.zeros(3, np.float32), FRAMES)
    with pytest.raises(ValueError, match="expected floats"):
        model.generate(np.zeros(model.embedding_dim, np.int32), FRAMES)
    with pytest.raises(ValueError, match="unknown backend \"gpu\": expected cpu, vulkan or auto"):
        kinema.Engine(backend="gpu")
    with pytest.raises(ValueError, match="threads = 2 applies to the CPU backend"):
        kinema.Engine(backend="vulkan", threads=2)
    with pytest.raises(TypeError, match="takes text features, not prompts"):
        model("A person walks forward.", FRAMES, STEPS)
    with pytest.raises(ValueError, match="cfg_type=\"nocfg\""):
        model(emb, FRAMES, STEPS, cfg_type="nocfg")
    # A file that is not a model: the same message as the command line's.
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGUF but not really")
    with pytest.raises(kinema.KinemaError) as e:
        kinema.Kimodo(kinema.Engine(backend="cpu"), bad)
    np.save(tmp_path / "e.npy", emb[None, :])
    r = run_cli(cli, "generate", "--model", bad, "--embedding", tmp_path / "e.npy",
                "--frames", FRAMES, "--backend", "cpu", "--quiet", "-o", tmp_path / "x.npz")
    assert r.returncode != 0
    assert str(e.value) in r.stderr


def test_progress_reports_and_cancels(model):
    emb = embedding_of(model.embedding_dim)
    seen = []
    model.generate(emb, FRAMES, steps=STEPS, progress=lambda *a: seen.append(a))
    assert seen == [("sample", i, STEPS) for i in range(1, STEPS + 1)] + [("decode", 1, 1)]

    def stop_at_two(stage, step, total):
        return not (stage == "sample" and step == 2)

    with pytest.raises(kinema.Cancelled, match=r"cancelled: .* \(at sample step 2 of 4\)"):
        model.generate(emb, FRAMES, steps=STEPS, progress=stop_at_two)

    class Boom(Exception):
        pass

    def boom(stage, step, total):
        raise Boom(step)

    with pytest.raises(Boom):
        model.generate(emb, FRAMES, steps=STEPS, progress=boom)
    # The model is unharmed by the cancels.
    again = model.generate(emb, FRAMES, steps=STEPS)
    assert_same_arrays(again, model.generate(emb, FRAMES, steps=STEPS))


def test_load_model_is_upstreams_entry_point(kimodo_path):
    m = kinema.load_model(kimodo_path, engine=kinema.Engine(backend="cpu"))
    assert isinstance(m, kinema.Kimodo) and m.skeleton == "soma30" and m.fps == 30.0


def test_vulkan_equals_the_cli(kimodo_path, cli, tmp_path):
    from conftest import vulkan_engine

    model = kinema.Kimodo(vulkan_engine(), kimodo_path)
    emb = embedding_of(model.embedding_dim)
    e = tmp_path / "embedding.npy"
    np.save(e, emb[None, :])
    out = tmp_path / "motion.npz"
    r = run_cli(cli, "generate", "--model", kimodo_path, "--embedding", e, "--frames", FRAMES,
                "--steps", STEPS, "--seed", 3, "--backend", "vulkan", "--quiet", "-o", out)
    assert r.returncode == 0, r.stderr
    assert_same_arrays(model.generate(emb, FRAMES, steps=STEPS, seed=3), np.load(out))


def test_multi_prompt_equals_the_cli_timeline(model, kimodo_path, cli, tmp_path):
    """Upstream's `multi_prompt=True`: the features are consecutive segments of one motion,
    as `kinema generate --embedding A --frames 16 --embedding B --frames 14` stitches them."""
    a, b = embedding_of(model.embedding_dim, 0.3), embedding_of(model.embedding_dim, 1.7)
    args = []
    for i, (e, f) in enumerate(((a, 16), (b, 14))):
        path = tmp_path / f"segment{i}.npy"
        np.save(path, e[None, :])
        args += ["--embedding", path, "--frames", f]
    out = tmp_path / "stitched.npz"
    r = run_cli(
        cli, "generate", "--model", kimodo_path, *args, "--steps", STEPS, "--seed", 3,
        "--backend", "cpu", "--no-postprocess", "--quiet", "-o", out,
    )
    assert r.returncode == 0, r.stderr
    want = np.load(out)
    got = model(np.stack([a, b]), [16, 14], STEPS, multi_prompt=True, seed=3)
    assert got["posed_joints"].shape == (30, 77, 3)
    assert_same_arrays(got, want)
    # One prompt with multi_prompt=True is the plain call (upstream's CLI always sets it).
    assert_same_arrays(model(a, 16, STEPS, multi_prompt=True, seed=3), model(a, 16, STEPS, seed=3))
    with pytest.raises(kinema.InvalidArgumentError, match="one per segment"):
        model(np.stack([a, b]), [16, 14, 12], STEPS, multi_prompt=True)
    with pytest.raises(kinema.InvalidArgumentError, match="stitches one motion"):
        model(np.stack([a, b]), [16, 14], STEPS, multi_prompt=True, num_samples=2)
