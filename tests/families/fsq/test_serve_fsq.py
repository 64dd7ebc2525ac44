"""The FSQ family in the continuous-batching engine and the speech server: a stream's codes
alone and next to streams that join and leave equal `FSQTTS.generate` with the same seed
(bit-identical), the stop head ends them, the scaling bench, and the HTTP endpoint on an
FSQ server (a whole WAV, pcm streamed, model names). IPA input: no espeak-ng needed."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest
from serve_util import HELLO, LONG, LocalServer, assert_idle, cancel_all, codes, ipa, wait_for

from codecspec.families.fsq.model import FSQ_FILES, default_fsq_dir
from codecspec.serve.engine import Engine, SpeechRequest

pytestmark = pytest.mark.skipif(
    not all((default_fsq_dir() / f).is_file() for f in FSQ_FILES), reason="no shipped FSQ model"
)


@pytest.fixture(scope="module")
def engine():
    e = Engine("fsq", max_streams=4, max_queue=8, threads=1)
    yield e
    e.shutdown()


@pytest.fixture(autouse=True)
def idle_after(engine):
    """Every test leaves the shared engine idle (no active or queued stream)."""
    yield
    assert_idle(engine)


def reference(engine, text, seed, **kw):
    return engine.tts.generate("", phonemes=text, seed=seed, decode_audio=False, **kw)


def test_engine_loads_the_fsq_family_by_name(engine):
    assert engine.family.name == "fsq" and engine.family.model_names == ("codecspec-fsq",)
    assert engine.frame_rate == 12.5 and engine.sample_rate == 16000
    assert engine.family.hop == 1280 and "f1" in engine.voices and "en" in engine.languages


def test_stream_alone_equals_generate_and_the_stop_head_ends_it(engine):
    ref = reference(engine, HELLO, 11)
    assert ref.stopped and len(ref.codes) < ref.max_frames
    h = engine.submit(ipa(seed=11))
    assert h.frames is None  # the stop head, not a plan, sets the length
    np.testing.assert_array_equal(codes(h), ref.codes)
    assert h.count == len(ref.codes)


def test_stream_batched_with_streams_that_join_and_leave_equals_generate(engine):
    """The target joins while a long stream runs (different frame index, phoneme count),
    short streams join after it and leave before it ends: its codes are still bit-identical."""
    ref = reference(engine, LONG, 5, speaker="m3")
    long = engine.submit(ipa(LONG, seed=1))
    try:
        assert wait_for(lambda: long.count >= 5, timeout=60)  # the long stream's own frames
        target = engine.submit(ipa(LONG, seed=5, voice="m3"))
        assert wait_for(lambda: target.count >= 3, timeout=60)
        short = [engine.submit(ipa(seed=30 + k, voice="f2")) for k in range(2)]
        got = codes(target)
        for k, h in enumerate(short):
            ref_k = reference(engine, HELLO, 30 + k, speaker="f2").codes
            np.testing.assert_array_equal(codes(h), ref_k)
        assert long.first_frame_at < target.first_frame_at < short[0].first_frame_at
        assert max(h.done_at for h in short) < target.done_at
        np.testing.assert_array_equal(got, ref.codes)
        np.testing.assert_array_equal(codes(long), reference(engine, LONG, 1).codes)
    finally:
        cancel_all(engine)


def test_streams_submitted_together_each_equal_generate(engine):
    seeds = [41, 42, 43, 44]
    refs = [reference(engine, HELLO, s).codes for s in seeds]
    hs = engine.submit_many([ipa(seed=s, temperature=0.9) for s in seeds])
    for h, ref in zip(hs, refs):
        np.testing.assert_array_equal(codes(h), ref)
    assert engine.metrics()["tokens_per_call"] == 32.0  # one step call gives the whole frame


def test_greedy_request_is_deterministic_across_seeds(engine):
    a = codes(engine.submit(ipa(seed=1, temperature=0.0)))
    b = codes(engine.submit(ipa(seed=2, temperature=0.0)))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"speed": 1.5}, "speed"),
        ({"mode": "spec"}, "mode"),
        ({"top_k": 9}, "top_k"),
        ({"voice": "x"}, "voice"),
        ({"language": "xx"}, "language"),
        ({"input": "qqq<"}, "input"),
    ],
)
def test_bad_requests_name_the_field(engine, kw, field):
    with pytest.raises(ValueError, match=field):
        engine.submit(SpeechRequest(**{"input": HELLO, "input_format": "ipa", **kw}))


def test_input_beyond_the_length_guard_is_refused():
    e = Engine("fsq", max_streams=1, max_frames=60, threads=1)
    try:
        with pytest.raises(ValueError, match="input: may need"):
            e.submit(ipa(LONG))
        assert len(codes(e.submit(ipa(seed=3)))) > 0
    finally:
        e.shutdown()


def test_scaling_bench_on_fsq(engine):
    from codecspec.serve.bench import engine_scaling, table

    rows = engine_scaling(engine, [1, 3], "ar", progress=False, texts=[HELLO], input_format="ipa")
    assert [r["n"] for r in rows] == [1, 3] and all(r["model"] == "fsq" for r in rows)
    assert all(r["frames_per_second"] > 0 and r["aggregate_realtime"] > 0 for r in rows)
    assert all(r["tokens_per_call"] == 32.0 for r in rows)
    assert rows[1]["batch_tokens_per_call"] > 32.0 * 1.5  # streams share each step call
    assert "| ar | 3 |" in table(rows)


# --------------------------------------------------------------------------- HTTP
httpx = pytest.importorskip("httpx")


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    with LocalServer(lambda: Engine("fsq", max_streams=2, max_queue=2, threads=1)) as s:
        yield s


def speech(server, **body):
    body.setdefault("input", HELLO)
    body.setdefault("input_format", "ipa")
    return httpx.post(server.url + "/v1/audio/speech", json=body, timeout=120)


def test_http_fsq_returns_a_valid_wav(server):
    from codecspec.serve.bench import check_wav

    r = speech(server, model="codecspec-fsq", seed=3, voice="nova", response_format="wav")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/wav"
    ok, seconds = check_wav(r.content)
    assert ok and seconds > 0.5
    frames = len(reference(server.engine, HELLO, 3, speaker="f3").codes)
    assert int(r.headers["X-Codecspec-Frames"]) == frames
    assert len(r.content) == 44 + 2 * frames * 1280
    with wave.open(io.BytesIO(r.content)) as w:  # a standard reader agrees
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        assert w.getnframes() == frames * 1280
    # pcm streams (no length known in advance) at OpenAI's 24 kHz: the same audio resampled
    pcm = speech(server, model="tts-1", seed=3, voice="nova", response_format="pcm")
    assert pcm.status_code == 200 and "X-Codecspec-Frames" not in pcm.headers
    assert abs(len(pcm.content) // 2 - 1.5 * frames * 1280) <= 64
    assert np.abs(np.frombuffer(pcm.content, "<i2")).max() > 100, "silent output"


@pytest.mark.parametrize(
    "patch,status,field",
    [
        ({"model": "codecspec-reference"}, 400, "model"),  # a model this server did not load
        ({"model": "/srv/models/fsq"}, 400, "model"),
        ({"model_dir": "/tmp"}, 400, "model_dir"),
        ({"mode": "spec"}, 400, "mode"),
        ({"speed": 1.5}, 400, "speed"),
    ],
)
def test_http_fsq_bad_input_names_the_field(server, patch, status, field):
    r = speech(server, **patch)
    assert r.status_code == status, r.text
    assert field in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == field


def test_http_fsq_lists_its_models(server):
    ids = [m["id"] for m in httpx.get(server.url + "/v1/models").json()["data"]]
    assert "codecspec-fsq" in ids and "codecspec-reference" not in ids
