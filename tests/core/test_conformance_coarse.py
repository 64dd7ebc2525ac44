"""Statistical conformance of cs.verify_chain_coarse (PCG, docs/design.md section 2).

The exact-law variable is the emitted group: r.groups[0] must follow coarse(warp(root row)) and
(groups[0], groups[1] | STOP) the exact joint law (after acceptance of draft x the next group
follows the coarse law of the target row of context x). Groups overlap (built with
AcousticGroups.from_members). With all-singleton groups the method is exact speculative
sampling: r.tokens must equal verify_chain's for identical Generator states.
"""

import numpy as np
import pytest
from stats import (
    N_DRAWS,
    NpTree,
    assert_law,
    bigram_tables,
    chain_paths,
    coarse_two_group_law,
    counts_of,
    draft_tree_tokens,
    group_weights,
    law_ok,
    make_logits,
    np_coarse_two_groups,
    np_warp,
)

import codecspec as cs

ROOT = 3

MEMBERS_13 = [[0, 1, 2, 3], [3, 4, 5], [5, 6, 7, 0], [8, 9], [9, 10, 11, 12], [12, 1, 6], [4]]


def _members_50():
    rng = np.random.default_rng(50)
    out = []
    for k in range(50):
        others = rng.choice(50, size=int(rng.integers(0, 4)), replace=False).tolist()
        out.append(sorted({k, *others}))
    return out


# (id, V, (temperature, top_k, top_p), members, K)
CONFIGS = [
    ("v13-T0.9-k5", 13, (0.9, 5, 1.0), MEMBERS_13, 2),
    ("v50-T1.3-p0.8", 50, (1.3, 0, 0.8), _members_50(), 2),
]


def sp(params):
    t, k, p = params
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


def run_coarse_trials(grp, tok, L, Qt, params, g):
    n, k1 = tok.shape
    ar = np.arange(k1)
    tok32 = np.ascontiguousarray(tok, dtype=np.int32)
    toks = np.full((n, k1), -1, dtype=np.int64)
    grps = np.full((n, k1), -1, dtype=np.int64)
    nacc = np.zeros(n, dtype=np.int64)
    for i in range(n):
        t = tok32[i]
        r = cs.verify_chain_coarse(grp, L[ar, t], t[1:], Qt[ar[:-1], t[:-1]], params, g)
        y, gr = np.asarray(r.tokens), np.asarray(r.groups)
        assert y.size == gr.size == r.num_accepted + 1 <= k1
        toks[i, : y.size] = y
        grps[i, : gr.size] = gr
        nacc[i] = r.num_accepted
    return toks, grps, nacc


