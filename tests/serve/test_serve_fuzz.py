"""Input fuzzing of the speech app (issue 51), in process against the ASGI app over the
smallest shipped model (reference v1): arbitrary Unicode in `input` (lone surrogates, NUL and
other controls, combining marks, bidi controls, many scripts) and arbitrary JSON values and
shapes for every field of POST /v1/audio/speech. Whatever comes in: never a 5xx, never a
traceback logged, every answer either a 4xx in the API's error shape naming the field, or
audio of the text as given (a text that a C string or UTF-8 boundary would alter is refused,
never spoken cut); the server healthy and idle after each example.

CI runs a bounded number of examples (the same ones every run: the suite's derandomized
profile). The nightly size, with fresh random examples:

    CODECSPEC_FUZZ=nightly python3 -m pytest -q tests/serve/test_serve_fuzz.py

(docs/testing.md; CODECSPEC_FUZZ_EXAMPLES=N sets the count of either).
"""

from __future__ import annotations

import json
import logging
import os
import unicodedata

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from serve_util import Tracebacks, wait_for  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from codecspec.serve.app import SpeechBody, create_app  # noqa: E402
from codecspec.serve.audio import FORMATS, MEDIA_TYPES  # noqa: E402
from codecspec.serve.engine import Engine  # noqa: E402
from codecspec.serve.openai_api import OPENAI_VOICES  # noqa: E402

NIGHTLY = os.environ.get("CODECSPEC_FUZZ") == "nightly"
EXAMPLES = int(os.environ.get("CODECSPEC_FUZZ_EXAMPLES", 5000 if NIGHTLY else 80))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=not NIGHTLY,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FIELDS = tuple(SpeechBody.model_fields)
ALLOWED_CONTROLS = "\t\n\x0b\x0c\r"


@pytest.fixture(scope="module")
def client():
    def factory():
        return Engine("reference", max_streams=2, max_queue=2, threads=1)

    # 4 Griffin-Lim iterations: the audio is not judged here, only its presence and length
    with TestClient(create_app(factory, vocoder_iters=4)) as c:
        yield c


@pytest.fixture(scope="module")
def tracebacks():
    h = Tracebacks()
    logging.getLogger().addHandler(h)
    yield h
    logging.getLogger().removeHandler(h)


def altered_at_a_boundary(text: str) -> bool:
    """Whether a C string or UTF-8 boundary would alter `text` (restated from Unicode's
    categories, independently of frontend/textcheck.py)."""
    return any(
        unicodedata.category(c) == "Cs"
        or (unicodedata.category(c) == "Cc" and c not in ALLOWED_CONTROLS)
        for c in text
    )


def post(client, body) -> tuple:
    """(the body as the server decodes it, the response). json.dumps escapes lone surrogates
    (\ud800) and writes NaN / Infinity, as a hostile client may (httpx's own json= refuses
    both); two escapes that form a surrogate pair decode to one character, as JSON says."""
    raw = json.dumps(body)
    r = client.post(
        "/v1/audio/speech", content=raw.encode(), headers={"content-type": "application/json"}
    )
    return json.loads(raw), r


def check_answer(client, tracebacks, body, r) -> None:
    """The property every answer must hold, then the server's health."""
    assert r.status_code < 500, (body, r.status_code, r.text[:300])
    event(f"status {r.status_code}")  # --hypothesis-show-statistics: how many were spoken
    assert not tracebacks.records, [x.getMessage() for x in tracebacks.records]
    if r.status_code >= 400:
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
        param = err["param"]
        event(f"refused naming {param}")
        assert param in FIELDS + ("body",) or (isinstance(body, dict) and param in body), err
        assert err["message"].startswith(f"{param}:"), err
        assert err["type"] == "invalid_request_error" and err["code"], err
        if isinstance(body, dict) and isinstance(body.get("input"), str):
            if altered_at_a_boundary(body["input"]) and param == "input":
                assert "contains" in err["message"] or "empty" in err["message"], err
    else:
        assert r.status_code == 200, r.status_code
        assert isinstance(body, dict) and isinstance(body.get("input"), str)
        # audio only for text no boundary alters: the rest is refused, never spoken cut
        assert not altered_at_a_boundary(body["input"]), body
        fmt = body.get("response_format", "mp3")
        sse = body.get("stream_format") == "sse"
        kind = "text/event-stream" if sse else MEDIA_TYPES[fmt]
        assert r.headers["content-type"].startswith(kind), r.headers
        assert len(r.content) > 0
    assert client.get("/health").status_code == 200
    engine = client.app.state.engine
    assert wait_for(lambda: engine.idle, timeout=60), "a stream outlived its request"


