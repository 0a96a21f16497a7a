"""Import the real upstream Kimodo package from a pinned checkout (`--upstream-root`).

Shared by `capture_kimodo.py` and `bench_kimodo_torch.py`. Nothing of upstream is copied here:
this only makes `import kimodo` work outside upstream's own environment.

* Upstream's package `__init__` files import the text encoder and the model-hub loader
  (`kimodo/__init__.py` -> `kimodo/model/load_model.py`; `kimodo/model/__init__.py` ->
  `llm2vec`, `text_encoder_api`). Their third-party packages, when they are not installed, are
  replaced in `sys.modules` by inert stubs: `huggingface_hub` (`snapshot_download`, hub
  downloads), `hydra` (`hydra.utils.instantiate`, used only by `loading.instantiate_from_dict`),
  `transformers` and `peft` (LLM2Vec text encoder), `gradio_client` (remote text encoder),
  `tqdm` (progress bars only; the callers pass their own `progress_bar`), `packaging` (LLM2Vec
  version checks). None of the modules the denoiser, diffusion, CFG, motion representation
  and skeletons need (`kimodo/model/{twostage_denoiser,backbone,diffusion,cfg,kimodo_model,
  common}.py`, `kimodo/motion_rep/`, `kimodo/skeleton/`, `kimodo/geometry.py`,
  `kimodo/tools.py`) calls into them. A stub raises if anything is ever called or instantiated.
* Required and not stubbed: torch, numpy, scipy, einops, pydantic, omegaconf (see
  `reference/requirements-upstream.txt`).
* Skeleton assets: upstream finds them at `kimodo.assets.SKELETONS_ROOT` (`kimodo/assets.py`).
  `skeleton_asset_path` reads it at call time (SOMASkeleton30.somaskel77 builds
  `SOMASkeleton77()` from it, `kimodo/skeleton/definitions.py#L239-244`), but
  `build_skeleton(nbjoints, assets_folder=SKELETONS_ROOT)` binds it as a default when
  `kimodo/skeleton/registry.py` is imported. The pinned checkout's assets are partly stored out
  of band, so `SKELETONS_ROOT` is pointed at the project's copy
  (`shared/data/upstream/kimodo/assets/skeletons`) after import, and callers pass the same
  folder as `assets_folder` to `build_skeleton` (a runtime override of the skeleton node, like
  the `checkpoint_dir` that `load_model` merges in).
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path

STUBBED_IF_MISSING = ("huggingface_hub", "hydra", "transformers", "peft", "gradio_client", "tqdm", "packaging")

DEFAULT_ASSETS = Path(__file__).resolve().parent.parent / ".." / "shared" / "data" / "upstream" / "kimodo" / "assets"


class _Inert:
    """Stand-in for any attribute of a stubbed package: usable as a base class or decorator
    target at import time, raises when actually used."""

    def __init__(self, *a, **k):
        raise RuntimeError(f"{type(self).__name__} comes from a stubbed package and cannot be used")

    def __init_subclass__(cls, **k):
        pass


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        qual = f"{self.__name__}.{name}"
        # A fresh class per attribute: subclassable (LlamaModel, PeftModel, ...), and its
        # instantiation raises.
        value = type(name, (_Inert,), {"__module__": self.__name__, "__qualname__": qual})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)
        self.used = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            self.used.add(fullname.split(".")[0])
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def import_upstream(upstream_root, assets_root=None):
    """Make `import kimodo` resolve to `upstream_root/kimodo`; returns a dict of facts for the
    fixture metadata (commit, stubbed packages, assets path)."""
    root = Path(upstream_root).resolve()
    if not (root / "kimodo" / "model" / "twostage_denoiser.py").is_file():
        sys.exit(f"--upstream-root {root}: no kimodo/model/twostage_denoiser.py there")
    assets = Path(assets_root or DEFAULT_ASSETS).resolve()
    if not (assets / "skeletons" / "somaskel30" / "joints.p").is_file():
        sys.exit(f"skeleton assets not found under {assets}/skeletons")
    missing = [r for r in STUBBED_IF_MISSING if importlib.util.find_spec(r) is None]
    finder = _StubFinder(missing)
    sys.meta_path.insert(0, finder)
    sys.path.insert(0, str(root))
    import kimodo.assets as ka

    if Path(ka.__file__).resolve().parent != root / "kimodo":
        sys.exit(f"imported kimodo from {ka.__file__}, not from {root}")
    ka.SKELETONS_ROOT = assets / "skeletons"
    importlib.import_module("kimodo")
    return {
        "upstream_root": str(root),
        "upstream_commit": upstream_commit(root),
        "stubbed_packages": sorted(missing),
        "skeleton_assets": str(assets / "skeletons"),
    }


def _blob_id(path):
    import hashlib

    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def upstream_commit(root):
    """The commit of the checkout. A git work tree answers itself. An extracted archive (as
    SESSION.md makes with `git archive`) carries no history: then every `kimodo/**/*.py` file is
    compared, by git blob id, with the tree of HEAD in the git directory named by
    KIMODO_UPSTREAM_GIT (default: the project's mirror), and that commit is returned only when
    all of them match."""
    try:
        top = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        if Path(top).resolve() == root:
            return subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    gitdir = os.environ.get("KIMODO_UPSTREAM_GIT", "/work/.mirror/nv-tlabs+kimodo/repo")
    try:
        commit = subprocess.run(
            ["git", "-C", gitdir, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        tree = subprocess.run(
            ["git", "-C", gitdir, "ls-tree", "-r", "HEAD", "kimodo"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    blobs = {}
    for line in tree.splitlines():
        info, path = line.split("\t", 1)
        blobs[path] = info.split()[2]
    ours = sorted(p for p in (root / "kimodo").rglob("*.py"))
    if not ours:
        return "unknown"
    for p in ours:
        rel = str(p.relative_to(root))
        if blobs.get(rel) != _blob_id(p):
            return f"unknown ({rel} differs from {commit})"
    return commit
