"""Qwen3-TTS streams stepped on their slots' runtimes (engine.py's module doc says how): the
loop's side of the family, which `Qwen3TTS.iter_frames` runs one stream through (one slot,
whose runtime is the `Qwen3TTS` itself) and `engine.Qwen3Family` extends with a loaded
folder's requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import codecspec as cs
from codecspec.pipeline.family import Check, Family, Frame, StreamState, guard, guard_value

__all__ = ["Qwen3State", "Qwen3Steps"]


@dataclass
class Qwen3State(StreamState):
    """A stream as `Qwen3TTS.prepare` made it (the request checked, its prompt built: the one
    place a Qwen3-TTS request is prepared), what its `frame_steps` coroutine reads."""

    text: object = None  # str, or the TextStream whose tokens the prompt's rows wait on
    prompt: Optional[object] = None  # the talker's prompt (`text.Prompt`)
    voice: Optional[object] = None  # the cloned voice (`ClonedVoice`; Base checkpoints)
    depth_params: Optional[cs.SamplingParams] = None  # the code predictor's law
    max_new: int = 0  # talker tokens it may sample: its frames + 1 (eos or the last)
    info: Optional[dict] = None  # `iter_frames`' info (prompt, seconds, hit_max_frames)
    trace: Optional[list] = None  # (talker hidden state, c0) per frame (calibration)
    steps: Optional[object] = None  # the stream's frame_steps coroutine
    slot_rt: Optional[object] = None  # the slot's runtime (its speculative depth decoder)


class Qwen3Steps(Family):
    """The family's steps over its slots' runtimes (`runtimes`: slot -> a `Qwen3TTS`), the
    batched depth loop `depth` (None: each frame on its stream's own decoder) and the shared
    talker buffer `talker_rows` (None: each talker steps alone). `Qwen3Steps({0: tts})` is
    `iter_frames`' one slot: neither. A stream's coroutine ends it, at eos or its frame
    budget, served or not, and says which (`state.stopped`)."""

    name = "qwen3-tts"
    known_length = False  # the talker's eos decides
    modes = ("ar", "spec")
    depth = talker_rows = None  # the engine's (Qwen3Family); iter_frames' slot has neither
    frame_rate = 12.5  # frames a second: 24 kHz audio, 1920 samples a frame

    def __init__(self, runtimes: dict):
        self.runtimes = runtimes

    def load(self, slot: int, state: Qwen3State) -> None:
        rt = self.runtimes.get(slot)
        if rt is None:
            rt = self.runtimes[slot] = self.tts.replica()
        if self.talker_rows is not None and rt.talker.home is None:
            self.talker_rows.attach(rt.talker, slot)  # its cache: this slot of the shared buffer
        state.slot_rt = rt
        state.steps = rt.frame_steps(state)

    def step(self, streams: list, check: Check) -> list:
        frames: list = [None] * len(streams)
        # 1. every stream to its next request: a newcomer prefills on its own talker and asks
        #    for its first depth loop; the others ask for their talker step
        reqs = {i: self._advance(s, None) for i, s in enumerate(streams)}
        # 2. every talker step, as one call where it is bit-identical (`talker_rows`),
        #    then each stream to its depth request
        self._talk(streams, reqs)
        # 3. one batched depth loop for every AR frame, then each stream's frame
        jobs = {}
        for i, r in reqs.items():
            if isinstance(r, Exception):
                frames[i] = Frame(error=r)
            elif r is None:  # eos (or the frame limit): no frame this step
                frames[i] = Frame(ended=True)
            else:
                error = guard(lambda s=streams[i], job=r[1]: check(s, job.hidden))
                if error is None:
                    jobs[i] = r[1]
                else:
                    frames[i] = Frame(error=error)
        for i, codes in self._depth(streams, jobs).items():
            s = streams[i]
            r = codes if isinstance(codes, Exception) else self._advance(s, codes)
            if isinstance(r, Exception):
                frames[i] = Frame(error=r)
            else:
                frames[i] = Frame(codes=r[1])  # its coroutine ends it (eos or budget)
        return frames

    def _talk(self, streams: list, reqs: dict) -> None:
        """Answers every ("talker", row) request in `reqs` (in place) with the stream's next
        request: the steps of several streams as one batched call when the engine has one
        (`TalkerSlots`), else each on its own talker. One step alone takes its own talker's
        one-row call either way (the same bits, and no padding rows)."""
        asks = [i for i, r in reqs.items() if isinstance(r, tuple) and r[0] == "talker"]
        if self.talker_rows is not None and len(asks) > 1:
            talkers = [streams[i].state.slot_rt.talker for i in asks]
            rows, live = [reqs[i][1] for i in asks], [s.slot for s in streams]
            got = guard_value(lambda: self.talker_rows.step(talkers, rows, live))
            hiddens = got if isinstance(got, list) else [got] * len(asks)
        else:
            hiddens = [
                guard_value(lambda t=streams[i].state.slot_rt.talker, e=reqs[i][1]: t.step(e))
                for i in asks
            ]
        for i, hidden in zip(asks, hiddens):
            failed = isinstance(hidden, Exception)
            reqs[i] = hidden if failed else self._advance(streams[i], hidden)

    @staticmethod
    def _advance(s, reply):
        """Resumes the stream's coroutine with `reply` up to its next request (kind, item),
        None when it ended, or the exception it raised (its own failure)."""
        try:
            return s.state.steps.send(reply)
        except StopIteration:
            return None
        except Exception as e:  # this stream's own error: it alone fails
            return e

    def _depth(self, streams: list, jobs: dict) -> dict:
        """Codes (or the exception) per stream index: the AR frames in one batched loop, a
        speculative one through its stream's own decoder."""
        from codecspec.decode.batched_depth import decode_frames

        out = {}
        # `iter_frames`' one slot (no batched loop) runs every frame on its own decoder
        ar = [] if self.depth is None else [i for i, j in jobs.items() if j.mode == "ar"]
        for i, codes in zip(ar, decode_frames(self.depth, [jobs[i] for i in ar]) if ar else []):
            out[i] = codes
        for i, j in jobs.items():
            if i not in out:
                dec = streams[i].state.slot_rt.depth
                out[i] = guard_value(
                    lambda d=dec, j=j: d.decode_frame(j.hidden, j.c0, j.generator, j.mode)
                )
        return out

    def counters(self) -> dict:
        # the frame stage's graph calls: the batched AR loop's and the per-stream spec ones
        spec = sum(rt.depth.stats.calls for rt in self.runtimes.values())
        codes = sum(rt.depth.stats.codes for rt in self.runtimes.values())
        d = self.depth
        return {
            "calls": d.calls + spec,
            "lane_calls": d.lane_calls + spec,
            "codes": d.codes_out + codes,
        }
