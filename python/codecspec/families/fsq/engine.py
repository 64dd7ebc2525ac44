"""The FSQ family in the continuous-batching engine: a slot-based batched step stepper and
the `Family` adapter over `FSQTTS`.

The FSQ step graph already has a batch axis and additive masks (`cross_bias` [B, P],
`past_bias` [B, T]), so no graph surgery is needed: each slot owns rows of preallocated
self-attention K/V [L, slots, heads, max_frames, hd] and cross K/V [L, slots, heads,
max_phonemes, hd] blocks; a step feeds the active slots' rows cut to the longest stream, with
`past_bias` hiding the positions a stream has not written and `cross_bias` the phonemes it
does not have. Attention has no positional term (position enters through `pace`), so a
stream's outputs are its own single-stream ones; on onnxruntime CPU they are bit-identical
(tests/families/fsq/test_serve_fsq.py), so its codes equal `FSQTTS.generate` with the same
seed, which is this adapter with one slot (`FSQFamily.over`) run inline (`codecspec.pipeline.loop`).

A stream ends at its stop head's first stop, or at the max-length guard `FSQTTS.max_frames_for`
its text (the same guard `generate` uses).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import codecspec as cs
from codecspec.families.fsq.model import FSQTTS, FSQSlots  # noqa: F401  (FSQSlots: the engine's name)
from codecspec.pipeline.family import Check, Family, Frame, StreamState, guard, sampling_params
from codecspec.runtime.session import open_session
from codecspec.tts.phonemes import encode_input

__all__ = ["FSQSlots", "FSQFamily"]


@dataclass
class FSQState(StreamState):
    pace: np.float32 = np.float32(0.0)  # pace per frame: 1 / (tokens x pace_unit)
    cross: tuple = ()
    prev: np.ndarray = None  # the last frame's channels, the next step's input
    stopped: bool = False  # the stop head ended the stream (not the max-length guard)


class FSQFamily(Family):
    """`FSQTTS` in the engine: frames decoded by `FSQFrameDecoder` (one generator per stream),
    ended by the stop head or the max-length guard. `speed` must be 1 (the stop head, not a
    rate, sets the length) and `mode` ar/auto (one decode loop), as in `FSQTTS.generate`."""

    name = "fsq"
    formats = ("codecspec-fsq-tts/1",)
    model_names = ("codecspec-fsq",)
    known_length = False  # the stop head decides
    modes = ("ar",)

    def __init__(self, model_dir, slots, max_frames, max_phonemes, provider, threads):
        tts = FSQTTS(model_dir, provider=provider, threads=threads)
        # A session of its own: FSQTTS.generate on tts.step_graph may run beside the engine.
        step = open_session(str(tts.dir / "step.onnx"), provider=provider, threads=threads)
        self._attach(tts, step, slots, max_frames, max_phonemes)

    @classmethod
    def over(cls, tts: FSQTTS, slots: int, max_frames: int, max_phonemes: int) -> FSQFamily:
        """An adapter over a loaded `tts` and its own step session (`FSQTTS.generate`'s: one
        slot sized to its utterance; the K/V blocks are mapped lazily)."""
        family = cls.__new__(cls)
        family._attach(tts, tts.step_graph, slots, max_frames, max_phonemes)
        return family

    def _attach(self, tts: FSQTTS, step, slots, max_frames, max_phonemes) -> None:
        self.tts = tts
        self.max_frames, self.max_phonemes = max_frames, max_phonemes
        self.slots = FSQSlots(step, slots, max_frames, max_phonemes)
        self.codec = tts.codec
        self.sample_rate = int(self.codec.sample_rate)
        self.frame_rate = float(self.codec.frame_rate)
        self.hop = int(round(self.sample_rate / self.frame_rate))
        self.stream_steps = self.codes_out = 0
        self.sample_seconds = 0.0  # the frame decoder's time (FSQSynthesis.sampling_seconds)

    def check(self, req) -> None:
        super().check(req)
        if req.speed != 1.0:
            raise ValueError(f"speed: the fsq family's stop head sets the length; got {req.speed}")

    def params(self, req) -> cs.SamplingParams:
        return sampling_params(self.tts.params, req, max(self.tts.frame_decoder.head_sizes))

    def prepare(self, req, generator: cs.Generator) -> FSQState:
        tts = self.tts
        lang_id, spk_id = tts.ids(req.language, req.voice)
        ids = encode_input(tts, req, self.max_phonemes)
        limit = tts.max_frames_for(len(ids))
        if limit > self.max_frames:
            raise ValueError(f"input: may need {limit} frames, more than {self.max_frames}")
        return self.state(ids, lang_id, spk_id, self.params(req), generator, limit)

    def state(self, ids, lang_id: int, spk_id: int, params, generator, limit: int) -> FSQState:
        """A stream of phoneme ids `ids` (bos/eos included) under `params`, ended by its stop
        head or after `limit` frames: the encoder call and the step's inputs."""
        tts = self.tts
        cross = tts.encoder.run(
            None,
            {
                "phonemes": ids[None],
                "phoneme_lengths": np.array([len(ids)], np.int64),
                "language": np.array([lang_id], np.int64),
                "speaker": np.array([spk_id], np.int64),
            },
        )
        unit = np.float32(tts.meta["pace_unit"])
        return FSQState(
            generator=generator,
            params=params,
            speaker=spk_id,
            frames=None,
            expected=int(np.ceil(len(ids) * unit)),
            limit=limit,
            tokens=len(ids),
            # FSQStepper's float32 arithmetic, so the pace input is the same bits
            pace=np.float32(1.0) / (np.float32(len(ids)) * unit),
            cross=tuple(cross),
            prev=np.zeros(self.slots.channels, np.int64),
        )

    def load(self, slot: int, state: FSQState) -> None:
        cross, state.cross = state.cross, ()
        self.slots.load(slot, *cross)

    def step(self, streams: list, check: Check) -> list:
        states = [s.state for s in streams]
        pace = [np.float32(s.t + 0.5) * s.state.pace for s in streams]
        h, logits, stop = self.slots.step(
            [s.slot for s in streams],
            np.stack([st.prev for st in states]),
            pace,
            [st.speaker for st in states],
        )
        t1 = time.perf_counter()
        self.stream_steps += len(streams)
        rows = zip(streams, h, logits, stop)
        frames = [self._frame(s, check, hi, li[None], si[None]) for s, hi, li, si in rows]
        self.sample_seconds += time.perf_counter() - t1
        return frames

    def _frame(self, s, check: Check, hidden, logits, stop) -> Frame:
        out = {}

        def sample():
            check(s, hidden, logits, stop)
            out["codes"], out["stop"] = self._sample(s.state, logits, stop)

        error = guard(sample)
        if error is not None:
            return Frame(error=error)
        s.state.prev, s.state.stopped = out["codes"], bool(out["stop"])
        self.codes_out += len(out["codes"])
        return Frame(codes=out["codes"], ended=bool(out["stop"]) or s.t + 1 >= s.state.limit)

    def _sample(self, st: FSQState, logits, stop):
        # FSQTTS.generate's draws (FSQFrameDecoder), with the stream's own sampling law
        return self.tts.frame_decoder.sample_stream(logits, stop, st.params, st.generator)

    def counters(self) -> dict:
        return {"calls": self.slots.calls, "lane_calls": self.stream_steps, "codes": self.codes_out}
