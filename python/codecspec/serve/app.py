"""The OpenAI-compatible speech server: FastAPI over one continuous-batching `Engine`.

POST /v1/audio/speech takes OpenAI's request (`model`, `input`, `voice`, `instructions`,
`response_format`, `speed`, `stream_format`) plus codecspec's own fields, and streams audio
as the engine decodes frames: the codes of a few frames are vocoded and encoded (in a worker
thread, outside the engine's step) and sent at once, as raw audio or as OpenAI's server-sent
events (`speech.audio.delta`, `speech.audio.done`). The response starts only after the first
frame, so a request that fails before any audio gets a proper error status; a client that
leaves before then stops its stream at the next step (or leaves the queue at once).

Every error is OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`: 400
`invalid_request_error` for any invalid request (never FastAPI's 422), 401 for a missing or
wrong key, 404 / 405, 429 `rate_limit_error` with Retry-After, 5xx `server_error`.

A request names a model and a voice from fixed lists, never a path: the server loads its one
model folder at start-up (`codecspec serve --model reference|fsq|v2|v3|DIR`, DIR also a
Qwen3-TTS checkpoint folder). `codecspec-reference`, `codecspec-fsq`, ... and
`qwen3-tts-<folder>` name a family; OpenAI's model names name whichever model was loaded.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import math
import os
import secrets
import time
from typing import Callable, Literal, Optional, Union

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from codecspec.frontend.phonemes import PhonemizerError
from codecspec.serve.audio import (
    FORMATS,
    MEDIA_TYPES,
    OPENAI_RATE,
    available_formats,
    encoder,
    wav_header,
)
from codecspec.serve.engine import Engine, Overloaded, SpeechRequest, StreamFailed
from codecspec.serve.heap import HeapTrimmer
from codecspec.serve.openai_api import (
    Mode,
    Seed,
    Temperature,
    TopK,
    TopP,
    error_body,
    field_of,
    key_error,
    model_error,
    served_models,
    speaker_of,
)
from codecspec.serve.text_socket import add_text_socket

log = logging.getLogger("codecspec.serve")

FIRST_CHUNK_FRAMES = 3  # a short first chunk keeps the time to first audio low
CHUNK_FRAMES = 10
CONTEXT_FRAMES = 2  # vocoded with each chunk and dropped: smoother chunk boundaries
MAX_BODY_BYTES = 64 * 1024  # a request is a few hundred characters of text
DRAIN_RETRY_AFTER = 5  # seconds a draining server asks clients to wait (Retry-After)


class VoiceRef(BaseModel):
    """OpenAI's custom-voice object; here `id` names one of the model's speakers."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: str


