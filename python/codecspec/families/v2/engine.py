"""Reference models v2 and v3 (the two-stage family) in the continuous-batching engine.

An engine step runs one round of `TemporalLoop` (`codecspec.decode.temporal`) for every
active stream: with temporal speculation the draft LM's proposals, one target call and the
verification; in AR one target call. Then the depth loops of every frame that step emitted,
across all streams (one frame per AR stream, the accepted frames plus one per speculative
stream), run in one batched depth loop (`codecspec.decode.batched_depth`: one graph call per
level for the whole batch), and each stream draws its stop head frame by frame. A
speculative stream thus hands out several frames per step.

`V2TTS.generate` runs the very same rounds for one stream (the same `next_round`,
`frame_jobs` and `finish_round`, each frame's depth loop drawing from its own generator), so
a served stream is bit-identical to single-stream generation with the same seed, whatever
streams share the engine (tests/families/v2/test_serve_v2.py).

The temporal calls are batched too: each stream's round is a coroutine
(`TemporalLoop.round_steps`) that asks for draft and target calls, and one call of the
batch-axis variant of each step graph (`codecspec.families.v2.step_batch`) answers every stream's
request of that kind (the draft calls first, then one target call for all); the batched
graph's outputs equal the single-stream graph's up to float rounding (~4e-6). The sampling
law is the model's calibrated one: a request's temperature, top_k or top_p is a 400 naming
the field.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.calibrate.decision import auto_mode
from codecspec.decode.batched_depth import decode_frames
from codecspec.decode.temporal import run_round
from codecspec.families.v2.model import V2TTS
from codecspec.pipeline.family import Check, Family, Frame, StreamState, guard, guard_value
from codecspec.tts.phonemes import encode_input

DRAFT_LEN = 3  # drafts per temporal round (V2TTS.temporal_loop's default)


@dataclass
class V2State(StreamState):
    plan: tuple = ()  # (encoder outputs, speaker id, expected frames, mode) until the slot
    loop: Optional[object] = None  # the stream's TemporalLoop
    stopped: bool = False  # the stop head ended the stream (not the max-length guard)


class V2Family(Family):
    """`V2TTS` in the engine: one temporal round per stream per step, all the step's frames
    through one batched depth loop."""

    name = "v2"
    formats = ("codecspec-v2-tts/1",)
    model_names = ("codecspec-v2",)
    known_length = False  # the stop head decides
    modes = ("ar", "spec")
    # The one-stream cases of the batched step (every step of `V2TTS.generate`, and of a lone
    # served stream): the stream's own step graphs instead of their batch-axis variants, and
    # one frame's depth loop on the decoder itself instead of the batched loop. The same bits
    # either way (`StepBatch`, `decode_frames`); they stay because they pay: without them
    # v3's generate took ~7% longer per frame with its default loops and ~13% in AR
    # (medians of per-sentence ratios, 24 interleaved sentences each, 2-core CPU).
    solo_graphs = True
    solo_depth = True

    def __init__(self, model_dir, slots, max_frames, max_phonemes, provider, threads):
        tts = V2TTS(model_dir, provider=provider, threads=threads)
        self._attach(tts, slots, DRAFT_LEN, max_frames, max_phonemes)

    @classmethod
    def over(cls, tts: V2TTS, slots: int, draft_len: int, max_frames: int) -> V2Family:
        """An adapter over a loaded `tts` (`V2TTS.generate`'s: one slot, its streams'
        `TemporalLoop`s built by the caller, rounds of up to `draft_len` drafts)."""
        family = cls.__new__(cls)
        family._attach(tts, slots, draft_len, max_frames, None)
        return family

    def _attach(self, tts: V2TTS, slots, draft_len, max_frames, max_phonemes) -> None:
        self.tts = tts
        if tts.aligned:  # reference model v3: the same runtime, its own name
            self.name, self.model_names = "v3", ("codecspec-v3",)
        self.max_frames, self.max_phonemes = max_frames, max_phonemes
        self.codec = tts.codec
        self.sample_rate = int(self.codec.sample_rate)
        self.frame_rate = float(self.codec.frame_rate)
        self.hop = int(round(self.sample_rate / self.frame_rate))
        # room for every slot's longest round
        self.depth = tts.round_depth(slots * (draft_len + 1))
        self.stream_steps = 0

    def check(self, req) -> None:
        super().check(req)
        for name in ("temperature", "top_k", "top_p"):
            if getattr(req, name) is not None:
                raise ValueError(f"{name}: the v2 family serves its calibrated sampling law only")

    def params(self, req) -> cs.SamplingParams:
        return self.tts.params

    def prepare(self, req, generator: cs.Generator) -> V2State:
        tts = self.tts
        lang_id, spk_id = tts.ids(req.language, req.voice)
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
            depth, temporal = auto_mode("auto", tts.speculation_pays), "auto"
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
        if state.loop is not None:  # built by its caller (V2TTS.plan: generate's options)
            return
        enc, spk_id, expected, depth, temporal = state.plan
        state.plan = ()
        state.loop = self.tts.temporal_loop(
            enc, spk_id, expected, temporal=temporal, depth_mode=depth, draft_len=DRAFT_LEN
        )

    def step(self, streams: list, check: Check) -> list:
        frames: list = [None] * len(streams)
        rounds, jobs = [], []
        for i, (s, rnd) in enumerate(zip(streams, self._rounds(streams))):
            error = rnd if isinstance(rnd, Exception) else guard(partial(check, s, rnd.hidden))
            if error is not None:
                frames[i] = Frame(error=error)
                continue
            rounds.append((i, rnd, len(jobs)))
            jobs += s.state.loop.frame_jobs(rnd, s.state.generator)
        t0 = time.perf_counter()
        codes = self._depth(jobs)
        dt = time.perf_counter() - t0
        for i, rnd, at in rounds:
            # the step's depth loops ran together: each stream's stats count the call
            streams[i].state.loop.stats.depth_seconds += dt
            frames[i] = self._finish(streams[i], rnd, codes[at : at + len(rnd)])
        return frames

    def _rounds(self, streams: list) -> list:
        """Every stream's round (or the exception that ended it), their graph calls batched:
        each stream's `round_steps` coroutine asks for draft and target calls; all pending
        draft requests run as one call of the draft graph, and the target requests wait
        until no stream drafts any more, so they all run as one target call."""
        steps = [s.state.loop.round_steps(s.state.generator, s.state.limit) for s in streams]
        if len(steps) == 1 and self.solo_graphs:  # one stream: its own graphs (see solo_graphs)
            return [guard_value(lambda: run_round(steps[0]))]
        results: list = [None] * len(streams)
        pending: dict = {}

        def advance(i: int, value) -> None:
            try:
                pending[i] = steps[i].send(value)
            except StopIteration as done:
                results[i] = done.value
            except Exception as e:  # this stream's own failure (its verification, its input)
                results[i] = e

        for i in range(len(steps)):
            advance(i, None)
        while pending:
            drafts = [i for i, (st, _) in pending.items() if st.is_draft]
            group = drafts or list(pending)
            outs = self.tts.step_batch(draft=bool(drafts)).score([pending.pop(i) for i in group])
            for i, out in zip(group, outs):
                advance(i, out)
        return results

    def _depth(self, jobs: list) -> list:
        if self.depth is not None and not (len(jobs) == 1 and self.solo_depth):
            return decode_frames(self.depth, jobs)
        # a depth decoder without a batched form, or one frame: frame by frame, same generators
        dec = self.tts.depth
        return [
            guard_value(lambda j=j: dec.decode_frame(j.hidden, j.c0, j.generator, j.mode))
            for j in jobs
        ]

    def _finish(self, s, rnd, codes: list) -> Frame:
        st = s.state
        box = {}
        error = guard(lambda: box.update(out=st.loop.finish_round(rnd, codes, st.generator)))
        if error is not None:
            return Frame(error=error)
        out, stopped = box["out"]
        st.stopped = stopped
        self.stream_steps += 1
        ended = stopped or len(st.loop.c0s) >= st.limit
        return Frame(codes=out, ended=ended)

    def prebuffer_steps(self, state: V2State) -> int:
        return 1 if state.loop is not None and state.loop.draft_len > 0 else 0

    def counters(self) -> dict:
        # the frame stage's graph calls: the batched depth loop's (as for the reference family)
        d = self.depth
        if d is None:
            s = self.tts.depth.stats
            return {"calls": s.calls, "lane_calls": s.calls, "codes": s.codes}
        return {"calls": d.calls, "lane_calls": d.lane_calls, "codes": d.codes_out}
