"""Continuous batching of many TTS streams in one process, for every shipped model family.

One engine thread runs steps. A step decodes one frame of every active stream through the
model family's adapter (`codecspec.pipeline.Family`): for the RVQ reference one batched
temporal call, one c0 draw per sampling law, then the depth loop batched across streams
(`BatchedDepth`: AR and speculative streams side by side, ragged trees verified in one core
call); for the FSQ family one batched step call and the factorised heads + stop head
(`codecspec.families.fsq.model`); for v2/v3 one temporal round per stream (speculative or
AR) and the depth loops of all the frames it emitted in one batched loop, so a speculative
stream gets several frames per step (`codecspec.families.v2.model`); for a Qwen3-TTS
checkpoint folder each stream's own frame loop (`codecspec.families.qwen3_tts.engine`).
Streams join and leave only between steps (frame boundaries): a stream ends at its planned
length (RVQ), its stop head (FSQ, v2) or its eos token (Qwen3-TTS); one whose client went
away is dropped at the next boundary, and its slot is reused; a queued one leaves the queue
at once. With admit "realtime" only as many streams decode together as the engine's recent
step times say stay faster than playback (`realtime_capacity`).

Each stream draws from its own counter-based generator (`Generator(seed)`, or a fork of the
engine's base generator when no seed is given), so its codes do not depend on which other
streams share the batch. The queue in front of the slots is bounded: `submit` raises
`Overloaded` (with a retry hint) instead of letting memory grow.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time
from collections import deque
from typing import Callable, Optional

import numpy as np

import codecspec as cs
from codecspec.frontend.textcheck import check_text
from codecspec.pipeline.family import SpeechRequest
from codecspec.pipeline.loop import Outlet, Stream, StreamLoop

MAX_INPUT_CHARS = 400
SPEED_RANGE = (0.25, 4.0)
ADMIT_POLICIES = ("realtime", "max")
# Realtime admission keeps a step within this share of a frame's playback time, leaving the
# rest for jitter on a shared machine and the vocoder's chunks.
REALTIME_HEADROOM = 0.8
# A late frame lowers the realtime limit to one stream below the batch it happened in; each
# this many steps without a late frame raise it by one again (additive increase): the step
# times cannot see everything that competes for the cores (the vocoder's chunks, the HTTP
# handlers, other processes), the deadlines can.
LATE_BACKOFF_STEPS = 100


class Overloaded(RuntimeError):
    """Every slot is busy and the queue is full; `retry_after` seconds is a fair wait."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class StreamFailed(RuntimeError):
    """Decoding of this stream raised; the other streams are unaffected."""


class StreamHandle(Outlet):
    """The consumer's side of a stream: frames of codes (int64 [G]) as they are decoded.

    Iterate it (blocking) or `await handle.next()` (asyncio; pass `loop` to `submit`).
    `next` returns None at the end and raises `StreamFailed` if decoding raised. `frames`:
    the stream's length when known in advance (RVQ: planned from the phonemes), None when
    the model's stop head decides (FSQ); `count`: frames decoded so far."""

    def __init__(self, stream_id: int, frames: Optional[int], loop=None, on_cancel=None):
        super().__init__(stream_id, frames)
        self._on_cancel = on_cancel  # the engine's: a queued stream leaves the queue at once
        self._loop = loop
        self._aq = asyncio.Queue() if loop is not None else None
        self._items: deque = deque()
        self._ready = threading.Condition()

    def _deliver(self, item) -> None:
        if self._aq is not None:
            self._loop.call_soon_threadsafe(self._aq.put_nowait, item)
            return
        with self._ready:
            self._items.append(item)
            self._ready.notify()

    @staticmethod
    def _unwrap(item):
        kind, value = item
        if kind == "error":
            raise StreamFailed(str(value)) from value
        return value if kind == "frame" else None

    async def next(self):
        return self._unwrap(await self._aq.get())

    def __iter__(self):
        while True:
            with self._ready:
                while not self._items:
                    self._ready.wait()
                item = self._items.popleft()
            frame = self._unwrap(item)
            if frame is None:
                return
            yield frame

    def cancel(self) -> None:
        """The consumer is gone: a queued stream leaves the queue now, an active one frees
        its slot at the next step."""
        if self.cancelled:
            return
        self.cancelled = True
        if self._on_cancel is not None:
            self._on_cancel(self)