class SpeechBody(BaseModel):
    """OpenAI's /v1/audio/speech fields, plus codecspec's own (seed, mode, accept, sampling).
    Strict: a field of the wrong JSON type is refused, never coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: Optional[str] = None  # None: the loaded model
    input: str
    voice: Union[str, VoiceRef] = "alloy"
    instructions: Optional[str] = Field(None, max_length=4096)
    response_format: Literal[FORMATS] = "mp3"  # type: ignore[valid-type]
    speed: float = Field(1.0, ge=0.25, le=4.0, allow_inf_nan=False)
    stream_format: Literal["audio", "sse"] = "audio"
    input_format: Literal["text", "ipa"] = "text"  # ipa: espeak-ng IPA instead of text
    # absent (or null): the model's default (`Family.default_language`): "en" for the phoneme
    # families, "auto" for Qwen3-TTS as its official methods (a language tag changes codes)
    language: Optional[str] = None
    seed: Seed = None
    mode: Mode = "auto"
    accept: Literal["exact"] = "exact"  # lossless verification is the only rule served
    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None
    # Qwen3-TTS's code predictor's own law, as the official methods' keywords of these names
    # (absent: the checkpoint's; temperature 0 alone makes both greedy); other families 400
    subtalker_temperature: Temperature = None
    subtalker_top_k: TopK = None
    subtalker_top_p: TopP = None
    # Qwen3-TTS prompt layout: true streaming text, false whole text; absent (or null) the
    # official default of the checkpoint's mode (streaming for a Base voice clone, whole
    # text for CustomVoice / VoiceDesign). Strict: "true" or 1 is a 400 naming the field.
    streaming_text: Optional[bool] = None


# --------------------------------------------------------------------------- errors
def _error(status: int, message: str, param=None, headers=None, code=None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status, headers=headers)


# Pydantic's error kinds -> OpenAI-style codes (400 in every case)
_VALIDATION_CODES = {
    "missing": "missing_required_parameter",
    "extra_forbidden": "unknown_parameter",
    "json_invalid": "invalid_json",
    "literal_error": "unsupported_value",
}


def _validation_error(errs: list) -> JSONResponse:
    first = errs[0] if errs else {}
    param = _loc(first) if first else "body"
    kind = str(first.get("type", ""))
    code = _VALIDATION_CODES.get(kind)
    if code is None:
        code = "invalid_type" if kind.endswith("_type") or "parsing" in kind else "invalid_value"
    msgs = "; ".join(f"{_loc(e)}: {e['msg']}" for e in errs) or "body: invalid request"
    return _error(400, msgs, param, code=code)


def _loc(err: dict) -> str:
    """The field a validation error is about ("body" for JSON that does not parse)."""
    names = [str(x) for x in err.get("loc", ()) if isinstance(x, str) and x != "body"]
    names = [n for n in names if n not in ("str", "VoiceRef")]  # union branches of `voice`
    return ".".join(names[:1]) or "body"


# --------------------------------------------------------------------------- API keys
class BodyTooLarge(Exception):
    """Raised by KeyCheck's receive once a body has passed MAX_BODY_BYTES."""


class KeyCheck:
    """ASGI middleware: with a key set, every request but the open paths needs
    `Authorization: Bearer <key>` (compared in constant time; the key is never logged or
    echoed), else 401 in OpenAI's shape before the body is read. Also refuses bodies over
    MAX_BODY_BYTES (413): at once from a Content-Length, and for a body without one
    (`Transfer-Encoding: chunked`) as soon as the bytes received pass the limit, without
    reading the rest."""

    def __init__(self, app, key: Optional[str], open_paths=("/health",), on_refuse=None):
        self.app, self.open_paths, self.on_refuse = app, tuple(open_paths), on_refuse
        self.key = None if key is None else key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {}
        for k, v in scope.get("headers", ()):
            headers.setdefault(k.lower(), v)  # the first of repeated headers
        refusal = self._refusal(scope["path"], headers)
        if refusal is None:
            return await self._limited(scope, receive, send)
        if self.on_refuse is not None:
            self.on_refuse(refusal.status_code)
        await refusal(scope, receive, send)

    async def _limited(self, scope, receive, send):
        """The app with a receive that counts body bytes as they arrive. Past the limit it
        raises BodyTooLarge inside whatever reads the body; the framework turns that into
        some error response of its own (FastAPI: a 400 "error parsing the body"), which is
        dropped here, and the 413 is answered instead. Nothing more is received, so the
        server never buffers the rest (uvicorn closes the connection after the answer)."""
        seen, over, started = 0, False, False

        async def receive_counted():
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > MAX_BODY_BYTES:
                    over = True
                    raise BodyTooLarge(f"body: more than {MAX_BODY_BYTES} bytes")
            return message

        async def send_unless_over(message):
            nonlocal started
            if over and not started:
                return  # the app's answer to BodyTooLarge: the 413 below replaces it
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive_counted, send_unless_over)
        except BodyTooLarge:
            pass  # a framework that let it through: answered below all the same
        if over and not started:
            if self.on_refuse is not None:
                self.on_refuse(413)
            # the rest of the body stays unread: this connection cannot carry another request
            close = {"Connection": "close"}
            too_large = _error(413, f"body: at most {MAX_BODY_BYTES} bytes", "body", close)
            await too_large(scope, receive, send)

    def _refusal(self, path: str, headers: dict) -> Optional[JSONResponse]:
        if self.key is not None and path not in self.open_paths:
            bad = key_error(self.key, headers.get(b"authorization"))
            if bad is not None:
                return _error(401, bad, None, headers={"WWW-Authenticate": "Bearer"})
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return _error(413, f"body: at most {MAX_BODY_BYTES} bytes", "body")
        return None


