"""A served Qwen3-TTS stream with audio, turns on (`runtime.threads.compute_turn`; limit 1, as
CODECSPEC_TURNS=auto gives a pool of 2 on 2 cores): the speech decoder's graph calls (the
app's worker thread) and the engine's steps never run side by side (side by side at 2 threads
on 2 cores they cost ~30 ms a frame more than one after the other, docs/serving.md, issue
49). The codes and audio are the same either way.

Uses the tiny checkpoint of tests/data/qwen3_tiny/custom_equal; graphs are built into a
temporary cache.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from paths import DATA

pytest.importorskip("tokenizers")

from codecspec.runtime.threads import set_turn_limit  # noqa: E402
from codecspec.serve.app import chunk_frames  # noqa: E402
from codecspec.serve.engine import Engine, SpeechRequest  # noqa: E402

FOLDER = DATA / "qwen3_tiny" / "custom_equal"
TEXT = "Hello world, and hello again."


class _Timed:
    """A session whose `run` records its (start, end) inside the caller's turn."""

    def __init__(self, session, spans: list) -> None:
        self.session, self.spans = session, spans

    def run(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return self.session.run(*a, **k)
        finally:
            self.spans.append((t0, time.perf_counter()))

    def __getattr__(self, name):
        return getattr(self.session, name)


def _served_with_audio(engine, seed: int) -> tuple:
    """(codes, audio) of one served stream whose chunks a consumer thread decodes as the app
    does (`chunk_frames`, the family's one-frame first chunk)."""
    fam = engine.family
    (handle,) = engine.submit_many([SpeechRequest(TEXT, seed=seed, temperature=0.9)])
    got: dict = {}

    def consume() -> None:
        dec = fam.chunk_decoder(0, 0)
        frames, sent, parts = [], 0, []
        for f in handle:
            frames.append(f)
            if len(frames) - sent >= chunk_frames(sent, fam.first_chunk_frames):
                parts.append(dec.feed(np.stack(frames[sent:])))
                sent = len(frames)
        if len(frames) > sent:
            parts.append(dec.feed(np.stack(frames[sent:])))
        got["codes"], got["audio"] = np.stack(frames), np.concatenate(parts)

    t = threading.Thread(target=consume)
    t.start()
    t.join(timeout=120)
    return got["codes"], got["audio"]


def _overlaps(a: list, b: list) -> int:
    return sum(1 for s0, s1 in a for t0, t1 in b if s0 < t1 and t0 < s1)


@pytest.fixture
def engine(tmp_path):
    e = Engine(FOLDER, max_streams=2, threads=1, max_frames=19, cache_dir=tmp_path)
    yield e
    e.shutdown()
    set_turn_limit(None)


def _instrumented(engine, limit: int):
    """A served stream with audio at turn limit `limit`, the engine's steps lengthened so that
    the consumer's decoder calls fall inside the next step unless they wait for their turn:
    (step intervals, decoder call intervals, codes, audio)."""
    fam = engine.family
    steps: list = []
    step = fam.step

    def slow_step(streams, check):
        t0 = time.perf_counter()
        out = step(streams, check)
        time.sleep(0.03)
        steps.append((t0, time.perf_counter()))
        return out

    fam.step = slow_step
    dec = fam.codec.decoder
    calls: list = []
    dec.session = _Timed(dec.session, calls)
    try:
        set_turn_limit(limit)
        codes, audio = _served_with_audio(engine, seed=5)
    finally:
        set_turn_limit(None)
        dec.session = dec.session.session
        fam.step = step
    return steps, calls, codes, audio


def test_decoder_calls_wait_for_the_engine_step(engine):
    steps, calls, codes, audio = _instrumented(engine, 1)  # 1: as a pool of 2 on 2 cores
    assert len(codes) >= 4 and len(calls) >= 3 and len(steps) >= len(codes)
    assert _overlaps(steps, calls) == 0
    # the codes are the stream's own, the audio their decode (turns only order the work)
    fam = engine.family
    tts, dec = fam.tts, fam.codec.decoder
    kw = fam.request_kwargs(engine.check(SpeechRequest(TEXT, seed=5, temperature=0.9)))
    ref = tts.generate_codes(TEXT, seed=5, max_frames=19, **kw).codes
    assert np.array_equal(codes, ref)
    whole = dec.decode(codes)
    assert np.abs(audio - whole).max() <= 1e-5


def test_without_turns_the_calls_run_inside_steps(engine):
    """The test above fails without the turns: the same served stream with no limit has
    decoder calls inside the engine's steps."""
    steps, calls, _, _ = _instrumented(engine, 10**6)
    assert _overlaps(steps, calls) > 0
