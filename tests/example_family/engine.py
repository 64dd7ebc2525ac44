"""The example family in the serving engine: its `codecspec.pipeline.Family` adapter.

The adapter keeps the batched stepper's state per slot (the text and speaker rows a stream
loads when it joins, the previous frame's codes) and computes every active stream's logits in
one call per step, `ToyTTS.logits` over the active slots' rows; each stream then draws its
frame with its own generator and sampling law, as `ToyTTS.generate` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import codecspec as cs
from codecspec.pipeline.family import (
    Check,
    Family,
    Frame,
    Stage,
    StreamState,
    guard,
    sampling_params,
)

from . import FORMAT
from .model import G, H, ToyTTS, V


@dataclass
class ToyState(StreamState):
    text: np.ndarray = None  # int64 [H]: the stream's text vector (ToyTTS.text_vector)


class ToyFamily(Family):
    name = "example-toy"
    formats = (FORMAT,)
    model_names = ("codecspec-example-toy",)
    modes = ("ar",)  # one loop; "auto" is it too
    known_length = True  # the text sets the frame count

    def __init__(self, folder, slots, max_frames, max_phonemes, provider, threads):
        self.tts = ToyTTS(folder, provider=provider, threads=threads)
        self.codec = self.tts.codec
        self.sample_rate, self.frame_rate = self.codec.sample_rate, self.codec.frame_rate
        self.hop = self.codec.hop
        self.max_frames, self.max_phonemes = max_frames, max_phonemes
        self.text = np.zeros((slots, H), np.int64)
        self.speaker = np.zeros(slots, np.int64)
        self.prev = np.full((slots, G), -1, np.int64)
        self.calls = self.lane_calls = self.codes_out = 0

    def params(self, req) -> cs.SamplingParams:
        return sampling_params(self.tts.params, req, V)

    def prepare(self, req, generator: cs.Generator) -> ToyState:
        ids = self.tts.ids(req.input, self.max_phonemes)
        frames = self.tts.frames_for(len(ids), req.speed)
        if frames > self.max_frames:
            raise ValueError(f"input: needs {frames} frames, more than {self.max_frames}")
        return ToyState(
            generator=generator,
            params=self.params(req),
            speaker=self.tts.speaker_id(req.voice),
            frames=frames,
            expected=frames,
            limit=frames,
            tokens=len(ids),
            text=self.tts.text_vector(ids),
        )

    def load(self, slot: int, state: ToyState) -> None:
        self.text[slot], self.speaker[slot] = state.text, state.speaker
        self.prev[slot] = -1

    def step(self, streams: list, check: Check) -> list:
        slots = [s.slot for s in streams]
        t = np.array([s.t for s in streams], np.int64)
        logits = self.tts.logits(self.text[slots], self.speaker[slots], self.prev[slots], t)
        self.calls += 1
        self.lane_calls += len(streams)
        return [self._frame(s, check, logits[i]) for i, s in enumerate(streams)]

    def _frame(self, s, check: Check, logits: np.ndarray) -> Frame:
        out = {}

        def sample():
            check(s, logits)  # the engine's per-stream boundary (fault hook, finiteness)
            out["codes"] = self.tts.sample(logits, s.state.params, s.state.generator)

        error = guard(sample)
        if error is not None:
            return Frame(error=error)
        self.prev[s.slot] = out["codes"]
        self.codes_out += G
        return Frame(codes=out["codes"], ended=s.t + 1 >= s.state.frames)

    def stages(self) -> list:
        """One stage: a frame reads the output matrix whole and G rows of the code table
        (what `codecspec bench` bounds it by)."""
        w = self.tts.w
        return [Stage("logits", int(w["out"].nbytes + G * w["codes"].itemsize * H))]

    def counters(self) -> dict:
        return {"calls": self.calls, "lane_calls": self.lane_calls, "codes": self.codes_out}
