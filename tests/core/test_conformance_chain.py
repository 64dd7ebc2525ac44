"""Statistical conformance of cs.verify_chain (docs/design.md section 2, "Lossless verification").

Targets and drafters are context dependent ("depth bigram": row j of target_logits is a table
row selected by the j-th draft token), drafts are drawn afresh for every trial, and one Generator
is advanced by every call. Every statistical check is also run against deliberately broken
verifiers, which must fail it (so the check has power), and against a numpy reference verifier,
which must pass it (so the expected law itself is right).
"""

import numpy as np
import pytest
from stats import (
    N_DRAWS,
    NpTree,
    assert_law,
    bigram_tables,
    chain_nacc_law,
    chain_paths,
    check_result_invariants,
    check_support,
    complete_sequences,
    counts_of,
    draft_tree_tokens,
    law_ok,
    np_verify_tree,
    np_warp,
    pair_laws,
    run_chain_trials,
    sample_rows,
    two_token_law,
    two_token_outcomes,
)

import codecspec as cs

ROOT = 1

# (id, V, (temperature, top_k, top_p), K)
CONFIGS = [
    ("v7-T1.3-p0.8", 7, (1.3, 0, 0.8), 3),
    ("v13-T0.9-k50", 13, (0.9, 50, 1.0), 3),
    ("v50-T0.7-k5-p0.9", 50, (0.7, 5, 0.9), 2),
]


def sp(params):
    t, k, p = params
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


def _outcomes(res, v, k, P=None, rng=None):
    out, nacc = res["tokens"], res["nacc"]
    c = {
        "first token": counts_of(out[:, 0], v),
        "(y1, y2|STOP)": counts_of(two_token_outcomes(out, nacc, v), v * (v + 1)),
        "num_accepted": counts_of(nacc, k + 1),
    }
    if P is not None:  # every position: completed sequences, consecutive pairs
        seq = complete_sequences(rng, dict(res, lens=nacc + 1), P, ROOT, k + 1)
        for j in range(1, k + 1):
            c[f"completed (y{j}, y{j + 1})"] = counts_of(seq[:, j - 1] * v + seq[:, j], v * v)
    return c


def _with_pairs(laws, P, k):
    for j, law in enumerate(pair_laws(P, ROOT, k + 1), start=1):
        laws[f"completed (y{j}, y{j + 1})"] = law
    return laws


def _laws_ok(counts, laws, n):
    return all(law_ok(counts[name], laws[name], n) for name in laws)


def _assert_laws(counts, laws, n):
    for name in laws:
        assert_law(counts[name], laws[name], n, what=name)


