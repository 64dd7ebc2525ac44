"""One CPU thread budget for every ONNX Runtime session of a process.

A pipeline runs several graphs back to back (encoder, temporal LM, draft LM, depth decoder,
and in serving many streams). With per-session pools each session owns worker threads that
spin after every call, so on two cores the temporal session's spinning worker fights the depth
session's call that follows it: the depth loop inside synthesis ran 2.1-2.5x slower than the
same loop alone (docs/performance.md). onnxruntime's global thread pools give every session
the same workers, so only one pool ever spins.

The pool belongs to the process and its size is fixed once it exists (onnxruntime cannot
resize or drop it; once it exists every later session must use it). So the budget is set by
the first session, or explicitly by `configure`, and a later request for a different size is
an error rather than a silent substitution. `CODECSPEC_THREAD_POOL=session` in the
environment restores one pool per session (for comparisons only).

Turns (`compute_turn`). One pool does not stop several threads from calling it at once: each
caller computes its share of a call on its own thread beside the pool's workers, so a
serving engine's step and an audio decoder's call running together put both caller threads
and the pool's workers on the cores. Where the pool already fills the CPUs (a pool of 2 on 2
cores), that oversubscribes them: an operator's parallel section waits on a thread the
scheduler has taken away. Served Qwen3-TTS with audio on the 2-core Xeon at 2 threads, the
decoder's calls took 88 instead of 37 ms per frame beside the engine's steps, 130 ms per
frame in all against 99 for the same codes decoded after them (docs/serving.md, issue 49).
With CODECSPEC_TURNS=auto (or `set_turn_limit`) the engine's steps and the speech decoder's
calls take turns: at most `turn_limit()` threads inside them at once (CPUs - pool size + 1:
one on 2 cores at 2 threads, two at 1 thread), in the order they asked; the work and its
results stay as they were, only its order changes. Off by default: beside other processes
that take the cores (a co-tenant at a higher priority) the turns lost, 304 -> 361 ms a
frame, the process's fewer runnable threads getting less of the CPU; serving at one thread
(`codecspec serve`'s default) avoids the oversubscription without them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from typing import Optional

import onnxruntime as ort

__all__ = [
    "ThreadBudgetError",
    "available_cpus",
    "compute_turn",
    "configure",
    "per_session_pools",
    "physical_cores",
    "pool_size",
    "set_turn_limit",
    "threads_in_use",
    "turn_limit",
]

log = logging.getLogger("codecspec.runtime")
_lock = threading.Lock()
_size: Optional[int] = None  # threads of the process's shared pool once it exists


class ThreadBudgetError(ValueError):
    """A session asked for a thread count the process's shared pool cannot give it."""


def available_cpus() -> int:
    """CPUs this process may run on (affinity mask, e.g. under taskset or a container)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def physical_cores() -> int:
    # Hyper-threads do not help a memory-bound decode step; os.cpu_count counts them.
    n = available_cpus()
    try:
        import psutil  # optional

        n = min(n, psutil.cpu_count(logical=False) or n)
    except ImportError:
        pass
    return max(1, n)


def per_session_pools() -> bool:
    """True when CODECSPEC_THREAD_POOL=session asks for the old one-pool-per-session mode."""
    mode = os.environ.get("CODECSPEC_THREAD_POOL", "shared").strip().lower()
    if mode not in ("shared", "session"):
        raise ValueError(f"CODECSPEC_THREAD_POOL: expected 'shared' or 'session', got {mode!r}")
    return mode == "session"


def check_threads(threads, name: str = "threads") -> Optional[int]:
    """None or an int in [1, available_cpus()]; anything else raises ValueError naming it."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise ValueError(f"{name}: expected an integer >= 1 or None, got {threads!r}")
    if threads < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {threads}")
    cpus = available_cpus()
    if threads > cpus:
        raise ThreadBudgetError(
            f"{name}: asked for {threads} threads, but this process may run on only {cpus} "
            f"CPU(s); pass {name}={cpus} or fewer"
        )
    return threads


