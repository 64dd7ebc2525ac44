"""Admission by real-time capacity, queued cancellation and deadline misses in the engine;
`codecspec serve`'s start-up checks (the serve extra, API keys on non-loopback hosts)."""

from __future__ import annotations

import sys

import pytest
from serve_util import HELLO, LONG, codes, ipa, wait_for

from codecspec.serve.engine import Engine, realtime_capacity


def test_capacity_from_a_line_of_step_times():
    # step time 20 ms + 5 ms per stream: within 64 ms for 8 streams, not 9
    steps = [(n, 0.020 + 0.005 * n) for n in (1, 2, 4, 8) for _ in range(5)]
    assert realtime_capacity(steps, 0.064, 64) == 8
    assert realtime_capacity(steps, 0.064, 6) == 6, "never beyond the slots"
    assert realtime_capacity(steps, 0.010, 64) == 1, "at least one stream"
    slower = [(n, 0.040 + 0.010 * n) for n in (1, 2, 4, 8) for _ in range(5)]
    assert realtime_capacity(slower, 0.064, 64) == 2, "slower steps, fewer streams"


def test_capacity_grows_step_by_step_from_one_batch_size():
    assert realtime_capacity([], 0.064, 64) == 1, "nothing measured: one stream"
    # one size seen: half its time is fixed cost; at most twice the size seen
    assert realtime_capacity([(1, 0.010)] * 3, 0.064, 64) == 2
    assert realtime_capacity([(4, 0.040)] * 3, 0.064, 64) == 8
    assert realtime_capacity([(4, 0.040)] * 3, 0.031, 64) == 2


def test_capacity_is_robust_to_outliers_and_noise():
    steps = [(n, 0.020 + 0.005 * n) for n in (2, 4) for _ in range(9)] + [(4, 5.0)]
    assert realtime_capacity(steps, 0.064, 64) == 8, "a median, not a mean"
    # a negative slope: the proportional line through the costliest size (15 ms a stream)
    flat = [(2, 0.030), (4, 0.029)]
    assert realtime_capacity(flat, 0.064, 64) == 4


@pytest.fixture(scope="module")
def engine():
    e = Engine("reference", max_streams=4, max_queue=4, threads=1, admit="realtime")
    yield e
    e.shutdown(drain=False)


def _admitted_together(engine, n: int) -> list:
    hs = engine.submit_many([ipa(HELLO, seed=k) for k in range(n)])
    for h in hs:
        codes(h)
    return hs


def test_realtime_admission_queues_beyond_capacity(engine, monkeypatch):
    # A frame rate no step can keep up with: capacity 1, so streams run one at a time.
    monkeypatch.setattr(engine, "frame_rate", 1e4)
    assert engine.capacity() == 1
    hs = _admitted_together(engine, 3)
    for a, b in zip(hs, hs[1:]):
        assert b.first_frame_at >= a.done_at, "the next stream joined after the last ended"
    m = engine.metrics()
    assert m["capacity"] == 1 and m["late_streams_total"] >= 3, "every stream was late"


def test_admit_max_and_slow_playback_run_streams_together(engine, monkeypatch):
    # The broken variant of the test above: with capacity the slots, streams overlap.
    monkeypatch.setattr(engine, "frame_rate", 1e-3)  # every step is far within a frame
    late = engine.metrics()["late_frames_total"]
    monkeypatch.setattr(engine, "admit", "max")
    assert engine.capacity() == engine.max_streams
    hs = _admitted_together(engine, 3)
    assert hs[1].first_frame_at < hs[0].done_at
    assert engine.metrics()["late_frames_total"] == late, "nothing late at this pace"


def test_late_frames_lower_the_realtime_limit(engine, monkeypatch):
    """The step-time estimate cannot see everything that slows a step; the deadlines can. With
    an estimate blind to the pace (always every slot), frames late at 3 streams hold the
    limit below 3."""
    import codecspec.serve.engine as engine_module

    monkeypatch.setattr(engine_module, "realtime_capacity", lambda steps, budget, most: most)
    monkeypatch.setattr(engine, "_late_limit", engine.max_streams)  # restored afterwards
    monkeypatch.setattr(engine, "_limit_since", engine.stats.steps)
    assert engine.capacity() == engine.max_streams  # what the blind estimate alone admits
    monkeypatch.setattr(engine, "frame_rate", 1e4)  # every frame after the first is late
    _admitted_together(engine, 3)
    assert engine.capacity() <= 2


