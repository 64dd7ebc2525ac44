"""Reference model v2 served by the engine: each stream's codes are bit-identical to
`V2TTS.generate` with the same seed, alone or beside other streams, AR and speculative; the
HTTP server answers with `--model v2`."""

from __future__ import annotations

import numpy as np
import pytest
from paths import DATA
from serve_util import HELLO, LONG, codes, ipa

from codecspec.serve.engine import Engine

SHORT = "ðɪs ɪz ɐ tˈɛst"


@pytest.fixture(scope="module")
def engine():
    e = Engine("v2", max_streams=3, max_queue=3, threads=1)
    yield e
    e.shutdown(drain=False)


_single = {}


def reference(engine, text, seed, **kw):
    """V2TTS.generate on a model of its own (the engine's depth decoder is busy in its
    thread: one decoder is not for two threads)."""
    if "tts" not in _single:
        from codecspec.families.v2.model import V2TTS

        _single["tts"] = V2TTS(engine.tts.dir, provider="cpu", threads=1)
    s = _single["tts"].generate("", phonemes=text, seed=seed, decode_audio=False, **kw)
    return s.codes.astype(np.int64)


def test_a_served_stream_is_single_stream_generation(engine):
    got = codes(engine.submit(ipa(HELLO, seed=11)))
    assert np.array_equal(got, reference(engine, HELLO, 11))


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_bit_identical_beside_other_streams(engine, mode):
    texts = [HELLO, LONG, SHORT]
    hs = engine.submit_many([ipa(t, seed=20 + k, mode=mode) for k, t in enumerate(texts)])
    late = engine.submit(ipa(SHORT, seed=99, mode=mode))  # joins while the others run
    for k, (h, t) in enumerate(zip(hs, texts)):
        want = reference(engine, t, 20 + k, mode=mode, temporal=mode)
        assert np.array_equal(codes(h), want), (mode, k)
    assert np.array_equal(codes(late), reference(engine, SHORT, 99, mode=mode, temporal=mode))


def test_a_different_seed_gives_different_codes(engine):
    # the broken variant of the identity above: the comparison can fail
    got = codes(engine.submit(ipa(HELLO, seed=12)))
    assert not np.array_equal(got, reference(engine, HELLO, 13))


def test_v2_bad_input(engine):
    for field, kw in [("temperature", {"temperature": 0.5}), ("mode", {"mode": "pcg"})]:
        with pytest.raises(ValueError, match=field):
            engine.submit(ipa(HELLO, **kw))
    with pytest.raises(ValueError, match="input"):
        engine.submit(ipa("qqq<"))


def test_serve_model_v2_over_http():
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from serve_util import LocalServer

    from codecspec.serve.bench import check_wav

    with LocalServer(lambda: Engine("v2", max_streams=2, threads=1)) as s:
        body = {"input": HELLO, "input_format": "ipa", "seed": 5, "model": "codecspec-v2"}
        url = s.url + "/v1/audio/speech"
        r = httpx.post(url, json={**body, "response_format": "wav"}, timeout=120)
        assert r.status_code == 200, r.text
        ok, seconds = check_wav(r.content)
        want = reference(s.engine, HELLO, 5)
        assert ok and int(r.headers["X-Codecspec-Frames"]) == len(want)
        pcm = httpx.post(url, json={**body, "model": "tts-1"}, timeout=120)
        assert pcm.status_code == 200 and pcm.headers["content-type"] == "audio/mpeg"


def test_an_aligned_model_is_served_bit_identical_to_generate():
    """Reference model v3's runtime (the tiny aligned folder): text in, espeak-ng's phoneme
    track as the pace, the same codes as `generate` with the same seed, beside another
    stream; IPA input is refused (the model needs espeak-ng's timing of the text)."""

    from codecspec.families.v2.model import V2TTS
    from codecspec.frontend import espeak
    from codecspec.serve.engine import SpeechRequest

    if not espeak.available():
        pytest.skip("libespeak-ng.so.1 is not installed (apt-get install espeak-ng)")
    folder = DATA / "tiny_v3"
    e = Engine(str(folder), max_streams=2, max_queue=2, threads=1)
    try:
        assert e.family.model_names == ("codecspec-v3",)
        texts = ["Hello world, a big feel.", "This is a test."]
        hs = e.submit_many([SpeechRequest(t, seed=5 + k) for k, t in enumerate(texts)])
        single = V2TTS(folder, provider="cpu", threads=1)
        for k, (h, t) in enumerate(zip(hs, texts)):
            want = single.generate(t, seed=5 + k, decode_audio=False).codes
            assert np.array_equal(codes(h), want.astype(np.int64)), k
        with pytest.raises(ValueError, match="input_format"):
            e.submit(ipa(HELLO))
    finally:
        e.shutdown(drain=False)