# --------------------------------------------------------------------------- audio out
def chunk_frames(sent: int, first: int = FIRST_CHUNK_FRAMES) -> int:
    """Frames in the next chunk after `sent`: a short first chunk (`first`: the family's
    `first_chunk_frames`), then never more than the client already holds, so a stream
    decoded at real-time pace never starves playback."""
    return first if sent == 0 else min(CHUNK_FRAMES, sent)


class FirstAudio:
    """Seconds from a request's arrival to its first audio bytes, over the server's life
    (count and sum: a Prometheus summary) and over the last `window` requests (median)."""

    def __init__(self, window: int = 256) -> None:
        self.count, self.total = 0, 0.0
        self.recent: collections.deque = collections.deque(maxlen=window)

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.recent.append(seconds)

    def median(self) -> float:
        return float(np.median(self.recent)) if self.recent else 0.0


class AudioStream:
    """Turns a stream's frames into encoded audio bytes chunk by chunk (vocoder, resampler
    and encoder run in a worker thread)."""

    def __init__(
        self,
        engine: Engine,
        handle,
        first,
        seed: int,
        iters: int,
        fmt: str,
        voice=None,
        arrived: Optional[float] = None,
        first_audio: Optional[FirstAudio] = None,
    ):
        self.engine, self.handle, self.seed, self.iters = engine, handle, seed, iters
        # perf_counter() at the request's arrival, and where its time to first audio goes
        self.arrived, self.first_audio = arrived, first_audio
        self.codes = [first]
        self.sent = 0  # frames already vocoded and sent
        self.encoder = encoder(fmt, engine.sample_rate)
        # None: context frames
        self.decoder = engine.family.chunk_decoder(iters, seed, voice=voice)

    def _encode(self, block: np.ndarray, start: int) -> bytes:
        wav = self.engine.family.codec.decode(block, self.iters, self.seed)
        return self.encoder.feed(wav[start:])

    def _encode_next(self, block: np.ndarray) -> bytes:
        return self.encoder.feed(self.decoder.feed(block))

    async def chunks(self):
        try:
            async for out in self._chunks():
                yield out
        finally:  # a batched decoder stops waiting for this stream's chunks
            close = getattr(self.decoder, "close", None)
            if close is not None:
                close()

    async def _chunks(self):
        hop = self.engine.family.hop
        done = False
        first = getattr(self.engine.family, "first_chunk_frames", FIRST_CHUNK_FRAMES)
        while not done:
            want = chunk_frames(self.sent, first)
            while len(self.codes) - self.sent < want:
                frame = await self.handle.next()
                if frame is None:
                    done = True
                    break
                self.codes.append(frame)
            if len(self.codes) == self.sent:
                break
            if self.decoder is not None:  # it holds the context itself
                block, self.sent = np.stack(self.codes[self.sent :]), len(self.codes)
                out = await run_in_threadpool(self._encode_next, block)
            else:
                lo = max(0, self.sent - CONTEXT_FRAMES)
                block = np.stack(self.codes[lo:])
                start = (self.sent - lo) * hop
                self.sent = len(self.codes)
                out = await run_in_threadpool(self._encode, block, start)
            if out:
                self._first_out()
                yield out
        tail = await run_in_threadpool(self.encoder.close)
        if tail:
            yield tail

    def _first_out(self) -> None:
        if self.first_audio is not None and self.arrived is not None:
            self.first_audio.add(time.perf_counter() - self.arrived)
            self.first_audio = None  # once per request


