"""The WebSocket text-in endpoint (issue 49 item 2, serve/text_socket.py) over a tiny
Qwen3-TTS checkpoint, in process (Starlette's TestClient): the audio of an utterance whose
text came in many messages is the whole text's (`stream(text, streaming_text=True)` with the
session's seed), base64 and binary; flush starts a new utterance; bad messages get OpenAI's
error shape and the session goes on; the API key is the HTTP routes'; a client that leaves
frees its runtime; a family that needs the whole text says so."""

from __future__ import annotations

import base64
import time

import numpy as np
import pytest
from paths import DATA

pytest.importorskip("tokenizers")
pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402
from starlette.websockets import WebSocketDisconnect  # noqa: E402

from codecspec.serve.app import create_app  # noqa: E402
from codecspec.serve.audio import pcm16  # noqa: E402
from codecspec.serve.engine import Engine  # noqa: E402
from codecspec.serve.text_socket import ROUTE  # noqa: E402

MODEL = DATA / "qwen3_tiny" / "custom_equal"
TEXT = "It's 12, café 你好! More words to say."
KEY = "sk-test"
AUTH = {"Authorization": f"Bearer {KEY}"}
SETTINGS = {"voice": "aiden", "language": "english", "seed": 3, "mode": "ar"}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    cache = tmp_path_factory.mktemp("qwen3_socket")

    def factory():
        return Engine(MODEL, max_streams=2, max_queue=2, threads=1, cache_dir=cache)

    with TestClient(create_app(factory, api_key=KEY, vocoder_iters=4)) as c:
        yield c


def _want(client, text: str, seed: int = 3, **law) -> np.ndarray:
    tts = client.app.state.engine.tts.replica()
    kw = dict(speaker="aiden", language="english", seed=seed, mode="ar", **law)
    kw["max_frames"] = min(client.app.state.engine.family.max_frames, 19)
    audio = np.concatenate(list(tts.stream(text, streaming_text=True, **kw)))
    return np.frombuffer(pcm16(audio), "<i2")


def _utterance(ws, binary: bool = False):
    """(PCM samples, the utterance.done message, the errors) until the utterance ends."""
    pcm, errors, offset = [], [], None
    while True:
        m = ws.receive_json()
        if m["type"] == "error":
            errors.append(m)
        elif m["type"] == "audio":
            offset = m["offset"] if offset is None else offset
            raw = ws.receive_bytes() if binary else base64.b64decode(m["audio"])
            assert len(raw) == 2 * m["samples"]
            pcm.append(np.frombuffer(raw, "<i2"))
        elif m["type"] == "utterance.done":
            return np.concatenate(pcm) if pcm else np.zeros(0, "<i2"), m, errors


@pytest.mark.parametrize("output", ["base64", "binary"])
def test_text_in_many_messages_gives_the_whole_texts_audio(client, output):
    with client.websocket_connect(ROUTE, headers=AUTH) as ws:
        ws.send_json(dict(SETTINGS, output=output))
        started = ws.receive_json()
        assert started["type"] == "session.started" and started["sample_rate"] == 24000
        for i in range(0, len(TEXT), 2):  # cut inside words and inside "é"'s neighbours
            ws.send_json({"text": TEXT[i : i + 2]})
        ws.send_json({"end": True})
        pcm, done, errors = _utterance(ws, binary=output == "binary")
        assert not errors and done["streaming_text"] is True
        np.testing.assert_array_equal(pcm, _want(client, TEXT))
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()  # closed after the last audio


