"""The frame loop the families ran before `generate` / `stream` became the serving engine's
loop with one slot (`codecspec.pipeline.loop.run_inline`): the oracle of the one-loop tests
(tests/families/{reference,fsq}/test_*_one_loop.py) and the driver of tests that step a
model's graphs by hand (tests/families/fsq/test_fsq_model.py). Moved here, as it was, from
`codecspec.decode.frames` (a helper at tests/, so every folder imports it alike).

A *stepper* runs the temporal model one frame ahead for every stream and returns whatever its
frame decoder needs (`step(prev_frames) -> step_output`); a *frame decoder* turns that output
into the frame's codes and a stop decision per stream (`decode(step_output, generator) ->
(codes [B, C], stop [B])`). The loop feeds each frame back, stops every stream at its first
stop (its frames after that are discarded, the batch keeps stepping until all streams have
stopped) and guards with `max_frames`, recording whether the guard ended a stream.
`iter_frame_loop` is the loop as a generator; `run_frame_loop` collects it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


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


@dataclass
class FrameStep:
    """One frame of the loop as it is produced (`iter_frame_loop`), with the loop's
    bookkeeping so far. `codes[b]` belongs to stream b's output iff `keep[b]`: a stream's
    frames after its own stop are computed (the batch steps on) but discarded."""

    t: int  # frame index (0-based)
    codes: np.ndarray  # int64 [B, C]: every stream's codes of this frame
    keep: np.ndarray  # bool [B]: the frame is part of stream b's output (not past its stop)
    ends: np.ndarray  # int [B]: frame at which stream b stopped (-1: still running)
    last: bool  # the loop ends after this frame (every stream stopped, or max_frames)
    step_seconds: float  # stepper time so far
    decode_seconds: float  # frame decoder time so far

    @property
    def stopped(self) -> np.ndarray:
        """bool [B]: stream b's own stop decision has ended it (at this frame or before)."""
        return self.ends >= 0


def _check_max_frames(max_frames) -> int:
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
        raise ValueError(f"max_frames: expected a positive int, got {max_frames!r}")
    return max_frames


def iter_frame_loop(
    stepper, decoder, generator, max_frames: int, progress=None
) -> Iterator[FrameStep]:
    """The frame loop as a generator: one `FrameStep` per temporal step, yielded as soon as
    the frame decoder has produced it, until every stream has stopped or `max_frames` frames
    (the last step has `last=True`). `progress`: an iterable wrapper (e.g.
    `codecspec.progress.bar`) for the frame range. `max_frames` is checked at the call, not
    at the first `next`. `run_frame_loop` collects it."""
    _check_max_frames(max_frames)
    return _frame_steps(stepper, decoder, generator, max_frames, progress)


def _frame_steps(stepper, decoder, generator, max_frames, progress):
    ends = None
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
        keep = np.ones(len(stop), bool) if ends is None else ends < 0
        ends = np.full(len(stop), -1) if ends is None else ends
        ends = np.where((ends < 0) & np.asarray(stop, bool), t, ends)
        last = bool(np.all(ends >= 0)) or t == max_frames - 1
        yield FrameStep(t, codes, keep, ends.copy(), last, step_s, dec_s)
        if last:
            break
        prev = codes


def run_frame_loop(stepper, decoder, generator, max_frames: int, progress=None) -> FrameLoop:
    """Run until every stream has stopped or `max_frames` frames; `progress`: an iterable
    wrapper (e.g. `codecspec.progress.bar`) for the frame range. Collects `iter_frame_loop`."""
    frames, step = [], None
    for step in iter_frame_loop(stepper, decoder, generator, max_frames, progress):
        frames.append(step.codes)
    allc = np.stack(frames, axis=1)  # [B, T, C]
    stopped = step.ends >= 0
    lengths = np.where(stopped, step.ends + 1, allc.shape[1])
    return FrameLoop(
        codes=[allc[b, : lengths[b]].astype(np.int64) for b in range(len(allc))],
        stopped=stopped,
        steps=len(frames),
        step_seconds=step.step_seconds,
        decode_seconds=step.decode_seconds,
    )


class FSQDecoder:
    """`FSQFrameDecoder` as the old loop's frame decoder: `decode(step_output, generators)`
    with `step_output` = (hidden, channel_logits [B, sum L], stop_logits [B]) (the decode
    interface left the package with the loop; `sample` is the family's)."""

    def __init__(self, decoder):
        self.decoder = decoder

    def decode(self, step_output, generator):
        _, channel_logits, stop_logits = step_output
        return self.decoder.sample(channel_logits, stop_logits, generator)
