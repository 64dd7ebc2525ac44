"""The one decision for `auto`: speculate only where this device's calibration measured that
it pays.

The format. Every calibration command writes its decision as one small JSON document
(`write_decision`):

    {"format": "codecspec-decision/1", "speculate": true, "why": "...",
     "measured": {...the speed-ups / calls that decided it...},
     "device": {...cpu model, SIMD flags, threads, provider...}}

Where it lives. `decision.json` in the folder that was calibrated; a folder holding several
calibrations tags the name the way it tags its other calibration files: the shared depth
decoder's is `depth_shared.decision.json` (beside `depth_shared.tree.json`), a Qwen3-TTS int8
calibration's `decision.int8.json` (beside `tree.int8.json`). `decision_files` is the one
place that spells this out; every family, the engine and the bench read through
`read_decision` / `speculation_pays`.

Older folders. Before this format the decision was a key of the file each calibration
command wrote: `device_profile.json` (`"speculation_pays"`, the reference, v2, v3 families;
the shipped model folders) and `speculation.json` (`"speculate"`, Qwen3-TTS, tagged per
precision like the rest). Where no decision.json exists, `read_decision` reads those (same
tags), so an old folder decides as it always did.

No file: `auto` decodes AR, the safe side, since speculation whose drafts are not accepted
costs more than it saves. A file that exists but cannot be read as a decision (not JSON, no
decision in it, a value of the wrong type, an unknown format version) raises ValueError
naming the file: a silent AR would hide a broken calibration as "speculation does not pay".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

__all__ = [
    "DECISION_FILE",
    "DECISION_FORMAT",
    "LEGACY_KEYS",
    "Decision",
    "auto_mode",
    "decision_files",
    "read_decision",
    "speculation_pays",
    "write_decision",
]

DECISION_FORMAT = "codecspec-decision/1"
DECISION_FILE = "decision.json"
# The older files, by the stem of their name, and the key each kept the decision under.
LEGACY_KEYS = {"device_profile": "speculation_pays", "speculation": "speculate"}
_STEMS = ("decision", *LEGACY_KEYS)

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class Decision:
    """A calibration's decision. `source`: the file it was read from (None: no calibration,
    the AR default)."""

    speculate: bool
    why: str
    measured: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)
    source: Optional[Path] = None

    @property
    def mode(self) -> str:
        """What `auto` runs under this decision: "spec" or "ar"."""
        return auto_mode("auto", self.speculate)

    def to_dict(self) -> dict:
        return {
            "format": DECISION_FORMAT,
            "speculate": self.speculate,
            "why": self.why,
            "measured": dict(self.measured),
            "device": dict(self.device),
        }


def decision_files(path: PathLike) -> tuple:
    """Where the decision for `path` may live, in the order `read_decision` tries them.

    A folder: its decision.json, then the older device_profile.json and speculation.json.
    A file named after any of the three (tags kept: `depth_shared.device_profile.json`,
    `speculation.int8.json`): the decision.json of the same tags, then the older names with
    those tags (the file itself among them). Any other file: that file alone."""
    p = Path(path)
    if p.is_dir():
        return tuple(p / f"{stem}.json" for stem in _STEMS)
    parts = p.name.split(".")
    at = next((i for i, part in enumerate(parts[:-1]) if part in _STEMS), None)
    if at is None:
        return (p,)
    return tuple(p.with_name(".".join(parts[:at] + [s] + parts[at + 1 :])) for s in _STEMS)


def read_decision(path: Optional[PathLike]) -> Decision:
    """The decision for `path` (a folder or one of its calibration files, see
    `decision_files`): the first of its files that exists, in the one format or an older
    one; AR when none exists. ValueError naming the file when it holds no readable
    decision."""
    if path is not None:
        for f in decision_files(path):
            if f.is_file():
                return _parse(f, _load(f))
    return Decision(False, "no calibration here: `auto` decodes AR", source=None)


def speculation_pays(path: Optional[PathLike]) -> bool:
    """What the calibration at `path` decided (False where there is none)."""
    return read_decision(path).speculate


def write_decision(
    path: PathLike,
    *,
    speculate: bool,
    why: str,
    measured: Optional[dict] = None,
    device: Optional[dict] = None,
) -> Decision:
    """Writes a decision in the one format to `path` (a folder: its decision.json), replacing
    the file in one rename so that a reader never sees half of it; returns it as read back."""
    dst = Path(path)
    if dst.is_dir():
        dst = dst / DECISION_FILE
    doc = Decision(bool(speculate), str(why), dict(measured or {}), dict(device or {}))
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text(json.dumps(doc.to_dict(), indent=1) + "\n")
    tmp.replace(dst)
    return read_decision(dst)


def auto_mode(mode: str, pays: bool) -> str:
    """`mode` with "auto" resolved: "spec" where speculation pays here, else "ar"."""
    if mode != "auto":
        return mode
    return "spec" if pays else "ar"


def _bad(f: Path, what: str) -> ValueError:
    return ValueError(
        f"{f}: {what}; run the calibration again (`codecspec calibrate`), or delete the file "
        "to decode `auto` as AR"
    )


def _load(f: Path) -> dict:
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(f, f"not a JSON calibration decision ({e})") from None
    if not isinstance(doc, dict):
        raise _bad(f, f"expected a JSON object, got {type(doc).__name__}")
    return doc


def _parse(f: Path, doc: dict) -> Decision:
    """One document of either generation as a Decision."""
    fmt = doc.get("format")
    if isinstance(fmt, str) and fmt.startswith("codecspec-decision/"):
        if fmt != DECISION_FORMAT:
            raise _bad(f, f"decision format {fmt!r} is not {DECISION_FORMAT!r}")
        return _parse_current(f, doc)
    for key in LEGACY_KEYS.values():  # the order the older reader had
        if key in doc:
            return _parse_legacy(f, doc, key)
    keys = ", ".join(repr(k) for k in ("format", *LEGACY_KEYS.values()))
    raise _bad(f, f"holds no decision (none of {keys})")


def _flag(f: Path, doc: dict, key: str) -> bool:
    value = doc[key]
    if not isinstance(value, bool):
        raise _bad(f, f"{key!r} must be true or false, got {value!r}")
    return value


def _parse_current(f: Path, doc: dict) -> Decision:
    if "speculate" not in doc:
        raise _bad(f, "holds no 'speculate'")
    why, measured, device = doc.get("why", ""), doc.get("measured", {}), doc.get("device", {})
    if not isinstance(why, str):
        raise _bad(f, f"'why' must be a string, got {why!r}")
    for name, value in (("measured", measured), ("device", device)):
        if not isinstance(value, dict):
            raise _bad(f, f"{name!r} must be an object, got {value!r}")
    return Decision(_flag(f, doc, "speculate"), why, measured, device, f)


# What an older file kept beside its decision, carried into `measured` / `device` so that
# both generations answer the same questions.
_LEGACY_MEASURED = (
    "chosen_budget",
    "simulated_speedup",
    "predicted_speedup",
    "simulated_tokens_per_call",
    "tokens_per_call",
    "measured_speedup",
)
_LEGACY_DEVICE = ("cpu_model", "cpu_count", "threads", "provider", "platform")


def _parse_legacy(f: Path, doc: dict, key: str) -> Decision:
    speculate = _flag(f, doc, key)
    measured = {k: doc[k] for k in _LEGACY_MEASURED if k in doc}
    device = {k: doc[k] for k in _LEGACY_DEVICE if k in doc}
    why = f"{f.name}'s {key!r} (a calibration from before {DECISION_FORMAT})"
    return Decision(speculate, why, measured, device, f)
