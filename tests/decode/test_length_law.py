"""Exact temporal speculation keeps the autoregressive law of utterance LENGTHS, stop head on.

`tests/decode/test_temporal_loop.py` tests the per-position c0 law with the stop head switched off;
here the tiny v2 fixture's stop head decides when each utterance ends, and the histogram of
lengths under exact speculation (draft LM + one target call per round) must match AR's by a
two-sample chi-square homogeneity test. Two broken loops must be caught by the same test: one
that reads the stop head only at a call's last row (stops of accepted drafts ignored, so
utterances run on), and an off-by-one that draws each frame's stop from the next row's logit
(a stop biased by one frame of history). A verifier that accepts every draft, which the c0-law
test catches, moves this model's length law too little to be caught at these sizes (p ~ 0.01).

The fixture's stop head never fires (bias -50, see tests/families/v2/test_v2_runtime.py);
`_StopHead` gives it weights scaled by GAIN and a bias of BIAS instead: stop logit GAIN *
(w.h + 50.5) + BIAS, the same function of the hidden state in AR and speculation, a model
whose stop depends on the utterance's c0 history. The depth loop never feeds the temporal
LM, so it cannot change lengths: it is left out (`_NoDepth`) to keep the test fast.
"""

from __future__ import annotations

import numpy as np
import pytest
from paths import DATA
from v2_oracle import round_frames

import codecspec as cs
from codecspec.decode.temporal import TemporalLoop
from codecspec.families.v2.model import V2TTS
from codecspec.fidelity import homogeneity_pvalue

FIXTURE = DATA / "tiny_v2"
PHONEMES = "həlˈoʊ wˈɜːld"
GAIN, CENTRE, BIAS = -6.0, 50.5, -1.5  # stop logit = GAIN * (fixture's logit + CENTRE) + BIAS
MAX_FRAMES = 16  # the max-length guard; guard hits form the histogram's last bin
RUNS = 400
BROKEN_RUNS = 200
DRAFT_LEN = 3
P_MIN = 1e-3  # one test per comparison: a correct sampler fails it 0.1% of the time
P_BROKEN = 1e-6


class _StopHead:
    """A target stepper whose stop logits are an affine map of the fixture's (see above);
    `broken`: "bonus_only" sees a stop only on a call's last row, "next_row" gives each row
    the next row's stop logit."""

    def __init__(self, stepper, broken=None):
        self.stepper, self.broken = stepper, broken

    def __getattr__(self, name):
        return getattr(self.stepper, name)

    def score(self, prev_tokens):
        out = list(self.stepper.score(prev_tokens))
        stop = (GAIN * (out[2].astype(np.float64) + CENTRE) + BIAS).astype(np.float32)
        if self.broken == "bonus_only":
            stop[:-1] = -1e4
        elif self.broken == "next_row":
            stop[:-1] = stop[1:].copy()
        out[2] = stop
        return tuple(out)


class _NoDepth:
    """The depth loop's place: codes of zeros (lengths are the temporal loop's alone)."""

    def decode_frame(self, hidden, c0, generator, mode):
        return np.zeros(16, np.int64)


@pytest.fixture(scope="module")
def tts():
    t = V2TTS(FIXTURE, provider="cpu", threads=1)
    t.params = cs.SamplingParams(1.0, 0, 1.0)  # the full law: no top-k cut
    return t


@pytest.fixture(scope="module")
def utterance(tts):
    _, ids, _, spk, enc = tts.encode_text(None, PHONEMES, "en", None)
    return enc, spk, tts.expected_frames(len(ids) - 2, "en")


def _lengths(tts, utterance, runs, first_seed, draft_len=0, broken=None) -> np.ndarray:
    """Histogram [MAX_FRAMES + 1] of the lengths of `runs` utterances (seeds from
    `first_seed`: every arm draws its own streams)."""
    enc, spk, expected = utterance
    lengths = []
    for seed in range(first_seed, first_seed + runs):
        target = _StopHead(tts.stepper(enc, spk, expected), broken)
        draft = tts.stepper(enc, spk, expected, draft=True) if draft_len else None
        loop = TemporalLoop(target, draft, _NoDepth(), tts.params, draft_len=draft_len)
        lengths.append(sum(1 for _ in round_frames(loop, cs.Generator(seed), MAX_FRAMES)))
    return np.bincount(lengths, minlength=MAX_FRAMES + 1)


@pytest.fixture(scope="module")
def ar_lengths(tts, utterance):
    return _lengths(tts, utterance, RUNS, first_seed=0)


def test_the_stop_head_ends_most_utterances_at_varied_lengths(ar_lengths):
    # the law under test is not degenerate: many lengths, the guard a minority
    assert (ar_lengths > 0).sum() >= 8, ar_lengths
    assert ar_lengths[MAX_FRAMES] < 0.5 * RUNS, ar_lengths


def test_exact_temporal_speculation_keeps_the_length_law(tts, utterance, ar_lengths):
    spec = _lengths(tts, utterance, RUNS, first_seed=10_000, draft_len=DRAFT_LEN)
    p = homogeneity_pvalue(ar_lengths, spec)
    assert p > P_MIN, (p, ar_lengths, spec)


@pytest.mark.parametrize("broken", ["bonus_only", "next_row"])
def test_a_broken_loop_changes_the_length_law_and_is_caught(tts, utterance, ar_lengths, broken):
    runs = 60 if broken == "bonus_only" else BROKEN_RUNS  # ignoring stops is a large change
    bad = _lengths(tts, utterance, runs, first_seed=20_000, draft_len=DRAFT_LEN, broken=broken)
    p = homogeneity_pvalue(ar_lengths, bad)
    assert p < P_BROKEN, (p, ar_lengths, bad)
