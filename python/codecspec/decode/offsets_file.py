"""Reading a depth decoder's draft offsets (offsets.npz / .npy) and the hashes that tie them
to a model: what loading a model needs, so `decode/` reads the file itself instead of
importing calibration. `codecspec.calibrate.offsets` trains and writes them (and re-exports
these names)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["config_hash", "heads_hash", "load_offsets"]


def config_hash(config) -> str:
    """sha256 (hex, 16 chars) of the config's canonical JSON."""
    s = config.to_json() if hasattr(config, "to_json") else json.dumps(config, sort_keys=True)
    return hashlib.sha256(s.encode()).hexdigest()[:16]


def heads_hash(heads: np.ndarray) -> str:
    """sha256 (hex, 16 chars) of the frozen heads: ties offsets to the weights they fit."""
    return hashlib.sha256(np.ascontiguousarray(heads, np.float32).tobytes()).hexdigest()[:16]


def load_offsets(path, config=None, heads: Optional[np.ndarray] = None):
    """(offsets float32 [K, H], meta dict). With `config` / `heads`, a stored hash that does not
    match raises ValueError (offsets fitted to other weights give poor, though still lossless,
    drafts)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"offsets: no such file {path}")
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.ndarray):  # a bare .npy array: no metadata to check
        offsets, meta = np.ascontiguousarray(loaded, np.float32), {}
    else:
        with loaded as f:
            if "offsets" not in f.files:
                raise ValueError(f"offsets: {path} holds no `offsets` array")
            offsets = np.ascontiguousarray(f["offsets"], np.float32)
            meta = json.loads(f["meta"].tobytes().decode()) if "meta" in f.files else {}
    if offsets.ndim != 2 or not np.all(np.isfinite(offsets)):
        raise ValueError(f"offsets: {path} must hold a finite [K, H] array, got {offsets.shape}")
    if config is not None:
        if "config_hash" in meta and meta["config_hash"] != config_hash(config):
            raise ValueError(f"offsets: {path} was trained for another model config")
        want = (config.num_draft_offsets, config.hidden_size)
        if offsets.shape != want:
            raise ValueError(f"offsets: expected shape {want}, got {offsets.shape}")
    if heads is not None and "heads_hash" in meta and meta["heads_hash"] != heads_hash(heads):
        raise ValueError(f"offsets: {path} was trained on other head weights")
    return offsets, meta
