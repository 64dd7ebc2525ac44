"""cs.verify_chain(..., tolerance=beta): SSD's tolerance-relaxed acceptance (docs/design.md
section 2, the lossy baseline PCG is compared with; contract in section 4).

Draft x is accepted iff u < min(1, p(x)/q(x)) + beta; a rejection emits a token from the usual
residual norm(max(p - q, 0)) (p when that is all zero). Checks:

* tolerance = 0 is bit-identical to omitting it (and to the chain as a verify_tree "iid" tree),
  same tokens, same generator consumption, on many random cases;
* tolerance > 0 follows SSD's exact law (first token, (y1, y2 | STOP), num_accepted), checked on
  65,536 draws, with a numpy reference that must pass and broken variants (a wrong acceptance
  ratio, a residual taken from p) that must fail the same check;
* it is lossy: the same draws measurably depart from the target's autoregressive law, which the
  tolerance = 0 run satisfies; acceptance rises with beta (exactly, for equal generator states,
  and in law);
* invalid tolerances raise ValueError naming `tolerance` and draw nothing.
"""

import numpy as np
import pytest
from stats import (
    N_DRAWS,
    NpTree,
    assert_law,
    bigram_tables,
    chain_paths,
    counts_of,
    draft_tree_tokens,
    law_ok,
    make_logits,
    np_warp,
    sample_rows,
    two_token_law,
    two_token_outcomes,
)

import codecspec as cs

ROOT = 2
V, K = 13, 2
PARAMS = (0.9, 5, 1.0)  # top-k 5: the drafter proposes tokens the target gives probability 0
BETA = 0.3


def sp(params):
    t, k, p = params
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


# --------------------------------------------------------------------------------------------
# SSD's exact law and a numpy reference


def ssd_accept(p, q, beta, bug=None):
    """Acceptance probability of each drafted token (q(x) = 0: never drafted, 0)."""
    qs = np.where(q > 0, q, 1.0)
    ratio = (1.0 + beta) * p / qs if bug == "ratio_scaled" else p / qs + beta
    return np.where(q > 0, np.minimum(1.0, ratio), 0.0)


def ssd_residual(p, q, bug=None):
    r = p.copy() if bug == "residual_p" else np.maximum(p - q, 0.0)
    s = r.sum(axis=-1, keepdims=True)
    return np.where(s > 0, r / np.where(s > 0, s, 1.0), p)


def ssd_split(p, q, beta):
    """(P[y = x accepted], P[y emitted as the correction]) at one chain position."""
    acc = q * ssd_accept(p, q, beta)
    rej = 1.0 - acc.sum(axis=-1, keepdims=True)
    return acc, rej * ssd_residual(p, q)


def ssd_laws(P, Q, beta):
    """Exact laws of SSD on the K = 2 depth-bigram chain: first token, (y1, y2 | STOP),
    num_accepted."""
    acc0, stp0 = ssd_split(P[0, ROOT], Q[0, ROOT], beta)
    acc1, stp1 = ssd_split(P[1], Q[1], beta)  # rows: context x1
    first = acc0 + stp0
    pair = two_token_law(acc0, stp0, acc1 + stp1)
    a0, a1 = acc0.sum(), acc0 @ acc1.sum(axis=1)
    return {"first token": first, "(y1, y2|STOP)": pair, "num_accepted": [1 - a0, a0 - a1, a1]}


def np_ssd_chain(rng, tok, P, Q, beta, bug=None):
    """Vectorised SSD reference on tok [n, K+1] (column 0 = the committed token).
    bug None | "ratio_scaled" (accept with min(1, (1 + beta) p/q)) | "residual_p"."""
    n, k1 = tok.shape
    out = np.full((n, k1), -1, dtype=np.int64)
    nacc = np.zeros(n, dtype=np.int64)
    live = np.ones(n, dtype=bool)
    prev = tok[:, 0].copy()
    for j in range(k1 - 1):
        idx = np.flatnonzero(live)
        p, q, x = P[j, prev[idx]], Q[j, prev[idx]], tok[idx, j + 1]
        r = np.arange(idx.size)
        a = ssd_accept(p[r, x], q[r, x], beta, bug)
        acc = 1.0 - rng.random(idx.size) <= a
        out[idx[acc], j] = x[acc]
        nacc[idx[acc]] = j + 1
        prev[idx[acc]] = x[acc]
        rej = idx[~acc]
        out[rej, j] = sample_rows(rng, ssd_residual(p[~acc], q[~acc], bug))
        live[rej] = False
    idx = np.flatnonzero(live)
    out[idx, k1 - 1] = sample_rows(rng, P[k1 - 1, prev[idx]])
    return out, nacc