def _steps_and_frames(engine, reqs) -> tuple:
    s0, f0 = engine.stats.steps, engine.stats.frames
    for h in engine.submit_many(reqs):
        codes(h)
    return engine.stats.steps - s0, engine.stats.frames - f0


def test_a_speculative_stream_gets_several_frames_per_step(engine):
    steps, frames = _steps_and_frames(engine, [ipa(LONG, seed=5, mode="spec")])
    assert frames > 1.3 * steps, (steps, frames)  # accepted drafts: several frames a round
    steps, frames = _steps_and_frames(engine, [ipa(LONG, seed=5, mode="ar")])
    assert frames == steps  # AR: one frame per step (the broken variant of the above)


def test_the_streams_share_one_depth_loop(engine):
    """Three AR streams in one step: one batched depth call per level serves all three."""
    c0 = engine.family.counters()
    _steps_and_frames(engine, [ipa(LONG, seed=40 + k, mode="ar") for k in range(3)])
    c1 = engine.family.counters()
    calls, lanes = c1["calls"] - c0["calls"], c1["lane_calls"] - c0["lane_calls"]
    assert lanes > 1.5 * calls, (calls, lanes)  # frame by frame: lanes == calls


def test_the_streams_share_one_target_call_per_step(engine, monkeypatch):
    """AR streams: every step runs one call of the batch-axis target graph for all of them
    (with the one-stream case off: a step left with one stream runs its own graph)."""
    monkeypatch.setattr(engine.family, "solo_graphs", False)
    batch = engine.tts.step_batch(draft=False)
    calls0 = batch.calls
    steps, _ = _steps_and_frames(engine, [ipa(LONG, seed=60 + k, mode="ar") for k in range(3)])
    assert batch.calls - calls0 == steps


def test_a_lone_stream_runs_its_own_graphs(engine):
    """The one-stream case of the batched step (V2Family.solo_graphs): no batch-axis call,
    and the codes are generate's all the same."""
    batch = engine.tts.step_batch(draft=False)
    calls0 = batch.calls
    got = codes(engine.submit(ipa(HELLO, seed=61, mode="ar")))
    assert batch.calls == calls0
    assert np.array_equal(got, reference(engine, HELLO, 61, mode="ar", temporal="ar"))


def test_a_speculative_stream_starts_with_a_cushion(engine, monkeypatch):
    """A speculative stream's first frames go out after its second step (playback starts
    with two rounds of frames: a step that brings one frame does not stall it); an AR
    stream's after its first (the comparison that shows the hold)."""
    from codecspec.serve.engine import StreamHandle

    first_put = {}
    real_put = StreamHandle._put

    def put(handle, item):
        first_put.setdefault(handle.id, engine.stats.steps)
        real_put(handle, item)

    monkeypatch.setattr(StreamHandle, "_put", put)
    held = {}
    for mode in ("spec", "ar"):
        steps0 = engine.stats.steps  # the engine is idle between requests
        h = engine.submit(ipa(LONG, seed=7, mode=mode))
        codes(h)
        held[mode] = first_put[h.id] - steps0
    assert held == {"spec": 1, "ar": 0}


def test_a_failing_stream_ends_alone_in_a_batched_round():
    """One stream's check raises at its 4th frame, inside a step whose temporal and depth
    calls it shares with two others: it alone ends with StreamFailed, and the others still
    give the codes of single-stream generation."""
    from codecspec.serve.engine import StreamFailed

    def fault(req, t):
        if req.seed == 666 and t >= 3:
            raise RuntimeError("injected")

    e = Engine("v2", max_streams=3, max_queue=3, threads=1, fault=fault)
    try:
        reqs = [ipa(LONG, seed=31, mode="spec"), ipa(LONG, seed=666, mode="spec")]
        reqs.append(ipa(SHORT, seed=32, mode="ar"))
        hs = e.submit_many(reqs)
        with pytest.raises(StreamFailed, match="injected"):
            codes(hs[1])
        assert np.array_equal(codes(hs[0]), reference(e, LONG, 31, mode="spec", temporal="spec"))
        assert np.array_equal(codes(hs[2]), reference(e, SHORT, 32, mode="ar", temporal="ar"))
        assert e.metrics()["streams_failed_total"] == 1
    finally:
        e.shutdown(drain=False)
