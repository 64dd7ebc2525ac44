"""Turns on the shared pool (`codecspec.runtime.threads.compute_turn`): at most `turn_limit()`
threads inside at once, served in the order they asked, reentrant per thread; off unless
CODECSPEC_TURNS or `set_turn_limit` asks for them."""

from __future__ import annotations

import threading
import time

import pytest

from codecspec.runtime.threads import (
    _turns,
    available_cpus,
    compute_turn,
    pool_size,
    set_turn_limit,
    turn_limit,
)


@pytest.fixture
def limit():
    """set_turn_limit for the test, derived again after."""
    yield set_turn_limit
    set_turn_limit(None)


def test_off_by_default_and_auto_is_the_cpus_beside_the_pools_workers(monkeypatch):
    monkeypatch.delenv("CODECSPEC_TURNS", raising=False)
    assert turn_limit() is None
    monkeypatch.setenv("CODECSPEC_TURNS", "auto")
    # conftest.py made the shared pool (1 thread): every CPU may hold a caller
    assert turn_limit() == max(1, available_cpus() - pool_size() + 1)


def test_set_turn_limit_checks_its_argument(limit, monkeypatch):
    monkeypatch.delenv("CODECSPEC_TURNS", raising=False)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="limit"):
            limit(bad)
    limit(3)
    assert turn_limit() == 3
    limit(None)
    assert turn_limit() is None


def test_the_environment_sets_or_turns_off_the_limit(monkeypatch):
    monkeypatch.setenv("CODECSPEC_TURNS", "off")
    assert turn_limit() is None
    monkeypatch.setenv("CODECSPEC_TURNS", "3")
    assert turn_limit() == 3
    monkeypatch.setenv("CODECSPEC_TURNS", "auto")
    assert turn_limit() == max(1, available_cpus() - pool_size() + 1)
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("CODECSPEC_TURNS", bad)
        with pytest.raises(ValueError, match="CODECSPEC_TURNS"):
            turn_limit()


def _holders(n: int, hold_s: float) -> tuple[list, list]:
    """n threads, started 20 ms apart, each holding a turn for hold_s: their (start, end)
    spans inside the turn, and the order they got it in."""
    spans, order, lock = [None] * n, [], threading.Lock()

    def work(k: int) -> None:
        with compute_turn():
            t0 = time.perf_counter()
            with lock:
                order.append(k)
            time.sleep(hold_s)
            spans[k] = (t0, time.perf_counter())

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
        time.sleep(0.02)
    for t in threads:
        t.join(timeout=10)
    return spans, order


def _most_at_once(spans: list) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def test_one_turn_at_a_time_in_the_order_asked(limit):
    limit(1)
    spans, order = _holders(4, 0.05)
    assert _most_at_once(spans) == 1
    assert order == [0, 1, 2, 3]
    assert _turns.inside == 0


def test_two_turns_at_once_with_a_limit_of_two(limit):
    limit(2)
    spans, _ = _holders(4, 0.1)
    assert _most_at_once(spans) == 2
    assert _turns.inside == 0


def test_a_turn_is_reentrant_and_released_by_an_error(limit):
    limit(1)
    with pytest.raises(RuntimeError):
        with compute_turn():
            with compute_turn():  # the same thread asks again: no wait
                assert _turns.inside == 1
            raise RuntimeError("boom")
    assert _turns.inside == 0
    spans, _ = _holders(2, 0.01)  # the turn is free for others after the error
    assert all(s is not None for s in spans)


def test_a_large_limit_makes_no_one_wait(limit):
    limit(10**6)
    spans, _ = _holders(3, 0.1)
    assert _most_at_once(spans) == 3
