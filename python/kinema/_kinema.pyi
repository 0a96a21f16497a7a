"""Type stubs of kinema's native module (kinema._kinema); import them from ``kinema``."""

import os
import pathlib
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

PathLike = Union[str, "os.PathLike[str]"]
ArrayLike = npt.ArrayLike
#: ``(stage, step, total)``; stage is "encode", "sample", "decode" or "plan". Return False to cancel
#: (the call raises kinema.Cancelled); None or True goes on. An exception raised here cancels
#: the call and propagates.
ProgressCallback = Callable[[str, int, int], Optional[bool]]

class Engine:
    """One backend (CPU kernels or one Vulkan device), shared by the models loaded on it."""

    def __init__(
        self,
        backend: Literal["auto", "cpu", "vulkan"] = "auto",
        precision: Literal["auto", "strict", "fast", "split"] = "auto",
        threads: Optional[int] = None,
        device: Optional[int] = None,
    ) -> None: ...
    @property
    def backend(self) -> str:
        """"cpu" or "vulkan"."""
    @property
    def device(self) -> str:
        """The Vulkan device's name, or the CPU's ISA."""
    @property
    def precision(self) -> str:
        """The resolved precision: "strict", "fast" or "split"."""
    @property
    def threads(self) -> int:
        """CPU threads (1 on Vulkan)."""
    @property
    def vulkan_unavailable(self) -> Optional[str]:
        """Why "auto" did not take Vulkan, when it took the CPU."""
    def info(self) -> Dict[str, Any]:
        """backend, device, precision and threads as a dict."""

#: Upstream's constraints: a ``constraints.json`` path, its JSON text, or a list of its objects
#: (dicts of lists, numbers or numpy arrays).
ConstraintsLike = Union[PathLike, str, bytes, Sequence[Dict[str, Any]]]

class TextEncoder:
    """An LLM2Vec text encoder (``kinema convert llm2vec``) on an Engine: prompts in,
    text features out."""

    def __init__(
        self,
        engine: Engine,
        path: PathLike,
        *,
        chat_template: Literal["auto", "on", "off"] = "auto",
        long_text: Literal["trim", "refuse"] = "trim",
    ) -> None: ...
    @property
    def dim(self) -> int: ...
    @property
    def chat_template(self) -> bool: ...
    @property
    def path(self) -> pathlib.Path: ...
    def encode(self, prompts: Union[str, Sequence[str]]) -> np.ndarray:
        """float32 [len(prompts), dim], one row per prompt, as ``kinema encode`` writes."""

class Kimodo:
    """A Kimodo model (``kinema convert kimodo``) on an Engine: text feature in, motion out."""

    def __init__(
        self, engine: Engine, path: PathLike, text_encoder: Optional[TextEncoder] = None
    ) -> None: ...
    @property
    def has_text_encoder(self) -> bool: ...
    @property
    def embedding_dim(self) -> int: ...
    @property
    def max_frames(self) -> int: ...
    @property
    def fps(self) -> float: ...
    @property
    def feature_dim(self) -> int: ...
    @property
    def skeleton(self) -> str: ...
    @property
    def num_base_steps(self) -> int: ...
    @property
    def path(self) -> pathlib.Path: ...
    def generate(
        self,
        embedding: Union[ArrayLike, str],
        num_frames: int,
        *,
        steps: int = 100,
        seed: int = 0,
        noise: Optional[ArrayLike] = None,
        cfg_text: Optional[float] = None,
        cfg_constraint: Optional[float] = None,
        cfg_rows: Optional[int] = None,
        heading: float = 0.0,
        diagnostics: bool = False,
        constraints: Optional[ConstraintsLike] = None,
        postprocess: bool = True,
        progress: Optional[ProgressCallback] = None,
    ) -> Dict[str, np.ndarray]:
        """One motion, the arrays of ``kinema generate``'s npz (no batch axis).

        ``embedding`` may be a prompt when the model has a text encoder. ``constraints`` are
        applied as ``kinema generate --constraints`` applies them (3 rows by default).
        """
    def __call__(
        self,
        prompts: Union[ArrayLike, str, Sequence[str]],
        num_frames: Union[int, Sequence[int]],
        num_denoising_steps: int = 100,
        multi_prompt: bool = False,
        constraint_lst: Optional[ConstraintsLike] = None,
        cfg_weight: Union[None, float, Sequence[float]] = None,
        num_samples: Optional[int] = None,
        cfg_type: Optional[Literal["separated", "regular"]] = None,
        return_numpy: bool = True,
        first_heading_angle: Union[None, float, ArrayLike] = None,
        post_processing: bool = False,
        *,
        seed: int = 0,
        noise: Optional[ArrayLike] = None,
        progress: Optional[ProgressCallback] = None,
    ) -> Dict[str, np.ndarray]:
        """Upstream KimodoModel's call with text features ([D] or [B, D]) for prompts (or
        prompts, with a text encoder).

        Sample i starts from seed + i (or noise[i]); progress runs once per sample.
        ``constraint_lst`` applies to every sample; ``post_processing`` is off by default, as
        upstream's. ``multi_prompt=True`` with several prompts (or [S, D] features): one motion
        whose segment i follows prompt i for ``num_frames[i]`` frames (an int: each), stitched
        with upstream's transitions, every segment's noise from ``seed`` (no ``noise``, one
        sample), as ``kinema generate --prompt A --frames 90 --prompt B --frames 60``.
        """

