"""Reference model v2 (the default shipped model) in the continuous-batching engine.

Each v2 stream runs the single-stream round loop itself (`V2TTS.temporal_loop`: the draft
LM and one target call per round when temporal speculation is on, the depth loop, the stop
head) with its own step caches and its own generator; an engine step advances every active
stream by one frame. A speculative round yields several frames, which the stream hands out
one per step. Since a stream's codes come from the same loop, with the same generator and
the same calls as `V2TTS.generate`, a served v2 stream is bit-identical to single-stream
generation with the same seed (tests/test_serve_v2.py), whatever streams share the engine.

What this adapter does not do yet: batch the graph calls of several v2 streams into one
call (the reference and FSQ families do; that is the one-engine refactor's job), so the
engine's step time grows linearly with v2 streams, and realtime admission sizes the batch
accordingly. The sampling law is the model's calibrated one: a request's temperature, top_k
or top_p is a 400 naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.serve.family import Check, Family, Frame, StreamState, encode_input, guard
from codecspec.tts.v2 import V2TTS


@dataclass
class V2State(StreamState):
    plan: tuple = ()  # (encoder outputs, speaker id, expected frames, mode) until the slot
    frames_it: Optional[object] = None  # the stream's round loop, one frame per next()
    loop: Optional[object] = None  # its TemporalLoop (statistics)


class V2Family(Family):
    """`V2TTS` in the engine: one round loop per stream, advanced one frame per step."""

    name = "v2"
    model_names = ("codecspec-v2",)
    known_length = False  # the stop head decides
    modes = ("ar", "spec")

    def __init__(self, model_dir, slots, max_frames, max_phonemes, provider, threads):
        self.tts = V2TTS(model_dir, provider=provider, threads=threads)
        if self.tts.aligned:  # reference model v3: the same runtime, its own name
            self.name, self.model_names = "v3", ("codecspec-v3",)
        self.max_frames, self.max_phonemes = max_frames, max_phonemes
        self.codec = self.tts.codec
        self.sample_rate = int(self.codec.sample_rate)
        self.frame_rate = float(self.codec.frame_rate)
        self.hop = int(round(self.sample_rate / self.frame_rate))
        self.calls = self.stream_steps = self.codes_out = 0

    def check(self, req) -> None:
        super().check(req)
        for name in ("temperature", "top_k", "top_p"):
            if getattr(req, name) is not None:
                raise ValueError(f"{name}: the v2 family serves its calibrated sampling law only")

    def params(self, req) -> cs.SamplingParams:
        return self.tts.params

    def prepare(self, req, generator: cs.Generator) -> V2State:
        tts = self.tts
        lang_id, spk_id = tts._ids(req.language, req.voice or tts.meta["default_speaker"])
        if tts.aligned:  # v3: the pace is espeak-ng's phoneme track of the text
            enc, ids, expected = self._aligned_input(req)
        else:
            ids = encode_input(tts, req, self.max_phonemes)
            expected = tts.expected_frames(len(ids) - 2, req.language, float(req.speed))
        limit = tts.max_frames_for(expected)
        if limit > self.max_frames:
            raise ValueError(f"input: may need {limit} frames, more than {self.max_frames}")
        if not tts.aligned:
            enc = tts.encoder.run(
                None,
                {
                    "phonemes": ids[None],
                    "language": np.array([lang_id], np.int64),
                    "speaker": np.array([spk_id], np.int64),
                },
            )
        # V2TTS.plan's choices for mode "auto": the depth loop's calibration, the temporal
        # loop's measurement in model.json; an explicit mode sets both loops.
        if req.mode == "auto":
            depth, temporal = ("spec" if tts.speculation_pays else "ar"), "auto"
        else:
            depth = temporal = req.mode
        return V2State(
            generator=generator,
            params=tts.params,
            speaker=spk_id,
            frames=None,
            expected=int(np.ceil(expected if np.ndim(expected) == 0 else len(expected))),
            limit=limit,
            tokens=len(ids),
            plan=(enc, spk_id, expected, depth, temporal),
        )

    def _aligned_input(self, req):
        """(encoder outputs, ids, phoneme track) of a request to an aligned model: text only
        (its phonemes and their timing both come from espeak-ng)."""
        if req.input_format != "text":
            raise ValueError("input_format: this model reads text (espeak-ng times its phonemes)")
        _, ids, _, _, enc, track = self.tts.prepare_text(
            req.input, None, req.language, req.voice, float(req.speed)
        )
        if len(ids) > self.max_phonemes:
            raise ValueError(f"input: {len(ids) - 2} phonemes, more than the limit")
        return enc, ids, track

    def load(self, slot: int, state: V2State) -> None:
        enc, spk_id, expected, depth, temporal = state.plan
        state.plan = ()
        loop = self.tts.temporal_loop(enc, spk_id, expected, temporal=temporal, depth_mode=depth)
        state.loop, state.frames_it = loop, loop.frames(state.generator, state.limit)

    def step(self, streams: list, check: Check) -> list:
        return [self._frame(s, check) for s in streams]

    def _frame(self, s, check: Check) -> Frame:
        out = {}

        def one():
            calls = s.state.loop.stats.target_calls
            codes, stop, hidden = next(s.state.frames_it)
            self.calls += s.state.loop.stats.target_calls - calls
            check(s, hidden)
            out["codes"], out["stop"] = codes, stop

        error = guard(one)
        if error is not None:
            return Frame(error=error)
        self.stream_steps += 1
        self.codes_out += len(out["codes"])
        ended = bool(out["stop"]) or s.t + 1 >= s.state.limit
        return Frame(codes=out["codes"], ended=ended)

    def counters(self) -> dict:
        # the frame stage's graph calls here are the temporal target calls (one per round)
        return {"calls": self.calls, "lane_calls": self.calls, "codes": self.codes_out}