# --------------------------------------------------------------------------- strategies
# Every code point, lone surrogates included (Hypothesis leaves them out unless asked).
ANY_CHAR = st.characters(exclude_categories=())
SPECIALS = st.sampled_from(
    [
        "\x00",
        "\x07",
        "\x1b",
        "\x7f",
        "\x85",
        "\ud800",
        "\udfff",
        "\t",
        "\n",
        "\u0301",  # combining acute
        "\u200d",  # zero-width joiner
        "\u202e",  # right-to-left override
        "\u200f",  # right-to-left mark
        "\ufeff",  # byte-order mark
        "\U0001f600",
    ]
)
WORDS = st.sampled_from(["Hi", "there", "this", "is", "a", "test", "שלום", "مرحبا", "你好", "é"])


@st.composite
def texts(draw) -> str:
    """Short texts: words with special characters between them, or any code points."""
    if draw(st.booleans()):
        parts = draw(st.lists(st.one_of(WORDS, SPECIALS, st.just(" ")), min_size=1, max_size=8))
        return "".join(parts)
    return draw(st.text(ANY_CHAR, min_size=0, max_size=10))


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(ANY_CHAR, max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
# Per field: a value that field takes, or any JSON value at all.
PLAUSIBLE = {
    "model": st.sampled_from([None, "tts-1", "gpt-4o-mini-tts", "codecspec-reference", "fsq"]),
    "voice": st.sampled_from([*list(OPENAI_VOICES)[:3], "f1", "nobody", {"id": "m1"}, {"x": 1}]),
    "instructions": texts(),
    "response_format": st.sampled_from(FORMATS),
    "speed": st.floats(min_value=2.0, max_value=4.0) | st.sampled_from([0.1, 9.0, 4]),
    "stream_format": st.sampled_from(["audio", "sse", "raw"]),
    "input_format": st.sampled_from(["text", "ipa"]),
    "language": st.sampled_from(["en", "de", "xx"]),
    "seed": st.integers(min_value=-1, max_value=2**64),
    "mode": st.sampled_from(["auto", "ar", "spec", "fast"]),
    "accept": st.sampled_from(["exact", "ssd"]),
    "temperature": st.floats(min_value=-1.0, max_value=11.0),
    "top_k": st.integers(min_value=-1, max_value=5000),
    "top_p": st.floats(min_value=-0.1, max_value=1.1),
}


@st.composite
def bodies(draw):
    """A request body: mostly an object with a short `input` and some fields, each a value
    it takes or any JSON; sometimes no object at all, or unknown keys."""
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON)
    if draw(st.integers(0, 2)) > 0:  # a text the model speaks, in its format
        text, fmt = draw(st.sampled_from([("hˈaɪ", "ipa"), ("Hi there.", "text")]))
        body = {"input": text, "input_format": fmt}
    else:
        body = {"input": draw(texts() | JSON)}
    if draw(st.booleans()):
        body["speed"] = 4.0  # short audio: the fuzz's budget goes to inputs, not decoding
    for name in draw(st.lists(st.sampled_from(list(PLAUSIBLE)), unique=True, max_size=4)):
        # mostly a value of the field's own kind, so that requests get past validation too
        body[name] = draw(st.one_of(PLAUSIBLE[name], PLAUSIBLE[name], JSON))
    if draw(st.integers(0, 4)) == 0:
        body[draw(st.text(max_size=6))] = draw(JSON)
    return body


# --------------------------------------------------------------------------- properties
@FUZZ
@given(text=texts(), fmt=st.sampled_from(["text", "ipa"]))
def test_any_input_text_is_refused_naming_input_or_spoken_whole(client, tracebacks, text, fmt):
    body = {"input": text, "input_format": fmt, "speed": 4.0, "response_format": "pcm"}
    body, r = post(client, body)
    check_answer(client, tracebacks, body, r)
    if altered_at_a_boundary(body["input"]):
        assert r.status_code == 400 and r.json()["error"]["param"] == "input", r.text


@FUZZ
@given(body=bodies())
def test_any_json_body_is_refused_naming_the_field_or_spoken(client, tracebacks, body):
    check_answer(client, tracebacks, *post(client, body))


@FUZZ
@given(raw=st.binary(max_size=64))
def test_any_bytes_as_a_body_are_refused_naming_the_body(client, tracebacks, raw):
    r = client.post("/v1/audio/speech", content=raw, headers={"content-type": "application/json"})
    check_answer(client, tracebacks, raw, r)
