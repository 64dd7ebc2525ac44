"""numpy's BLAS on codecspec's decode path runs on one thread, so none of its workers spins.

OpenBLAS (the BLAS of numpy's PyPI wheels) keeps its worker threads busy-waiting for about a
tenth of a second after every multi-threaded call. On a machine with few cores those spinning
threads take the CPU from the ONNX Runtime calls that come next: on two cores the Qwen3-TTS
code predictor's first eight calls of every frame ran at half speed after the talker's head
was a numpy product (that head now runs in the Rust core), and v3's streamed synthesis, whose
vocoder multiplies a chunk's mel rows between frames, took 1.76x as long as with one BLAS
thread. The products on this path are small (one chunk's rows), so one thread costs nothing:
v3's whole-utterance synthesis was faster too (0.60 against 0.72 s).

`one_blas_thread()` sets the BLAS libraries numpy loaded to one thread for the duration of a
block and restores the earlier count when the last block of any thread ends (the setting is
the library's, global to the process; entering costs ~25 microseconds). Raising OpenBLAS's
count from a thread other than the main one did not take effect here (numpy 2's OpenBLAS
0.3.31), so where the last block ends on another thread BLAS may stay at one thread: in a server, which owns its process, that is
what the decode path wants. Through
`threadpoolctl`, which finds OpenBLAS, MKL or BLIS whichever numpy uses; without it, or with
no BLAS library found, it does nothing.
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

__all__ = ["one_blas_thread", "single_blas_thread", "blas_threads"]

F = TypeVar("F", bound=Callable)

_lock = threading.Lock()
_depth = 0  # blocks inside one_blas_thread, over every thread
_limiter = None  # threadpoolctl's record of the counts to restore
_controller = None  # threadpoolctl's view of numpy's BLAS libraries (found once)
_UNAVAILABLE = object()


def _blas():
    """threadpoolctl's controller of the loaded BLAS libraries, or None without any."""
    global _controller
    if _controller is None:
        try:
            import numpy  # noqa: F401  (loads the BLAS library threadpoolctl looks for)
            from threadpoolctl import ThreadpoolController

            found = ThreadpoolController().select(user_api="blas")
            _controller = found if found.lib_controllers else _UNAVAILABLE
        except ImportError:
            _controller = _UNAVAILABLE
    return None if _controller is _UNAVAILABLE else _controller


def blas_threads() -> list:
    """Threads of each BLAS library numpy loaded (empty when none is found)."""
    blas = _blas()
    return [] if blas is None else [lib.num_threads for lib in blas.lib_controllers]


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Inside the block numpy's BLAS runs on one thread (see the module doc)."""
    global _depth, _limiter
    blas = _blas()
    if blas is None:
        yield
        return
    with _lock:
        if _depth == 0:
            _limiter = blas.limit(limits=1)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _limiter.restore_original_limits()
                _limiter = None


def single_blas_thread(fn: F) -> F:
    """Decorator: `fn` runs inside `one_blas_thread()`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_blas_thread():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