def sse_event(kind: str, **fields) -> bytes:
    return f"data: {json.dumps({'type': kind, **fields})}\n\n".encode()


# --------------------------------------------------------------------------- the app
def create_app(
    engine_factory: Callable[[], Engine],
    drain_timeout: float = 60.0,
    vocoder_iters: int = 32,
    api_key: Optional[str] = None,
    metrics_open: bool = False,
    heap_trim_seconds: float = 10.0,
) -> FastAPI:
    """The HTTP app over the engine that `engine_factory` returns (created at start-up).
    `vocoder_iters`: Griffin-Lim iterations per chunk (the codec's default 32; fewer trade
    quality for CPU, which the vocoder dominates at many streams). `api_key`: required as
    `Authorization: Bearer <key>` on every path but /health (and /metrics when
    `metrics_open`). `heap_trim_seconds`: how often freed heap memory is handed back to the
    system while requests are answered (`serve.heap.HeapTrimmer`)."""
    from contextlib import asynccontextmanager

    if api_key is not None and not api_key.strip():
        raise ValueError("api_key: an empty key would admit anyone; pass None for no key")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.engine = await run_in_threadpool(engine_factory)
        app.state.formats = await run_in_threadpool(available_formats)
        # Memory freed after requests goes back to the system (serve/heap.py: glibc kept it)
        trimmer = HeapTrimmer(lambda: sum(app.state.requests.values()), heap_trim_seconds)
        app.state.heap = trimmer.start()
        yield
        trimmer.stop()
        # Uvicorn has already waited for in-flight responses; finish anything left over.
        await run_in_threadpool(app.state.engine.shutdown, True, drain_timeout)

    app = FastAPI(title="codecspec speech server", lifespan=lifespan)
    app.state.requests = {}
    app.state.first_audio = FirstAudio()
    app.state.vocoder_iters = int(vocoder_iters)
    app.state.api_key = api_key  # the WebSocket route checks it itself (serve/text_socket.py)
    open_paths = ("/health", "/metrics") if metrics_open else ("/health",)
    app.add_middleware(
        KeyCheck, key=api_key, open_paths=open_paths, on_refuse=lambda s: _count(app, s)
    )

    _add_error_handlers(app)
    _add_routes(app)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Every error leaves in the API's own error shape, counted by status."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        _count(app, 400)
        return _validation_error(exc.errors())

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        status = exc.status_code
        if isinstance(exc.__cause__, BodyTooLarge):  # KeyCheck drops this and answers 413
            return _error(413, str(exc.__cause__), "body")
        _count(app, status)
        message, code = str(exc.detail), None
        if status == 404:
            message = f"{request.method} {request.url.path}: no such endpoint"
        elif status == 405:
            message = f"{request.method} {request.url.path}: method not allowed"
        elif status == 400:
            # FastAPI's one 400 of its own: a body json.loads could not even start on (not
            # UTF-8: a JSONDecodeError is a validation error, handled above)
            message, code = "body: not a JSON text in UTF-8", "invalid_json"
        return _error(status, message, "body" if status == 400 else None, exc.headers, code)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception):
        log.exception("request failed")
        return _error(500, "internal error", code="internal_error")


def _add_routes(app: FastAPI) -> None:
    """The OpenAI-compatible paths, health and metrics."""

    @app.get("/health")
    async def health():
        e = app.state.engine
        m = e.metrics()
        ok = not e.draining
        body = {
            "status": "ok" if ok else "draining",
            "active_streams": m["active_streams"],
            "queue_depth": m["queue_depth"],
            "max_streams": m["max_streams"],
            "capacity": m["capacity"],
        }
        # draining: a load balancer takes this replica out and retries elsewhere
        retry = None if ok else {"Retry-After": str(DRAIN_RETRY_AFTER)}
        return JSONResponse(body, status_code=200 if ok else 503, headers=retry)

    @app.get("/v1/models")
    async def models():
        names = served_models(app.state.engine)
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "owned_by": "codecspec"} for n in names],
        }

    @app.get("/metrics")
    async def metrics():
        return Response(prometheus_text(app), media_type="text/plain; version=0.0.4")

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechBody, request: Request):
        return await _speech(app, body, request)

    add_text_socket(app)  # text in as it arrives, audio out: a WebSocket