def _ref_res(rng, nt, tok, P, Q, kind, bug=None):
    out, nacc, _ = np_verify_tree(rng, nt, tok, P, Q, kind, bug)
    return {"tokens": out, "nacc": nacc}


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_chain_law_with_draft_probs(cfg):
    _, v, params, k = cfg
    n = N_DRAWS
    rng = np.random.default_rng(1000 + v)
    L, P, Ql, Q = bigram_tables(rng, k + 1, v, params)
    nt = NpTree(chain_paths(k))
    tok = draft_tree_tokens(rng, nt, Q, ROOT, n, "iid")  # x1 ~ Q[0, root], x_{j+1} ~ Q[j, x_j]
    g = cs.Generator(seed=11)
    res = run_chain_trials(tok, L, sp(params), g, Q.astype(np.float32))
    assert g.step == n, "every sampling verify call advances step by exactly one"
    check_result_invariants(nt, tok, res, v)
    assert (res["nodes"][:, 0][res["nacc"] > 0] == 1).all()
    check_support(res, P, ROOT)

    p0, q0 = P[0, ROOT], Q[0, ROOT]
    acc = np.minimum(p0, q0)
    laws = {
        "first token": p0,
        "(y1, y2|STOP)": two_token_law(acc, p0 - acc, P[1]),
        "num_accepted": chain_nacc_law(P, Q, ROOT, k),
    }
    laws = _with_pairs(laws, P, k)
    _assert_laws(_outcomes(res, v, k, P, rng), laws, n)

    # the expected laws are right: the numpy reference verifier satisfies them
    ref = _ref_res(rng, nt, tok, P, Q, "iid")
    assert _laws_ok(_outcomes(ref, v, k, P, rng), laws, n)
    # power: accepting with p(x) instead of min(1, p(x)/q(x)) is caught
    bad = _ref_res(rng, nt, tok, P, Q, "iid", bug="accept_p")
    assert not _laws_ok(_outcomes(bad, v, k, P, rng), laws, n)
    # power, through codecspec: q passed with another temperature than the drafts were drawn at
    q_wrong = np_warp(Ql, 2.5).astype(np.float32)
    bad_cs = run_chain_trials(tok, L, sp(params), cs.Generator(seed=12), q_wrong)
    assert not _laws_ok(_outcomes(bad_cs, v, k, P, rng), laws, n)


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=[c[0] for c in CONFIGS[:2]])
def test_chain_law_point_mass_drafts(cfg):
    """draft_probs=None: every draft is a point mass, so the law holds for any drafts."""
    _, v, params, k = cfg
    n = N_DRAWS
    rng = np.random.default_rng(2000 + v)
    L, P, _, Q = bigram_tables(rng, k + 1, v, params)
    nt = NpTree(chain_paths(k))
    tok = draft_tree_tokens(rng, nt, Q, ROOT, n, "iid")
    g = cs.Generator(seed=21)
    res = run_chain_trials(tok, L, sp(params), g, None)
    assert g.step == n
    check_result_invariants(nt, tok, res, v)

    p0, q0 = P[0, ROOT], Q[0, ROOT]
    acc = q0 * p0  # P(x1 = a) * P(accept a)
    laws = {
        "first token": p0,
        "(y1, y2|STOP)": two_token_law(acc, p0 - acc, P[1]),
        "num_accepted": chain_nacc_law(P, Q, ROOT, k, point_mass_drafts=True),
    }
    laws = _with_pairs(laws, P, k)
    _assert_laws(_outcomes(res, v, k, P, rng), laws, n)

    ref = _ref_res(rng, nt, tok, P, None, "topk")
    assert _laws_ok(_outcomes(ref, v, k, P, rng), laws, n)
    # power: correction drawn from p instead of p with the rejected draft removed
    bad = _ref_res(rng, nt, tok, P, None, "topk", bug="no_residual")
    assert not _laws_ok(_outcomes(bad, v, k, P, rng), laws, n)
    # power, through codecspec: rows after the first selected by the wrong context
    perm = np.roll(np.arange(v), 1)
    L_bad = L.copy()
    L_bad[1:] = L[1:, perm]
    bad_cs = run_chain_trials(tok, L_bad, sp(params), cs.Generator(seed=22), None)
    assert not _laws_ok(_outcomes(bad_cs, v, k, P, rng), laws, n)


def test_chain_q_equals_p():
    """draft_probs = p and drafts drawn from p: (almost) everything is accepted, law intact."""
    v, k, params = 13, 3, (0.9, 0, 1.0)
    n = N_DRAWS
    rng = np.random.default_rng(3000)
    L, P, _, _ = bigram_tables(rng, k + 1, v, params)
    p_cs = cs.warp(L, sp(params))  # the library's own p, bit for bit
    assert p_cs.shape == L.shape and p_cs.dtype == np.float32
    nt = NpTree(chain_paths(k))
    tok = draft_tree_tokens(rng, nt, P, ROOT, n, "iid")
    res = run_chain_trials(tok, L, sp(params), cs.Generator(seed=31), p_cs)
    check_result_invariants(nt, tok, res, v, distinct_rejections=False)
    frac_all = (res["nacc"] == k).mean()
    assert frac_all >= 0.999, f"q == p: only {frac_all:.5f} of chains fully accepted"
    out, nacc = res["tokens"], res["nacc"]
    assert_law(counts_of(out[:, 0], v), P[0, ROOT], n, what="first token")
    # autoregressive law of (y1, y2): complete a stopped chain from the target itself
    y2 = np.where(nacc >= 1, out[:, 1], sample_rows(rng, P[1, out[:, 0]]))
    law = P[0, ROOT][:, None] * P[1]
    assert_law(counts_of(out[:, 0] * v + y2, v * v), law, n, what="(y1, y2)")
    # power: the same check on a verifier that resamples y2 from p at another temperature
    y2_bad = np.where(nacc >= 1, sample_rows(rng, np_warp(L[1, out[:, 0]], 1.8)), y2)
    assert not law_ok(counts_of(out[:, 0] * v + y2_bad, v * v), law, n)


