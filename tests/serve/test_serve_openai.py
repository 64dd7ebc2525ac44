"""The speech server as OpenAI's own Python client sees it (over 127.0.0.1, with an API key):
the TTS quickstart and streaming response unchanged, every voice and format, SSE, every
error class in OpenAI's shape; keys (missing, wrong, malformed: 401, nothing decoded);
clients that leave in the queue or before their first audio."""

from __future__ import annotations

import base64
import io
import json
import socket
import threading

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
av = pytest.importorskip("av")
pytest.importorskip("fastapi")

from serve_util import HELLO, LONG, LocalServer, wait_for  # noqa: E402

from codecspec.serve.engine import Engine  # noqa: E402
from codecspec.serve.openai_api import OPENAI_VOICES, voice_map  # noqa: E402

KEY = "sk-codecspec-test-0123456789"
BLOCK = 4242  # a request whose first step waits for the test (see _fault)
_gate = {"entered": threading.Event(), "release": threading.Event()}


def _fault(req, t):
    # Holds the engine inside the first step of a BLOCK stream until the test releases it,
    # so that "before its first audio" and "while queued" are states the test controls.
    if req.seed == BLOCK and t == 0:
        _gate["entered"].set()
        _gate["release"].wait(60)


@pytest.fixture(scope="module")
def server():
    def factory():
        return Engine("reference", max_streams=1, max_queue=2, threads=1, fault=_fault)

    with LocalServer(factory, api_key=KEY) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0, timeout=120)


def auth(key=KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def post(server, body: dict, headers=None, **kw):
    body = {"input": HELLO, "input_format": "ipa", **body}
    return httpx.post(
        server.url + "/v1/audio/speech",
        json=body,
        headers=auth() if headers is None else headers,
        timeout=120,
        **kw,
    )


def decoded(data: bytes, container=None):
    """(sample rate, samples) of an encoded file, decoded by FFmpeg."""
    with av.open(io.BytesIO(data), format=container) as f:
        s = f.streams.audio[0]
        x = np.concatenate([fr.to_ndarray().reshape(-1) for fr in f.decode(s)])
        return s.rate, x


def idle(server) -> bool:
    m = server.engine.metrics()
    return m["active_streams"] == 0 and m["queue_depth"] == 0


def test_the_tts_quickstart_runs_unchanged(client, server, tmp_path):
    # OpenAI's text-to-speech quickstart, with only base_url (and the key) changed.
    before = server.engine.metrics()["frames_total"]
    speech_file_path = tmp_path / "speech.mp3"
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts",
        voice="coral",
        input="Today is a wonderful day to build something people love!",
        instructions="Speak in a cheerful and positive tone.",
    ) as response:
        response.stream_to_file(speech_file_path)
    assert response.headers["content-type"] == "audio/mpeg"  # OpenAI's default format: mp3
    assert response.headers["x-codecspec-ignored"] == "instructions"
    rate, x = decoded(speech_file_path.read_bytes())
    assert rate == 24000 and len(x) / rate > 1.0 and np.abs(x).max() > 0.01
    assert server.engine.metrics()["frames_total"] > before


def test_plain_create(client):
    r = client.audio.speech.create(model="tts-1", voice="verse", input="Hello world.")
    rate, x = decoded(r.content)
    assert rate == 24000 and len(x) > 0.3 * rate


def test_streaming_response_runs_unchanged(client, tmp_path):
    out = tmp_path / "speech.pcm"
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input="Hello world.", response_format="pcm"
    ) as response:
        response.stream_to_file(out)
    pcm = np.frombuffer(out.read_bytes(), "<i2")
    assert len(pcm) > 0.3 * 24000 and np.abs(pcm).max() > 100