def test_bad_admit_policy():
    with pytest.raises(ValueError, match="admit"):
        Engine(admit="fifo")


def test_a_cancelled_queued_stream_leaves_the_queue_at_once(engine, monkeypatch):
    monkeypatch.setattr(engine, "admit", "max")
    cancelled = engine.metrics()["streams_cancelled_total"]
    with engine._cv:  # the loop cannot admit while this thread holds the lock
        h = engine.submit(ipa(LONG, seed=5))
        assert engine.metrics()["queue_depth"] == 1
        h.cancel()  # the condition's lock is re-entrant: cancelling here is what a client does
        assert engine.metrics()["queue_depth"] == 0
    assert list(h) == [] and h.count == 0
    assert engine.metrics()["streams_cancelled_total"] == cancelled + 1
    assert wait_for(lambda: engine.metrics()["active_streams"] == 0, 30)


# --------------------------------------------------------------------------- the command
def test_serve_without_the_extra_names_it_in_one_line(monkeypatch, capsys):
    from codecspec.cli import main

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # what `import uvicorn` sees if absent
    with pytest.raises(SystemExit) as e:
        main(["serve"])
    msg = str(e.value)
    assert "codecspec[serve]" in msg and "\n" not in msg and "uvicorn" in msg


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.org"])
def test_serve_refuses_a_public_host_without_a_key(monkeypatch, host):
    from codecspec.cli import main

    monkeypatch.delenv("CODECSPEC_API_KEY", raising=False)
    with pytest.raises(SystemExit) as e:
        main(["serve", "--host", host])
    assert "--api-key" in str(e.value) and "--allow-no-key" in str(e.value)


def test_key_sources_and_loopback(monkeypatch):
    import argparse

    from codecspec.serve.commands import api_key_of, is_loopback

    def args(**kw):
        base = dict(api_key=None, host="127.0.0.1", allow_no_key=False)
        return argparse.Namespace(**{**base, **kw})

    monkeypatch.delenv("CODECSPEC_API_KEY", raising=False)
    assert api_key_of(args()) is None
    assert api_key_of(args(host="0.0.0.0", allow_no_key=True)) is None
    assert api_key_of(args(host="0.0.0.0", api_key="k1")) == "k1"
    monkeypatch.setenv("CODECSPEC_API_KEY", "k2")
    assert api_key_of(args(host="0.0.0.0")) == "k2"
    assert api_key_of(args(api_key="k3")) == "k3", "the flag wins over the environment"
    monkeypatch.setenv("CODECSPEC_API_KEY", " ")
    with pytest.raises(SystemExit, match="empty"):
        api_key_of(args())
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")


def test_playback_stalls_of_a_client():
    from codecspec.serve.bench import playback

    bps = 32000.0  # 16 kHz 16-bit: 32000 bytes per audio second
    # 0.24 s first, then 0.24 s every 0.2 s: always ahead of playback
    on_time = [(0.0, 44 + 7680)] + [(0.2 * k, 7680) for k in range(1, 10)]
    stall, rtf = playback(on_time, bps)
    assert stall == 0.0 and rtf < 1.0
    # the broken variant: 0.24 s of audio every 0.4 s falls behind
    late = [(0.0, 44 + 7680)] + [(0.4 * k, 7680) for k in range(1, 10)]
    stall, rtf = playback(late, bps)
    assert stall > 1.0 and rtf > 1.0


def test_stream_mode_lists():
    from codecspec.serve.commands import stream_modes

    assert stream_modes("both") == ["ar", "spec"]
    assert stream_modes("ar,auto") == ["ar", "auto"]
    with pytest.raises(SystemExit, match="--stream-mode"):
        stream_modes("ar,fast")