class MotionBricks:
    """A MotionBricks model (``kinema convert motionbricks``) on an Engine."""

    def __init__(self, engine: Engine, path: PathLike) -> None: ...
    @property
    def frames_per_token(self) -> int: ...
    @property
    def num_keyframes(self) -> int: ...
    @property
    def min_tokens(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def max_frames(self) -> int: ...
    @property
    def code_heads(self) -> int: ...
    @property
    def codes(self) -> int: ...
    @property
    def path(self) -> pathlib.Path: ...
    def plan(
        self,
        global_root_values: Optional[ArrayLike] = None,
        has_global_root_values: Optional[ArrayLike] = None,
        local_root_values: Optional[ArrayLike] = None,
        has_local_root_values: Optional[ArrayLike] = None,
        local_poses: Optional[ArrayLike] = None,
        has_local_poses: Optional[ArrayLike] = None,
        num_tokens: Union[None, int, ArrayLike] = None,
        allowed_pred_num_tokens: Optional[ArrayLike] = None,
        *,
        batch: Optional[int] = None,
        sampling: Literal["gumbel", "argmax"] = "gumbel",
        seed: int = 0,
        uniforms: Optional[ArrayLike] = None,
        diagnostics: bool = False,
        progress: Optional[ProgressCallback] = None,
    ) -> Dict[str, np.ndarray]:
        """One batch of plans, the arrays of ``kinema plan``'s npz with the batch axis kept."""
    def predict(
        self,
        global_root_values: ArrayLike,
        has_global_root_values: ArrayLike,
        local_root_values: ArrayLike,
        has_local_root_values: ArrayLike,
        local_poses: ArrayLike,
        has_local_poses: ArrayLike,
        num_tokens: Union[None, int, ArrayLike] = None,
        text_embeddings: None = None,
        has_text_embeddings: None = None,
        allowed_pred_num_tokens: Optional[ArrayLike] = None,
        config: Optional[Dict[str, Any]] = None,
        info: Optional[Dict[str, Any]] = None,
        *,
        seed: int = 0,
        uniforms: Optional[ArrayLike] = None,
        progress: Optional[ProgressCallback] = None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Upstream motion_inference.predict: (features [B, frames, 414], num_tokens [B])."""

class Agent:
    """The MotionBricks navigation agent: push commands, step or poll 30 fps G1 qpos frames.

    It starts idle and replans every 16 frames under the command pushed last, as
    ``kinema agent`` plays a script; ``step`` and ``poll`` release the GIL.
    """

    def __init__(
        self,
        model: MotionBricks,
        clips: PathLike,
        *,
        sampling: Literal["argmax", "gumbel"] = "argmax",
    ) -> None: ...
    def push(
        self,
        style: str,
        *,
        movement: Sequence[float] = (1.0, 0.0),
        facing: Sequence[float] = (1.0, 0.0),
        speed: Optional[float] = None,
        waypoint: Optional[Sequence[float]] = None,
        heading: float = 0.0,
        seed: int = 0,
    ) -> None:
        """Follow this command (a commands.json entry without duration) from the next frame."""
    def step(
        self, frames: int, *, progress: Optional[ProgressCallback] = None
    ) -> Dict[str, Any]:
        """``{"qpos": float32 [frames, 36], "first_frame": int, "plans": [dict, ...]}``."""
    def poll(self) -> Dict[str, Any]:
        """``step`` up to and including the next frame that plans (at most 16 frames)."""
    @property
    def frames_played(self) -> int: ...
    @property
    def plans_made(self) -> int: ...
    @property
    def fps(self) -> float: ...
    @property
    def styles(self) -> List[str]:
        """The styles the clip file holds."""