@pytest.mark.parametrize(
    "fmt,container", [("mp3", "mp3"), ("opus", "ogg"), ("aac", "aac"), ("flac", "flac")]
)
def test_every_encoded_format(client, fmt, container):
    r = client.audio.speech.create(
        model="tts-1",
        voice="ash",
        input=HELLO,
        response_format=fmt,
        extra_body={"seed": 3, "input_format": "ipa"},
    )
    rate, x = decoded(r.content, container if fmt == "aac" else None)
    # the same seed's wav, for the length and the level of the audio
    ref = client.audio.speech.create(
        model="tts-1",
        voice="ash",
        input=HELLO,
        response_format="wav",
        extra_body={"seed": 3, "input_format": "ipa"},
    )
    n16 = (len(ref.content) - 44) / 2
    assert rate in (24000, 48000)  # Ogg Opus decodes at 48 kHz
    seconds = len(x) / rate
    assert abs(seconds - n16 / 16000) < 0.12, (fmt, seconds, n16 / 16000)
    assert np.abs(x).max() > 0.01, f"{fmt}: silent"


def test_every_openai_voice_maps_to_a_speaker(server):
    speakers = list(server.engine.voices)
    m = voice_map(speakers)
    assert set(OPENAI_VOICES) <= set(m) and set(m[v] for v in OPENAI_VOICES) <= set(speakers)
    assert len(OPENAI_VOICES) == 13
    # a model with other speakers still gets a speaker for every voice
    assert set(voice_map(["a", "b"]).values()) <= {"a", "b"}
    for voice in OPENAI_VOICES:
        r = post(server, {"voice": voice, "response_format": "pcm"})
        assert r.status_code == 200, (voice, r.text)
    two = [
        post(server, {"voice": v, "seed": 1, "response_format": "pcm"}).content
        for v in ("alloy", "onyx")
    ]
    assert two[0] != two[1], "different voices, different speakers"
    assert post(server, {"voice": {"id": "m3"}, "response_format": "pcm"}).status_code == 200


