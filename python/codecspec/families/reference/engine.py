"""The reference (v1) family's serving-engine adapter: `ReferenceFamily`, the RVQ reference
(temporal LM with latent feedback, depth loop, a frame count planned from the phonemes) as a
`codecspec.pipeline.Family`. The registry (`codecspec.pipeline.registry`) names it by module
path, so the engine imports it only when a reference folder is served.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.calibrate.decision import auto_mode
from codecspec.decode.batched_depth import BatchedDepth, DepthLane, sample_roots
from codecspec.decode.depth import MODES
from codecspec.families.reference.model import ReferenceTTS
from codecspec.families.reference.temporal_batch import BatchedTemporal
from codecspec.pipeline.family import (
    Check,
    Family,
    Frame,
    StreamState,
    guard,
    sampling_params,
)
from codecspec.tts.phonemes import encode_input

__all__ = ["RVQState", "ReferenceFamily"]


@dataclass
class RVQState(StreamState):
    spec: bool = False
    cross: tuple = ()
    latent: Optional[np.ndarray] = None


class ReferenceFamily(Family):
    """The RVQ reference: batched temporal LM (latent feedback), c0 for all streams in one
    core call, the depth loop batched across streams (`BatchedDepth`), frames planned from
    the phoneme count and `speed`."""

    name = "reference"
    formats = ("codecspec-reference-tts/1",)
    model_names = ("codecspec-reference",)
    modes = MODES
    # The one-stream case of the batched step (every step of `ReferenceTTS.generate`, and of
    # a lone served stream): c0 by `cs.sample` and the frame's depth loop on the decoder
    # itself, not the batched loop's lanes. The same draws, so the same bits.
    solo_depth = True

    def __init__(self, model_dir, slots, max_frames, max_phonemes, provider, threads):
        tts = ReferenceTTS(model_dir, provider=provider, threads=threads)
        self._attach(tts, slots, max_frames, max_phonemes)
        self.depth = BatchedDepth(tts.depth, slots, provider, threads)

    @classmethod
    def over(cls, tts: ReferenceTTS, frames: int, max_phonemes: int) -> ReferenceFamily:
        """An adapter over a loaded `tts` with one slot for an utterance of `frames` frames
        (`ReferenceTTS.generate`'s): the one-stream case only, so no batched depth loop."""
        family = cls.__new__(cls)
        family._attach(tts, 1, frames, max_phonemes)
        family.depth = None
        return family

    def _attach(self, tts: ReferenceTTS, slots, max_frames, max_phonemes) -> None:
        self.tts = tts
        self.max_frames, self.max_phonemes = max_frames, max_phonemes
        # the session ReferenceTTS.generate runs its utterance on (one stepper for both)
        self.temporal = BatchedTemporal(tts.temporal_batch, slots, max_frames, max_phonemes)
        self.codec = tts.codec
        self.hop = self.codec.cfg.frame_hop
        self.sample_rate = self.codec.cfg.sample_rate
        self.frame_rate = self.codec.cfg.frame_rate
        self.depth_seconds = 0.0  # the depth loops' time (Synthesis.depth_seconds)
        self.solo_calls = self.solo_codes = 0  # the one-stream case's depth graph calls

    def params(self, req) -> cs.SamplingParams:
        return sampling_params(self.tts.params, req, self.tts.depth.V)

    def prepare(self, req, generator: cs.Generator) -> RVQState:
        tts = self.tts
        lang_id, spk_id = tts.ids(req.language, req.voice)
        ids = encode_input(tts, req, self.max_phonemes)
        frames = tts.num_frames(len(ids) - 2, req.language, float(req.speed))
        if frames > self.max_frames:
            raise ValueError(
                f"input: needs {frames} frames at speed {req.speed}, more than {self.max_frames}"
            )
        cross = tts.encoder.run(
            ["cross_keys", "cross_values"],
            {
                "phonemes": ids[None],
                "language": np.array([lang_id], np.int64),
                "speaker": np.array([spk_id], np.int64),
            },
        )
        mode = auto_mode(req.mode, tts.speculation_pays)
        return RVQState(
            generator=generator,
            params=self.params(req),
            speaker=spk_id,
            frames=frames,
            expected=frames,
            limit=frames,
            tokens=len(ids),
            spec=mode == "spec",
            cross=tuple(cross),
        )

    def load(self, slot: int, state: RVQState) -> None:
        cross, state.cross = state.cross, ()  # the slot's block holds them from now on
        self.temporal.load(slot, *cross)

    def step(self, streams: list, check: Check) -> list:
        states = [s.state for s in streams]
        zero = np.zeros(self.temporal.latent_dim, np.float32)
        latents = np.stack([zero if st.latent is None else st.latent for st in states])
        progress = [(s.t + 0.5) / s.state.frames for s in streams]
        hidden, logits = self.temporal.step(
            [s.slot for s in streams], latents, progress, [st.speaker for st in states]
        )
        lanes = [self._lane(st) for st in states]
        for i, (s, ln) in enumerate(zip(streams, lanes)):
            ln.failed = guard(lambda s=s, i=i: check(s, hidden[i], logits[i]))
        live = [i for i, ln in enumerate(lanes) if ln.failed is None]
        if len(live) == 1 and (self.depth is None or self.solo_depth):
            i = live[0]
            lanes[i].failed = guard(lambda: self._solo(hidden[i], logits[i], lanes[i]))
        elif live:
            self._batched(hidden, logits, lanes, live)
        return [self._frame(s, ln) for s, ln in zip(streams, lanes)]

    def _solo(self, hidden, logits, ln: DepthLane) -> None:
        """One stream's frame by the depth decoder's own loop: c0 drawn on the host, then
        c1.. (the same draws as the batched depth loop)."""
        c0 = cs.sample(logits, ln.params, ln.generator)
        dec, t0 = self.tts.depth, time.perf_counter()
        calls, codes = dec.stats.calls, dec.stats.codes
        ln.codes[:] = dec.decode_frame(hidden, c0, ln.generator, "spec" if ln.spec else "ar")
        self.depth_seconds += time.perf_counter() - t0
        self.solo_calls += dec.stats.calls - calls
        self.solo_codes += dec.stats.codes - codes

    def _batched(self, hidden, logits, lanes: list, live: list) -> None:
        c0 = sample_roots(logits[live], [lanes[i] for i in live])
        for i, c in zip(live, c0):
            if c is not None:
                lanes[i].codes[0] = c[0]
        # A failed stream's rows may hold NaN; masked columns still multiply their values, so
        # it leaves the depth batch entirely.
        live = [i for i in live if lanes[i].failed is None]
        if live:
            t0 = time.perf_counter()
            self.depth.decode(hidden[live], [lanes[i] for i in live])
            self.depth_seconds += time.perf_counter() - t0

    def _lane(self, st: RVQState) -> DepthLane:
        codes = np.zeros(self.tts.depth.G, np.int64)
        return DepthLane(spec=st.spec, params=st.params, generator=st.generator, codes=codes)

    def _frame(self, s, ln: DepthLane) -> Frame:
        if ln.failed is not None:
            return Frame(error=ln.failed)
        s.state.latent = self.tts._latent(ln.codes)  # the next step's input
        return Frame(codes=ln.codes, ended=s.t + 1 >= s.state.frames)

    def counters(self) -> dict:
        # a one-stream step's graph calls are its own (the batch of one), so lane_calls too
        d, solo = self.depth, self.solo_calls
        if d is None:
            return {"calls": solo, "lane_calls": solo, "codes": self.solo_codes}
        return {
            "calls": d.calls + solo,
            "lane_calls": d.lane_calls + solo,
            "codes": d.codes_out + self.solo_codes,
        }