def _count(app: FastAPI, status: int) -> None:
    app.state.requests[status] = app.state.requests.get(status, 0) + 1


def _refuse(app: FastAPI, status: int, message: str, param=None, code=None, headers=None):
    _count(app, status)
    return _error(status, message, param, headers=headers, code=code)


def _checked(app: FastAPI, body: SpeechBody):
    """(SpeechRequest, None) or (None, the 400 response naming the field)."""
    engine: Engine = app.state.engine
    if body.model is not None:
        bad = model_error(engine, body.model)
        if bad is not None:
            return None, _refuse(app, 400, bad, "model", code="model_not_found")
    name = body.voice if isinstance(body.voice, str) else body.voice.id
    try:
        speaker = speaker_of(engine, name)
    except ValueError as e:
        return None, _refuse(app, 400, str(e), "voice")
    fmt = body.response_format
    if fmt not in app.state.formats:
        msg = f"response_format: {fmt!r} is not available here; this server has {app.state.formats}"
        return None, _refuse(app, 400, msg, "response_format", code="unsupported_value")
    if fmt == "wav" and body.stream_format == "sse" and not _known_length(engine):
        msg = (
            f"response_format: 'wav' over sse needs the length in advance, which the "
            f"{engine.family.name} model's stop head decides as it goes; ask for pcm"
        )
        return None, _refuse(app, 400, msg, "response_format", code="unsupported_value")
    req = SpeechRequest(
        input=body.input,
        input_format=body.input_format,
        voice=speaker,
        language=body.language,  # None: the family's default (Engine.check)
        speed=body.speed,
        mode=body.mode,
        seed=body.seed,
        temperature=body.temperature,
        top_k=body.top_k,
        top_p=body.top_p,
        subtalker_temperature=body.subtalker_temperature,
        subtalker_top_k=body.subtalker_top_k,
        subtalker_top_p=body.subtalker_top_p,
        instructions=body.instructions if engine.family.takes_instructions else None,
        streaming_text=body.streaming_text,
    )
    return req, None


def _known_length(engine: Engine) -> bool:
    return engine.family.known_length


