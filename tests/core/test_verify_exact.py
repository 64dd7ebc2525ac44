"""Exact (non-statistical) verification tests: greedy chains and trees on hand-worked logits,
greedy vs brute force, degenerate shapes, structural invariants on random inputs, and one call
each at V = 151,936 (Qwen-size vocabulary)."""

import numpy as np
import pytest
from stats import (
    NpTree,
    check_result_invariants,
    greedy_walk,
    make_logits,
    np_warp,
    random_tree_paths,
    softmax,
)

import codecspec as cs

NINF = -np.inf
KINDS = ["topk", "iid", "swor"]
GREEDY_PARAMS = [(0.0, 0, 1.0), (0.0, 2, 0.3), (0.0, 1, 1.0)]


def sp(t, k=0, p=1.0):
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


# ------------------------------------------------------------------------------------------
# greedy chain

CHAIN_ROWS = np.array(
    [
        [0.0, 2.0, 1.0, NINF, 2.0],  # argmax 1 (tie with 4 -> lowest index)
        [3.0, 0.0, 0.0, 0.0, 0.0],  # argmax 0
        [0.0, 0.0, 0.0, 5.0, 0.0],  # argmax 3
        [1.0, 1.0, 1.0, 1.0, 1.0],  # argmax 0 (all tied)
    ],
    dtype=np.float32,
)


@pytest.mark.parametrize(
    "drafts, tokens",
    [
        ([1, 0, 2], [1, 0, 3]),
        ([1, 0, 3], [1, 0, 3, 0]),
        ([4, 0, 3], [1]),  # tie at the root: 4 is not the argmax
        ([3, 0, 3], [1]),  # draft on a -inf logit
        ([1, 4, 3], [1, 0]),
    ],
)
@pytest.mark.parametrize("params", GREEDY_PARAMS)
@pytest.mark.parametrize("with_q", [False, True])
def test_greedy_chain_hand_worked(drafts, tokens, params, with_q):
    g = cs.Generator(seed=5)
    drafts = np.array(drafts, dtype=np.int32)
    q = np.full((3, 5), 0.2, dtype=np.float32) if with_q else None
    r = cs.verify_chain(CHAIN_ROWS, drafts, sp(*params), g, draft_probs=q)
    np.testing.assert_array_equal(r.tokens, tokens)
    assert r.num_accepted == len(tokens) - 1
    np.testing.assert_array_equal(r.nodes, np.arange(1, len(tokens)))
    assert r.tokens.dtype == np.int32 and r.nodes.dtype == np.int32
    assert g.step == 0, "greedy calls draw nothing and do not advance step"


def test_greedy_chain_no_drafts():
    rows = np.array([[0.0, 3.0, 3.0]], dtype=np.float32)
    r = cs.verify_chain(rows, np.zeros(0, dtype=np.int32), sp(0.0), cs.Generator(seed=1))
    np.testing.assert_array_equal(r.tokens, [1])
    assert r.num_accepted == 0 and len(r.nodes) == 0


def test_sampling_chain_no_drafts():
    g = cs.Generator(seed=1)
    rows = np.array([[0.0, NINF, 1.0]], dtype=np.float32)
    for _ in range(200):
        r = cs.verify_chain(rows, np.zeros(0, dtype=np.int32), sp(1.0), g)
        assert r.num_accepted == 0 and len(r.tokens) == 1 and r.tokens[0] in (0, 2)
    assert g.step == 200


# ------------------------------------------------------------------------------------------
# greedy tree

TREE_PATHS = [(2,), (0,), (1,), (0, 1), (0, 0), (1, 0), (1, 0, 0)]
# node order: 0 root, 1 (0,), 2 (1,), 3 (2,), 4 (0,0), 5 (0,1), 6 (1,0), 7 (1,0,0)
TREE_TOKENS = np.array([9, 3, 5, 7, 2, 4, 1, 6], dtype=np.int32)


