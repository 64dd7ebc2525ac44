"""Model folders by name or path, and the family each one belongs to (model.json "format").

load_model("fsq")          # the shipped FSQ family (python/codecspec/models/fsq)
load_model()               # the default: reference model v3 (it says the text)
load_model("reference")    # the shipped RVQ reference v1 (python/codecspec/models/reference)
load_model("v2")           # the shipped reference model v2 (python/codecspec/models/v2)
load_model("v3")           # the shipped reference model v3 (python/codecspec/models/v3; the v2
                           # family's runtime, told espeak-ng's phoneme timing)
load_model("/path/to/dir") # whichever family the folder's model.json names
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["MODEL_NAMES", "resolve_model_dir", "model_family", "load_model"]

MODEL_NAMES = ("reference", "fsq", "v2", "v3")
FAMILIES = {
    "codecspec-reference-tts/1": "reference",
    "codecspec-fsq-tts/1": "fsq",
    "codecspec-v2-tts/1": "v2",
}


def resolve_model_dir(name_or_dir=None) -> Path:
    """A shipped model's folder by name, or the given folder. None = the default model:
    CODECSPEC_MODEL_DIR if set, else reference model v3 (the one a recognizer understands:
    docs/reference_model_v3.md), else v2, else v1 where a checkout lacks those folders."""
    import os

    from codecspec.tts.fsq import default_fsq_dir
    from codecspec.tts.model import default_model_dir
    from codecspec.tts.v2 import default_v2_dir, default_v3_dir

    if name_or_dir is None:
        if os.environ.get("CODECSPEC_MODEL_DIR"):
            return default_model_dir()
        for d in (default_v3_dir(), default_v2_dir()):
            if (d / "model.json").is_file():
                return d
        return default_model_dir()
    if name_or_dir == "reference":
        return default_model_dir()
    if name_or_dir == "fsq":
        return default_fsq_dir()
    if name_or_dir == "v2":
        return default_v2_dir()
    if name_or_dir == "v3":
        return default_v3_dir()
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
