"""One rule for `auto`: speculate only where this device's calibration measured that it pays.

Two files carry that measurement, one per generation of the calibration command:
`device_profile.json` (the reference families: `"speculation_pays"`) and `speculation.json`
(Qwen3-TTS folders, per weight precision: `"speculate"`). Both are read here, by every
family, the engine and the bench. Where a folder holds no measurement, `auto` decodes AR: the
safe side, since speculation that is not accepted costs more than it saves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union

__all__ = ["DECISION_KEYS", "speculation_pays", "auto_mode"]

DECISION_KEYS = ("speculation_pays", "speculate")  # device_profile.json, speculation.json


def speculation_pays(path: Union[str, Path, None]) -> bool:
    """What the calibration file at `path` decided (False when there is none, or it holds
    no decision)."""
    if path is None or not Path(path).is_file():
        return False
    doc = json.loads(Path(path).read_text())
    for key in DECISION_KEYS:
        if key in doc:
            return bool(doc[key])
    return False


def auto_mode(mode: str, pays: bool) -> str:
    """`mode` with "auto" resolved: "spec" where speculation pays here, else "ar"."""
    if mode != "auto":
        return mode
    return "spec" if pays else "ar"