def _rows(argmaxes, v=10):
    rows = np.zeros((len(argmaxes), v), dtype=np.float32)
    rows[:, 0] = 0.5
    rows[np.arange(len(argmaxes)), argmaxes] = 2.0
    return rows


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "argmaxes, tokens, nodes",
    [
        ([5, 0, 1, 0, 0, 0, 6, 8], [5, 1, 6, 8], [2, 6, 7]),  # down to a leaf, bonus 8
        ([5, 0, 0, 0, 0, 0, 6, 8], [5, 0], [2]),  # argmax of node 2 is no child
        ([3, 4, 0, 0, 0, 0, 0, 0], [3, 4, 0], [1, 5]),  # leaf 5: bonus = argmax row 5
        ([7, 0, 0, 9, 0, 0, 0, 0], [7, 9], [3]),  # leaf 3
        ([8, 0, 0, 0, 0, 0, 0, 0], [8], []),  # nothing accepted
    ],
)
def test_greedy_tree_hand_worked(kind, argmaxes, tokens, nodes):
    tree = cs.DraftTree.from_paths(TREE_PATHS)
    rows = _rows(argmaxes)
    q = None if kind == "topk" else np.full((8, 10), 0.1, dtype=np.float32)
    g = cs.Generator(seed=3)
    r = cs.verify_tree(tree, TREE_TOKENS, rows, sp(0.0), g, draft_probs=q, draft_kind=kind)
    np.testing.assert_array_equal(r.tokens, tokens)
    np.testing.assert_array_equal(r.nodes, nodes)
    assert r.num_accepted == len(nodes)
    assert g.step == 0


def test_greedy_tree_ties_lowest_index():
    tree = cs.DraftTree.from_paths([(0,), (1,)])
    tokens = np.array([0, 4, 2], dtype=np.int32)
    rows = np.array([[0, 1, 3, 1, 3], [0] * 5, [1, 0, 0, 0, 1]], dtype=np.float32)
    r = cs.verify_tree(tree, tokens, rows, sp(0.0), cs.Generator(seed=0))
    np.testing.assert_array_equal(r.tokens, [2, 0])  # 2 and 4 tie: 2 wins, node 2 followed
    np.testing.assert_array_equal(r.nodes, [2])


def test_greedy_iid_repeated_sibling_tokens():
    tree = cs.DraftTree.from_paths([(0,), (1,), (2,)])
    tokens = np.array([0, 3, 3, 5], dtype=np.int32)
    rows = _rows([3, 1, 2, 0], v=6)
    q = np.full((4, 6), 1 / 6, dtype=np.float32)
    for kind in ["iid"]:
        r = cs.verify_tree(tree, tokens, rows, sp(0.0), cs.Generator(seed=0), q, kind)
        assert r.tokens[0] == 3 and r.num_accepted == 1
        node = int(r.nodes[0])
        assert node in (1, 2)
        assert r.tokens[1] == int(np.argmax(rows[node]))


def test_greedy_tree_root_only():
    tree = cs.DraftTree.from_paths([])
    assert tree.num_nodes == 1
    rows = np.array([[0.0, 1.0, 4.0, 4.0]], dtype=np.float32)
    r = cs.verify_tree(tree, np.array([1], dtype=np.int32), rows, sp(0.0), cs.Generator(seed=0))
    np.testing.assert_array_equal(r.tokens, [2])
    assert r.num_accepted == 0 and len(r.nodes) == 0


