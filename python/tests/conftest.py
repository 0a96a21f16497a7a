"""Shared fixtures: the tiny models (`cargo run --example tiny_models -- DIR`) and the kinema
command line, both built from the checkout this package lives in.

KINEMA_TINY_DIR: a folder that already holds the tiny models (else they are written to a
temporary folder). KINEMA_BIN: the `kinema` binary (else `cargo build --bin kinema`).
"""

import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _target_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> pathlib.Path:
    given = os.environ.get("KINEMA_TINY_DIR")
    d = pathlib.Path(given) if given else tmp_path_factory.mktemp("tiny")
    names = ("kimodo-soma30-tiny.gguf", "motionbricks-tiny.gguf", "clips.npz", "llm2vec-tiny.gguf")
    if not all((d / n).exists() for n in names):
        subprocess.run(
            ["cargo", "run", "-q", "--example", "tiny_models", "--", str(d)],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return d


@pytest.fixture(scope="session")
def kimodo_path(tiny) -> pathlib.Path:
    return tiny / "kimodo-soma30-tiny.gguf"


@pytest.fixture(scope="session")
def mb_path(tiny) -> pathlib.Path:
    return tiny / "motionbricks-tiny.gguf"


@pytest.fixture(scope="session")
def text_path(tiny) -> pathlib.Path:
    return tiny / "llm2vec-tiny.gguf"


@pytest.fixture(scope="session")
def clips_path(tiny) -> pathlib.Path:
    return tiny / "clips.npz"


@pytest.fixture(scope="session")
def cli() -> pathlib.Path:
    given = os.environ.get("KINEMA_BIN")
    if given:
        return pathlib.Path(given)
    subprocess.run(["cargo", "build", "-q", "--bin", "kinema"], cwd=ROOT, check=True)
    return _target_dir() / "debug" / "kinema"


def embedding_of(dim: int, phase: float = 0.0) -> np.ndarray:
    """A synthetic text feature of the model's width (as examples/kimodo.rs makes one)."""
    return np.sin(np.arange(dim, dtype=np.float32) * np.float32(0.37) + np.float32(phase)).astype(
        np.float32
    )


def run_cli(cli, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(cli), *map(str, args)], capture_output=True, text=True, check=False
    )


def assert_same_arrays(got: dict, want) -> None:
    """Same keys, dtypes, shapes and bits."""
    assert sorted(got) == sorted(want.keys())
    for k in want.keys():
        w = want[k]
        g = got[k]
        assert g.dtype == w.dtype, k
        assert g.shape == w.shape, k
        assert g.tobytes() == w.tobytes(), k


def vulkan_engine():
    """A Vulkan engine (lavapipe in CI), or a skip; KINEMA_REQUIRE_VULKAN=1 fails instead."""
    import kinema

    try:
        return kinema.Engine(backend="vulkan")
    except kinema.KinemaError as e:
        if os.environ.get("KINEMA_REQUIRE_VULKAN") == "1":
            raise
        pytest.skip(f"no Vulkan device ({e}); KINEMA_REQUIRE_VULKAN=1 fails instead")