def run_chain(tok, L, Qt, params, g, tolerance):
    n, k1 = tok.shape
    ar = np.arange(k1)
    out = np.full((n, k1), -1, dtype=np.int64)
    nacc = np.zeros(n, dtype=np.int64)
    t32 = np.ascontiguousarray(tok, dtype=np.int32)
    for i in range(n):
        t = t32[i]
        r = cs.verify_chain(
            L[ar, t], t[1:], params, g, draft_probs=Qt[ar[:-1], t[:-1]], tolerance=tolerance
        )
        y = np.asarray(r.tokens)
        assert y.size == r.num_accepted + 1 <= k1
        assert (y[: r.num_accepted] == t[1 : 1 + r.num_accepted]).all()
        out[i, : y.size] = y
        nacc[i] = r.num_accepted
    return out, nacc


def counts(out, nacc):
    return {
        "first token": counts_of(out[:, 0], V),
        "(y1, y2|STOP)": counts_of(two_token_outcomes(out, nacc, V), V * (V + 1)),
        "num_accepted": counts_of(nacc, K + 1),
    }


def all_ok(c, laws, n):
    return all(law_ok(c[k], laws[k], n) for k in laws)


def completed_pair_counts(rng, out, nacc, P):
    """(y1, y2) with y2 completed from the target when the chain stopped at position 1."""
    y1 = out[:, 0]
    y2 = np.where(nacc >= 1, out[:, 1], -1)
    stop = y2 < 0
    y2[stop] = sample_rows(rng, P[1, y1[stop]])
    return counts_of(y1 * V + y2, V * V)