def test_sse_stream_format(server):
    r = post(server, {"seed": 2, "stream_format": "sse", "response_format": "pcm"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"}
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    plain = post(server, {"seed": 2, "response_format": "pcm"}).content
    assert audio == plain, "the same audio as stream_format audio"
    usage = events[-1]["usage"]
    assert (
        usage["output_tokens"] > 0
        and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    )


BAD_FIELDS = [
    ({"model": 5}, "model"),
    ({"model": "tts-9"}, "model"),
    ({"input": 7}, "input"),
    ({"input": ""}, "input"),
    ({"input": None}, "input"),
    ({"voice": 3}, "voice"),
    ({"voice": "robot"}, "voice"),
    ({"voice": {"name": "x"}}, "voice"),
    ({"instructions": 12}, "instructions"),
    ({"instructions": "x" * 5000}, "instructions"),
    ({"response_format": "ogg"}, "response_format"),
    ({"response_format": 1}, "response_format"),
    ({"speed": "fast"}, "speed"),
    ({"speed": 0.1}, "speed"),
    ({"speed": 4.5}, "speed"),
    ({"speed": True}, "speed"),
    ({"stream_format": "chunks"}, "stream_format"),
    ({"stream_format": None}, "stream_format"),
    ({"seed": "1"}, "seed"),
    ({"stream": True}, "stream"),
]


@pytest.mark.parametrize(
    "patch,param", BAD_FIELDS, ids=[f"{p}{i}" for i, (_, p) in enumerate(BAD_FIELDS)]
)
def test_each_field_wrong_type_or_value_is_a_400(client, server, patch, param):
    before = server.engine.metrics()["frames_total"]
    r = post(server, patch)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["code"]
    assert param in err["message"]
    assert server.engine.metrics()["frames_total"] == before, "nothing decoded"
    # and the official client raises its typed error for it
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(
            model="tts-1", voice="alloy", input=HELLO, extra_body={"input_format": "ipa", **patch}
        )


@pytest.mark.parametrize(
    "raw",
    [b'{"input": "x", ', b'\xff\xfe{"input": "x"}', b"[1, 2]", b'"text"', b""],
    ids=["truncated", "utf8", "array", "string", "empty"],
)
def test_unparseable_bodies_are_400_in_openai_shape(server, raw):
    h = {**auth(), "content-type": "application/json"}
    r = httpx.post(server.url + "/v1/audio/speech", content=raw, headers=h, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_not_found_and_method_not_allowed_are_openai_errors(server):
    r = httpx.get(server.url + "/v1/nothing", headers=auth())
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = httpx.get(server.url + "/v1/audio/speech", headers=auth())
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    big = post(server, {"input": "a" * 70000})
    assert big.status_code == 413 and big.json()["error"]["param"] == "body"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        auth("sk-wrong"),
        auth(KEY[:-1]),
        {"Authorization": KEY},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": "Bearer"},
    ],
    ids=["missing", "wrong", "prefix", "no-scheme", "basic", "empty"],
)
def test_a_bad_key_is_401_and_nothing_is_decoded(server, headers):
    before = server.engine.metrics()["frames_total"]
    r = post(server, {"seed": 1}, headers=headers)
    assert r.status_code == 401, r.text
    err = r.json()["error"]
    assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key"
    assert KEY not in r.text
    assert server.engine.metrics()["frames_total"] == before
    assert httpx.get(server.url + "/metrics", headers=headers).status_code == 401
    assert httpx.get(server.url + "/v1/models", headers=headers).status_code == 401


def test_the_official_client_with_a_wrong_key_gets_authentication_error(server):
    bad = openai.OpenAI(api_key="sk-wrong", base_url=server.url + "/v1", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.audio.speech.create(model="tts-1", voice="alloy", input="Hello.")


def test_health_is_open_and_metrics_need_the_key(server, client):
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/metrics", headers=auth()).status_code == 200
    assert [m.id for m in client.models.list()][0] == "codecspec-reference"


def test_metrics_open_leaves_only_metrics_open():
    from codecspec.serve.app import create_app

    app = create_app(lambda: None, api_key=KEY, metrics_open=True)
    with pytest.raises(ValueError, match="api_key"):
        create_app(lambda: None, api_key=" ")
    mw = [m for m in app.user_middleware if m.cls.__name__ == "KeyCheck"][0]
    assert mw.kwargs["open_paths"] == ("/health", "/metrics")


# --------------------------------------------------------------------------- leaving early
def _send_and_hold(server, body: dict) -> socket.socket:
    """A raw client that sends one request and then reads nothing (closing it = leaving)."""
    data = json.dumps(
        {"input": LONG, "input_format": "ipa", "response_format": "pcm", **body}
    ).encode()
    s = socket.create_connection(("127.0.0.1", server.port))
    head = (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    s.sendall(head.encode() + data)
    return s


def _stream_of(server, seed):
    for s in list(server.engine._active.values()) + list(server.engine._pending):
        if s.request.seed == seed:
            return s
    return None


def test_abandoned_before_first_audio_stops_at_the_next_step(server):
    assert wait_for(lambda: idle(server), 60)
    _gate["entered"].clear()
    _gate["release"].clear()
    before = server.engine.metrics()["streams_cancelled_total"]
    a = _send_and_hold(server, {"seed": BLOCK})
    try:
        assert _gate["entered"].wait(60), "the stream did not start"
        stream = _stream_of(server, BLOCK)
        a.close()  # the client leaves while its first frame is being decoded
        assert wait_for(lambda: stream.handle.cancelled, 30), "the server did not notice"
    finally:
        _gate["release"].set()
    assert wait_for(lambda: idle(server), 60)
    # the step that was running when it left finished; no further frame was decoded
    assert stream.handle.count == 1, stream.handle.count
    assert stream.state.frames > 10
    assert server.engine.metrics()["streams_cancelled_total"] == before + 1


def test_abandoned_in_the_queue_leaves_it_at_once(server):
    assert wait_for(lambda: idle(server), 60)
    _gate["entered"].clear()
    _gate["release"].clear()
    before = server.engine.metrics()["streams_cancelled_total"]
    a = _send_and_hold(server, {"seed": BLOCK})  # takes the only slot and holds the engine
    try:
        assert _gate["entered"].wait(60)
        b = _send_and_hold(server, {"seed": 77})
        assert wait_for(lambda: server.engine.metrics()["queue_depth"] == 1, 60)
        queued = _stream_of(server, 77)
        b.close()
        # the engine is still inside its step: the queue empties without a step boundary
        assert wait_for(lambda: server.engine.metrics()["queue_depth"] == 0, 30)
        assert queued.handle.cancelled and queued.handle.count == 0
        assert _stream_of(server, BLOCK).handle.count == 0, "still the first step"
    finally:
        _gate["release"].set()
        a.close()
    assert wait_for(lambda: idle(server), 60)
    assert server.engine.metrics()["streams_cancelled_total"] == before + 2


def test_overload_is_a_rate_limit_error_with_retry_after(server):
    assert wait_for(lambda: idle(server), 60)
    _gate["entered"].clear()
    _gate["release"].clear()
    held = [_send_and_hold(server, {"seed": BLOCK})]
    try:
        assert _gate["entered"].wait(60)
        held += [_send_and_hold(server, {"seed": 80 + k}) for k in range(2)]  # the queue
        assert wait_for(lambda: server.engine.metrics()["queue_depth"] == 2, 60)
        r = post(server, {"seed": 90})
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        err = r.json()["error"]
        assert err["type"] == "rate_limit_error" and err["code"] == "rate_limit_exceeded"
        c = openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            c.audio.speech.create(model="tts-1", voice="alloy", input="Hello.")
    finally:
        _gate["release"].set()
        for s in held:
            s.close()
    assert wait_for(lambda: idle(server), 60)


def test_an_abandoned_whole_wav_stops_decoding():
    # A stop-head model's WAV is sent whole at the end: a client that leaves before then
    # must not cost the rest of the decode (the issue: it used to decode to the end).
    def slow(req, t):
        if req.seed == 31:
            import time

            time.sleep(0.02)  # a stream surely still decoding when its client leaves

    with LocalServer(lambda: Engine("fsq", max_streams=2, threads=1, fault=slow)) as fsq:
        s = socket.create_connection(("127.0.0.1", fsq.port))
        data = json.dumps(
            {"input": LONG, "input_format": "ipa", "response_format": "wav", "seed": 31}
        ).encode()
        head = (
            "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        )
        s.sendall(head.encode() + data)
        assert wait_for(lambda: _stream_of(fsq, 31) is not None, 60)
        stream = _stream_of(fsq, 31)
        assert wait_for(lambda: stream.handle.count >= 3, 60)
        s.close()
        assert wait_for(lambda: stream.handle.cancelled, 30), "the server did not notice"
        at_cancel = stream.handle.count
        assert wait_for(lambda: idle(fsq), 30)
        assert stream.handle.count <= at_cancel + 1 < stream.state.limit
        assert fsq.engine.metrics()["streams_cancelled_total"] == 1
        # a format this model cannot stream: WAV over SSE needs the length in advance
        body = {"input": HELLO, "input_format": "ipa", "response_format": "wav"}
        frames = fsq.engine.metrics()["frames_total"]
        r = httpx.post(fsq.url + "/v1/audio/speech", json={**body, "stream_format": "sse"})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == "response_format"
        assert err["code"] == "unsupported_value"
        assert fsq.engine.metrics()["frames_total"] == frames, "nothing decoded"
        sse = httpx.post(
            fsq.url + "/v1/audio/speech",
            json={**body, "response_format": "pcm", "stream_format": "sse"},
            timeout=120,
        )
        assert sse.status_code == 200 and "speech.audio.done" in sse.text
