"""The OpenAI-compatible speech server: FastAPI over one continuous-batching `Engine`.

POST /v1/audio/speech streams audio (chunked) as the engine decodes frames: the codes of a
few frames are vocoded (in a worker thread, outside the engine's step) and sent at once.
The response starts only after the first frame, so a request that fails before any audio
gets a proper error status. GET /health, GET /metrics (Prometheus text format).

A request names a model and a voice from fixed lists, never a path: the server loads its one
model folder at start-up (`codecspec serve --model reference|fsq`). `codecspec-reference` and
`codecspec-fsq` name a family; OpenAI's model names name whichever model was loaded.

The RVQ reference knows a stream's length from its phonemes, so its WAV streams with an exact
header. The FSQ family's stop head decides the length as it goes: its `pcm` streams, its
`wav` is sent whole when the stream ends, so that the header's sizes are the real ones.
"""

from __future__ import annotations

import asyncio
import math
import os
import struct
from typing import Callable, Literal, Optional

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from codecspec.serve.engine import Engine, Overloaded, SpeechRequest, StreamFailed
from codecspec.tts.model import PhonemizerError

# OpenAI's model names map onto whichever model the server loaded; the family names only
# onto their own family (see engine.family.model_names).
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
MODEL_NAMES = ("codecspec-reference", "codecspec-fsq") + OPENAI_MODELS
# OpenAI's voices mapped onto the reference model's speakers; its own names work too.
OPENAI_VOICES = {
    "alloy": "f1",
    "echo": "m1",
    "fable": "f2",
    "onyx": "m3",
    "nova": "f3",
    "shimmer": "f4",
    "ash": "m5",
    "sage": "m7",
}
FIRST_CHUNK_FRAMES = 3  # a short first chunk keeps the time to first audio low
CHUNK_FRAMES = 10
CONTEXT_FRAMES = 2  # vocoded with each chunk and dropped: smoother chunk boundaries


class SpeechBody(BaseModel):
    """OpenAI's /v1/audio/speech fields, plus codecspec's own (seed, mode, accept, sampling)."""

    model_config = ConfigDict(extra="forbid")

    model: Optional[str] = None  # None: the loaded model
    input: str
    input_format: Literal["text", "ipa"] = "text"  # ipa: espeak-ng IPA instead of text
    voice: str = "alloy"
    response_format: Literal["wav", "pcm"] = "wav"
    speed: float = Field(1.0, ge=0.25, le=4.0, allow_inf_nan=False)
    language: str = "en"
    seed: Optional[int] = Field(None, ge=0, lt=2**63)
    mode: Literal["auto", "ar", "spec"] = "auto"
    accept: Literal["exact"] = "exact"  # lossless verification is the only rule served
    temperature: Optional[float] = Field(None, ge=0.0, le=10.0, allow_inf_nan=False)
    top_k: Optional[int] = Field(None, ge=0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)


