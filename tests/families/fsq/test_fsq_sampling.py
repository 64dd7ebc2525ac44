"""FSQ frame decoding (issue 11): the factorised sampling law, the stop head's law, the
family's frames in the one loop, and the errors that name their argument. No torch, no model
files.

Law checks follow tests/stats.py (per-cell 6-sigma bounds on 65,536 draws), and every check
ships with a deliberately broken sampler that must fail the same check: one that ignores the
warp (marginals wrong), one that reuses a uniform across two heads (marginals right, joint
wrong), one with the head boundaries shifted.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from stats import law_violations, np_warp

import codecspec as cs
from codecspec.families.fsq.model import FSQFamily, FSQFrameDecoder, FSQState, stop_logits_from_prob
from codecspec.pipeline.loop import run_together

LEVELS = (8, 7, 6, 6) * 2  # two groups keep the test fast; the law is per head anyway
N = 65_536
PARAMS = cs.SamplingParams(temperature=0.7, top_k=0, top_p=1.0)


def _logits(seed=0):
    rng = np.random.default_rng(seed)
    return (1.5 * rng.normal(size=(1, sum(LEVELS)))).astype(np.float32)


def _heads(logits, sizes=LEVELS):
    off = np.concatenate([[0], np.cumsum(sizes)])
    return [logits[0, off[c] : off[c + 1]] for c in range(len(sizes))]


def _draw(sampler, logits, stop_logit, n=N):
    """n frames, each from its own stream generator (as the runtime does per stream)."""
    rows = np.repeat(logits, n, axis=0)
    gens = [cs.Generator(7).fork(i) for i in range(n)]
    return sampler(rows, np.full(n, stop_logit, np.float32), gens)


def _marginal_violations(channels, logits, params=PARAMS):
    bad = []
    for c, head in enumerate(_heads(logits)):
        p = np_warp(head[None], params.temperature, params.top_k, params.top_p)[0]
        counts = np.bincount(channels[:, c], minlength=len(head))
        bad += [(c, v) for v in law_violations(counts, p, len(channels))]
    return bad


def _joint_violations(channels, logits, a=0, b=1):
    heads = _heads(logits)
    pa, pb = (np_warp(heads[i][None], PARAMS.temperature)[0] for i in (a, b))
    cells = channels[:, a] * len(pb) + channels[:, b]
    counts = np.bincount(cells, minlength=len(pa) * len(pb))
    return law_violations(counts, np.outer(pa, pb).ravel(), len(channels))


@pytest.fixture(scope="module")
def good_draws():
    dec = FSQFrameDecoder(LEVELS, PARAMS)
    return _draw(dec.sample, _logits(), 0.4)


def test_factorised_marginals_and_independence(good_draws):
    channels, stop = good_draws
    assert channels.shape == (N, len(LEVELS)) and channels.dtype == np.int64
    assert not _marginal_violations(channels, _logits())
    assert not _joint_violations(channels, _logits(), 0, 1)
    assert not _joint_violations(channels, _logits(), 3, 4)  # across the group boundary


def _stop_violations(stop, stop_logit=0.4):
    p = 1.0 / (1.0 + np.exp(-stop_logit))  # stop_temperature 1: the model's own Bernoulli
    return law_violations(np.bincount(stop.astype(int), minlength=2), [1 - p, p], len(stop))


def test_stop_law(good_draws):
    _, stop = good_draws
    assert not _stop_violations(stop)


@pytest.mark.parametrize("warp", [lambda s: s / PARAMS.temperature, lambda s: -s])
def test_broken_stop_sampler_is_caught(warp):
    """The same check catches a stop drawn at the channels' temperature (0.7 instead of 1)
    and one with the logit's sign flipped."""
    dec = FSQFrameDecoder(LEVELS, PARAMS)
    _, stop = _draw(lambda r, s, g: dec.sample(r, warp(s), g), _logits(), 0.4)
    assert _stop_violations(stop)


def test_broken_sampler_that_ignores_the_warp_is_caught():
    dec = FSQFrameDecoder(LEVELS, cs.SamplingParams(1.0, 0, 1.0))  # T=1 instead of 0.7
    channels, _ = _draw(dec.sample, _logits(), 0.0)
    assert _marginal_violations(channels, _logits())


def test_broken_sampler_with_shifted_heads_is_caught():
    shifted = (7, 8) + LEVELS[2:]  # the first two head boundaries swapped
    dec = FSQFrameDecoder(shifted, PARAMS)
    channels, _ = _draw(dec.sample, _logits(), 0.0)
    assert _marginal_violations(np.minimum(channels, np.array(LEVELS) - 1), _logits())


def _correlated_sample(rows, stop_logits, gens):
    """Broken: channel 1 reuses channel 0's uniform (inverse CDF), the rest sampled right."""
    dec = FSQFrameDecoder(LEVELS, PARAMS)
    out, stop = dec.sample(rows, stop_logits, gens)
    h0, h1 = _heads(rows[:1])[:2]
    p0, p1 = (np_warp(h[None], PARAMS.temperature)[0] for h in (h0, h1))
    u = np.random.default_rng(3).random(len(rows))
    out[:, 0] = np.minimum(np.searchsorted(np.cumsum(p0), u), 7)
    out[:, 1] = np.minimum(np.searchsorted(np.cumsum(p1), u), 6)
    return out, stop


def test_broken_sampler_with_correlated_heads_is_caught():
    channels, _ = _draw(_correlated_sample, _logits(), 0.0)
    assert not _marginal_violations(channels, _logits())  # each marginal is still right
    assert _joint_violations(channels, _logits(), 0, 1)  # the joint is not their product


