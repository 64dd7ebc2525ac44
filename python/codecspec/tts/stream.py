"""Streaming synthesis, shared by the model families: frames -> audio chunks as they come.

A family prepares each utterance as a `FramePlan`: its frames as the one loop hands them out
(`codecspec.pipeline.loop.run_inline` over the family's serving adapter with one slot) and
the frame guard. `AudioStream` feeds every frame to a `codecspec.codec.streaming.ChunkVocoder`
over the family's codec, yielding float32 waveform chunks as soon as each is ready. Several
plans (the sentences of a long text) play as one continuous stream through one vocoder, so
sentence joins are cross-faded like any other chunk boundary. A family plugs in with a
`plan` giving FramePlans and any codec with `decode(codes, seed=...)`.

    s = tts.stream("Hello there.", chunk_frames=8)
    for chunk in s:            # float32 [samples] at s.sample_rate
        play(chunk)
    s.time_to_first_audio      # seconds from the stream() call to the first chunk
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Optional

import numpy as np

from codecspec.codec.streaming import ChunkVocoder, codec_sample_rate
from codecspec.tts.text import split_sentences as _split

__all__ = [
    "FramePlan",
    "AudioStream",
    "stream_model",
    "DEFAULT_CHUNK_FRAMES",
    "check_chunk_frames",
]

DEFAULT_CHUNK_FRAMES = 8  # 0.64 s at 12.5 frames/s


def check_chunk_frames(chunk_frames, name: str = "chunk_frames") -> int:
    """`chunk_frames` as an int >= 1; ValueError naming `name` otherwise."""
    if isinstance(chunk_frames, bool) or not isinstance(chunk_frames, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer >= 1, got {chunk_frames!r}")
    if chunk_frames < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {chunk_frames}")
    return int(chunk_frames)


@dataclass
class FramePlan:
    """One utterance ready to stream (one stream): its frames from the one loop."""

    frames: Iterator  # (codes int64 [C], stopped, ...) per frame, as the loop hands them out
    max_frames: int  # the stream's guard
    phonemes: str = ""
    frontend_seconds: float = 0.0  # text -> phonemes -> encoder graph
    mode: str = ""  # the family's decode mode ("ar", "spec", "fsq", ...)


class AudioStream:
    """Iterator of float32 waveform chunks for a sequence of `FramePlan`s (lazily consumed:
    a plan is built only when the previous utterance has been played out).

    Statistics, filled in as it runs: `time_to_first_audio` (seconds from `t_start`, default
    the construction, to the first chunk being ready), `frames`, `chunks`, `samples`,
    `audio_seconds`, `sentences`, `stopped` (every utterance ended by its own stop rule, not
    by its max_frames guard), `frontend_seconds`, `step_seconds` (the loop: waiting for each
    frame), `decode_seconds` (0: the loop's frame decoding is in `step_seconds`),
    `vocoder_seconds`, `total_seconds`, `codes` [T, C]."""

    def __init__(
        self,
        plans: Iterable[FramePlan],
        codec,
        *,
        sample_rate: Optional[int] = None,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        context_frames: int = 2,
        crossfade: float = 0.25,
        seed: int = 0,
        mode: str = "",
        t_start: Optional[float] = None,
    ):
        self.t_start = time.perf_counter() if t_start is None else float(t_start)
        self.chunk_frames = check_chunk_frames(chunk_frames)
        self.vocoder = ChunkVocoder(
            codec,
            chunk_frames=self.chunk_frames,
            context_frames=context_frames,
            crossfade=crossfade,
            seed=seed,
        )
        self.sample_rate = codec_sample_rate(codec) if sample_rate is None else int(sample_rate)
        self.mode, self.seed = mode, int(seed)
        self.time_to_first_audio: Optional[float] = None
        self._t_end: Optional[float] = None
        self.frontend_seconds = self.step_seconds = self.decode_seconds = 0.0
        self.vocoder_seconds = 0.0
        self.frames = self.steps = self.chunks = self.samples = self.sentences = 0
        self.stopped = True
        self.phonemes: list = []
        self._codes: list = []
        self._it = self._run(iter(plans))

    def __iter__(self):
        return self

    def __next__(self) -> np.ndarray:
        return next(self._it)

    def close(self) -> None:
        """Stop early (the generator's frames and graphs are released)."""
        self._it.close()

    @property
    def codes(self) -> np.ndarray:
        """int64 [T, C]: every frame streamed so far, all utterances in order."""
        if not self._codes:
            return np.zeros((0, 0), np.int64)
        return np.stack(self._codes).astype(np.int64)

    @property
    def total_seconds(self) -> float:
        """Wall time from `t_start` to the end of the stream (so far, while it runs)."""
        end = time.perf_counter() if self._t_end is None else self._t_end
        return end - self.t_start

    @property
    def audio_seconds(self) -> float:
        return self.samples / self.sample_rate

    @property
    def real_time_factor(self) -> float:
        return self.total_seconds / max(self.audio_seconds, 1e-9)

    def _emit(self, chunk: np.ndarray) -> np.ndarray:
        if self.time_to_first_audio is None:
            self.time_to_first_audio = time.perf_counter() - self.t_start
        self.chunks += 1
        self.samples += len(chunk)
        return chunk

    def _vocode(self, frame=None) -> list:
        t0 = time.perf_counter()
        out = self.vocoder.finish() if frame is None else self.vocoder.push(frame)
        self.vocoder_seconds += time.perf_counter() - t0
        return out

    def _run(self, plans):
        try:
            while True:
                t0 = time.perf_counter()
                plan = next(plans, None)  # a lazy plan phonemizes and encodes here
                if plan is None:
                    break
                if not plan.frontend_seconds:
                    plan.frontend_seconds = time.perf_counter() - t0
                self.frontend_seconds += plan.frontend_seconds
                self.sentences += 1
                self.phonemes.append(plan.phonemes)
                yield from self._plan_frames(plan)
            for c in self._vocode():
                yield self._emit(c)
        finally:
            self._t_end = time.perf_counter()

    def _plan_frames(self, plan: FramePlan):
        """One utterance's frames through the vocoder, as the loop hands them out."""
        stopped, t0 = False, time.perf_counter()
        for codes, stop, *_ in plan.frames:
            self.step_seconds += time.perf_counter() - t0
            frame = np.asarray(codes, np.int64)
            self._codes.append(frame)
            self.frames += 1
            self.steps += 1
            stopped = bool(stop)
            for c in self._vocode(frame):
                yield self._emit(c)
            t0 = time.perf_counter()
        self.stopped = self.stopped and stopped


def stream_model(
    model,
    text: str,
    *,
    sample_rate: Optional[int] = None,
    chunk_frames: int = DEFAULT_CHUNK_FRAMES,
    split_sentences: bool = False,
    seed: int = 0,
    vocoder: Optional[dict] = None,
    **plan_kwargs,
) -> AudioStream:
    """The families' `stream`: `model.plan(text, seed=..., **plan_kwargs) -> FramePlan` for
    the text (or for each of its sentences, sentence i seeded `seed + i`, built lazily) and
    `model.codec` for the vocoder (`sample_rate`: None = the codec's). The first plan is
    built here, so bad arguments fail at the call, before any audio; `time_to_first_audio`
    counts from the call."""
    t_start = time.perf_counter()
    chunk_frames = check_chunk_frames(chunk_frames)
    vocoder = dict(vocoder or {})
    if split_sentences:
        if plan_kwargs.get("phonemes") is not None:
            raise ValueError("phonemes: split_sentences splits text; give text, not phonemes")
        sentences = _split(text) if isinstance(text, str) else []
        if not sentences:
            raise ValueError("text: expected a non-empty string")
        first = model.plan(sentences[0], seed=seed, **plan_kwargs)
        rest = (model.plan(t, seed=seed + i, **plan_kwargs) for i, t in enumerate(sentences[1:], 1))
        plans = itertools.chain([first], rest)
    else:
        first = model.plan(text, seed=seed, **plan_kwargs)
        plans = iter([first])
    return AudioStream(
        plans,
        model.codec,
        sample_rate=sample_rate,
        chunk_frames=chunk_frames,
        seed=seed,
        mode=first.mode,
        t_start=t_start,
        **vocoder,
    )