def _error(status: int, message: str, param: Optional[str] = None, headers=None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": param}}
    return JSONResponse(body, status_code=status, headers=headers)


def _field_of(message: str) -> Optional[str]:
    head = message.split(":", 1)[0]
    return head if head.isidentifier() else None


def wav_header(num_samples: int, sample_rate: int) -> bytes:
    data = 2 * num_samples
    return b"RIFF" + struct.pack(
        "<I4s4sIHHIIHH4sI",
        36 + data,
        b"WAVE",
        b"fmt ",
        16,
        1,
        1,
        sample_rate,
        2 * sample_rate,
        2,
        16,
        b"data",
        data,
    )


def pcm16(wav: np.ndarray) -> bytes:
    return (np.clip(wav, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


class AudioStream:
    """Turns a stream's frames into audio bytes chunk by chunk."""

    def __init__(self, engine: Engine, handle, first, seed: int, iters: int):
        self.engine, self.handle, self.seed, self.iters = engine, handle, seed, iters
        self.codes = [first]
        self.sent = 0  # frames already vocoded and sent

    async def chunks(self):
        hop = self.engine.family.hop
        done = False
        while not done:
            want = FIRST_CHUNK_FRAMES if self.sent == 0 else CHUNK_FRAMES
            while len(self.codes) - self.sent < want:
                frame = await self.handle.next()
                if frame is None:
                    done = True
                    break
                self.codes.append(frame)
            if len(self.codes) == self.sent:
                break
            lo = max(0, self.sent - CONTEXT_FRAMES)
            block = np.stack(self.codes[lo:])
            decode = self.engine.family.codec.decode
            wav = await run_in_threadpool(decode, block, self.iters, self.seed)
            self.sent, start = len(self.codes), (self.sent - lo) * hop
            yield pcm16(wav[start:])


def create_app(
    engine_factory: Callable[[], Engine], drain_timeout: float = 60.0, vocoder_iters: int = 32
) -> FastAPI:
    """The HTTP app over the engine that `engine_factory` returns (created at start-up).
    `vocoder_iters`: Griffin-Lim iterations per chunk (the codec's default 32; fewer trade
    quality for CPU, which the vocoder dominates at many streams)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.engine = await run_in_threadpool(engine_factory)
        yield
        # Uvicorn has already waited for in-flight responses; finish anything left over.
        await run_in_threadpool(app.state.engine.shutdown, True, drain_timeout)

    app = FastAPI(title="codecspec speech server", lifespan=lifespan)
    app.state.requests = {}
    app.state.vocoder_iters = int(vocoder_iters)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        errs = exc.errors()
        param = _loc(errs[0]) if errs else "body"
        msgs = "; ".join(f"{_loc(e)}: {e['msg']}" for e in errs)
        _count(app, 422)
        return _error(422, msgs, param)

    @app.get("/health")
    async def health():
        e = app.state.engine
        m = e.metrics()
        ok = not e._draining
        body = {
            "status": "ok" if ok else "draining",
            "active_streams": m["active_streams"],
            "queue_depth": m["queue_depth"],
            "max_streams": m["max_streams"],
        }
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/v1/models")
    async def models():
        names = served_models(app.state.engine)
        return {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}

    @app.get("/metrics")
    async def metrics():
        return Response(prometheus_text(app), media_type="text/plain; version=0.0.4")

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechBody, request: Request):
        return await _speech(app, body)

    return app


def _loc(err: dict) -> str:
    """The field a validation error is about ("body" for JSON that does not parse)."""
    names = [str(x) for x in err.get("loc", ()) if isinstance(x, str) and x != "body"]
    return ".".join(names) or "body"


def served_models(engine: Engine) -> tuple:
    """The `model` names this server answers: its family's own and OpenAI's."""
    return tuple(engine.family.model_names) + OPENAI_MODELS


def _model_error(engine: Engine, model: str) -> Optional[str]:
    served = served_models(engine)
    if model in served:
        return None
    if model in MODEL_NAMES:
        return f"model: this server loaded {served[0]!r}, not {model!r}; expected one of {served}"
    return f"model: expected one of {list(served)}, got {model!r}"


def _count(app: FastAPI, status: int) -> None:
    app.state.requests[status] = app.state.requests.get(status, 0) + 1


async def _speech(app: FastAPI, body: SpeechBody):
    engine: Engine = app.state.engine
    bad_model = None if body.model is None else _model_error(engine, body.model)
    if bad_model is not None:
        _count(app, 400)
        return _error(400, bad_model, "model")
    req = SpeechRequest(
        input=body.input,
        input_format=body.input_format,
        voice=OPENAI_VOICES.get(body.voice, body.voice),
        language=body.language,
        speed=body.speed,
        mode=body.mode,
        seed=body.seed,
        temperature=body.temperature,
        top_k=body.top_k,
        top_p=body.top_p,
    )
    try:
        handle = await run_in_threadpool(engine.submit, req, asyncio.get_running_loop())
    except Overloaded as e:
        status = 503 if engine._draining else 429
        _count(app, status)
        retry = {"Retry-After": str(max(1, math.ceil(e.retry_after)))}
        return _error(status, str(e), None, headers=retry)
    except ValueError as e:
        _count(app, 400)
        return _error(400, str(e), _field_of(str(e)))
    except PhonemizerError as e:  # this server cannot phonemize text (no espeak-ng)
        _count(app, 503)
        return _error(503, f"input_format: text is unavailable here ({e}); send ipa", None)
    try:
        first = await handle.next()
        if first is None:
            raise StreamFailed("the stream ended before its first frame")
    except StreamFailed as e:
        _count(app, 500)
        return _error(500, f"decoding failed: {e}")
    except asyncio.CancelledError:
        handle.cancel()
        raise
    if handle.frames is None and body.response_format == "wav":
        return await _whole_wav(app, engine, handle, first, body)
    _count(app, 200)
    return _stream_response(engine, handle, first, body, app.state.vocoder_iters)


def _headers(engine: Engine, frames: Optional[int]) -> dict:
    headers = {
        "X-Codecspec-Sample-Rate": str(engine.sample_rate),
        "X-Codecspec-Process": str(os.getpid()),  # which replica answered (scale-out tests)
    }
    if frames is not None:  # known in advance (RVQ), or at the end of a whole WAV (FSQ)
        headers["X-Codecspec-Frames"] = str(frames)
        headers["X-Codecspec-Samples"] = str(frames * engine.family.hop)
    return headers


async def _whole_wav(app: FastAPI, engine: Engine, handle, first, body: SpeechBody):
    """A stream whose length the stop head decides, as one WAV with exact sizes."""
    audio = AudioStream(engine, handle, first, body.seed or 0, app.state.vocoder_iters)
    try:
        pcm = b"".join([c async for c in audio.chunks()])
    except StreamFailed as e:
        _count(app, 500)
        return _error(500, f"decoding failed: {e}")
    finally:
        handle.cancel()  # disconnect or failure: the engine drops the stream at its next step
    _count(app, 200)
    wav = wav_header(len(pcm) // 2, engine.sample_rate) + pcm
    return Response(wav, media_type="audio/wav", headers=_headers(engine, handle.count))


def _stream_response(engine: Engine, handle, first, body: SpeechBody, iters: int):
    sr = engine.sample_rate
    audio = AudioStream(engine, handle, first, body.seed or 0, iters)

    async def gen():
        try:
            if body.response_format == "wav":  # only for streams of known length
                yield wav_header(handle.frames * engine.family.hop, sr)
            async for chunk in audio.chunks():
                yield chunk
        finally:
            # Disconnect or failure: the engine drops the stream at its next step.
            handle.cancel()

    media = "audio/wav" if body.response_format == "wav" else "audio/pcm"
    return StreamingResponse(gen(), media_type=media, headers=_headers(engine, handle.frames))


def prometheus_text(app: FastAPI) -> str:
    """The engine's gauges and counters in the Prometheus exposition format."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    m = app.state.engine.metrics()
    gauges = {
        "active_streams": "streams decoded in the current step",
        "queue_depth": "admitted requests waiting for a slot",
        "max_streams": "slots of the engine",
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

    reg = CollectorRegistry()
    reg.register(_Collector())
    return generate_latest(reg).decode()