async def _until_gone(request: Request) -> None:
    """Returns when the client disconnects (its body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
        # A server that answers at once with empty body messages (some ASGI proxies) must
        # not turn this into a busy loop.
        await asyncio.sleep(0.05)


async def _unless_gone(request: Request, awaitable):
    """The awaitable's result, or None (and the awaitable cancelled) if the client leaves
    first: no audio is decoded for a client that has gone."""
    work = asyncio.ensure_future(awaitable)
    gone = asyncio.ensure_future(_until_gone(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if work.done():
        return work.result()
    work.cancel()
    return None


async def _speech(app: FastAPI, body: SpeechBody, request: Request):
    arrived = time.perf_counter()
    engine: Engine = app.state.engine
    req, refusal = _checked(app, body)
    if refusal is not None:
        return refusal
    try:
        handle = await run_in_threadpool(engine.submit, req, asyncio.get_running_loop())
    except Overloaded as e:
        status = 503 if engine.draining else 429
        retry = {"Retry-After": str(max(1, math.ceil(e.retry_after)))}
        return _refuse(app, status, str(e), headers=retry)
    except ValueError as e:
        return _refuse(app, 400, str(e), field_of(str(e)))
    except PhonemizerError as e:  # this server cannot phonemize text (no espeak-ng)
        msg = f"input_format: text is unavailable here ({e}); send ipa"
        return _refuse(app, 503, msg, code="phonemizer_unavailable")
    try:
        first = await _unless_gone(request, _first_frame(handle))
    except StreamFailed as e:
        handle.cancel()
        return _refuse(app, 500, f"decoding failed: {e}")
    except asyncio.CancelledError:
        handle.cancel()
        raise
    if first is None:  # the client left before its first audio: stop decoding now
        handle.cancel()
        _count(app, 499)
        return Response(status_code=499)
    headers = _headers(engine, handle, body, replica_name())
    ignored = _ignored(engine, body)
    if ignored:
        headers["X-Codecspec-Ignored"] = ",".join(ignored)
        log.info("ignored by the %s model: %s", engine.family.name, ", ".join(ignored))
    iters = app.state.vocoder_iters
    fmt = body.response_format
    audio = AudioStream(
        engine,
        handle,
        first,
        body.seed or 0,
        iters,
        fmt,
        voice=req.voice,
        arrived=arrived,
        first_audio=app.state.first_audio,
    )
    if body.response_format == "wav" and not _known_length(engine):
        return await _whole_wav(app, engine, handle, audio, request, headers)
    _count(app, 200)
    if body.stream_format == "sse":
        return _sse_response(engine, handle, audio, body, headers)
    return _stream_response(engine, handle, audio, body, headers)


def _ignored(engine: Engine, body: SpeechBody) -> list:
    """The request's fields this model accepted but does not use."""
    out = []
    if body.instructions is not None and not engine.family.takes_instructions:
        out.append("instructions")
    if not engine.voices:  # no speakers to choose from (the instructions set the voice)
        out.append("voice")
    return out


async def _first_frame(handle):
    first = await handle.next()
    if first is None:
        raise StreamFailed("the stream ended before its first frame")
    return first


_REPLICA: list = [None, ""]  # (the process it was drawn in, the name)


def replica_name() -> str:
    """A random name for this serving process, drawn in the process that answers: Ray ships
    one app object to every replica, so a name drawn with the app would be shared, and a
    forked worker draws its own."""
    if _REPLICA[0] != os.getpid():
        _REPLICA[:] = [os.getpid(), secrets.token_hex(4)]
    return _REPLICA[1]


def _headers(engine: Engine, handle, body: SpeechBody, replica: str) -> dict:
    rate = engine.sample_rate if body.response_format == "wav" else OPENAI_RATE
    headers = {
        "X-Codecspec-Sample-Rate": str(rate),
        # Which replica answered (scale-out tests): a random name per process, so that the
        # header tells nothing about the process (it was the PID).
        "X-Codecspec-Replica": replica,
    }
    if handle.frames is not None:  # known in advance (RVQ)
        headers["X-Codecspec-Frames"] = str(handle.frames)
        if body.response_format == "wav":
            headers["X-Codecspec-Samples"] = str(handle.frames * engine.family.hop)
    return headers