def test_greedy_tree_random_vs_brute_force():
    rng = np.random.default_rng(77)
    for case in range(300):
        v = int(rng.integers(2, 12))
        kind = KINDS[case % 3]
        paths = random_tree_paths(rng, int(rng.integers(1, 12)), max_depth=4, max_rank=3)
        nt = NpTree(paths)
        tree = cs.DraftTree.from_paths(paths)
        # small integer logits: many ties; some -inf
        rows = rng.integers(-2, 3, size=(nt.T, v)).astype(np.float32)
        rows[rng.random((nt.T, v)) < 0.15] = NINF
        rows[np.arange(nt.T), rng.integers(0, v, nt.T)] = rng.integers(-2, 3, nt.T)
        tok = np.zeros(nt.T, dtype=np.int32)
        for i in range(nt.T):
            ch = nt.children[i]
            if kind == "topk" or kind == "swor":  # distinct sibling tokens
                picks = rng.permutation(max(v, len(ch)))[: len(ch)] % v
                if len(set(picks.tolist())) < len(ch):
                    picks = np.arange(len(ch)) % v
            else:
                picks = rng.integers(0, v, len(ch))
            tok[ch] = picks
        if kind in ("topk", "swor") and any(
            len({int(tok[c]) for c in ch}) < len(ch) for ch in nt.children
        ):
            continue  # v too small for distinct siblings
        q = None if kind == "topk" else softmax(rng.standard_normal((nt.T, v))).astype(np.float32)
        exp_tokens, exp_nodes = greedy_walk(nt, tok, rows)
        for seed in (0, 1):
            g = cs.Generator(seed=seed)
            r = cs.verify_tree(tree, tok, rows, sp(0.0), g, draft_probs=q, draft_kind=kind)
            np.testing.assert_array_equal(r.tokens, exp_tokens, err_msg=f"case {case}")
            if kind != "iid":
                np.testing.assert_array_equal(r.nodes, exp_nodes, err_msg=f"case {case}")
            else:  # repeated tokens: any child with the argmax token may be followed
                np.testing.assert_array_equal(tok[np.asarray(r.nodes)], exp_tokens[:-1])
            assert g.step == 0


# ------------------------------------------------------------------------------------------
# sampling mode: structural invariants on random inputs (exact, many small cases)


def test_random_tree_invariants_sampling():
    rng = np.random.default_rng(88)
    g = cs.Generator(seed=88)
    all_params = [(1.0, 0, 1.0), (0.9, 50, 1.0), (1.3, 0, 0.8), (0.7, 5, 0.9), (0.5, 1, 1.0)]
    for case in range(600):
        v = int(rng.integers(2, 20))
        kind = KINDS[case % 3]
        params = all_params[case % len(all_params)]
        paths = random_tree_paths(rng, int(rng.integers(0, 10)), max_depth=4, max_rank=3)
        nt = NpTree(paths)
        tree = cs.DraftTree.from_paths(paths)
        rows = make_logits(rng, (nt.T, v), ninf_frac=0.2)
        qrows = softmax(make_logits(rng, (nt.T, v), ninf_frac=0.3))
        tok = np.zeros((1, nt.T), dtype=np.int64)
        skip = False
        for i in range(nt.T):
            ch = nt.children[i]
            if kind == "iid":
                tok[0, ch] = rng.choice(v, size=len(ch), p=qrows[i])
            elif kind == "topk":
                skip |= len(ch) > v
                tok[0, ch] = rng.permutation(max(v, len(ch)))[: len(ch)] % v
            else:
                skip |= len(ch) > int((qrows[i] > 0).sum())
                if not skip:
                    tok[0, ch] = rng.choice(v, size=len(ch), replace=False, p=qrows[i])
        if skip:
            continue  # not enough tokens (support) for distinct siblings
        q = None if kind == "topk" else qrows.astype(np.float32)
        before = g.step
        r = cs.verify_tree(tree, tok[0].astype(np.int32), rows, sp(*params), g, q, kind)
        assert g.step == before + 1
        res = {
            "tokens": np.array([list(r.tokens) + [-1] * (nt.max_depth + 2 - len(r.tokens))]),
            "lens": np.array([len(r.tokens)]),
            "nacc": np.array([r.num_accepted]),
            "nodes": np.array([list(r.nodes) + [-1] * (nt.max_depth + 1 - len(r.nodes))]),
            "nlens": np.array([len(r.nodes)]),
        }
        check_result_invariants(nt, tok, res, v)
        # no emitted token may have zero target probability at its node
        p = np_warp(rows, *params)
        path = [0] + list(r.nodes)
        for node, y in zip(path, r.tokens):
            assert p[node, y] > 0, f"case {case}: token {y} has p = 0 at node {node}"


