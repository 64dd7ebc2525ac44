"""Freed heap memory back to the operating system, for a long-running server.

A request's buffers (phoneme ids, frames, vocoded chunks, encoded audio) are allocated by
whichever thread handles it: the engine's, and the app's worker threads that vocode and
encode. glibc's malloc gives each of those threads an arena of its own and keeps what is
freed in it for reuse rather than handing it back, so a server's resident memory rose after
every burst of new sizes and never came down (issue 51: 281 MiB idle, 487 MiB after the first
20-stream burst, 568 MiB after ~400 requests). `malloc_trim(0)` returns the free pages of
every arena. `HeapTrimmer` calls it from a thread of its own, at most every `every` seconds
and only after requests have been answered since the last call: it costs a few ms (tens
after a burst), which must not land inside an engine step (a frame is 80 ms).

`limit_arenas` caps the arenas themselves (glibc's M_ARENA_MAX, what MALLOC_ARENA_MAX sets
from the environment; by default 8 per core): threads then share a few arenas, whose free
memory the next request reuses instead of growing another thread's. `codecspec serve` sets 2
unless MALLOC_ARENA_MAX is set. Measured with `bench/serve_soak.py` (reference model, 4
clients, 2 minutes, ~250 mixed requests, this 2-core machine): RSS 320 MiB at start, then
408 MiB at the end with neither, 371 MiB with the trimmer alone, 375 MiB (flat after the
first 30 requests) with 2 arenas alone.

Elsewhere than glibc (macOS, musl) there is no malloc_trim / mallopt and both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import Callable, Optional

__all__ = ["HeapTrimmer", "limit_arenas", "trim"]

_M_ARENA_MAX = -8  # malloc.h


def _glibc(name: str, argtypes: list):
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = getattr(libc, name)
    except (OSError, AttributeError):  # not glibc
        return None
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


_TRIM = _glibc("malloc_trim", [ctypes.c_size_t])
_MALLOPT = _glibc("mallopt", [ctypes.c_int, ctypes.c_int])


def limit_arenas(n: int = 2) -> bool:
    """At most `n` malloc arenas for the threads that allocate from now on (glibc's
    M_ARENA_MAX); False where it cannot be set (not glibc) or MALLOC_ARENA_MAX already is
    (the environment's choice stands)."""
    import os

    if _MALLOPT is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return _MALLOPT(_M_ARENA_MAX, int(n)) == 1


def trim() -> bool:
    """Returns the heap's free pages to the system; False where malloc_trim does not exist."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


class HeapTrimmer:
    """A daemon thread that calls `trim()` every `every` seconds while `activity()` (e.g. the
    count of requests answered) has changed since its last call."""

    def __init__(self, activity: Callable[[], int], every: float = 10.0):
        self.activity, self.every = activity, float(every)
        self.trims = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> HeapTrimmer:
        if _TRIM is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="codecspec-heap", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        seen = self.activity()
        while not self._stop.wait(self.every):
            now = self.activity()
            if now != seen:
                seen = now
                trim()
                self.trims += 1
