"""Model folders by name or path, and the family each one belongs to (model.json "format").

load_model("fsq")          # the shipped FSQ family (python/codecspec/models/fsq)
load_model()               # the default: reference model v3 (it says the text)
load_model("reference")    # reference v1 (the repository's models/reference; not in the wheel)
load_model("v2")           # reference model v2 (the repository's models/v2; not in the wheel)
load_model("v3")           # the shipped reference model v3 (python/codecspec/models/v3; the v2
                           # family's runtime, told espeak-ng's phoneme timing)
load_model("/path/to/dir") # whichever family the folder's model.json names

The table behind it is `codecspec.pipeline.registry` (one for every place that picks a
family); this module keeps the names it always had.
"""

from __future__ import annotations

from codecspec.pipeline import registry as _registry
from codecspec.pipeline.registry import DEFAULT_MODEL, MODEL_NAMES, resolve_model_dir

__all__ = ["MODEL_NAMES", "DEFAULT_MODEL", "resolve_model_dir", "model_family", "load_model"]


def __getattr__(name):
    if name == "FAMILIES":  # model.json "format" -> family name, as this module once listed
        return _registry.formats()
    raise AttributeError(name)


def model_family(name_or_dir=None) -> str:
    """ "reference", "fsq" or "v2", from model.json's "format". Raises ValueError naming `model`."""
    return _registry.family_of(name_or_dir, detect=False).name


def load_model(name_or_dir=None, **kwargs):
    """`ReferenceTTS`, `FSQTTS` or `V2TTS` for a name or folder; kwargs go to the
    constructor. A broken folder is a `ModelLoadError` naming the file."""
    d = resolve_model_dir(name_or_dir)
    model = _registry.family_of(d, detect=False).load("model")
    with _registry.loading(d):
        return model(d, **kwargs)
