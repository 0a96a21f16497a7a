"""kinema from Python: Kimodo and MotionBricks on kinema's CPU and Vulkan kernels.

numpy arrays in, numpy arrays out; the GIL is released while a model runs, so models may run
from several threads at once. A sketch (README "Python" has the full example)::

    import numpy as np
    import kinema

    engine = kinema.Engine(backend="cpu", precision="strict")
    model = kinema.Kimodo(engine, "kimodo-soma-rp.gguf")
    out = model(embedding, 150, num_denoising_steps=100)  # upstream KimodoModel's call
    out["posed_joints"].shape  # (150, 77, 3)

Upstream's ``kimodo.load_model(name)`` becomes :func:`load_model` (a GGUF path) and the
prompt becomes its LLM2Vec embedding, or stays a prompt when the model has a
:class:`TextEncoder` (``load_model(path, text_encoder=...)``); ``constraint_lst`` takes
upstream's constraint objects as dicts (or a ``constraints.json`` path); the output dict has
upstream's keys, shapes and dtypes.
"""

from __future__ import annotations

import os
from typing import Optional, Union

from ._errors import Cancelled, InvalidArgumentError, KinemaError
from ._kinema import Agent, Engine, Kimodo, MotionBricks, TextEncoder, __version__

__all__ = [
    "Agent",
    "Cancelled",
    "Engine",
    "InvalidArgumentError",
    "KinemaError",
    "Kimodo",
    "MotionBricks",
    "TextEncoder",
    "__version__",
    "load_model",
]


def load_model(
    path: Union[str, "os.PathLike[str]"],
    engine: Optional[Engine] = None,
    text_encoder: Optional[TextEncoder] = None,
) -> Kimodo:
    """Loads a Kimodo GGUF (``kinema convert kimodo``) on ``engine`` (default: ``Engine()``).

    The counterpart of upstream's ``kimodo.load_model(name, device=...)``: the model is a file
    path, the device is the engine's choice. With ``text_encoder`` (a :class:`TextEncoder`)
    prompts may be given as text, as upstream's.
    """
    return Kimodo(engine if engine is not None else Engine(), path, text_encoder)
