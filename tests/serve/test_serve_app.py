"""The speech server over a real engine and a real socket: API, bad input, faults, overload,
disconnects, metrics, a small concurrent load test."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest
from scipy.signal import resample_poly

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_util import HELLO, LONG, LocalServer, wait_for  # noqa: E402

from codecspec.serve.bench import check_wav, load_test  # noqa: E402
from codecspec.serve.engine import Engine  # noqa: E402

FAIL_AT_START, FAIL_MID_STREAM, SLOW = 666, 667, 668


def _fault(req, t):
    # Fault injection through the engine's per-stream error boundary (see Engine.fault).
    if (req.seed == FAIL_AT_START and t == 0) or (req.seed == FAIL_MID_STREAM and t == 12):
        raise RuntimeError("injected fault")
    if req.seed == SLOW:  # a stream that is surely still decoding when its client leaves
        time.sleep(0.02)


@pytest.fixture(scope="module")
def server():
    def factory():
        return Engine("reference", max_streams=3, max_queue=2, threads=1, fault=_fault)

    with LocalServer(factory) as s:
        yield s


def speech(server, timeout=120, **body):
    body.setdefault("input", HELLO)
    body.setdefault("input_format", "ipa")
    body.setdefault("response_format", "wav")
    return httpx.post(server.url + "/v1/audio/speech", json=body, timeout=timeout)


def idle(server) -> bool:
    m = server.engine.metrics()
    return m["active_streams"] == 0 and m["queue_depth"] == 0


def test_health_and_metrics(server):
    r = httpx.get(server.url + "/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert r.json()["max_streams"] == 3
    text = httpx.get(server.url + "/metrics").text
    for name in (
        "codecspec_active_streams",
        "codecspec_queue_depth",
        "codecspec_frames_per_second",
        "codecspec_tokens_per_call",
        "codecspec_frames_total",
    ):
        assert name in text


def test_speech_wav_and_pcm(server):
    r = speech(server, seed=1, voice="nova")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/wav"
    ok, seconds = check_wav(r.content)
    assert ok and seconds > 0.5
    samples = int(r.headers["X-Codecspec-Samples"])
    assert len(r.content) == 44 + 2 * samples
    assert np.abs(np.frombuffer(r.content[44:], "<i2")).max() > 100, "silent output"
    # pcm is OpenAI's: 24 kHz, the same audio resampled (not the 16 kHz samples relabelled)
    pcm = speech(server, seed=1, voice="nova", response_format="pcm")
    assert pcm.status_code == 200 and pcm.headers["X-Codecspec-Sample-Rate"] == "24000"
    x16 = np.frombuffer(r.content[44:], "<i2").astype(float)
    x24 = np.frombuffer(pcm.content, "<i2").astype(float)
    assert abs(len(x24) - 1.5 * len(x16)) <= 64, (len(x24), len(x16))
    ref = resample_poly(x16, 3, 2)[: len(x24)]
    corr = np.corrcoef(ref[200:-200], x24[: len(ref)][200:-200])[0, 1]
    assert corr > 0.98, corr


def test_same_seed_same_audio_under_concurrency(server):
    out = {}

    def one(k):
        out[k] = speech(server, seed=5, mode="spec").content

    ts = [threading.Thread(target=one, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out[0] == out[1] == out[2]


BAD = [
    ({"input": ""}, 400, "input"),
    ({"input": "a" * 401, "input_format": "text"}, 400, "input"),
    ({"input": "qqq<"}, 400, "input"),
    ({"voice": "nobody"}, 400, "voice"),
    ({"model": "/srv/models/other"}, 400, "model"),
    ({"model": "../../etc/passwd"}, 400, "model"),
    ({"model": "codecspec-fsq"}, 400, "model"),  # a model this server did not load
    ({"model_dir": "/tmp"}, 400, "model_dir"),
    ({"response_format": "ogg"}, 400, "response_format"),
    ({"speed": 9.0}, 400, "speed"),
    ({"speed": 0.0}, 400, "speed"),
    ({"temperature": -1.0}, 400, "temperature"),
    ({"top_p": 0.0}, 400, "top_p"),
    ({"top_k": 5000}, 400, "top_k"),
    ({"mode": "fast"}, 400, "mode"),
    ({"accept": "ssd"}, 400, "accept"),
    ({"language": "xx"}, 400, "language"),
    ({"seed": -3}, 400, "seed"),
    ({"subtalker_temperature": 0.0}, 400, "subtalker_temperature"),  # Qwen3-TTS's only
    ({"subtalker_top_k": 5}, 400, "subtalker_top_k"),
]


@pytest.mark.parametrize("patch,status,field", BAD, ids=[b[2] + str(i) for i, b in enumerate(BAD)])
def test_bad_input_names_the_field(server, patch, status, field):
    body = {"input": HELLO, "input_format": "ipa", **patch}
    r = httpx.post(server.url + "/v1/audio/speech", json=body, timeout=60)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert field in err["message"] and err["param"] == field
    assert err["type"] == "invalid_request_error" and err["code"]
    assert idle(server)


@pytest.mark.parametrize(
    "raw,field",
    [
        ('{"input": "x", ', "body"),  # malformed JSON
        ('{"input": "a", "input_format": "ipa", "temperature": NaN}', "temperature"),
        ('{"input": "a", "input_format": "ipa", "speed": Infinity}', "speed"),
        ('{"voice": "alloy"}', "input"),  # missing
    ],
)
def test_malformed_bodies(server, raw, field):
    r = httpx.post(
        server.url + "/v1/audio/speech",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"]
    assert speech(server, seed=2).status_code == 200, "the engine is unaffected"


def test_fault_fails_one_stream_only(server):
    res = {}

    def one(k, seed):
        res[k] = speech(server, seed=seed, input=LONG)

    ts = [threading.Thread(target=one, args=(k, s)) for k, s in enumerate([3, FAIL_AT_START])]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert res[1].status_code == 500 and "injected fault" in res[1].json()["error"]["message"]
    assert res[0].status_code == 200 and check_wav(res[0].content)[0]
    assert server.engine.metrics()["streams_failed_total"] >= 1


def test_fault_mid_stream_truncates_only_that_stream(server):
    res = {}

    def one(k, seed):
        try:
            r = speech(server, seed=seed, input=LONG)
            res[k] = (r.status_code, check_wav(r.content)[0])
        except httpx.HTTPError as e:  # the connection is cut: no complete body
            res[k] = (None, repr(e))

    ts = [threading.Thread(target=one, args=(k, s)) for k, s in enumerate([4, FAIL_MID_STREAM])]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert res[0] == (200, True)
    assert res[1][1] is not True, "a stream that failed mid-way must not look complete"


def test_disconnect_frees_the_slot(server):
    before = server.engine.metrics()["streams_cancelled_total"]
    with httpx.stream(
        "POST",
        server.url + "/v1/audio/speech",
        json={"input": LONG, "input_format": "ipa", "seed": SLOW},
        timeout=60,
    ) as r:
        assert r.status_code == 200
        next(r.iter_bytes())
        assert server.engine.metrics()["active_streams"] == 1
    # Closed mid-stream: the engine drops the stream at its next frame boundary.
    assert wait_for(lambda: server.engine.metrics()["active_streams"] == 0, timeout=10)
    assert server.engine.metrics()["streams_cancelled_total"] == before + 1
    assert len(server.engine._free) == server.engine.max_streams


def test_overload_is_429_with_retry_after(server):
    n = 9  # 3 slots + 2 queued admitted; the rest refused

    async def run():
        async with httpx.AsyncClient(timeout=300) as c:
            body = {"input": LONG, "input_format": "ipa", "response_format": "wav"}
            return await asyncio.gather(
                *(
                    c.post(server.url + "/v1/audio/speech", json={**body, "seed": k})
                    for k in range(n)
                )
            )

    rs = asyncio.run(run())
    codes = [r.status_code for r in rs]
    assert set(codes) <= {200, 429}, codes
    refused = [r for r in rs if r.status_code == 429]
    assert refused and all(int(r.headers["Retry-After"]) >= 1 for r in refused)
    assert all(r.json()["error"]["type"] == "rate_limit_error" for r in refused)
    assert all(check_wav(r.content)[0] for r in rs if r.status_code == 200)
    assert codes.count(200) >= 3
    assert wait_for(lambda: idle(server))


def test_small_load_test(server):
    # Fewer clients than slots + queue so that nothing is refused: every response complete.
    r = asyncio.run(load_test(server.url, clients=4, requests=2, texts=[HELLO], input_format="ipa"))
    assert r["requests"] == 8 and r["valid"] == 8, json.dumps(r)
    assert r["lost"] == 0 and r["status_5xx"] == 0
    assert r["aggregate_realtime"] > 0 and r["ttfa_ms_p50"] > 0