class Engine(StreamLoop):
    """Continuous-batching TTS engine over a model: a folder, or a shipped model's name
    (None: the registry's default, v3); its model.json picks the family, or its config.json
    marks a Qwen3-TTS checkpoint folder (then `cache_dir`: where its graphs are built;
    `ref_audio`: the recording a Base checkpoint clones, required for one; `weights`: fp32,
    int8 or int4 talker and code predictor, None = the provider's default).

    max_streams: slots decoded together per step; max_queue: admitted requests waiting for a
    slot (default max_streams); beyond that `submit` raises `Overloaded`. threads: ONNX
    Runtime threads per session, 1 by default: the engine runs several sessions with host
    work between calls, and their spinning worker pools then take the cores from each other
    (2-core machine, 16 streams: 3.8 s at 1 thread vs 14.4 s at 2 spinning threads); scale
    across cores with replicas (`codecspec.serve.ray`) instead. `fault`: an
    optional callable(request, frame) run per stream per step inside that stream's error
    boundary (fault-injection tests use it to make one stream raise).

    admit: "max" lets queued streams take any free slot; "realtime" (the server's default)
    only as many as `capacity()` says the engine can decode faster than playback, from its
    own recent step times; the rest wait in the queue (still bounded by max_queue)."""

    def __init__(
        self,
        model_dir=None,
        max_streams: int = 16,
        max_queue: Optional[int] = None,
        provider: str = "cpu",
        threads: Optional[int] = 1,
        max_input_chars: int = MAX_INPUT_CHARS,
        max_frames: int = 480,
        fault: Optional[Callable[[SpeechRequest, int], None]] = None,
        admit: str = "max",
        cache_dir=None,
        ref_audio=None,
        weights: Optional[str] = None,
        voices_dir=None,
        decoder_precision: Optional[str] = None,
    ):
        if int(max_streams) < 1:
            raise ValueError(f"max_streams: must be >= 1, got {max_streams}")
        if admit not in ADMIT_POLICIES:
            raise ValueError(f"admit: expected one of {ADMIT_POLICIES}, got {admit!r}")
        self.admit = admit
        self.max_streams = int(max_streams)
        self.max_queue = self.max_streams if max_queue is None else int(max_queue)
        self.max_input_chars, self.max_frames = int(max_input_chars), int(max_frames)
        # Phonemes: an input of max_input_chars never needs more than ~1.5 per character.
        self.max_phonemes = int(1.5 * self.max_input_chars) + 2
        from codecspec.pipeline.registry import open_family

        # the registry finds the model's family; the options go to the family that takes them
        self.family = open_family(
            model_dir,
            self.max_streams,
            self.max_frames,
            self.max_phonemes,
            provider,
            threads,
            cache_dir=cache_dir,
            ref_audio=ref_audio,
            weights=weights,
            voices_dir=voices_dir,
            decoder_precision=decoder_precision,
        )
        StreamLoop.__init__(self, self.family, self.max_streams, fault)
        self.tts = self.family.tts
        self.sample_rate = self.family.sample_rate
        self._base = cs.Generator(int.from_bytes(os.urandom(8), "little") >> 1)
        self._ids = 0
        self._pending: deque = deque()
        self._running, self._draining = True, False
        self._thread = threading.Thread(target=self._loop, name="codecspec-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ requests
    @property
    def voices(self) -> list:
        return self.family.voices

    @property
    def languages(self) -> list:
        return self.family.languages

    def check(self, req: SpeechRequest) -> SpeechRequest:
        """Validates a request (ValueError names the offending field) and returns it with the
        family's default language when it names none (the official default for Qwen3-TTS,
        "auto", not English)."""
        if req.language is None:
            req = dataclasses.replace(req, language=self.family.default_language)
        if not isinstance(req.input, str) or not req.input.strip():
            raise ValueError("input: expected a non-empty string")
        if len(req.input) > self.max_input_chars:
            raise ValueError(
                f"input: {len(req.input)} characters, more than the limit {self.max_input_chars}"
            )
        # One character policy for every family: a NUL would cut the text at a C string
        # boundary, a lone surrogate fail inside a front end (frontend/textcheck.py).
        check_text(req.input, "input")
        if req.instructions is not None:
            check_text(req.instructions, "instructions")
        if req.input_format not in ("text", "ipa"):
            raise ValueError(f"input_format: expected 'text' or 'ipa', got {req.input_format!r}")
        if req.voice is not None and req.voice not in self.voices:
            raise ValueError(f"voice: expected one of {self.voices}, got {req.voice!r}")
        if req.language not in self.languages:
            raise ValueError(f"language: expected one of {self.languages}, got {req.language!r}")
        lo, hi = SPEED_RANGE
        if not (isinstance(req.speed, (int, float)) and lo <= req.speed <= hi):
            raise ValueError(f"speed: expected a number in [{lo}, {hi}], got {req.speed!r}")
        if req.seed is not None and not (0 <= int(req.seed) < 2**63):
            raise ValueError(f"seed: expected an integer in [0, 2^63), got {req.seed!r}")
        self.family.check(req)  # mode, and what else the family refuses
        self.family.params(req)
        return req

    def _overloaded(self) -> Optional[Overloaded]:
        if self._draining or not self._running:
            return Overloaded("server: shutting down", retry_after=5.0)
        # Memory bounds the queue: pending streams may fill the free slots and max_queue more
        # (realtime admission may keep some of them waiting for capacity, not for memory).
        if len(self._pending) >= self.max_queue + len(self._free):
            self.stats.rejected += 1
            return Overloaded(
                f"server: {self.max_streams} streams busy and {self.max_queue} queued",
                retry_after=self._retry_after(),
            )
        return None

    def _retry_after(self) -> float:
        # A slot frees when the shortest remaining stream ends: about that many steps.
        left = [max(s.state.expected - s.t, 1) for s in self._active.values()] or [1]
        return max(1.0, min(left) * self.step_seconds())

    def step_seconds(self) -> float:
        r = self.stats.recent
        if len(r) < 2:
            return 0.1
        return (r[-1][0] - r[0][0]) / max(len(r) - 1, 1)

    def submit(self, req: SpeechRequest, loop=None) -> StreamHandle:
        """Validates, phonemizes and encodes `req` in the caller's thread and queues it.
        Raises ValueError (naming the field) or Overloaded."""
        t0 = time.perf_counter()
        req = self.check(req)
        with self._cv:
            busy = self._overloaded()
        if busy is not None:
            raise busy
        stream = self._prepare(req, loop)
        with self._cv:
            busy = self._overloaded()
            if busy is not None:
                raise busy
            stream.handle.submitted = t0  # latency counts the text preparation too
            self._pending.append(stream)
            self._cv.notify()
        return stream.handle

    def submit_many(self, reqs: list) -> list:
        """Prepares every request, then queues them together, so that as many as there are
        free slots join at the same step (the scaling bench uses this). Raises ValueError or
        Overloaded before queueing any of them."""
        t0 = time.perf_counter()
        streams = [self._prepare(self.check(r), None) for r in reqs]
        with self._cv:
            if self._draining or len(self._pending) + len(streams) > self.max_queue + len(
                self._free
            ):
                raise Overloaded("server: not enough room for the batch", self._retry_after())
            for s in streams:
                s.handle.submitted = t0
                self._pending.append(s)
            self._cv.notify()
        return [s.handle for s in streams]

    def _prepare(self, req: SpeechRequest, loop) -> Stream:
        with self._cv:
            self._ids += 1
            sid = self._ids
        gen = cs.Generator(int(req.seed)) if req.seed is not None else self._base.fork(sid)
        try:
            state = self.family.prepare(req, gen)
        except ValueError as e:
            # The front ends name their argument `text` (espeak-ng found nothing to say, a
            # prompt over the talker's budget); a request's text is its `input`.
            if str(e).startswith("text: "):
                raise ValueError("input: " + str(e)[len("text: ") :]) from e
            raise
        handle = StreamHandle(sid, state.frames, loop, on_cancel=self._cancel_queued)
        handle.tokens = state.tokens
        return Stream(handle=handle, request=req, state=state)

    def _cancel_queued(self, handle: StreamHandle) -> None:
        """A queued stream whose client went away leaves the queue now (an active one is
        dropped by the loop at the next frame boundary)."""
        with self._cv:
            for s in self._pending:
                if s.handle is handle:
                    self._pending.remove(s)
                    self.stats.streams_cancelled += 1
                    handle._put(("done", None))
                    return
            self._cv.notify()  # an idle-waiting loop drops an active stream sooner

    # ------------------------------------------------------------------ admission
    def capacity(self) -> int:
        """How many streams may decode together: max_streams with admit="max"; with
        "realtime", the most whose step the recent step times predict within
        REALTIME_HEADROOM of one frame's playback time, and below the batch a frame was last
        late in (LATE_BACKOFF_STEPS; at least 1)."""
        if self.admit == "max":
            return self.max_streams
        if self.stats.steps - self._limit_since >= LATE_BACKOFF_STEPS:
            self._late_limit = min(self._late_limit + 1, self.max_streams)
            self._limit_since = self.stats.steps
        est = realtime_capacity(
            list(self.stats.step_times), REALTIME_HEADROOM / self.frame_rate, self.max_streams
        )
        return max(1, min(est, self._late_limit))

    # ------------------------------------------------------------------ state
    def metrics(self) -> dict:
        r = self.stats.recent
        span = r[-1][0] - r[0][0] if len(r) > 1 else 0.0
        fps = sum(f for _, f in list(r)[1:]) / span if span > 0 else 0.0
        c = self.family.counters()
        return {
            "model": self.family.name,
            "active_streams": len(self._active),
            "queue_depth": len(self._pending),
            "max_streams": self.max_streams,
            "frames_per_second": fps,
            "frames_total": self.stats.frames,
            "steps_total": self.stats.steps,
            # The frame stage's graph calls (RVQ: depth graph; FSQ: the step graph, whose
            # heads give the whole frame) and codes: per call of one stream (speculation's
            # figure, 1 for RVQ AR, 32 for FSQ) and per batched call (what batching adds).
            "depth_calls_total": c["calls"],
            "depth_codes_total": c["codes"],
            "tokens_per_call": c["codes"] / max(c["lane_calls"], 1),
            "batch_tokens_per_call": c["codes"] / max(c["calls"], 1),
            "streams_done_total": self.stats.streams_done,
            "streams_failed_total": self.stats.streams_failed,
            "streams_cancelled_total": self.stats.streams_cancelled,
            "rejected_total": self.stats.rejected,
            "late_frames_total": self.stats.late_frames,
            "late_streams_total": self.stats.late_streams,
            "capacity": self.capacity(),
        }

    def stop_admitting(self) -> None:
        """The first half of a drain: every new request is refused (Overloaded, a 503 with
        Retry-After in the app) while the active and queued streams go on; `shutdown` ends
        the loop once they are done (`idle`)."""
        with self._cv:
            self._draining = True

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def idle(self) -> bool:
        """No stream active or queued."""
        return not self._active and not self._pending

    def shutdown(self, drain: bool = True, timeout: float = 60.0) -> None:
        """Stops admitting; with `drain`, finishes the active and queued streams first."""
        with self._cv:
            self._draining = True
            if not drain:
                for s in list(self._pending) + list(self._active.values()):
                    s.handle.cancel()
            self._cv.notify()
        deadline = time.monotonic() + timeout
        while (self._active or self._pending) and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._cv:
            self._running = False
            self._cv.notify()
        self._thread.join(timeout=5.0)

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        # Errors are handled per stream or per step inside; this thread must never die with
        # streams waiting on it.
        while True:
            with self._cv:
                self._admit()
                while self._running and not self._active:
                    self._cv.wait(timeout=0.5)
                    self._admit()
                if not self._running:
                    return
            self._step()

    def _admit(self) -> None:
        """Frame boundary: cancelled streams leave, queued ones join free slots."""
        for s in list(self._active.values()):
            if s.handle.cancelled:
                self._leave(s, None, cancelled=True)
        room = self.capacity() - len(self._active)
        while self._pending and self._free and room > 0:
            s = self._pending.popleft()
            if s.handle.cancelled:
                self.stats.streams_cancelled += 1
                s.handle._put(("done", None))
                continue
            room -= 1
            self._join(s)


def realtime_capacity(steps: list, budget: float, most: int) -> int:
    """The most streams n <= `most` whose predicted step time a + b n stays within `budget`
    seconds, from recent (streams, seconds) steps: a line through the median time at each
    batch size seen; with one batch size seen, half of its time is taken as fixed cost (a
    prior the next batch size corrects). At most twice the largest batch seen (no far
    extrapolation); at least 1, and 1 before any step was measured."""
    if not steps:
        return 1
    by_n: dict = {}
    for n, dt in steps:
        by_n.setdefault(int(n), []).append(float(dt))
    ns = np.array(sorted(by_n), float)
    med = np.array([np.median(by_n[int(n)]) for n in ns])
    if len(ns) >= 2:
        b, a = np.polyfit(ns, med, 1)
        if b <= 0:  # noise: fall back to the proportional (no fixed cost) line
            a, b = 0.0, float(np.max(med / ns))
    else:
        a = b = 0.5 * med[0]
        b /= ns[0]
    a = max(float(a), 0.0)
    n = int((budget - a) // b) if b > 0 else most
    return int(max(1, min(n, most, 2 * int(ns.max()))))
