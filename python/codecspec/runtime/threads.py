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
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Optional

import onnxruntime as ort

__all__ = [
    "ThreadBudgetError",
    "available_cpus",
    "configure",
    "per_session_pools",
    "physical_cores",
    "pool_size",
    "threads_in_use",
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
