"""Reading the recipe's outputs: the corpus manifest and the encoded corpus (codes.npz).

codes.npz stores every utterance's codes concatenated in manifest order, so one int16 array
of [frames, 16] loads in one read; ``offsets`` delimits utterances.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["load_manifest", "save_codes", "load_codes"]


def load_manifest(corpus_dir) -> list[dict]:
    """Rows of ``<corpus_dir>/manifest.jsonl`` (see models/recipe/corpus.py for the fields)."""
    path = Path(corpus_dir).expanduser() / "manifest.jsonl"
    if not path.exists():
        raise ValueError(f"corpus_dir: no manifest.jsonl in {path.parent}")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def save_codes(path, ids, splits, codes, frame_rate: float) -> int:
    """Write per-utterance codes (list of [T_i, L] int arrays) as one compressed .npz."""
    ids, splits, codes = list(ids), list(splits), list(codes)
    if not len(ids) == len(splits) == len(codes):
        raise ValueError(
            f"ids, splits and codes must have the same length, got "
            f"{len(ids)}, {len(splits)}, {len(codes)}"
        )
    if codes and any(np.asarray(c).ndim != 2 for c in codes):
        raise ValueError("codes must be a list of 2-D [T, levels] arrays")
    levels = {np.asarray(c).shape[1] for c in codes}
    if len(levels) > 1:
        raise ValueError(f"codes: every utterance needs the same number of levels, got {levels}")
    allc = np.concatenate([np.asarray(c) for c in codes]) if codes else np.zeros((0, 0), np.int16)
    if allc.size and (allc.min() < 0 or allc.max() > np.iinfo(np.int16).max):
        raise ValueError("codes must lie in [0, 32767] to be stored as int16")
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in codes])]).astype(np.int64)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path,
        codes=allc.astype(np.int16),
        offsets=offsets,
        ids=np.array(ids, dtype=str),
        splits=np.array(splits, dtype=str),
        frame_rate=np.array(float(frame_rate)),
    )
    return Path(path).stat().st_size


def load_codes(path, split: str | None = None) -> dict[str, np.ndarray]:
    """{utterance id: int16 codes [T, L]}, optionally only one split ("train" / "test")."""
    with np.load(str(Path(path).expanduser()), allow_pickle=False) as z:
        missing = {"codes", "offsets", "ids", "splits"} - set(z.files)
        if missing:
            raise ValueError(f"path: {path} is not a codes file (missing {sorted(missing)})")
        codes, offsets, ids, splits = z["codes"], z["offsets"], z["ids"], z["splits"]
    return {
        str(i): codes[offsets[k] : offsets[k + 1]]
        for k, (i, s) in enumerate(zip(ids, splits))
        if split is None or s == split
    }
