"""Statistical conformance of cs.verify_tree for the three draft kinds (docs/design.md section 2).

Every tree node has its own (context-dependent) target row: the row of a node at depth d whose
token is t is L[d, t], so children that repeat a token (iid drafts) share a row. Drafts are drawn
afresh for every trial (vectorised in numpy up front) and one Generator advances per call.

Checks: (a) law of the first emitted token = warp(root row); (b) joint law of the first two
emitted tokens, with outcome (y1, STOP) when y1 was not accepted as a root child, computed
exactly by enumerating the root's draft tuples under the kind's residual rule; (c) for "topk":
exact law of the node where verification stops and of num_accepted. Each check is also run on
deliberately broken verifiers, which must fail it, and on a numpy reference, which must pass.
"""

import numpy as np
import pytest
from stats import (
    N_DRAWS,
    NpTree,
    assert_law,
    bigram_tables,
    check_result_invariants,
    check_support,
    complete_sequences,
    counts_of,
    draft_tree_tokens,
    exact_root_law,
    exact_stop_node_law,
    law_ok,
    np_verify_tree,
    np_warp,
    pair_laws,
    run_tree_trials,
    two_token_law,
    two_token_outcomes,
)

import codecspec as cs

ROOT = 2

PATHS_A = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (1, 0, 0)]
PATHS_B = [(1,), (0,), (0, 1), (0, 0), (1, 0), (0, 0, 0)]  # unsorted on purpose

# (id, V, (temperature, top_k, top_p), paths)
CONFIGS = [
    ("v7-T1.3-p0.8", 7, (1.3, 0, 0.8), PATHS_A),
    ("v13-T0.9-k5", 13, (0.9, 5, 1.0), PATHS_A),
    ("v50-T0.7-k5-p0.9", 50, (0.7, 5, 0.9), PATHS_B),
]
KINDS = ["topk", "iid", "swor"]


def sp(params):
    t, k, p = params
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


def _counts(res, nt, v, with_stop, P=None, rng=None):
    out, nacc = res["tokens"], res["nacc"]
    c = {
        "first token": counts_of(out[:, 0], v),
        "(y1, y2|STOP)": counts_of(two_token_outcomes(out, nacc, v), v * (v + 1)),
    }
    if P is not None:  # deeper positions: completed sequences, consecutive pairs
        if "lens" not in res:
            res = dict(res, lens=nacc + 1)
        seq = complete_sequences(rng, res, P, ROOT, nt.max_depth + 1)
        for j in range(1, nt.max_depth + 1):
            c[f"completed (y{j}, y{j + 1})"] = counts_of(seq[:, j - 1] * v + seq[:, j], v * v)
    if with_stop:
        c["stop node"] = counts_of(res["stop"], nt.T)
        c["num_accepted"] = counts_of(nacc, nt.max_depth + 1)
    return c


def _laws_ok(counts, laws, n):
    return all(law_ok(counts[k], laws[k], n) for k in laws)


def _ref(rng, nt, tok, P, Q, kind, bug=None):
    out, nacc, stop = np_verify_tree(rng, nt, tok, P, Q, kind, bug)
    return {"tokens": out, "nacc": nacc, "stop": stop}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_tree_law(cfg, kind):
    name, v, params, paths = cfg
    n = N_DRAWS
    seed = 100 * v + KINDS.index(kind)
    rng = np.random.default_rng(seed)
    nt = NpTree(paths)
    tree = cs.DraftTree.from_paths(paths)
    np.testing.assert_array_equal(tree.parents, nt.parents)
    L, P, Ql, Q = bigram_tables(rng, nt.max_depth + 1, v, params)
    tok = draft_tree_tokens(rng, nt, Q, ROOT, n, kind)
    Qt = None if kind == "topk" else Q.astype(np.float32)

    g = cs.Generator(seed=seed)
    res = run_tree_trials(tree, nt, tok, L, sp(params), g, kind, Qt)
    assert g.step == n, "every sampling verify call advances step by exactly one"
    res["stop"] = check_result_invariants(nt, tok, res, v)
    check_support(res, P, ROOT)

    m = len(nt.children[0])
    acc, stp = exact_root_law(P[0, ROOT], Q[0, ROOT], m, kind)
    np.testing.assert_allclose(acc + stp, P[0, ROOT], atol=1e-12)  # the rule is lossless
    laws = {"first token": P[0, ROOT], "(y1, y2|STOP)": two_token_law(acc, stp, P[1])}
    for j, law in enumerate(pair_laws(P, ROOT, nt.max_depth + 1), start=1):
        laws[f"completed (y{j}, y{j + 1})"] = law
    if kind == "topk":
        stop_law = exact_stop_node_law(nt, tok[0], P)
        laws["stop node"] = stop_law
        laws["num_accepted"] = np.bincount(nt.depths, weights=stop_law)
    counts = _counts(res, nt, v, kind == "topk", P, rng)
    for what in laws:
        assert_law(counts[what], laws[what], n, what=f"{name} {kind}: {what}")

    # the expected laws are right: the numpy reference verifier satisfies them
    ref = _ref(rng, nt, tok, P, Q, kind)
    assert _laws_ok(_counts(ref, nt, v, kind == "topk", P, rng), laws, n)
    # power: broken numpy verifiers fail the same checks
    bugs = ["no_renorm", "no_residual"] if kind == "topk" else ["accept_p", "no_renorm"]
    for bug in bugs:
        bad = _ref(rng, nt, tok, P, Q, kind, bug)
        assert not _laws_ok(_counts(bad, nt, v, kind == "topk", P, rng), laws, n), bug
    # power, through codecspec: q passed with another temperature than the drafts were drawn at
    if kind != "topk":
        q_wrong = np_warp(Ql, 2.5).astype(np.float32)
        bad = run_tree_trials(tree, nt, tok, L, sp(params), cs.Generator(seed=1), kind, q_wrong)
        bad_counts = _counts(bad, nt, v, False, P, rng)
        assert not _laws_ok(bad_counts, laws, n), "q at the wrong temperature"


def test_tree_iid_drafts_verified_as_swor_is_caught():
    """Power check with the wrong residual rule: i.i.d. drafts verified as "swor" (on a config
    where the exact law of that mistake is far from the target: TV 0.04 on the first token)."""
    name, v, params, paths = CONFIGS[0]
    n = N_DRAWS
    rng = np.random.default_rng(100 * v + 1)
    nt = NpTree(paths)
    tree = cs.DraftTree.from_paths(paths)
    L, P, _, Q = bigram_tables(rng, nt.max_depth + 1, v, params)
    tok = draft_tree_tokens(rng, nt, Q, ROOT, n, "iid")
    acc, stp = exact_root_law(P[0, ROOT], Q[0, ROOT], len(nt.children[0]), "iid")
    laws = {"first token": P[0, ROOT], "(y1, y2|STOP)": two_token_law(acc, stp, P[1])}
    Qt = Q.astype(np.float32)
    good = run_tree_trials(tree, nt, tok, L, sp(params), cs.Generator(seed=5), "iid", Qt)
    assert _laws_ok(_counts(good, nt, v, False), laws, n)
    bad = run_tree_trials(tree, nt, tok, L, sp(params), cs.Generator(seed=5), "swor", Qt)
    assert not _laws_ok(_counts(bad, nt, v, False), laws, n), "iid drafts verified as swor"
