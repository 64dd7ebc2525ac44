"""A loaded model's `generate` and `stream`, shared by the phoneme families: a request
prepared by the family (`Family.prepare`, the serving engine's), its frames from the one loop
with one slot (`codecspec.pipeline.loop.run_inline`), and the codec.

`run_request` is one utterance's frames; `stream_request` feeds every frame to a
`codecspec.codec.streaming.ChunkVocoder` over the family's codec (`AudioStream`), yielding
float32 waveform chunks as soon as each is ready. Several utterances (the sentences of a long
text) play as one continuous stream through one vocoder, so sentence joins are cross-faded
like any other chunk boundary.

    s = tts.stream("Hello there.", chunk_frames=8)
    for chunk in s:            # float32 [samples] at s.sample_rate
        play(chunk)
    s.time_to_first_audio      # seconds from the stream() call to the first chunk
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.codec.streaming import ChunkVocoder, codec_sample_rate
from codecspec.frontend.text import split_sentences as _split
from codecspec.pipeline.family import Family, SpeechRequest, StreamState
from codecspec.pipeline.loop import run_inline

__all__ = [
    "AudioStream",
    "DEFAULT_CHUNK_FRAMES",
    "check_chunk_frames",
    "run_request",
    "speech_request",
    "stream_request",
]

DEFAULT_CHUNK_FRAMES = 8  # 0.64 s at 12.5 frames/s


def check_chunk_frames(chunk_frames, name: str = "chunk_frames") -> int:
    """`chunk_frames` as an int >= 1; ValueError naming `name` otherwise."""
    if isinstance(chunk_frames, bool) or not isinstance(chunk_frames, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer >= 1, got {chunk_frames!r}")
    if chunk_frames < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {chunk_frames}")
    return int(chunk_frames)


class AudioStream:
    """Iterator of float32 waveform chunks for a sequence of utterances, each (its frames,
    its `StreamState`, the seconds its preparation took), lazily consumed: an utterance is
    prepared only when the previous one has been played out.

    Statistics, filled in as it runs: `time_to_first_audio` (seconds from `t_start`, default
    the construction, to the first chunk being ready), `frames`, `chunks`, `samples`,
    `audio_seconds`, `sentences`, `stopped` (every utterance ended by its own stop rule, not
    by its max_frames guard), `frontend_seconds`, `step_seconds` (the loop: waiting for each
    frame), `decode_seconds` (0: the loop's frame decoding is in `step_seconds`),
    `vocoder_seconds`, `total_seconds`, `codes` [T, C]."""

    def __init__(
        self,
        utterances: Iterable[tuple],
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
        self._it = self._run(iter(utterances))

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

    def _run(self, utterances):
        try:
            while True:
                t0 = time.perf_counter()
                item = next(utterances, None)  # a lazy utterance phonemizes and encodes here
                if item is None:
                    break
                frames, state, seconds = item
                self.frontend_seconds += seconds or time.perf_counter() - t0
                self.sentences += 1
                self.phonemes.append(state.phonemes)
                yield from self._frames(frames)
                self.stopped = self.stopped and _stopped(state)
            for c in self._vocode():
                yield self._emit(c)
        finally:
            self._t_end = time.perf_counter()

    def _frames(self, frames):
        """One utterance's frames through the vocoder, as the loop hands them out."""
        t0 = time.perf_counter()
        for codes in frames:
            self.step_seconds += time.perf_counter() - t0
            frame = np.asarray(codes, np.int64)
            self._codes.append(frame)
            self.frames += 1
            self.steps += 1
            for c in self._vocode(frame):
                yield self._emit(c)
            t0 = time.perf_counter()


def _stopped(state: StreamState) -> bool:
    """Whether the stream ended by its own rule: its stop head, or its planned length (a
    family without a stop head)."""
    return state.frames is not None if state.stopped is None else bool(state.stopped)


def speech_request(text, phonemes: Optional[str], *, speaker, rate, **fields) -> SpeechRequest:
    """A phoneme family's `generate` keywords as the serving engine's request: IPA
    `phonemes` when given, else `text`; `speaker` is the voice, `rate` the speed."""
    if phonemes is not None:
        return SpeechRequest(phonemes, "ipa", voice=speaker, speed=rate, **fields)
    return SpeechRequest(text, voice=speaker, speed=rate, **fields)


def run_request(family: Family, req: SpeechRequest) -> tuple:
    """(state, frames, seconds): `req` prepared by `family` (an adapter with one slot:
    checked, phonemized, encoded; `seconds` that took), and an iterator of its frames'
    codes from the one loop, `cs.Generator(req.seed)` drawing. The stream takes its slot
    here, so a bad argument fails at the call."""
    t0 = time.perf_counter()
    family.check(req)
    state = family.prepare(req, cs.Generator(req.seed))
    frames = run_inline(family, state)
    return state, frames, time.perf_counter() - t0


def stream_request(
    family: Family,
    req: SpeechRequest,
    *,
    chunk_frames: int = DEFAULT_CHUNK_FRAMES,
    split_sentences: bool = False,
    vocoder: Optional[dict] = None,
) -> AudioStream:
    """The families' `stream`: `req` through `run_request` (or each sentence of its text,
    sentence i seeded `req.seed + i`, prepared lazily), vocoded by `family.codec`. The first
    utterance is prepared here, so bad arguments fail at the call, before any audio;
    `time_to_first_audio` counts from the call."""
    t_start = time.perf_counter()
    chunk_frames = check_chunk_frames(chunk_frames)
    if split_sentences and req.input_format != "text":
        raise ValueError("phonemes: split_sentences splits text; give text, not phonemes")
    sentences = [req.input]
    if split_sentences:
        sentences = _split(req.input) if isinstance(req.input, str) else []
        if not sentences:
            raise ValueError("text: expected a non-empty string")
    reqs = [replace(req, input=t, seed=req.seed + i) for i, t in enumerate(sentences)]
    first = run_request(family, reqs[0])
    rest = (run_request(family, r) for r in reqs[1:])
    return AudioStream(
        _chain(first, rest),
        family.codec,
        chunk_frames=chunk_frames,
        seed=req.seed,
        mode=first[0].mode,
        t_start=t_start,
        **dict(vocoder or {}),
    )


def _chain(first, rest) -> Iterator:
    """(frames, state, seconds) of each utterance, `first` prepared already."""
    state, frames, seconds = first
    yield frames, state, seconds
    for state, frames, seconds in rest:
        yield frames, state, seconds
