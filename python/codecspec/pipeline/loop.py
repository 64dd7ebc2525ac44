"""The one frame loop: streams in slots of a family's batched stepper, one step at a time.

`StreamLoop` is the loop body every driver shares: a stream joins a free slot
(`Family.load`), a step decodes one frame (or a temporal round's frames) of every active
stream in one `Family.step` call, each stream's frames go to its `Outlet`, and a stream that
ended, failed or was cancelled leaves its slot. The serving engine
(`codecspec.serve.engine.Engine`) runs it in its own thread over many slots, with a queue in
front; `run_inline` runs it in the caller's thread over one slot, for a family's `generate`
and `stream`, so that single-stream synthesis is the engine with one slot, not a second
loop that could drift from it; `run_together` runs several streams at once the same way (a
family's batched bench), every stream joining at the start.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from codecspec.pipeline.family import Family, Frame, StreamState

__all__ = ["LoopStats", "Outlet", "Stream", "StreamLoop", "run_inline", "run_together"]

STEP_WINDOW = 256  # recent steps the engine's capacity estimate is fitted on


class Outlet:
    """Where a stream's frames go, as the loop sees it: `_put(("frame", codes))` per frame,
    then `("done", None)` or `("error", exception)`; subclasses deliver the items
    (`_deliver`). `frames`: the length when known in advance, None when a stop head decides;
    `count`: frames delivered; `cancelled`: the consumer is gone (the stream leaves its slot
    at the next step)."""

    def __init__(self, stream_id: int, frames: Optional[int]):
        self.id, self.frames, self.count = stream_id, frames, 0
        self.cancelled = False
        self.submitted = time.perf_counter()
        self.first_frame_at: Optional[float] = None  # perf_counter times, set by the loop
        self.done_at: Optional[float] = None
        self.late = False  # some frame came later than real-time playback needed it
        self.tokens = 0  # input phoneme ids

    def _put(self, item) -> None:
        now = time.perf_counter()
        if item[0] == "frame":
            self.count += 1
            if self.first_frame_at is None:
                self.first_frame_at = now
        else:
            self.done_at = now
        self._deliver(item)

    def _deliver(self, item) -> None:
        raise NotImplementedError


class _Inbox(Outlet):
    """The inline driver's outlet: items wait in a deque until the caller's loop takes them."""

    def __init__(self, frames: Optional[int], stream_id: int = 0):
        super().__init__(stream_id, frames)
        self.items: deque = deque()

    def _deliver(self, item) -> None:
        self.items.append(item)


@dataclass
class Stream:
    handle: Outlet
    request: object  # what the stream was asked (the fault hook's argument), or None
    state: StreamState  # the family's: generator, sampling law, caches' inputs, lengths
    slot: int = -1
    t: int = 0  # frames decoded
    steps: int = 0  # loop steps the stream took part in
    held: list = field(default_factory=list)  # decoded frames not yet handed out (prebuffer)


@dataclass
class LoopStats:
    steps: int = 0
    frames: int = 0
    streams_done: int = 0
    streams_failed: int = 0
    streams_cancelled: int = 0
    rejected: int = 0
    late_frames: int = 0  # frames decoded after their real-time playback deadline
    late_streams: int = 0  # streams with at least one late frame
    recent: deque = field(default_factory=lambda: deque(maxlen=64))  # (time, frames)
    # (streams, seconds) of recent steps' decode calls: the real-time capacity estimate
    step_times: deque = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))


class StreamLoop:
    """`slots` streams of `family` decoded together, a step at a time (module doc). `fault`:
    an optional callable(request, frame) run per stream per step inside that stream's error
    boundary (fault-injection tests). `_cv` guards the slots against a thread that admits or
    cancels streams while a step runs (uncontended when the loop runs inline)."""

    def __init__(self, family: Family, slots: int, fault: Optional[Callable] = None):
        self.family = family
        self.max_streams = int(slots)
        self.frame_rate = float(family.frame_rate)
        self.fault = fault
        self.stats = LoopStats()
        self._cv = threading.Condition()
        self._active: dict[int, Stream] = {}
        self._free = list(range(self.max_streams - 1, -1, -1))
        self._late_limit, self._limit_since = self.max_streams, 0
        # The playback cushion of a bursty stream (`Family.prebuffer_steps`) is the server's;
        # inline, the caller takes each frame as soon as it is decoded.
        self.prebuffer = True

    def _join(self, s: Stream) -> None:
        """`s` takes a free slot (the caller checked there is one)."""
        s.slot = self._free.pop()
        self._active[s.slot] = s
        try:
            self.family.load(s.slot, s.state)
        except Exception as e:  # this stream's own input: it alone fails
            self._leave(s, e)

    def _leave(self, s: Stream, error: Optional[Exception], cancelled: bool = False) -> None:
        del self._active[s.slot]
        self._free.append(s.slot)
        if cancelled:
            self.stats.streams_cancelled += 1
            s.handle._put(("done", None))  # a consumer still reading must not block
        elif error is not None:
            self.stats.streams_failed += 1
            s.handle._put(("error", error))
        else:
            self.stats.streams_done += 1
            s.handle._put(("done", None))

    def _step(self) -> None:
        streams = [self._active[k] for k in sorted(self._active)]
        frames0 = self.stats.frames
        try:
            self._decode(streams)
        except Exception as e:  # a shared call failed: every stream of this step ends
            with self._cv:
                for s in streams:
                    if s.slot in self._active:
                        self._leave(s, e)
        now = time.perf_counter()
        self.stats.steps += 1
        self.stats.recent.append((now, self.stats.frames - frames0))

    def _decode(self, streams: list) -> None:
        t0 = time.perf_counter()
        frames = self.family.step(streams, self._check_stream)
        dt = time.perf_counter() - t0
        with self._cv:
            for s, f in zip(streams, frames):
                self._emit(s, f)
        # A step may give a stream several frames (a temporal speculation round), and not
        # the same number to every stream: capacity is judged on the step time per frame of
        # the stream with the fewest frames per step so far (a stream whose drafts are
        # rejected more often must keep pace too); in a stream's first steps, on the mean.
        rates = [s.t / s.steps for s in streams if s.steps >= 3]
        mean = sum(_frames_in(f) for f in frames) / max(len(frames), 1)
        self.stats.step_times.append((len(streams), dt / max(min(rates, default=mean), 1.0)))

    def _check_stream(self, s: Stream, *arrays: np.ndarray) -> None:
        """The per-stream error boundary inside a family's step (fault hook, finiteness)."""
        if self.fault is not None:
            self.fault(s.request, s.t)
        if not all(np.isfinite(a).all() for a in arrays):
            raise FloatingPointError("the temporal model produced non-finite values")

    def _emit(self, s: Stream, f: Frame) -> None:
        if s.slot not in self._active:
            return
        if f.error is not None:
            self._leave(s, f.error)
            return
        if f.codes is None:  # the stop came without a frame (a stop token, Qwen3-TTS's eos)
            if f.ended:
                self._leave(s, None)
            return
        rows = list(f.codes) if f.codes.ndim == 2 else [f.codes]
        s.t += len(rows)
        s.steps += 1
        self.stats.frames += len(rows)
        s.held += rows
        if self.prebuffer and not f.ended and s.steps <= self.family.prebuffer_steps(s.state):
            return  # a bursty stream starts playing with a cushion (see Family)
        first = s.t - len(s.held)
        for k, codes in enumerate(s.held):
            s.handle._put(("frame", codes))
            self._deadline(s.handle, first + k)
        s.held = []
        if f.ended:
            self._leave(s, None)

    def _deadline(self, h: Outlet, t: int) -> None:
        """Frame t is late when it comes after its playback time, counted from the stream's
        first frame at real-time pace (the client plays from its first audio)."""
        if t == 0 or time.perf_counter() <= h.first_frame_at + t / self.frame_rate:
            return
        self.stats.late_frames += 1
        self._late_limit = max(1, min(self._late_limit, len(self._active) - 1))
        self._limit_since = self.stats.steps
        if not h.late:
            h.late = True
            self.stats.late_streams += 1