def _two_group_outcomes(grps, nacc, ng):
    return grps[:, 0] * (ng + 1) + np.where(nacc >= 1, grps[:, 1], ng)


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_coarse_group_law(cfg):
    name, v, params, members, k = cfg
    n = N_DRAWS
    rng = np.random.default_rng(300 + v)
    grp = cs.AcousticGroups.from_members(members, v)
    ng = len(members)
    assert grp.num_groups == ng
    w = group_weights(members, v)
    inc = w > 0
    L, P, Ql, Q = bigram_tables(rng, k + 1, v, params)
    nt = NpTree(chain_paths(k))
    tok = draft_tree_tokens(rng, nt, Q, ROOT, n, "iid")
    Qt = Q.astype(np.float32)
    g = cs.Generator(seed=v)
    toks, grps, nacc = run_coarse_trials(grp, tok, L, Qt, sp(params), g)
    assert g.step == n

    # exact structure: accepted tokens are the drafts, every token lies in its emitted group
    valid = toks >= 0
    assert ((toks < v) | ~valid).all()
    assert ((grps >= 0) & (grps < ng))[valid].all()
    assert inc[grps[valid], toks[valid]].all(), "emitted token is not a member of its group"
    for j in range(k):
        m = nacc > j
        assert (toks[m, j] == tok[m, j + 1]).all(), "accepted token differs from the draft"

    law1 = w @ P[0, ROOT]
    lib_law = np.asarray(grp.coarse(cs.warp(L[0, ROOT], sp(params))), dtype=np.float64)
    np.testing.assert_allclose(lib_law, law1, atol=1e-6)  # = grp.coarse(warp(root row))
    law2 = coarse_two_group_law(P[0, ROOT], Q[0, ROOT], P[1], w)
    assert_law(counts_of(grps[:, 0], ng), law1, n, what=f"{name}: first group")
    c2 = counts_of(_two_group_outcomes(grps, nacc, ng), ng * (ng + 1))
    assert_law(c2, law2, n, what=f"{name}: (k1, k2|STOP)")

    # the expected laws are right: the numpy reference satisfies them
    x1 = tok[:, 1]
    ref = np_coarse_two_groups(rng, P[0, ROOT], Q[0, ROOT], P[1], w, x1)
    assert law_ok(counts_of(ref, ng * (ng + 1)), law2, n)
    # power: token-level acceptance with a coarse residual emits groups from the wrong law
    bad = np_coarse_two_groups(rng, P[0, ROOT], Q[0, ROOT], P[1], w, x1, bug="token_accept")
    assert not law_ok(counts_of(bad, ng * (ng + 1)), law2, n)
    # power, through codecspec: q passed with another temperature than the drafts were drawn at
    q_wrong = np_warp(Ql, 2.5).astype(np.float32)
    _, grps_b, nacc_b = run_coarse_trials(grp, tok, L, q_wrong, sp(params), cs.Generator(seed=1))
    ok1 = law_ok(counts_of(grps_b[:, 0], ng), law1, n)
    ok2 = law_ok(counts_of(_two_group_outcomes(grps_b, nacc_b, ng), ng * (ng + 1)), law2, n)
    assert not (ok1 and ok2), "q at the wrong temperature was not caught"


def test_coarse_singletons_reduce_to_verify_chain():
    """All-singleton groups: identical Generator states give identical tokens (exact)."""
    v, k = 13, 3
    grp = cs.AcousticGroups.from_members([[t] for t in range(v)], v)
    rng = np.random.default_rng(400)
    all_params = [(1.0, 0, 1.0), (0.9, 5, 1.0), (1.3, 0, 0.8), (0.7, 5, 0.9)]
    accepted = 0
    for seed in range(400):
        params = sp(all_params[seed % len(all_params)])
        L = make_logits(rng, (k + 1, v), ninf_frac=0.1)
        q = np_warp(make_logits(rng, (k, v)) + L[:k].clip(-3, None), 1.0)
        x = np.array([rng.choice(v, p=q[j]) for j in range(k)], dtype=np.int32)
        q = q.astype(np.float32)
        g1, g2 = cs.Generator(seed=seed), cs.Generator(seed=seed)
        r1 = cs.verify_chain_coarse(grp, L, x, q, params, g1)
        r2 = cs.verify_chain(L, x, params, g2, draft_probs=q)
        np.testing.assert_array_equal(r1.tokens, r2.tokens, err_msg=f"seed {seed}")
        assert r1.num_accepted == r2.num_accepted
        np.testing.assert_array_equal(r1.groups, r1.tokens)
        assert g1.step == g2.step == 1
        accepted += r2.num_accepted
    assert accepted > 100  # the comparison exercised acceptances, not only rejections


def test_coarse_zero_probability_draft_never_accepted():
    """A draft token whose group has no target mass is never accepted."""
    v = 6
    grp = cs.AcousticGroups.from_members([[0, 1], [2, 3], [4, 5]], v)
    L = np.array([[0.0, 0.5, 1.0, 0.2, -np.inf, -np.inf], [0.0] * 6], dtype=np.float32)
    q = np.array([[0.1, 0.1, 0.1, 0.1, 0.5, 0.1]], dtype=np.float32)
    g = cs.Generator(seed=9)
    x = np.array([4], dtype=np.int32)
    for _ in range(20_000):
        r = cs.verify_chain_coarse(grp, L, x, q, sp((1.0, 0, 1.0)), g)
        assert r.num_accepted == 0
        assert r.groups[0] != 2 and r.tokens[0] < 4