def test_sampling_same_state_same_result():
    rng = np.random.default_rng(5)
    paths = [(0,), (1,), (0, 0), (0, 1), (1, 0)]
    tree = cs.DraftTree.from_paths(paths)
    v = 9
    rows = make_logits(rng, (6, v))
    q = softmax(make_logits(rng, (6, v))).astype(np.float32)
    tok = np.array([0, 1, 2, 3, 4, 5], dtype=np.int32)
    g = cs.Generator(seed=123)
    for _ in range(50):
        a, b = g.copy(), g.copy()
        ra = cs.verify_tree(tree, tok, rows, sp(1.0), a, q, "iid")
        rb = cs.verify_tree(tree, tok, rows, sp(1.0), b, q, "iid")
        np.testing.assert_array_equal(ra.tokens, rb.tokens)
        np.testing.assert_array_equal(ra.nodes, rb.nodes)
        g.random(1)


# ------------------------------------------------------------------------------------------
# Qwen-size vocabulary: one call each, shapes and ranges only

BIG_V = 151_936


def _big(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    x[..., rng.integers(0, BIG_V, 1000)] = NINF
    return x


def test_big_vocab_verify_chain():
    rng = np.random.default_rng(151)
    k = 3
    L = _big(rng, (k + 1, BIG_V))
    qd = softmax(_big(rng, (k, BIG_V)))
    x = np.array([rng.choice(BIG_V, p=qd[j]) for j in range(k)], dtype=np.int32)
    q = qd.astype(np.float32)
    for params in [(1.0, 0, 1.0), (0.9, 50, 0.95), (0.0, 0, 1.0)]:
        for dq in (q, None):
            r = cs.verify_chain(L, x, sp(*params), cs.Generator(seed=1), draft_probs=dq)
            assert len(r.tokens) == r.num_accepted + 1 <= k + 1
            assert ((r.tokens >= 0) & (r.tokens < BIG_V)).all()


def test_big_vocab_verify_tree_warp_sample():
    rng = np.random.default_rng(152)
    paths = [(0,), (1,), (0, 0)]
    tree = cs.DraftTree.from_paths(paths)
    L = _big(rng, (4, BIG_V))
    q = softmax(_big(rng, (4, BIG_V))).astype(np.float32)
    tok = np.array([5, 100, 151_935, 7], dtype=np.int32)
    for kind in KINDS:
        dq = None if kind == "topk" else q
        r = cs.verify_tree(tree, tok, L, sp(0.8, 40, 0.9), cs.Generator(seed=2), dq, kind)
        assert len(r.tokens) == r.num_accepted + 1 <= 3
        assert ((r.tokens >= 0) & (r.tokens < BIG_V)).all()
    p = cs.warp(L, sp(0.8, 40, 0.9))
    assert p.shape == L.shape and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, atol=1e-5)
    assert ((p > 0).sum(axis=-1) <= 40).all()
    s = cs.sample(L, sp(1.0), cs.Generator(seed=3))
    assert s.shape == (4,) and ((s >= 0) & (s < BIG_V)).all()
    assert np.isfinite(L[np.arange(4), s]).all()