def test_tolerance_follows_ssd_law_and_is_lossy():
    n = N_DRAWS
    rng = np.random.default_rng(700)
    L, P, _, Q = bigram_tables(rng, K + 1, V, PARAMS, q_noise=1.5)
    tok = draft_tree_tokens(rng, NpTree(chain_paths(K)), Q, ROOT, n, "iid")
    Qt = Q.astype(np.float32)
    laws = ssd_laws(P, Q, BETA)
    exact = ssd_laws(P, Q, 0.0)
    np.testing.assert_allclose(exact["first token"], P[0, ROOT], atol=1e-12)  # beta 0 = exact
    lossy_tv = 0.5 * np.abs(laws["first token"] - P[0, ROOT]).sum()
    assert lossy_tv > 0.05, lossy_tv

    g = cs.Generator(seed=7)
    out, nacc = run_chain(tok, L, Qt, sp(PARAMS), g, BETA)
    assert g.step == n
    c = counts(out, nacc)
    for what, law in laws.items():
        assert_law(c[what], law, n, what=f"SSD beta={BETA}: {what}")
    # lossy: the emitted tokens leave the target's support, and the laws depart from it
    zero_p = P[0, ROOT][out[:, 0]] == 0
    assert zero_p.sum() > 100, "tokens the warped target excludes are accepted"
    assert not law_ok(c["first token"], P[0, ROOT], n), "tolerance > 0 must be lossy"
    target_pair = (P[0, ROOT][:, None] * P[1]).ravel()
    assert not law_ok(completed_pair_counts(rng, out, nacc, P), target_pair, n)

    # exact at tolerance 0: the same check (target laws) passes, and acceptance is lower
    g0 = cs.Generator(seed=8)
    out0, nacc0 = run_chain(tok, L, Qt, sp(PARAMS), g0, 0.0)
    c0 = counts(out0, nacc0)
    assert_law(c0["first token"], P[0, ROOT], n, what="tolerance 0: first token")
    assert_law(completed_pair_counts(rng, out0, nacc0, P), target_pair, n, what="tolerance 0")
    assert_law(c0["num_accepted"], exact["num_accepted"], n, what="tolerance 0: num_accepted")
    assert nacc.mean() > nacc0.mean() + 0.1, (nacc.mean(), nacc0.mean())

    # the expected SSD laws are right: the numpy reference satisfies them
    ref = np_ssd_chain(rng, tok, P, Q, BETA)
    assert all_ok(counts(*ref), laws, n)
    # power: wrong acceptance ratio / residual rules fail the same checks
    for bug in ("ratio_scaled", "residual_p"):
        assert not all_ok(counts(*np_ssd_chain(rng, tok, P, Q, BETA, bug)), laws, n), bug
    # power, through codecspec: another beta than the law's is caught
    out_b, nacc_b = run_chain(tok[: n // 4], L, Qt, sp(PARAMS), cs.Generator(seed=9), 0.15)
    assert not all_ok(counts(out_b, nacc_b), laws, n // 4)


def test_acceptance_rises_with_tolerance():
    """Exact expected acceptance is increasing in beta; with equal generator states a larger
    beta accepts every draft a smaller one accepted (the same u is compared with a larger
    bound), and beta = 1 accepts every draft with q > 0."""
    rng = np.random.default_rng(701)
    _, P, _, Q = bigram_tables(rng, K + 1, V, PARAMS, q_noise=1.5)
    betas = [0.0, 0.05, 0.2, 0.5, 1.0]
    mean_acc = [np.dot(np.arange(K + 1), ssd_laws(P, Q, b)["num_accepted"]) for b in betas]
    assert all(a < b for a, b in zip(mean_acc, mean_acc[1:])), mean_acc
    assert mean_acc[-1] == pytest.approx(K)

    params = [sp(PARAMS), sp((1.0, 0, 1.0)), sp((1.2, 0, 0.8))]
    totals = np.zeros(len(betas))
    for case in range(600):
        k = 1 + case % 4
        L = make_logits(rng, (k + 1, V), ninf_frac=0.2)
        q = np_warp(make_logits(rng, (k, V)), 1.0)
        x = np.array([rng.choice(V, p=q[j]) for j in range(k)], dtype=np.int32)
        q = q.astype(np.float32)
        g = cs.Generator(seed=case)
        prev = None
        for bi, b in enumerate(betas):
            gi = g.copy()
            r = cs.verify_chain(L, x, params[case % 3], gi, draft_probs=q, tolerance=b)
            assert gi.step == 1
            if prev is not None:
                assert r.num_accepted >= prev.num_accepted
                np.testing.assert_array_equal(
                    r.tokens[: prev.num_accepted], prev.tokens[: prev.num_accepted]
                )
            if b == 1.0:
                assert r.num_accepted == k
            totals[bi] += r.num_accepted
            prev = r
    assert all(a < b for a, b in zip(totals, totals[1:])), totals


def test_zero_tolerance_is_bit_identical():
    """tolerance = 0 (float, int, numpy scalar, None) reproduces the default call and the chain
    verified as an "iid" verify_tree tree, bit for bit, generator state included."""
    rng = np.random.default_rng(702)
    all_params = [(1.0, 0, 1.0), (0.9, 5, 1.0), (1.3, 0, 0.8), (0.7, 4, 0.9), (0.0, 0, 1.0)]
    zeros = [0.0, 0, np.float64(0.0), np.float32(0.0), None, -0.0]
    accepted = rejected = 0
    for case in range(1500):
        v = (3, 11, 64)[case % 3]
        k = case % 5
        params = sp(all_params[case % len(all_params)])
        L = make_logits(rng, (k + 1, v), ninf_frac=0.15 * (case % 2))
        q = np_warp(make_logits(rng, (k, v)) + np.nan_to_num(L[:k], neginf=-3.0), 1.0)
        x = np.array([rng.choice(v, p=q[j]) for j in range(k)], dtype=np.int32)
        q = q.astype(np.float32)
        dp = q if case % 4 else None
        g = cs.Generator(seed=case, stream=3)
        g.random(case % 2)
        ref_g = g.copy()
        ref = cs.verify_chain(L, x, params, ref_g, draft_probs=dp)
        tree_g = g.copy()
        tree_q = None if dp is None else np.concatenate([dp, np.full((1, v), 1.0 / v, np.float32)])
        tokens = np.concatenate([[0], x]).astype(np.int32)
        via_tree = cs.verify_tree(
            cs.DraftTree.chain(k), tokens, L, params, tree_g, draft_probs=tree_q, draft_kind="iid"
        )
        np.testing.assert_array_equal(via_tree.tokens, ref.tokens, err_msg=f"case {case}")
        np.testing.assert_array_equal(via_tree.nodes, ref.nodes)
        for z in zeros:
            gz = g.copy()
            r = cs.verify_chain(L, x, params, gz, draft_probs=dp, tolerance=z)
            np.testing.assert_array_equal(r.tokens, ref.tokens, err_msg=f"case {case} {z!r}")
            np.testing.assert_array_equal(r.nodes, ref.nodes)
            assert gz.step == ref_g.step == tree_g.step
        if params.temperature == 0.0:  # greedy ignores the tolerance
            gb = g.copy()
            r = cs.verify_chain(L, x, params, gb, draft_probs=dp, tolerance=0.7)
            np.testing.assert_array_equal(r.tokens, ref.tokens)
            assert gb.step == g.step
        accepted += ref.num_accepted
        rejected += ref.num_accepted < k
    assert accepted > 300 and rejected > 300, (accepted, rejected)


@pytest.mark.parametrize(
    "bad", [-0.1, 1.0001, float("nan"), float("inf"), -float("inf"), "0.1", True, [0.1], object()]
)
def test_bad_tolerance_names_the_argument(bad):
    L = np.zeros((2, 4), dtype=np.float32)
    g = cs.Generator(seed=1)
    with pytest.raises(ValueError, match=r"^tolerance\b"):
        cs.verify_chain(L, [1], sp((1.0, 0, 1.0)), g, tolerance=bad)
    assert g.step == 0
