"""The one loop's drivers in the caller's thread (`codecspec.pipeline.loop`): `run_inline`
(a family's generate/stream: one slot) and `run_together` (several streams at once). The
bookkeeping the old frame loop's tests checked is the loop's now: each stream cut at its own
stop, the loop stepping on until the last stream has ended, a guard ending a stream that did
not stop, frames fed back, the streamed frames the collected ones, the stream loaded at the
call and stepped as its frames are taken, one stream's error its own. On a counting toy
family (exact bookkeeping) and on the example family (streams equal its own `generate`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from example_family.engine import ToyFamily
from example_family.model import write_folder

import codecspec as cs
from codecspec.pipeline.family import Family, Frame, SpeechRequest, StreamState
from codecspec.pipeline.loop import run_inline, run_together


@dataclass
class _CountState(StreamState):
    stop: int = 0  # the stream's own stop decision comes at this frame
    fail_at: int = -1  # the stream's own error at this frame (-1: none)
    stopped: bool = False  # its stop, not its guard (`limit`), ended it


class _Count(Family):
    """A toy family: a stream's frame t is (t, the frame index fed back from its previous
    frame, -1 first); it ends at its stop or after `limit` frames. A negative stop is a bad
    input its load refuses."""

    frame_rate = 12.5

    def __init__(self, slots: int):
        self.prev = [None] * slots
        self.loaded, self.sizes = [], []  # slots loaded; streams per step

    def load(self, slot: int, state: _CountState) -> None:
        if state.stop < 0:
            raise ValueError(f"stop: expected >= 0, got {state.stop}")
        self.prev[slot] = -1
        self.loaded.append(slot)

    def step(self, streams: list, check) -> list:
        self.sizes.append(len(streams))
        return [self._frame(s) for s in streams]

    def _frame(self, s) -> Frame:
        if s.t == s.state.fail_at:
            return Frame(error=RuntimeError(f"stream {s.slot} failed"))
        codes = np.array([s.t, self.prev[s.slot]], np.int64)
        self.prev[s.slot] = s.t
        s.state.stopped = s.t >= s.state.stop
        return Frame(codes=codes, ended=s.state.stopped or s.t + 1 >= s.state.limit)


def _state(stop: int, limit: int, fail_at: int = -1) -> _CountState:
    params = cs.SamplingParams(1.0, 0, 1.0)
    return _CountState(cs.Generator(0), params, 0, None, limit, limit, stop=stop, fail_at=fail_at)


def test_each_stream_is_cut_at_its_stop_and_the_loop_steps_until_the_last_ends():
    family = _Count(3)
    states = [_state(2, 6), _state(4, 6), _state(99, 6)]
    out = run_together(family, states)
    assert [len(f) for f in out] == [3, 5, 6]
    assert [s.stopped for s in states] == [True, True, False]  # the guard ended the third
    assert family.sizes == [3, 3, 3, 2, 2, 1]  # a stream that ended left its slot
    assert family.loaded == [0, 1, 2]  # each on a slot of its own
    for frames in out:
        codes = np.stack(frames)
        assert codes.dtype == np.int64 and codes[:, 0].tolist() == list(range(len(codes)))
        assert codes[:, 1].tolist() == list(range(-1, len(codes) - 1))  # frames fed back


def test_the_streamed_frames_are_the_collected_ones():
    stops = [(2, 6), (4, 6), (99, 6), (0, 1)]
    together = run_together(_Count(len(stops)), [_state(*s) for s in stops])
    for (stop, limit), want in zip(stops, together):
        alone = list(run_inline(_Count(1), _state(stop, limit)))
        np.testing.assert_array_equal(np.stack(alone), np.stack(want))


def test_run_inline_loads_at_the_call_and_steps_as_the_frames_are_taken():
    family = _Count(1)
    frames = run_inline(family, _state(3, 9))
    assert family.loaded == [0] and family.sizes == []
    next(frames)
    assert family.sizes == [1]
    assert len(list(frames)) == 3 and family.sizes == [1] * 4


def test_a_streams_own_error_is_raised_and_the_others_run_to_their_end():
    family = _Count(3)
    with pytest.raises(RuntimeError, match="stream 1 failed"):
        run_together(family, [_state(4, 9), _state(9, 9, fail_at=2), _state(5, 9)])
    assert family.sizes == [3, 3, 3, 2, 2, 1]  # the failed stream left at its frame 2
    family = _Count(2)
    with pytest.raises(ValueError, match="stop"):  # a load refused: raised, others ran
        run_together(family, [_state(-1, 9), _state(2, 9)])
    assert family.loaded == [0] and family.sizes == [1, 1, 1]  # the refused slot reused
    with pytest.raises(ValueError, match="stop"):
        next(run_inline(_Count(1), _state(-1, 9)))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("example_toy"))


def test_streams_run_together_equal_each_ones_generate(folder):
    texts = ["Hello there.", "A longer line, so that it runs past the others.", "Hi."]
    family = ToyFamily(folder, len(texts), 480, 722, "cpu", 1)
    states = [
        family.prepare(SpeechRequest(t, seed=i), cs.Generator(i)) for i, t in enumerate(texts)
    ]
    out = run_together(family, states)
    assert len({len(f) for f in out}) == len(texts)  # they end at different steps
    for i, (t, frames) in enumerate(zip(texts, out)):
        want = family.tts.generate(t, seed=i, decode_audio=False).codes
        np.testing.assert_array_equal(np.stack(frames), want)
    assert family.calls == max(len(f) for f in out)  # one batched call per step
