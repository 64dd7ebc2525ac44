"""The decode path's BLAS guard: one thread inside, the earlier count restored after, also
when blocks of several threads overlap (the last one out restores)."""

import threading

import numpy as np
import pytest

from codecspec.runtime import blas
from codecspec.runtime.blas import blas_threads, one_blas_thread, single_blas_thread

pytest.importorskip("threadpoolctl")


@pytest.fixture
def two_threads():
    """numpy's BLAS set to 2 threads for the test, its own count restored after."""
    from threadpoolctl import threadpool_limits

    if not blas_threads():
        pytest.fail("no BLAS library found under numpy: the guard would do nothing")
    with threadpool_limits(limits=2, user_api="blas"):
        yield


def test_one_thread_inside_and_restored_after(two_threads):
    before = blas_threads()
    with one_blas_thread():
        assert blas_threads() == [1] * len(before)
        with one_blas_thread():  # nested: still one
            assert blas_threads() == [1] * len(before)
        assert blas_threads() == [1] * len(before)
    assert blas_threads() == before


def test_overlapping_blocks_of_threads_restore_once(two_threads):
    """A worker's block ends inside this thread's: one thread holds until the last block
    ends, then the earlier count is back."""
    before = blas_threads()
    inside, leave = threading.Event(), threading.Event()

    def worker():
        with one_blas_thread():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=worker)
    with one_blas_thread():
        t.start()
        assert inside.wait(10)
        leave.set()
        t.join(10)
        assert not t.is_alive()
        assert blas_threads() == [1] * len(before)  # the worker left; this block holds
    assert blas_threads() == before and blas._depth == 0


def test_decorator_and_errors_restore(two_threads):
    before = blas_threads()

    @single_blas_thread
    def fails():
        assert blas_threads() == [1] * len(before)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fails()
    assert blas_threads() == before and blas._depth == 0


def test_vocoders_decode_under_the_guard(two_threads, monkeypatch):
    """Every codec's decode runs its matrix products with one BLAS thread."""
    from codecspec.codec import codec as v1

    seen = []
    real = v1.griffin_lim

    def spy(*a, **k):
        seen.append(blas_threads())
        return real(*a, **k)

    monkeypatch.setattr(v1, "griffin_lim", spy)
    from codecspec.model_store import named_model_dir

    codec = v1.Codec.load(named_model_dir("v3", must_exist=True) / "codec.npz")
    wav = codec.decode(np.zeros((3, 4), np.int64), n_iter=2)
    assert len(wav) and seen and all(n == [1] * len(n) for n in seen)
    assert blas_threads() == [2] * len(seen[0])
