"""Progress bars without a hard dependency: tqdm when installed, a plain stderr line otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def bar(it: Iterable[T], desc: str = "", total: int | None = None, show: bool = True):
    """`it` behind a progress bar on stderr, or as it is where `show` is false (a caller's
    progress flag, passed on)."""
    return _bar(it, desc, total) if show else it


def _bar(it: Iterable[T], desc: str, total: int | None) -> Iterator[T]:
    try:
        from tqdm import tqdm

        yield from tqdm(it, desc=desc, total=total, leave=False)
        return
    except ImportError:
        pass
    total = total if total is not None else (len(it) if hasattr(it, "__len__") else None)
    start, last = time.monotonic(), 0.0
    for i, x in enumerate(it, 1):
        yield x
        now = time.monotonic()
        if now - last > 0.5 or i == total:
            last = now
            of = f"/{total}" if total else ""
            sys.stderr.write(f"\r{desc}: {i}{of} ({now - start:.1f}s)")
            sys.stderr.flush()
    sys.stderr.write("\n")
