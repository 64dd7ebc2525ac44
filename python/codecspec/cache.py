"""Where codecspec keeps what it builds or assembles (Qwen3-TTS graphs, the speech decoder's
graph, the Whisper weights): one root for every part of the package."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """$CODECSPEC_CACHE_DIR (or its older spelling $CODECSPEC_CACHE), else
    $XDG_CACHE_HOME/codecspec, else ~/.cache/codecspec."""
    env = os.environ.get("CODECSPEC_CACHE_DIR") or os.environ.get("CODECSPEC_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "codecspec"
