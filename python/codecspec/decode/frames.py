"""The frame loop shared by model families: temporal stepper -> frame decoder, B streams at once.

A *stepper* runs the temporal model one frame ahead for every stream and returns whatever its
frame decoder needs (`step(prev_frames) -> step_output`); a *frame decoder* turns that output
into the frame's codes and a stop decision per stream (`decode(step_output, generator) ->
(codes [B, C], stop [B])`). The loop feeds each frame back, stops every stream at its first
stop (its frames after that are discarded, the batch keeps stepping until all streams have
stopped) and guards with `max_frames`, recording whether the guard ended a stream.

The FSQ family's decoder samples 32 channel heads and a stop head from one step's logits
(`codecspec.tts.fsq.FSQFrameDecoder`); the RVQ family's runs its depth loop and stops at the
planned frame count (`codecspec.tts.model.RVQFrameDecoder`). Batching, and later
streaming, are loops around this one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

import codecspec as cs

__all__ = ["Stepper", "FrameDecoder", "FrameLoop", "run_frame_loop"]


class Stepper(Protocol):
    def step(self, prev_frames): ...


class FrameDecoder(Protocol):
    def decode(self, step_output, generator: cs.Generator) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass
class FrameLoop:
    """Codes of every stream, cut at its stop, and what the loop cost."""

    codes: list  # per stream: int64 [T_b, C]
    stopped: np.ndarray  # bool [B]: the stream's own stop decision ended it (else max_frames)
    steps: int  # temporal graph calls (one per frame for the whole batch)
    step_seconds: float  # stepper (graph calls and their host work)
    decode_seconds: float  # frame decoder (sampling)

    @property
    def hit_max_frames(self) -> bool:
        return not bool(self.stopped.all())


def run_frame_loop(stepper, decoder, generator, max_frames: int, progress=None) -> FrameLoop:
    """Run until every stream has stopped or `max_frames` frames; `progress`: an iterable
    wrapper (e.g. `codecspec.progress.bar`) for the frame range."""
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
        raise ValueError(f"max_frames: expected a positive int, got {max_frames!r}")
    frames, ends = [], None
    step_s = dec_s = 0.0
    prev = None
    it = range(max_frames) if progress is None else progress(range(max_frames))
    for t in it:
        t0 = time.perf_counter()
        out = stepper.step(prev)
        t1 = time.perf_counter()
        codes, stop = decoder.decode(out, generator)
        dec_s += time.perf_counter() - t1
        step_s += t1 - t0
        frames.append(codes)
        ends = np.full(len(stop), -1) if ends is None else ends
        ends = np.where((ends < 0) & np.asarray(stop, bool), t, ends)
        if np.all(ends >= 0):
            break
        prev = codes
    allc = np.stack(frames, axis=1)  # [B, T, C]
    stopped = ends >= 0
    lengths = np.where(stopped, ends + 1, allc.shape[1])
    return FrameLoop(
        codes=[allc[b, : lengths[b]].astype(np.int64) for b in range(len(allc))],
        stopped=stopped,
        steps=len(frames),
        step_seconds=step_s,
        decode_seconds=dec_s,
    )