def _frames_in(f: Frame) -> int:
    return 0 if f.codes is None else (len(f.codes) if f.codes.ndim == 2 else 1)


def run_inline(family: Family, state: StreamState, request=None) -> Iterator[np.ndarray]:
    """One stream through the loop in the caller's thread, on slot 0 of `family` (an adapter
    with one slot): yields each frame's codes (int64 [G]) as the loop hands it out, until the
    stream ends; a stream's own error is raised as it was (a ValueError stays one). The
    stream loads at the call; the steps run as the frames are taken."""
    loop = StreamLoop(family, 1)
    loop.prebuffer = False
    inbox = _Inbox(state.frames)
    loop._join(Stream(handle=inbox, request=request, state=state))
    return _drain(loop, inbox)


def _drain(loop: StreamLoop, inbox: _Inbox) -> Iterator[np.ndarray]:
    while True:
        while inbox.items:
            kind, value = inbox.items.popleft()
            if kind == "error":
                raise value
            if kind == "done":
                return
            yield value
        loop._step()


def run_together(family: Family, states: list) -> list:
    """Streams `states` through the loop together in the caller's thread, each on a slot of
    its own of `family` (an adapter with at least len(states) slots), all joining at the
    start, as the engine runs streams admitted at once: a stream that ends leaves its slot
    and the others step on, until every stream has ended. Returns each stream's frames (a
    list of int64 [G]) in order. A stream's own error is raised once every stream has ended
    (the first stream's, in order), so one bad stream does not change the others' steps."""
    loop = StreamLoop(family, len(states))
    loop.prebuffer = False
    inboxes = [_Inbox(state.frames, i) for i, state in enumerate(states)]
    for inbox, state in zip(inboxes, states):
        loop._join(Stream(handle=inbox, request=None, state=state))
    while loop._active:
        loop._step()
    out = []
    for inbox in inboxes:
        errors = [value for kind, value in inbox.items if kind == "error"]
        if errors:
            raise errors[0]
        out.append([value for kind, value in inbox.items if kind == "frame"])
    return out