def test_flush_starts_a_new_utterance_and_bad_messages_leave_the_session_usable(client):
    with client.websocket_connect(ROUTE, headers=AUTH) as ws:
        ws.send_text("not json")
        assert ws.receive_json()["error"]["code"] == "invalid_json"
        ws.send_json(dict(SETTINGS, text="Hello"))
        assert ws.receive_json()["type"] == "session.started"
        bad = [{"txt": "x"}, {"text": 5}, {"text": "a\x00b"}, "binary"]
        for b in bad:
            ws.send_bytes(b"\x00\x01") if b == "binary" else ws.send_json(b)
        ws.send_json({"text": " there.", "flush": True})
        pcm1, done1, errors = _utterance(ws)
        assert len(errors) == len(bad)
        assert all(e["error"]["type"] == "invalid_request_error" for e in errors)
        assert [e["error"]["param"] for e in errors] == ["txt", "text", "text", "body"]
        for k in range(100):  # a session survives many small messages
            ws.send_json({"text": "ab "[k % 3]})
        ws.send_json({"text": ""})  # ElevenLabs' end message
        pcm2, done2, errors2 = _utterance(ws)
        assert not errors2 and done2["utterance"] == 2
    np.testing.assert_array_equal(pcm1, _want(client, "Hello there."))
    np.testing.assert_array_equal(pcm2, _want(client, "".join("ab "[k % 3] for k in range(100))))


def test_the_code_predictors_law_is_a_setting(client):
    law = {"subtalker_temperature": 0.0}
    with client.websocket_connect(ROUTE, headers=AUTH) as ws:
        ws.send_json(dict(SETTINGS, text="Hello there.", end=True, **law))
        assert ws.receive_json()["type"] == "session.started"
        pcm, _, errors = _utterance(ws)
    assert not errors
    np.testing.assert_array_equal(pcm, _want(client, "Hello there.", **law))
    assert not np.array_equal(pcm, _want(client, "Hello there."))  # the setting matters


def test_bad_settings_are_answered_and_the_next_ones_taken(client):
    cases = [({"voice": "nobody"}, "voice"), ({"top_p": 2}, "top_p")]
    cases += [({"subtalker_top_k": -2}, "subtalker_top_k")]
    with client.websocket_connect(ROUTE, headers=AUTH) as ws:
        for bad, param in cases:
            ws.send_json(bad)
            e = ws.receive_json()
            assert e["type"] == "error" and e["error"]["param"] == param
        ws.send_json(SETTINGS)
        assert ws.receive_json()["type"] == "session.started"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_the_api_key_is_the_http_routes(client, headers):
    with client.websocket_connect(ROUTE, headers=headers) as ws:
        e = ws.receive_json()
        assert e["error"]["type"] == "authentication_error"
        with pytest.raises(WebSocketDisconnect) as gone:
            ws.receive_json()
        assert gone.value.code == 1008


def test_a_client_that_leaves_frees_its_runtime(client):
    pool_size = client.app.state.engine.max_streams
    for _ in range(pool_size + 1):  # more sessions than runtimes, one after another
        with client.websocket_connect(ROUTE, headers=AUTH) as ws:
            ws.send_json(dict(SETTINGS, text="It's 12, café and more"))  # never ended
            assert ws.receive_json()["type"] == "session.started"
            assert ws.receive_json()["type"] == "audio"
    pool = client.app.state.text_sockets
    deadline = time.monotonic() + 10
    while len(pool.free) < pool.made and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(pool.free) == pool.made <= pool_size


def test_a_family_that_needs_the_whole_text_says_so():
    def factory():
        return Engine("reference", max_streams=1, max_queue=1, threads=1)

    with TestClient(create_app(factory)) as c, c.websocket_connect(ROUTE) as ws:
        e = ws.receive_json()
        assert e["error"]["param"] == "model" and "whole text" in e["error"]["message"]
        with pytest.raises(WebSocketDisconnect) as gone:
            ws.receive_json()
        assert gone.value.code == 1003


def test_one_session_more_than_runtimes_is_told_to_retry(client):
    hold = dict(SETTINGS, text="It's 12, café and more")
    with client.websocket_connect(ROUTE, headers=AUTH) as a:
        a.send_json(hold)
        assert a.receive_json()["type"] == "session.started"
        with client.websocket_connect(ROUTE, headers=AUTH) as b:
            b.send_json(hold)
            assert b.receive_json()["type"] == "session.started"
            with client.websocket_connect(ROUTE, headers=AUTH) as c:
                c.send_json(SETTINGS)
                e = c.receive_json()
                assert e["error"]["type"] == "rate_limit_error"
                with pytest.raises(WebSocketDisconnect) as gone:
                    c.receive_json()
                assert gone.value.code == 1013