def test_chain_disjoint_supports():
    """q is zero on p's support: nothing is ever accepted and the correction follows p."""
    v, k, params = 11, 2, (1.0, 0, 1.0)
    n = N_DRAWS
    rng = np.random.default_rng(4000)
    L = rng.standard_normal((k + 1, v, v)).astype(np.float32)
    L[..., 5:] = -np.inf  # p lives on 0..4
    Ql = rng.standard_normal((k + 1, v, v)).astype(np.float32)
    Ql[..., :5] = -np.inf  # q lives on 5..10
    P, Q = np_warp(L), np_warp(Ql)
    nt = NpTree(chain_paths(k))
    tok = draft_tree_tokens(rng, nt, Q, ROOT, n, "iid")
    res = run_chain_trials(tok, L, sp(params), cs.Generator(seed=41), Q.astype(np.float32))
    check_result_invariants(nt, tok, res, v)
    assert (res["nacc"] == 0).all(), "a draft outside the target's support was accepted"
    c = counts_of(res["tokens"][:, 0], v)
    assert_law(c, P[0, ROOT], n, what="correction token")
    # power: a correction drawn at another temperature fails the same check
    bad = sample_rows(rng, np.broadcast_to(np_warp(L[0, ROOT], 2.0), (n, v)))
    assert not law_ok(counts_of(bad, v), P[0, ROOT], n)


@pytest.mark.parametrize("variant", ["q", "none", "topk-cut"])
def test_chain_zero_probability_draft_never_accepted(variant):
    """A draft with p(x) = 0 must never be accepted, whatever u is (u = 0 pitfall)."""
    v, k = 9, 1
    n = N_DRAWS if variant == "q" else 20_000
    rng = np.random.default_rng(5000)
    L = rng.standard_normal((k + 1, v)).astype(np.float32)
    x = 4
    if variant == "topk-cut":
        L[0, x] = L[0].min() - 1.0  # finite logit, but outside the top-3
        params = (1.0, 3, 1.0)
    else:
        L[0, x] = -np.inf
        params = (1.0, 0, 1.0)
    q = np.full((k, v), 0.4 / (v - 1), dtype=np.float32)
    q[0, x] = 0.6
    g = cs.Generator(seed=51)
    drafts = np.array([x], dtype=np.int32)
    nacc = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    for i in range(n):
        if variant == "none":
            r = cs.verify_chain(L, drafts, sp(params), g)
        else:
            r = cs.verify_chain(L, drafts, sp(params), g, draft_probs=q)
        nacc[i] = r.num_accepted
        first[i] = r.tokens[0]
    assert (nacc == 0).all(), f"zero-probability draft accepted {(nacc > 0).sum()} times"
    assert (first != x).all()
    assert ((first >= 0) & (first < v)).all()


def test_chain_draft_with_zero_q_is_rejected():
    """The drafted token has q(x) = 0 (inconsistent input): reject, never divide, no crash."""
    v, k = 9, 2
    n = 20_000
    rng = np.random.default_rng(6000)
    L = rng.standard_normal((k + 1, v)).astype(np.float32)
    q = rng.random((k, v)).astype(np.float32)
    x = np.array([2, 3], dtype=np.int32)
    q[0, 2] = 0.0
    q /= q.sum(axis=1, keepdims=True)
    g = cs.Generator(seed=61)
    for _ in range(n):
        r = cs.verify_chain(L, x, sp((1.0, 0, 1.0)), g, draft_probs=q)
        assert r.num_accepted == 0
        assert len(r.tokens) == 1 and 0 <= r.tokens[0] < v


def test_chain_point_mass_target():
    """Targets with one finite logit: the output is that token, drafts accepted iff equal."""
    v, k = 10, 3
    rng = np.random.default_rng(7000)
    n = 5000
    g = cs.Generator(seed=71)
    for params in [(1.0, 0, 1.0), (0.7, 2, 0.5)]:
        for _ in range(n // 2):
            c = rng.integers(0, v, size=k + 1)
            L = np.full((k + 1, v), -np.inf, dtype=np.float32)
            L[np.arange(k + 1), c] = rng.standard_normal(k + 1)
            q = rng.dirichlet(np.ones(v), size=k).astype(np.float32)
            x = np.where(rng.random(k) < 0.5, c[:k], rng.integers(0, v, size=k)).astype(np.int32)
            r = cs.verify_chain(L, x, sp(params), g, draft_probs=q)
            m = 0
            while m < k and x[m] == c[m]:
                m += 1
            assert r.num_accepted == m
            np.testing.assert_array_equal(r.tokens, c[: m + 1])