async def _whole_wav(app: FastAPI, engine: Engine, handle, audio: AudioStream, request, headers):
    """A stream whose length the stop head decides, as one WAV with exact sizes."""

    async def collect():
        return b"".join([c async for c in audio.chunks()])

    # The client's first audio is the whole body: its time is counted once that is ready,
    # not when the first chunk is vocoded.
    first_audio, audio.first_audio = audio.first_audio, None
    try:
        pcm = await _unless_gone(request, collect())
    except StreamFailed as e:
        return _refuse(app, 500, f"decoding failed: {e}")
    finally:
        handle.cancel()  # disconnect or failure: the engine drops the stream at its next step
    if pcm is None:
        _count(app, 499)
        return Response(status_code=499)
    _count(app, 200)
    if first_audio is not None and audio.arrived is not None:
        first_audio.add(time.perf_counter() - audio.arrived)
    headers["X-Codecspec-Frames"] = str(handle.count)
    headers["X-Codecspec-Samples"] = str(len(pcm) // 2)
    wav = wav_header(len(pcm) // 2, engine.sample_rate) + pcm
    return Response(wav, media_type=MEDIA_TYPES["wav"], headers=headers)


def _stream_response(engine: Engine, handle, audio: AudioStream, body: SpeechBody, headers):
    async def gen():
        try:
            if body.response_format == "wav":  # only for streams of known length
                yield wav_header(handle.frames * engine.family.hop, engine.sample_rate)
            async for chunk in audio.chunks():
                yield chunk
        finally:
            # Disconnect or failure: the engine drops the stream at its next step.
            handle.cancel()

    media = MEDIA_TYPES[body.response_format]
    return StreamingResponse(gen(), media_type=media, headers=headers)


def _sse_response(engine: Engine, handle, audio: AudioStream, body: SpeechBody, headers):
    """OpenAI's stream_format "sse": base64 audio in `speech.audio.delta` events, then
    `speech.audio.done` with usage (input phonemes, frames decoded). A stream that fails
    after its first audio ends with an `error` event instead."""

    async def gen():
        try:
            if body.response_format == "wav":  # only for streams of known length
                header = wav_header(handle.frames * engine.family.hop, engine.sample_rate)
                yield sse_event("speech.audio.delta", audio=base64.b64encode(header).decode())
            async for chunk in audio.chunks():
                yield sse_event("speech.audio.delta", audio=base64.b64encode(chunk).decode())
            n_in, n_out = handle.tokens, handle.count
            usage = {"input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out}
            yield sse_event("speech.audio.done", usage=usage)
        except StreamFailed as e:
            yield sse_event("error", error=error_body(500, f"decoding failed: {e}")["error"])
        finally:
            handle.cancel()

    headers = {**headers, "Cache-Control": "no-cache"}
    return StreamingResponse(gen(), media_type="text/event-stream", headers=headers)


def prometheus_text(app: FastAPI) -> str:
    """The engine's gauges and counters in the Prometheus exposition format."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

    m = app.state.engine.metrics()
    first_audio: FirstAudio = app.state.first_audio
    gauges = {
        "active_streams": "streams decoded in the current step",
        "queue_depth": "admitted requests waiting for a slot",
        "max_streams": "slots of the engine",
        "capacity": "streams the engine admits together (realtime: its real-time estimate)",
        "frames_per_second": "frames decoded per second over the last steps",
        "tokens_per_call": "depth codes per depth call of one stream since start",
        "batch_tokens_per_call": "depth codes per batched depth graph call since start",
    }
    counters = {
        "frames": "frames decoded",
        "steps": "engine steps",
        "depth_calls": "depth graph calls",
        "streams_done": "streams that finished",
        "streams_failed": "streams whose decoding raised",
        "streams_cancelled": "streams whose client went away",
        "rejected": "requests refused for overload",
        "late_frames": "frames decoded after their real-time playback deadline",
        "late_streams": "streams with at least one frame past its playback deadline",
    }

    class _Collector:
        def collect(self):
            for k, doc in gauges.items():
                yield GaugeMetricFamily(f"codecspec_{k}", doc, value=float(m[k]))
            for k, doc in counters.items():
                yield CounterMetricFamily(f"codecspec_{k}", doc, value=float(m[f"{k}_total"]))
            c = CounterMetricFamily("codecspec_http_responses", "responses", labels=["status"])
            for status, n in sorted(app.state.requests.items()):
                c.add_metric([str(status)], float(n))
            yield c
            yield SummaryMetricFamily(
                "codecspec_time_to_first_audio_seconds",
                "seconds from a request's arrival to its first audio bytes",
                count_value=first_audio.count,
                sum_value=first_audio.total,
            )
            yield GaugeMetricFamily(
                "codecspec_time_to_first_audio_median_seconds",
                "median time to first audio over the last 256 requests",
                value=first_audio.median(),
            )

    reg = CollectorRegistry()
    reg.register(_Collector())
    return generate_latest(reg).decode()
