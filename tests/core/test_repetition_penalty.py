"""Repetition penalty in cs.warp / cs.sample (docs/design.md section 4): the transformers
convention (logit / r where > 0, logit * r otherwise, for every distinct id of the history),
applied before temperature / top-k / top-p; r = 1 or an empty history is bit-identical to the
call without it; bad values and ids are ValueErrors naming the argument."""

import numpy as np
import pytest
from stats import N_DRAWS, assert_law, counts_of, law_ok, make_logits, np_warp

import codecspec as cs


def np_penalty(logits, history, r):
    x = np.array(logits, np.float32, copy=True)
    for t in set(int(h) for h in history):
        x[..., t] = np.where(x[..., t] > 0, x[..., t] / np.float32(r), x[..., t] * np.float32(r))
    return x


def test_field_default_and_repr():
    p = cs.SamplingParams(0.9, 50, 1.0)
    assert p.repetition_penalty == 1.0 and "repetition" not in repr(p)
    q = cs.SamplingParams(0.9, 50, 1.0, repetition_penalty=1.05)
    assert q.repetition_penalty == pytest.approx(1.05) and "repetition_penalty" in repr(q)
    assert p != q


@pytest.mark.parametrize("r", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_penalty_is_named(r):
    with pytest.raises(ValueError, match="repetition_penalty"):
        cs.SamplingParams(1.0, 0, 1.0, repetition_penalty=r)


@pytest.mark.parametrize("history", [[5], [-1], [[0, 1]], [0.5]])
def test_bad_history_is_named(history):
    p = cs.SamplingParams(1.0, 0, 1.0, repetition_penalty=1.2)
    with pytest.raises(ValueError, match="history"):
        cs.warp(np.zeros(5, np.float32), p, history=np.array(history))


@pytest.mark.parametrize("params", [(1.0, 0, 1.0), (0.7, 5, 0.9), (0.0, 0, 1.0), (1.3, 3, 1.0)])
def test_warp_is_the_penalised_reference(params):
    rng = np.random.default_rng(3)
    x = make_logits(rng, (4, 40), scale=2.0, ninf_frac=0.1)
    hist = [0, 3, 3, 7, 11, 39]
    p = cs.SamplingParams(*params, repetition_penalty=1.7)
    got = cs.warp(x, p, history=hist)
    want = np_warp(np_penalty(x, hist, 1.7), *params)
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_off_is_bit_identical():
    rng = np.random.default_rng(4)
    x = make_logits(rng, (3, 30), scale=2.0)
    base = cs.SamplingParams(0.8, 7, 0.9)
    ref = cs.warp(x, base)
    assert np.array_equal(cs.warp(x, base, history=[1, 2, 3]), ref)
    pen = cs.SamplingParams(0.8, 7, 0.9, repetition_penalty=2.0)
    assert np.array_equal(cs.warp(x, pen, history=[]), ref)
    assert np.array_equal(cs.warp(x, pen), ref)
    g1, g2 = cs.Generator(1), cs.Generator(1)
    assert np.array_equal(cs.sample(x, pen, g1, history=None), cs.sample(x, base, g2))


def test_greedy_follows_the_penalty():
    x = np.array([3.0, 2.9, -1.0, -1.05], np.float32)
    p = cs.SamplingParams(0.0, 0, 1.0, repetition_penalty=1.05)
    g = cs.Generator(0)
    assert cs.sample(x, p, g)[()] == 0
    assert cs.sample(x, p, g, history=[0])[()] == 1  # 3 / 1.05 < 2.9
    y = np.array([-1.0, -1.04, -5.0], np.float32)
    assert cs.sample(y, p, g, history=[0])[()] == 1  # -1 * 1.05 < -1.04
    assert g.step == 0


def test_sample_law_with_penalty_and_a_broken_variant():
    """The draws follow warp(penalised logits); the same counts reject the law of a penalty
    applied once per occurrence instead of once per distinct id, and of no penalty at all."""
    n, v = N_DRAWS, 20
    rng = np.random.default_rng(7)
    row = make_logits(rng, (v,), scale=1.5)
    hist = [0, 0, 1, 2, 5, 5, 5]
    params = (0.6, 0, 1.0)
    p = cs.SamplingParams(*params, repetition_penalty=1.8)
    x = np.ascontiguousarray(np.broadcast_to(row, (n, v)))
    s = cs.sample(x, p, cs.Generator(seed=11), history=hist)
    counts = counts_of(s, v)
    assert_law(counts, np_warp(np_penalty(row, hist, 1.8), *params), n, what="penalised")
    per_occurrence = row.copy()
    for t in hist:
        per_occurrence = np_penalty(per_occurrence, [t], 1.8)
    assert not law_ok(counts, np_warp(per_occurrence, *params), n)
    assert not law_ok(counts, np_warp(row, *params), n)


def test_verify_refuses_a_penalty():
    p = cs.SamplingParams(1.0, 0, 1.0, repetition_penalty=1.1)
    with pytest.raises(ValueError, match="params"):
        cs.verify_chain(np.zeros((2, 4), np.float32), np.array([1]), p, cs.Generator(0))