def test_big_vocab_coarse():
    rng = np.random.default_rng(153)
    grp = cs.AcousticGroups.from_members([[2 * i, 2 * i + 1] for i in range(BIG_V // 2)], BIG_V)
    L = _big(rng, (3, BIG_V))
    qd = softmax(_big(rng, (2, BIG_V)))
    x = np.array([rng.choice(BIG_V, p=qd[j]) for j in range(2)], dtype=np.int32)
    q = qd.astype(np.float32)
    r = cs.verify_chain_coarse(grp, L, x, q, sp(1.0), cs.Generator(seed=4))
    assert len(r.tokens) == len(r.groups) == r.num_accepted + 1
    assert ((r.tokens >= 0) & (r.tokens < BIG_V)).all()
    np.testing.assert_array_equal(r.groups, np.asarray(r.tokens) // 2)


# ------------------------------------------------------------------------------------------
# memory layout: a non-C-contiguous array must mean the same thing as its C-contiguous copy


@pytest.mark.parametrize("kind", KINDS)
def test_verify_layout_independent(kind):
    rng = np.random.default_rng(21)
    paths = [(0,), (1,), (0, 0), (0, 1), (1, 0)]
    tree = cs.DraftTree.from_paths(paths)
    v = 11
    tok = np.array([0, 1, 2, 3, 4, 5], dtype=np.int32)
    for trial in range(40):
        rows = make_logits(rng, (v, 6)).T  # Fortran-ordered [6, V]
        q = softmax(make_logits(rng, (v, 6)).T).astype(np.float32).T.copy().T  # F-ordered
        q = None if kind == "topk" else q
        g = cs.Generator(seed=trial)
        a = cs.verify_tree(tree, tok, rows, sp(0.9), g.copy(), q, kind)
        qc = None if q is None else np.ascontiguousarray(q)
        b = cs.verify_tree(tree, tok, np.ascontiguousarray(rows), sp(0.9), g.copy(), qc, kind)
        np.testing.assert_array_equal(a.tokens, b.tokens, err_msg=f"trial {trial}")
        np.testing.assert_array_equal(a.nodes, b.nodes)
        ga = cs.verify_tree(tree, tok, rows, sp(0.0), g.copy(), q, kind)
        gb = cs.verify_tree(tree, tok, np.ascontiguousarray(rows), sp(0.0), g.copy(), qc, kind)
        np.testing.assert_array_equal(ga.tokens, gb.tokens)


def test_verify_chain_layout_independent():
    rng = np.random.default_rng(22)
    v, k = 11, 3
    for trial in range(40):
        rows = make_logits(rng, (v, k + 1)).T
        q = softmax(make_logits(rng, (v, k)).T).astype(np.float32).T.copy().T
        x = rng.integers(0, v, k).astype(np.int32)
        g = cs.Generator(seed=trial)
        a = cs.verify_chain(rows, x, sp(1.0), g.copy(), draft_probs=q)
        b = cs.verify_chain(
            np.ascontiguousarray(rows), x, sp(1.0), g.copy(), np.ascontiguousarray(q)
        )
        np.testing.assert_array_equal(a.tokens, b.tokens, err_msg=f"trial {trial}")
        ga = cs.verify_chain(rows, x, sp(0.0), g.copy())
        np.testing.assert_array_equal(ga.tokens[: ga.num_accepted + 1], _greedy_chain(rows, x))


def _greedy_chain(rows, x):
    out = []
    for j, xj in enumerate(x):
        y = int(np.argmax(rows[j]))
        out.append(y)
        if y != xj:
            return out
    out.append(int(np.argmax(rows[len(x)])))
    return out


def test_batch_and_coarse_layout_independent():
    rng = np.random.default_rng(23)
    tr = cs.DraftTree.from_paths([(0,), (1,)])
    tok = np.array([0, 1, 2], dtype=np.int32)
    grp = cs.AcousticGroups.from_members([[0, 1], [1, 2], [3], [4, 0]], 5)
    for trial in range(20):
        rows = make_logits(rng, (3, 6))
        want, _ = greedy_walk(NpTree([(0,), (1,)]), tok, rows)
        r = cs.verify_tree_batch(
            [tr], tok, np.asfortranarray(rows), sp(0.0), [cs.Generator(seed=0)]
        )
        np.testing.assert_array_equal(r[0].tokens, want, err_msg=f"trial {trial}")
        L = make_logits(rng, (3, 5))
        q = softmax(make_logits(rng, (2, 5))).astype(np.float32)
        x = np.array([1, 2], dtype=np.int32)
        g = cs.Generator(seed=trial)
        a = cs.verify_chain_coarse(grp, L, x, q, sp(1.0), g.copy())
        b = cs.verify_chain_coarse(
            grp, np.asfortranarray(L), x, np.asfortranarray(q), sp(1.0), g.copy()
        )
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.groups, b.groups)
