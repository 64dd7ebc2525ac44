"""Where named models live.

The wheel carries the default model (v3) and the FSQ model inside the package
(`codecspec/models/`). The other reference models (v1 `reference`, `v2`) are not installed:
they stay in the source repository's `models/` folder, where the recipes, tests and benchmarks
use them. A name is looked up in, first to last:

1. each folder of ``CODECSPEC_MODEL_PATH`` (``os.pathsep``-separated; a folder holding
   ``<name>/model.json``);
2. the package's own ``codecspec/models/``;
3. ``models/`` of the source checkout the package is imported from (an editable install).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PACKAGE_MODELS", "search_path", "named_model_dir", "MissingModelError"]

PACKAGE_MODELS = Path(__file__).resolve().with_name("models")
_CHECKOUT_MODELS = PACKAGE_MODELS.parents[2] / "models"


class MissingModelError(ValueError):
    """A named model is neither installed nor on the model search path."""


def search_path() -> list:
    """The folders a model name is looked up in, in order."""
    env = os.environ.get("CODECSPEC_MODEL_PATH", "")
    dirs = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return dirs + [PACKAGE_MODELS, _CHECKOUT_MODELS]


def named_model_dir(name: str, *, must_exist: bool = False) -> Path:
    """The folder of the model called `name`: the first search-path entry with
    ``<name>/model.json``. When none has it: the package's folder (which does not exist), or,
    with `must_exist`, a MissingModelError naming `model` and saying where to get it."""
    for root in search_path():
        d = root / name
        if (d / "model.json").is_file():
            return d
    if must_exist:
        raise MissingModelError(
            f"model: {name!r} is not installed with this package (the wheel ships the default "
            "model v3, fsq and fsq-aligned); it lives in the source repository's "
            "models/ folder: pass "
            f"--model path/to/models/{name}, or set CODECSPEC_MODEL_PATH=path/to/models"
        )
    return PACKAGE_MODELS / name
