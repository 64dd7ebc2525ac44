"""Text in as an LLM writes it, audio out as it is made: the WebSocket endpoint
`/v1/audio/speech/stream-input` (issue 49 item 2), in the message shapes LLM-to-speech
clients already use (ElevenLabs' stream-input: a first message with the settings, text
messages, flush / end; OpenAI Realtime's error events).

Client -> server, JSON text messages:
  1. the settings (once, first): {"voice", "language", "instructions", "seed", "mode",
     "temperature", "top_k", "top_p", "subtalker_temperature", "subtalker_top_k",
     "subtalker_top_p", "model", "output": "base64" | "binary"}, all optional,
     as the speech route's fields, and optionally "text", the first text;
  2. {"text": "..."}: more text (any cut, even inside a word: it is tokenized as the whole);
  3. {"flush": true} (with or without text): this utterance's text is complete; the audio
     finishes (tts_eos, then the model's stop) and the next text starts a new utterance;
     {"end": true} or {"text": ""} (ElevenLabs' close message): the same, then the server
     closes the socket once the last audio is sent.
Server -> client: {"type": "session.started", "sample_rate", "format": "pcm_s16le",
"channels": 1, "seed", "output"}; per chunk {"type": "audio", "utterance", "offset" (samples
of this session before the chunk), "samples", "audio": base64 PCM} (output "binary": the
same message without "audio", then the PCM as a binary message); per utterance
{"type": "utterance.done", "utterance", "samples", "frames", "hit_max_frames",
"first_audio_after_first_text_ms"}; errors as {"type": "error", "error": {OpenAI's error
object}}. A bad message gets an error and the session goes on; a client that disconnects
stops its utterance within a frame and frees its runtime.

The API key is the HTTP routes' (`Authorization: Bearer KEY` on the upgrade request); a bad
one gets the 401 error object, then the socket closes (1008). Only families that can read
the text as it comes serve it (Qwen3-TTS, in the streaming-text layout: the codes of each
utterance are `generate_codes(its text, streaming_text=True)`'s with the session's seed);
the others get an error saying they need the whole text, then the socket closes (1003).

Each session speaks on a runtime of its own (`Qwen3TTS.replica()`, up to the engine's
`max_streams` at once; one more gets a 429 error and close 1013), in a worker thread, beside
the batching engine rather than inside it (its talker steps are per stream there too).
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import threading
import time
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from codecspec.serve.engine import SpeechRequest
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
    speaker_of,
)

__all__ = ["ROUTE", "add_text_socket"]

ROUTE = "/v1/audio/speech/stream-input"
CLOSE_POLICY, CLOSE_UNSUPPORTED, CLOSE_TRY_LATER = 1008, 1003, 1013


class StreamStart(BaseModel):
    """The first message: the session's settings (the speech route's fields)."""

    model_config = ConfigDict(extra="forbid")
    model: Optional[str] = None
    voice: Optional[str] = None
    language: Optional[str] = None
    instructions: Optional[str] = None
    seed: Seed = None
    mode: Mode = "auto"
    temperature: Temperature = None
    top_k: TopK = None
    top_p: TopP = None
    subtalker_temperature: Temperature = None
    subtalker_top_k: TopK = None
    subtalker_top_p: TopP = None
    output: Literal["base64", "binary"] = "base64"
    text: Optional[str] = None
    flush: bool = False
    end: bool = False


class TextMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Optional[str] = None
    flush: bool = False
    end: bool = False


class RuntimePool:
    """At most `size` runtimes (replicas of `tts`) lent to sessions at once."""

    def __init__(self, tts, size: int):
        self.tts, self.size, self.free, self.made = tts, int(size), [], 0
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            if self.free:
                return self.free.pop()
            if self.made >= self.size:
                return None
            self.made += 1
        return self.tts.replica()

    def give(self, rt) -> None:
        with self.lock:
            self.free.append(rt)


def add_text_socket(app) -> None:
    """Registers the endpoint on the speech app (`serve.app.create_app`)."""

    @app.websocket(ROUTE)
    async def stream_input(websocket: WebSocket):
        await websocket.accept()
        rt, kw = await _open(app, websocket)
        if rt is None:
            return
        pool = app.state.text_sockets
        try:
            await Session(websocket, app.state.engine, rt, kw).run()
        finally:
            pool.give(rt)


def _error_message(status: int, message: str, param=None, code=None) -> dict:
    return {"type": "error", **error_body(status, message, param, code)}


async def _refuse(ws, close: int, status: int, message: str, param=None, code=None) -> None:
    await ws.send_json(_error_message(status, message, param, code))
    await ws.close(close)


async def _open(app, ws):
    """(runtime, session keywords) once the key, the family, a free runtime and a valid
    first message are there; (None, None) after refusing and closing."""
    key = getattr(app.state, "api_key", None)
    if key is not None:
        bad = key_error(key.encode(), ws.headers.get("authorization", "").encode() or None)
        if bad is not None:
            await _refuse(ws, CLOSE_POLICY, 401, bad)
            return None, None
    engine = app.state.engine
    if not hasattr(engine.tts, "text_stream"):
        msg = (
            f"model: the {engine.family.name} model needs the whole text before it speaks; "
            "text streams into Qwen3-TTS checkpoints (POST /v1/audio/speech takes it whole)"
        )
        await _refuse(ws, CLOSE_UNSUPPORTED, 400, msg, "model", "unsupported_model")
        return None, None
    if getattr(app.state, "text_sockets", None) is None:
        app.state.text_sockets = RuntimePool(engine.tts, engine.max_streams)
    kw = await _settings(app, ws)
    if kw is None:
        return None, None
    rt = app.state.text_sockets.take()
    if rt is None:
        msg = f"server: {engine.max_streams} text-streaming sessions busy; retry later"
        await _refuse(ws, CLOSE_TRY_LATER, 429, msg)
        return None, None
    return rt, kw


async def _settings(app, ws) -> Optional[dict]:
    """The first valid settings message as `Qwen3TTS.stream` keywords (plus the session's
    own: output, first text, seed); an error per bad one; None when the client left."""
    while True:
        raw = await _next_text(ws)
        if raw is None:
            return None
        if raw is False:
            continue
        try:
            start = StreamStart.model_validate_json(raw)
            return _session_kwargs(app, start)
        except ValidationError as e:
            await ws.send_json(_validation_message(e))
        except ValueError as e:
            await ws.send_json(_error_message(400, str(e), field_of(str(e))))


def _session_kwargs(app, start: StreamStart) -> dict:
    engine = app.state.engine
    family = engine.family
    if start.model is not None and model_error(engine, start.model):
        raise ValueError(model_error(engine, start.model))
    req = SpeechRequest(
        input="x",  # the text comes later; everything else is checked now
        voice=speaker_of(engine, start.voice or "alloy"),
        language=start.language,  # None: the family's default (Engine.check)
        mode=start.mode,
        seed=start.seed,
        temperature=start.temperature,
        top_k=start.top_k,
        top_p=start.top_p,
        subtalker_temperature=start.subtalker_temperature,
        subtalker_top_k=start.subtalker_top_k,
        subtalker_top_p=start.subtalker_top_p,
        instructions=start.instructions if family.takes_instructions else None,
        streaming_text=True,
    )
    req = engine.check(req)
    kw = family.request_kwargs(req)
    kw.pop("streaming_text", None)
    kw["max_frames"] = family.frame_limit(req)
    kw["seed"] = secrets.randbits(62) if start.seed is None else int(start.seed)
    return dict(kw, _output=start.output, _first=start)


async def _next_text(ws):
    """The next text message; None when the client left; False after answering a binary
    message with an error (the session goes on)."""
    try:
        msg = await ws.receive()
    except (WebSocketDisconnect, RuntimeError):
        return None
    if msg["type"] == "websocket.disconnect":
        return None
    if msg.get("text") is None:
        await ws.send_json(_error_message(400, "body: send JSON text messages", "body"))
        return False
    return msg["text"]


def _validation_message(e: ValidationError) -> dict:
    errs = e.errors()
    first = errs[0] if errs else {}
    loc = [str(x) for x in first.get("loc", ()) if isinstance(x, str)]
    param = loc[0] if loc else "body"
    msgs = "; ".join(f"{'.'.join(map(str, x.get('loc', ()))) or 'body'}: {x['msg']}" for x in errs)
    kind = str(first.get("type", ""))
    code = {"extra_forbidden": "unknown_parameter", "json_invalid": "invalid_json"}.get(kind)
    return _error_message(400, msgs or "body: invalid message", param, code or "invalid_value")


class Session:
    """One connection's utterances: the receiver pushes text into the current utterance's
    TextStream (a new one after each flush), the sender speaks them in order."""

    def __init__(self, ws, engine, rt, kw: dict):
        self.ws, self.engine, self.rt = ws, engine, rt
        self.output, first = kw.pop("_output"), kw.pop("_first")
        self.kw, self.first = kw, first
        self.utterances: asyncio.Queue = asyncio.Queue()
        self.current = None  # the TextStream text goes into now
        self.offset = 0  # samples sent in this session

    async def run(self) -> None:
        await self.ws.send_json(
            {
                "type": "session.started",
                "sample_rate": int(self.rt.sample_rate),
                "format": "pcm_s16le",
                "channels": 1,
                "seed": self.kw["seed"],
                "output": self.output,
            }
        )
        sender = asyncio.create_task(self._send_all())
        try:
            ended = await self._take(self.first) or await self._receive_all(sender)
            if ended:
                await sender
                await self.ws.close(1000)
        except Exception:  # the client left (or the socket broke): stop its utterance
            pass
        finally:
            if self.current is not None:
                self.current.cancel()
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)

    async def _receive_all(self, sender) -> bool:
        """Messages until the end (True) or until the client leaves (False)."""
        while True:
            raw = await _next_text(self.ws)
            if raw is None:
                return False
            if raw is False:
                continue
            try:
                parsed = TextMessage.model_validate_json(raw)
            except ValidationError as e:
                await self.ws.send_json(_validation_message(e))
                continue
            if await self._take(parsed):
                return True

    async def _take(self, msg) -> bool:
        """Applies one text / flush / end message; True at the end of the session."""
        closing = msg.end or msg.text == ""
        if msg.text:
            try:
                self._push(msg.text)
            except ValueError as e:
                text = str(e).replace("chunks: ", "text: ", 1)
                await self._error(400, text, "text")
                return False
        if msg.flush or closing:
            self._finish()
        if closing:
            self.utterances.put_nowait(None)
        return closing

    def _push(self, text: str) -> None:
        limit = self.engine.max_input_chars
        have = 0 if self.current is None else len(self.current.text)
        if have + len(text) > limit:
            raise ValueError(f"text: this utterance would pass {limit} characters; flush it first")
        if self.current is None:
            self.current = self.rt.text_stream()
            self.utterances.put_nowait(self.current)
        self.current.push(text)

    def _finish(self) -> None:
        s, self.current = self.current, None
        if s is None:
            return
        try:
            s.end()
        except ValueError as e:  # e.g. only whitespace: the sender reports it
            s.fail(e)

    async def _error(self, status: int, message: str, param=None, code=None) -> None:
        await self.ws.send_json(_error_message(status, message, param, code))

    async def _send_all(self) -> None:
        n = 0
        while True:
            stream = await self.utterances.get()
            if stream is None:
                return
            n += 1
            await self._speak(n, stream)

    async def _speak(self, n: int, stream) -> None:
        from codecspec.serve.audio import pcm16

        info: dict = {}
        frames: list = []
        start, first = self.offset, None
        speech = self.rt.aspeak(stream, info=info, frames_out=frames, **self.kw)
        try:
            async for audio in speech:
                first = first or time.perf_counter()
                await self._audio(n, pcm16(audio), int(audio.size))
        except Exception as e:
            await self._failed(stream, e)
            return
        finally:
            # an `async for` left by an exception does not close its generator: close it
            # now, so the utterance is cancelled and its worker stopped before the session
            # gives its runtime back (not whenever the generator is collected)
            await speech.aclose()
        since = stream.first_text_at
        ms = None if first is None or since is None else round(1e3 * (first - since), 1)
        p = info.get("prompt")
        await self.ws.send_json(
            {
                "type": "utterance.done",
                "utterance": n,
                "samples": self.offset - start,
                "frames": len(frames),
                "hit_max_frames": info.get("hit_max_frames"),
                "streaming_text": None if p is None else p.streaming_text,
                "first_audio_after_first_text_ms": ms,
            }
        )

    async def _failed(self, stream, e: Exception) -> None:
        """An utterance that failed: its text's error (400) or the server's (500); the
        session goes on. A cancelled one (the client left) says nothing."""
        if stream.cancelled:
            return
        if isinstance(e, ValueError):
            msg = str(e).replace("chunks: ", "text: ", 1)
            await self._error(400, msg, field_of(msg))
        else:
            await self._error(500, f"server: the utterance failed ({type(e).__name__})")

    async def _audio(self, n: int, pcm: bytes, samples: int) -> None:
        head = {"type": "audio", "utterance": n, "offset": self.offset, "samples": samples}
        self.offset += samples
        if self.output == "binary":
            await self.ws.send_json(head)
            await self.ws.send_bytes(pcm)
        else:
            await self.ws.send_json(dict(head, audio=base64.b64encode(pcm).decode("ascii")))
