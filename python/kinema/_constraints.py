"""Upstream's constraints (``constraints.json`` objects) as JSON text for the native module."""

from __future__ import annotations

import json
from typing import Any


def _plain(o: Any) -> Any:
    # numpy arrays and scalars (upstream's constraint objects hold them) as lists and numbers.
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(
        f"constraints: {type(o).__name__} is not JSON: give upstream's constraint objects as "
        "dicts of lists and numbers (or numpy arrays)"
    )


def to_json(constraints: Any) -> str:
    """A list of upstream's constraint dicts as the JSON text of a ``constraints.json``."""
    if isinstance(constraints, dict):
        constraints = [constraints]
    return json.dumps(list(constraints), default=_plain, allow_nan=True)
