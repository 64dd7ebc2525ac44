"""Hostile input to the speech app, in process (issue 51): text a C string boundary would cut,
lone surrogates, invalid UTF-8, bodies past the size limit on every transfer encoding. Every
answer is a 4xx in the API's own error shape naming the field, never a 5xx or a traceback."""

from __future__ import annotations

import asyncio
import logging

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from serve_util import HELLO, Tracebacks  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from codecspec.serve.app import MAX_BODY_BYTES, create_app  # noqa: E402
from codecspec.serve.engine import Engine  # noqa: E402

SPEECH = "/v1/audio/speech"


@pytest.fixture(scope="module")
def tracebacks():
    h = Tracebacks()
    logging.getLogger().addHandler(h)
    yield h
    logging.getLogger().removeHandler(h)


@pytest.fixture(scope="module")
def client(tracebacks):
    def factory():
        return Engine("reference", max_streams=2, max_queue=2, threads=1)

    # raise_server_exceptions: an exception that escapes the app fails the test itself
    with TestClient(create_app(factory)) as c:
        yield c
    assert not tracebacks.records, [r.getMessage() for r in tracebacks.records]


def raw(client, body: bytes):
    return client.post(SPEECH, content=body, headers={"content-type": "application/json"})


def refused(r, status: int, param: str, code=None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"].startswith(param + ":"), err
    assert err["type"] == "invalid_request_error"
    if code is not None:
        assert err["code"] == code, err
    return err


@pytest.mark.parametrize(
    "text", ["Hi\x00 this is a much longer sentence.", "Hi \x1b[31m there", "Hi\x7f", "a\x85b"]
)
def test_control_characters_in_input_are_refused_naming_input(client, text):
    # Before: a NUL ended espeak-ng's C string, so 200 with the audio of "Hi" alone.
    err = refused(client.post(SPEECH, json={"input": text, "seed": 1}), 400, "input")
    assert "control character U+" in err["message"]


def test_a_nul_in_ipa_input_is_refused_too(client):
    body = {"input": HELLO + "\x00" + HELLO, "input_format": "ipa", "seed": 1}
    refused(client.post(SPEECH, json=body), 400, "input")


def test_a_lone_surrogate_in_input_is_a_400_naming_input(client, tracebacks):
    # JSON's own escape: json.loads gives the lone surrogate, which has no UTF-8 form
    for body in (rb'{"input": "Hi \ud800 there"}', rb'{"input": "\udfff", "input_format": "ipa"}'):
        err = refused(raw(client, body), 400, "input")
        assert "surrogate" in err["message"]
    assert not tracebacks.records


def test_a_lone_surrogate_in_other_fields_is_a_400_naming_them(client):
    for field in ("voice", "language", "model"):
        body = b'{"input": "%s", "input_format": "ipa", "%s": "x\\ud800"}' % (
            HELLO.encode(),
            field.encode(),
        )
        refused(raw(client, body), 400, field)


def test_text_with_nothing_to_say_is_refused_naming_input(client):
    # Found by the fuzzing (test_serve_fuzz.py): the front end's "text: espeak-ng found
    # nothing to say" reached the client as param "text", a field the API does not have.
    err = refused(client.post(SPEECH, json={"input": ";", "seed": 1}), 400, "input")
    assert "nothing to say" in err["message"]


def test_invalid_utf8_is_invalid_json(client):
    refused(raw(client, b'{"input": "Hi \xff there"}'), 400, "body", code="invalid_json")
    refused(raw(client, b'{"input": "x", '), 400, "body", code="invalid_json")


def test_tab_and_newline_are_spoken(client):
    # the whitespace controls a text file holds stay allowed (the IPA tokenizer reads them as
    # word boundaries)
    text = HELLO.replace(" ", "\t", 1).replace(" ", "\n", 1)
    r = client.post(SPEECH, json={"input": text, "input_format": "ipa", "response_format": "pcm"})
    assert r.status_code == 200, r.text
    assert len(r.content) > 0


def test_the_engine_is_unaffected(client):
    r = client.post(SPEECH, json={"input": HELLO, "input_format": "ipa", "response_format": "wav"})
    assert r.status_code == 200, r.text


# --------------------------------------------------------------------------- body size
def _chunked_post(app, chunks: int, size: int):
    """POST a JSON body as `chunks` pieces of `size` bytes without a Content-Length
    (httpx sends a generator's body chunked); returns (response, pieces the app pulled)."""
    pulled = [0]

    async def body():
        yield b'{"input": "'
        for _ in range(chunks):
            pulled[0] += 1
            yield b"a" * size
        yield b'", "unknown": 1}'  # refused by validation once parsed: no engine needed

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.post(
                SPEECH, content=body(), headers={"content-type": "application/json"}
            )

    return asyncio.run(run()), pulled[0]


def test_a_chunked_body_past_the_limit_is_413_before_it_is_read():
    # No engine needed: the body is refused before any route runs (no lifespan here).
    app = create_app(lambda: None)
    size = 4096
    r, pulled = _chunked_post(app, chunks=10_000, size=size)  # 40 MB offered
    refused(r, 413, "body", code="request_too_large")
    # the app stopped pulling right after the limit: one piece past it, not 40 MB
    assert pulled <= MAX_BODY_BYTES // size + 1, pulled
    assert app.state.requests == {413: 1}


def test_a_chunked_body_within_the_limit_is_read():
    app = create_app(lambda: None)
    r, pulled = _chunked_post(app, chunks=2, size=100)
    assert pulled == 2
    refused(r, 400, "unknown", code="unknown_parameter")  # read and parsed in full


def test_content_length_past_the_limit_is_413(client):
    r = raw(client, b'{"input": "' + b"a" * MAX_BODY_BYTES + b'"}')
    refused(r, 413, "body", code="request_too_large")
