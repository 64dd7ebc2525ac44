"""The v2/v3 families' round loop as `generate` ran it before it became the engine's loop with
one slot (`TemporalLoop.frames`, moved here as it was, a function of the loop): the oracle of
tests/families/v2/test_v2_one_loop.py, and the driver of the tests of the round itself
(tests/decode/test_temporal_loop.py, tests/decode/test_length_law.py), which step one
`TemporalLoop` by hand. A helper at tests/, so every folder imports it alike."""

from __future__ import annotations

import time
from collections.abc import Iterator

import codecspec as cs
from codecspec.decode.batched_depth import decode_frames


def depth_codes(loop, jobs: list, batch_depth=None) -> list:
    """The round's depth loops: batched in one `BatchedDepth` (`batch_depth`) when there are
    several, else frame by frame through the loop's `DepthDecoder`. Same generators, so the
    same codes either way."""
    if batch_depth is not None and len(jobs) > 1:
        return decode_frames(batch_depth, jobs)
    return [loop.depth.decode_frame(j.hidden, j.c0, j.generator, j.mode) for j in jobs]


def round_frames(
    loop, generator: cs.Generator, max_frames: int, batch_depth=None
) -> Iterator[tuple]:
    """Yields (codes int64 [G], stop bool, hidden [D]) per emitted frame of `loop` (a
    `TemporalLoop`) until the stop head fires (its frame is the last one yielded) or
    `max_frames` frames. `batch_depth`: a `BatchedDepth` for rounds of several frames (the
    old loop's `TemporalLoop.batch_depth`, `V2TTS.round_depth`)."""
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
        raise ValueError(f"max_frames: expected a positive int, got {max_frames!r}")
    return _frames(loop, generator, max_frames, batch_depth)


def _frames(loop, generator, max_frames, batch_depth):
    while len(loop.c0s) < max_frames:
        rnd = loop.next_round(generator, max_frames)
        t0 = time.perf_counter()
        codes = depth_codes(loop, loop.frame_jobs(rnd, generator), batch_depth)
        loop.stats.depth_seconds += time.perf_counter() - t0
        codes, stopped = loop.finish_round(rnd, codes, generator)
        for j in range(len(codes)):
            yield codes[j], stopped and j == len(codes) - 1, rnd.hidden[j]
        if stopped:
            return
