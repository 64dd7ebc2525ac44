"""Model folders by name or path, and the family each one belongs to (model.json "format").

load_model("fsq")          # the shipped FSQ family (python/codecspec/models/fsq)
load_model()               # the default: reference model v3 (it says the text)
load_model("reference")    # reference v1 (the repository's models/reference; not in the wheel)
load_model("v2")           # reference model v2 (the repository's models/v2; not in the wheel)
load_model("v3")           # the shipped reference model v3 (python/codecspec/models/v3; the v2
                           # family's runtime, told espeak-ng's phoneme timing)
load_model("/path/to/dir") # whichever family the folder's model.json names
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["MODEL_NAMES", "DEFAULT_MODEL", "resolve_model_dir", "model_family", "load_model"]

MODEL_NAMES = ("reference", "fsq", "v2", "v3")
DEFAULT_MODEL = "v3"
FAMILIES = {
    "codecspec-reference-tts/1": "reference",
    "codecspec-fsq-tts/1": "fsq",
    "codecspec-v2-tts/1": "v2",
}


def resolve_model_dir(name_or_dir=None) -> Path:
    """A named model's folder (`codecspec.model_store`: installed, or on
    CODECSPEC_MODEL_PATH), or the given folder. None = the default model, DEFAULT_MODEL
    (reference model v3, the one a recognizer understands: docs/reference_model_v3.md);
    CODECSPEC_MODEL_DIR, where set, replaces the default and "reference". A name that is not
    installed is a ValueError naming `model` and saying where to find it."""
    import os

    from codecspec.model_store import named_model_dir
    from codecspec.tts.model import default_model_dir

    env = os.environ.get("CODECSPEC_MODEL_DIR")
    if env and name_or_dir in (None, "reference"):
        return default_model_dir()
    if name_or_dir is None:
        name_or_dir = DEFAULT_MODEL
    if name_or_dir in MODEL_NAMES:
        return named_model_dir(name_or_dir, must_exist=True)
    return Path(name_or_dir)


def model_family(name_or_dir=None) -> str:
    """ "reference", "fsq" or "v2", from model.json's "format". Raises ValueError naming `model`."""
    d = resolve_model_dir(name_or_dir)
    path = d / "model.json"
    if not path.is_file():
        raise ValueError(f"model: {d} is neither a model name {MODEL_NAMES} nor a model folder")
    fmt = json.loads(path.read_text()).get("format")
    if fmt not in FAMILIES:
        raise ValueError(f"model: {d} has model format {fmt!r}; known: {sorted(FAMILIES)}")
    return FAMILIES[fmt]


def load_model(name_or_dir=None, **kwargs):
    """`ReferenceTTS`, `FSQTTS` or `V2TTS` for a name or folder; kwargs go to the
    constructor."""
    d = resolve_model_dir(name_or_dir)
    family = model_family(d)
    if family == "v2":
        from codecspec.tts.v2 import V2TTS

        return V2TTS(d, **kwargs)
    if family == "fsq":
        from codecspec.tts.fsq import FSQTTS

        return FSQTTS(d, **kwargs)
    from codecspec.tts.model import ReferenceTTS

    return ReferenceTTS(d, **kwargs)