def configure(threads: Optional[int] = None) -> int:
    """Creates the process's shared pool with `threads` intra-op threads (default: the
    physical cores), or checks that the existing one has that size. Returns its size.

    Raises ThreadBudgetError when the pool already exists with another size."""
    global _size
    threads = check_threads(threads)
    if per_session_pools():
        return threads or physical_cores()
    with _lock:
        if _size is None:
            n = threads or physical_cores()
            try:
                # inter-op size 1 = no inter-op pool: every graph here runs sequentially.
                ort.set_global_thread_pool_sizes(n, 1)
            except Exception as e:  # onnxruntime's Fail: the environment already has pools
                raise ThreadBudgetError(
                    f"threads: the onnxruntime environment of this process already has "
                    f"thread pools that codecspec did not create ({e})"
                ) from e
            _size = n
            log.info("shared onnxruntime thread pool: %d intra-op thread(s)", n)
        elif threads is not None and threads != _size:
            raise ThreadBudgetError(
                f"threads: this process's shared onnxruntime pool has {_size} thread(s) and "
                f"cannot be resized; asked for {threads}. Pass threads={_size} or None, or "
                f"run the pipeline in its own process"
            )
        return _size


def threads_in_use(requested: Optional[int] = None) -> int:
    """Intra-op threads this process's sessions run with: the shared pool's size, or (with
    CODECSPEC_THREAD_POOL=session) what each session was given."""
    if per_session_pools():
        return check_threads(requested) or physical_cores()
    return _size or configure(requested)


def pool_size() -> Optional[int]:
    """Threads of the shared pool, or None while no session has created it."""
    return _size


# ---------------------------------------------------------------------- turns
_turn_override: Optional[int] = None


def turn_limit() -> Optional[int]:
    """Threads that may be inside a `compute_turn` at once: what `set_turn_limit` fixed, else
    CODECSPEC_TURNS's: "off" (the default) None, no limit; an integer >= 1 that many;
    "auto" the CPUs left beside the shared pool's workers (available CPUs - pool size + 1,
    at least 1), None while no shared pool exists or with one pool per session."""
    if _turn_override is not None:
        return _turn_override
    mode = os.environ.get("CODECSPEC_TURNS", "off").strip().lower()
    if mode == "off":
        return None
    if mode != "auto":
        if not mode.isdigit() or int(mode) < 1:
            raise ValueError(
                f"CODECSPEC_TURNS: expected 'auto', 'off' or an integer >= 1, got {mode!r}"
            )
        return int(mode)
    if _size is None or per_session_pools():
        return None
    return max(1, available_cpus() - _size + 1)


def set_turn_limit(limit: Optional[int]) -> None:
    """Fix `turn_limit()` (an int >= 1; a large one is no limit), or None: CODECSPEC_TURNS
    decides again (tests and benches compare with and without turns)."""
    global _turn_override
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit: expected an integer >= 1 or None, got {limit!r}")
    _turn_override = limit


class _Turns:
    """A first-come, first-served semaphore whose size is read at every request, reentrant
    per thread (a thread inside a turn that asks again goes on)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._queue: deque = deque()
        self._inside = 0
        self._mine = threading.local()

    def acquire(self, limit: int) -> None:
        depth = getattr(self._mine, "depth", 0)
        if depth:
            self._mine.depth = depth + 1
            return
        ticket = object()
        with self._cv:
            self._queue.append(ticket)
            while self._queue[0] is not ticket or self._inside >= limit:
                self._cv.wait()
            self._queue.popleft()
            self._inside += 1
            self._cv.notify_all()  # the next in line may fit too
        self._mine.depth = 1

    def release(self) -> None:
        self._mine.depth -= 1
        if self._mine.depth:
            return
        with self._cv:
            self._inside -= 1
            self._cv.notify_all()

    @property
    def inside(self) -> int:
        """Threads inside a turn now (tests)."""
        return self._inside


_turns = _Turns()


@contextlib.contextmanager
def compute_turn() -> Iterator[None]:
    """Run the block as one of at most `turn_limit()` threads doing onnxruntime work on the
    shared pool (see the module docstring), waiting in order for a turn; no wait where there
    is no limit. Never hold a turn while waiting on another thread's turn."""
    limit = turn_limit()
    if limit is None and not getattr(_turns._mine, "depth", 0):
        yield
        return
    _turns.acquire(limit or 1)
    try:
        yield
    finally:
        _turns.release()