def test_greedy_takes_each_heads_argmax_and_stops_on_positive_logit():
    dec = FSQFrameDecoder(LEVELS, cs.SamplingParams(0.0, 0, 1.0))
    lg = _logits(5)
    ch, stop = dec.sample(lg, np.array([0.3], np.float32), cs.Generator(0))
    assert list(ch[0]) == [int(np.argmax(h)) for h in _heads(lg)]
    assert bool(stop[0])


def test_stream_draws_do_not_depend_on_the_batch():
    dec = FSQFrameDecoder(LEVELS, PARAMS)
    lg = np.concatenate([_logits(1), _logits(2), _logits(3)])
    alone, _ = dec.sample(lg[1:2], np.zeros(1, np.float32), [cs.Generator(9).fork(1)])
    both, _ = dec.sample(lg, np.zeros(3, np.float32), [cs.Generator(9).fork(i) for i in range(3)])
    assert np.array_equal(alone[0], both[1])


# ------------------------------------------------------------------------- bad input
def test_bad_channel_logits_name_the_argument():
    dec = FSQFrameDecoder(LEVELS, PARAMS)
    g = cs.Generator(0)
    with pytest.raises(ValueError, match="channel_logits"):
        dec.sample(np.zeros((1, sum(LEVELS) + 1), np.float32), np.zeros(1, np.float32), g)
    with pytest.raises(ValueError, match="channel_logits"):
        dec.sample(np.zeros(sum(LEVELS), np.float32), np.zeros(1, np.float32), g)
    with pytest.raises(ValueError, match="stop_logits"):
        dec.sample(_logits(), np.zeros(2, np.float32), g)
    with pytest.raises(ValueError, match="stop_logits"):
        dec.sample(_logits(), np.array([np.nan], np.float32), g)
    with pytest.raises(ValueError, match=r"^logits: row 0, head 0"):  # the core names the head
        bad = _logits()
        bad[0, 3] = np.nan
        dec.sample(bad, np.zeros(1, np.float32), g)
    with pytest.raises(ValueError, match="generator"):
        dec.sample(np.repeat(_logits(), 2, 0), np.zeros(2, np.float32), [g])
    with pytest.raises(ValueError, match="channel_levels"):
        FSQFrameDecoder([8, 0], PARAMS)


@pytest.mark.parametrize("p", [[1.5], [-0.1], [np.nan], [0.2, np.nan]])
def test_bad_stop_probability_names_the_argument(p):
    with pytest.raises(ValueError, match="stop_prob"):
        stop_logits_from_prob(p)


def test_stop_probability_to_logits():
    lg = stop_logits_from_prob([0.0, 1.0, 0.5, 0.25])
    assert lg[0] == -np.inf and lg[1] == np.inf and lg[2] == 0.0
    assert np.isclose(lg[3], np.log(1 / 3))
    assert list(cs.sample_stop(lg[:2], cs.Generator(0))) == [False, True]


# ------------------------------------------------------------------------- the one loop
class _Slots:
    """Fake step graph in `FSQSlots`'s place: the stream in slot s sees a stop logit of +1e4
    (a certain stop; the loop refuses non-finite outputs) from its frame stops[s] on, -1e4
    before, and flat channel logits."""

    channels = len(LEVELS)

    def __init__(self, stops):
        self.stops, self.t, self.seen, self.calls = (
            np.array(stops),
            np.zeros(len(stops), int),
            [],
            0,
        )

    def load(self, slot, *cross) -> None:
        self.t[slot] = 0

    def step(self, slots, prev, pace, speakers):
        slots = np.asarray(slots)
        self.seen.append((slots.tolist(), np.array(prev)))
        stop = np.where(self.t[slots] >= self.stops[slots], 1e4, -1e4).astype(np.float32)
        self.t[slots] += 1
        self.calls += 1
        return np.zeros((len(slots), 1)), np.zeros((len(slots), sum(LEVELS)), np.float32), stop


def _family(stops) -> FSQFamily:
    """`FSQFamily` over the fake step graph, sampling with `FSQFrameDecoder` (its own)."""
    family = FSQFamily.__new__(FSQFamily)
    family.tts = SimpleNamespace(frame_decoder=FSQFrameDecoder(LEVELS, PARAMS))
    family.slots, family.frame_rate, family.inline = _Slots(stops), 12.5, False
    family.stream_steps = family.codes_out = 0
    family.sample_seconds = 0.0
    return family


def _state(g, limit) -> FSQState:
    return FSQState(g, PARAMS, 0, None, limit, limit, prev=np.zeros(len(LEVELS), np.int64))


def test_the_loop_cuts_each_stream_at_its_stop_and_reports_the_guard():
    family = _family([2, 5, 99])
    states = [_state(cs.Generator(0).fork(i), 8) for i in range(3)]
    codes = run_together(family, states)
    assert [len(c) for c in codes] == [3, 6, 8]
    assert [s.stopped for s in states] == [True, True, False]  # the guard ended the third
    assert family.slots.calls == 8  # one step call per frame for every stream still running
    slots, prev = family.slots.seen[1]  # frame 1's input: each stream's frame 0 fed back
    assert slots == [0, 1, 2] and np.array_equal(prev[0], codes[0][0])
    assert np.all(family.slots.seen[0][1] == 0)  # the first frame's input: zeros
    assert [len(s) for s, _ in family.slots.seen] == [3, 3, 3, 2, 2, 2, 1, 1]
    family = _family([0, 1])
    codes = run_together(family, [_state(cs.Generator(0).fork(i), 8) for i in range(2)])
    assert [len(c) for c in codes] == [1, 2] and family.slots.calls == 2
