"""The numpy oracle (bench/oracle.py) is a valid baseline: it is lossless on its own, and it
agrees with codecspec wherever the comparison is exact (warp to 1e-6, trees, masks, greedy
or point-mass verification, groups, coarse law). Random streams differ (numpy vs Philox),
so sampled results are compared through their laws only, at every emitted position: the
token drawn at tree node i (the root's, an accepted draft's child, or the bonus) must follow
warp(logits[i]) given that node i was reached, and a verifier that is right on the first
token but accepts every later draft (`_accepts_past_the_first`) must fail the same check.
Collected by the default test run (pyproject's testpaths).
"""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest

import benchdata as bd
import oracle as o


def _cs():
    return pytest.importorskip("codecspec")


def _tv(counts: np.ndarray, law: np.ndarray) -> float:
    return 0.5 * float(np.abs(counts / counts.sum() - law).sum())


def _gof_pvalue(counts, law, min_expected: float = 5.0) -> float:
    """Chi-square goodness of fit of `counts` to `law`; cells expecting fewer than
    `min_expected` draws are pooled. A count outside the law's support gives 0."""
    from scipy.stats import chisquare

    counts = np.asarray(counts, np.float64)
    law = np.asarray(law, np.float64)
    law = law / law.sum()
    if (counts[law <= 0] > 0).any():
        return 0.0
    exp = counts.sum() * law
    big, small = exp >= min_expected, (exp < min_expected) & (law > 0)
    obs, want = list(counts[big]), list(exp[big])
    if small.any():
        obs.append(counts[small].sum())
        want.append(exp[small].sum())
    return 1.0 if len(obs) < 2 else float(chisquare(obs, want).pvalue)


def _emitted_at(results, num_nodes: int, vocab: int) -> np.ndarray:
    """[nodes, V] counts of the tokens drawn at each node: emitted token j of a round was
    drawn at the root (j = 0) or at accepted node j - 1 (a chain's node j is position j)."""
    counts = np.zeros((num_nodes, vocab))
    for r in results:
        src = [0, *np.asarray(r.nodes).tolist()]
        for j, t in enumerate(np.asarray(r.tokens).tolist()):
            counts[src[j], t] += 1
    return counts


def _node_law_pvalues(counts, laws, min_visits: int = 30) -> dict:
    """{node: goodness-of-fit p-value} for every node reached at least `min_visits` times."""
    return {
        i: _gof_pvalue(counts[i], laws[i])
        for i in range(len(counts))
        if counts[i].sum() >= min_visits
    }


def _assert_every_position_lawful(pv: dict, num_nodes: int, alpha: float = 1e-4) -> None:
    assert len(pv) >= min(num_nodes, 3), f"too few nodes reached: {pv}"
    assert min(pv.values()) > alpha / len(pv), pv  # Bonferroni over the nodes


def _accepts_past_the_first(verify):
    """Broken on purpose: the real verifier decides the first token; after an accepted first
    draft every later draft (first child / next chain token) is accepted without a test, and
    the bonus comes from the last one's row. The first token's law is intact."""

    def broken(tree, tok, logits, params, rng, *args):
        r = verify(tree, tok, logits, params, rng, *args)
        if r.num_accepted == 0:
            return r
        node, tokens, nodes = int(r.nodes[0]), [int(r.tokens[0])], [int(r.nodes[0])]
        while tree.children_of[node]:
            node = tree.children_of[node][0]
            nodes.append(node)
            tokens.append(int(tok[node]))
        tokens.append(o._draw(o.warp_row(logits[node], *o._params(params)), rng))
        return o._result(tokens, nodes)

    return broken


def _chain_accepts_past_the_first(logits, drafts, params, rng, q=None):
    """The chain form of `_accepts_past_the_first`."""
    r = o.verify_chain(logits, drafts, params, rng, q)
    if r.num_accepted == 0:
        return r
    k = len(drafts)
    bonus = o._draw(o.warp_row(logits[k], *o._params(params)), rng)
    return o._result([*map(int, drafts), bonus], list(range(1, k + 1)))


def _tie_logits(rng, rows, vocab):
    """Logits with many exact ties and a few -inf entries."""
    x = np.round(rng.standard_normal((rows, vocab)) * 2.0).astype(np.float32)
    x[rng.random((rows, vocab)) < 0.05] = -np.inf
    x[:, 0] = np.maximum(x[:, 0], 0.0)  # keep every row finite somewhere
    return x


WARP_CASES = list(itertools.product([0.0, 0.7, 1.0, 1.3], [0, 1, 5, 50], [1.0, 0.9, 0.5]))


def _random_paths(rng, n_nodes, max_rank=4, max_depth=4):
    paths = set()
    while len(paths) < n_nodes:
        parent = () if not paths or rng.random() < 0.3 else sorted(paths)[rng.integers(len(paths))]
        if len(parent) < max_depth:
            paths.add(parent + (int(rng.integers(max_rank)),))
    out = list(paths)
    rng.shuffle(out)
    return out


def _draft_tokens(tree, q, n, kind, rng):
    """[n, T] node tokens for n independent rounds; node i's children are drawn from q[i]
    (top-k: the most likely tokens; iid: with replacement; swor: without, Gumbel top-k)."""
    q = np.asarray(q, dtype=np.float64)
    q = q / q.sum(axis=1, keepdims=True)
    out = np.zeros((n, tree.num_nodes), dtype=np.int32)
    for node, kids in enumerate(tree.children_of):
        m = len(kids)
        if not m:
            continue
        if kind == "topk":
            out[:, kids] = np.argsort(-q[node], kind="stable")[:m]
        elif kind == "iid":
            u = rng.random((n, m))
            out[:, kids] = np.minimum(np.searchsorted(np.cumsum(q[node]), u), q.shape[1] - 1)
        else:
            keys = np.log(q[node]) + rng.gumbel(size=(n, q.shape[1]))
            out[:, kids] = np.argsort(-keys, axis=1)[:, :m]
    return out


def _chain_drafts(q, n, rng):
    """[n, K] draft tokens, token j of each round drawn from q[j]."""
    q = np.asarray(q, dtype=np.float64)
    c = np.cumsum(q / q.sum(axis=1, keepdims=True), axis=1)
    u = rng.random((n, q.shape[0]))
    d = np.stack([np.searchsorted(c[j], u[:, j]) for j in range(q.shape[0])], axis=1)
    return np.minimum(d, q.shape[1] - 1).astype(np.int32)


def _decaying_accept(rng, depth, ranks):
    a = np.sort(rng.uniform(0.01, 0.95, size=(depth, ranks)), axis=1)[:, ::-1]
    return np.ascontiguousarray(a)


# ============================================================================================
# Oracle on its own
# ============================================================================================


class TestOracleSelf:
    def test_topk_tie_break_lowest_index(self):
        x = np.array([[1.0, 3.0, 3.0, 3.0, 0.0]], dtype=np.float32)
        p = o.warp(x, o.Params(1.0, 2, 1.0))[0]
        assert (p > 0).tolist() == [False, True, True, False, False]
        g = o.warp(x, o.Params(0.0, 0, 1.0))[0]
        assert g.tolist() == [0, 1, 0, 0, 0]

    def test_topp_keeps_boundary_ties(self):
        # probs 0.4, 0.2, 0.2, 0.2: top_p 0.5 reaches the boundary at a 0.2 -> all 0.2s kept
        x = np.log(np.array([[0.4, 0.2, 0.2, 0.2]], dtype=np.float64)).astype(np.float32)
        p = o.warp(x, o.Params(1.0, 0, 0.5))[0]
        assert (p > 0).all()
        p = o.warp(x, o.Params(1.0, 0, 0.4))[0]
        assert (p > 0).tolist() == [True, False, False, False]

    @pytest.mark.parametrize("t,k,tp", WARP_CASES)
    def test_warp_row_matches_vectorised(self, t, k, tp):
        x = _tie_logits(np.random.default_rng(0), 6, 64)
        full = o.warp(x, o.Params(t, k, tp))
        for i in range(x.shape[0]):
            np.testing.assert_allclose(o.warp_row(x[i], t, k, tp), full[i], atol=1e-7)

    def test_tree_order_and_masks(self):
        t = o.Tree.from_paths([(1, 0), (0,), (1,), (0, 0), (0, 2)])
        assert t.paths == [(0,), (1,), (0, 0), (0, 2), (1, 0)]
        assert t.parents.tolist() == [-1, 0, 0, 1, 1, 2]
        m = t.ancestor_mask()
        assert m[5].tolist() == [True, False, True, False, False, True]
        assert t.leaf_paths().tolist() == [[0, 1, 3], [0, 1, 4], [0, 2, 5]]
        with pytest.raises(ValueError):
            o.Tree.from_paths([(0, 0)])

    def test_greedy_is_best_first(self):
        a = np.array([[0.8, 0.3], [0.5, 0.1]])
        # values: (0,)=.8 (0,0)=.4 (1,)=.3 (1,0)=.15 (0,1)=.08
        t = o.Tree.greedy(a, 3)
        assert t.paths == [(0,), (1,), (0, 0)]
        assert t.expected_tokens(a) == pytest.approx(1.0 + 0.8 + 0.3 + 0.4)

    @staticmethod
    def _tree_case(seed=5, vocab=5):
        rng = np.random.default_rng(seed)
        tree = o.Tree.from_paths([(0,), (1,), (0, 0), (0, 1), (1, 0)])
        logits = (rng.standard_normal((tree.num_nodes, vocab)) * 1.5).astype(np.float32)
        q = rng.dirichlet(np.ones(vocab), size=tree.num_nodes)
        return rng, tree, logits, q

    @pytest.mark.parametrize("kind", ["topk", "iid", "swor"])
    def test_verify_tree_lossless_at_every_position(self, kind):
        rng, tree, logits, q = self._tree_case()
        params = o.Params(0.9, 4, 1.0)
        laws = o.warp(logits, params).astype(np.float64)
        dp = None if kind == "topk" else q
        rounds = {"ok": o.verify_tree, "broken": _accepts_past_the_first(o.verify_tree)}
        pv = {}
        for name, verify in rounds.items():
            res = [
                verify(tree, tok, logits, params, rng, dp, kind)
                for tok in _draft_tokens(tree, q, 4000, kind, rng)
            ]
            pv[name] = _node_law_pvalues(_emitted_at(res, tree.num_nodes, logits.shape[1]), laws)
        _assert_every_position_lawful(pv["ok"], tree.num_nodes)
        # the broken verifier keeps the first token's law and is caught past it
        assert pv["broken"][0] > 1e-4 and min(pv["broken"].values()) < 1e-6, pv["broken"]

    def test_verify_chain_and_coarse_lossless_at_every_position(self):
        rng = np.random.default_rng(6)
        vocab = 6
        emb = rng.standard_normal((vocab, 3)).astype(np.float32)
        grp = o.Groups.from_embeddings(emb, 0.3)
        assert any(len(grp.members(k)) > 1 for k in range(vocab))
        logits = rng.standard_normal((3, vocab)).astype(np.float32)
        q = rng.dirichlet(np.ones(vocab), size=2)
        params = o.Params(1.0, 0, 1.0)
        laws = o.warp(logits, params).astype(np.float64)
        res = {"q": [], "point_mass": [], "coarse": [], "broken": []}
        for d in _chain_drafts(q, 4000, rng):
            res["q"].append(o.verify_chain(logits, d, params, rng, q))
            res["point_mass"].append(o.verify_chain(logits, d, params, rng))
            res["coarse"].append(o.verify_chain_coarse(grp, logits, d, q, params, rng))
            res["broken"].append(_chain_accepts_past_the_first(logits, d, params, rng, q))
        for name in ("q", "point_mass", "broken"):
            pv = _node_law_pvalues(_emitted_at(res[name], 3, vocab), laws)
            if name == "broken":
                assert pv[0] > 1e-4 and min(pv.values()) < 1e-6, pv
            else:
                _assert_every_position_lawful(pv, 3)
        groups = [
            SimpleNamespace(nodes=r.nodes, tokens=r.groups) for r in res["coarse"]
        ]  # the emitted groups, position by position
        pv = _node_law_pvalues(_emitted_at(groups, 3, grp.num_groups), grp.coarse(laws))
        _assert_every_position_lawful(pv, 3)


# ============================================================================================
# Oracle vs codecspec (exact comparisons)
# ============================================================================================


class TestAgainstCodecspec:
    @pytest.mark.parametrize("t,k,tp", WARP_CASES)
    def test_warp(self, t, k, tp):
        cs = _cs()
        rng = np.random.default_rng(10)
        for x in (_tie_logits(rng, 8, 257), (rng.standard_normal((3, 4, 2048)) * 3)):
            x = x.astype(np.float32)
            got = np.asarray(cs.warp(x, cs.SamplingParams(temperature=t, top_k=k, top_p=tp)))
            assert got.dtype == np.float32 and got.shape == x.shape
            np.testing.assert_allclose(got, o.warp(x, o.Params(t, k, tp)), rtol=0, atol=1e-6)

    def test_greedy_sample_is_argmax(self):
        cs = _cs()
        x = _tie_logits(np.random.default_rng(11), 32, 100)
        got = cs.sample(x, cs.SamplingParams(temperature=0.0), cs.Generator(seed=1))
        np.testing.assert_array_equal(got, o.sample(x, o.Params(0.0), np.random.default_rng(0)))

    def test_sample_law(self):
        cs = _cs()
        x = np.tile(np.array([0.0, 1.0, 2.0, -np.inf, 1.0], np.float32), (20000, 1))
        params = cs.SamplingParams(temperature=1.2, top_k=3, top_p=1.0)
        toks = np.asarray(cs.sample(x, params, cs.Generator(seed=2)))
        counts = np.bincount(toks, minlength=5)
        assert _gof_pvalue(counts, o.warp(x[0], o.Params(1.2, 3, 1.0))) > 1e-4
        # the same check rejects the law of a sampler that ignores the temperature or top-k
        for wrong in (o.Params(1.0, 3, 1.0), o.Params(1.2, 0, 1.0)):
            assert _gof_pvalue(counts, o.warp(x[0], wrong)) < 1e-6, wrong

    @pytest.mark.parametrize("seed", range(6))
    def test_tree_from_paths(self, seed):
        cs = _cs()
        paths = _random_paths(np.random.default_rng(seed), 5 + 4 * seed)
        ref = o.Tree.from_paths(paths)
        t = cs.DraftTree.from_paths(paths)
        self._same_tree(t, ref)
        accept = np.random.default_rng(seed).uniform(0, 1, (ref.max_depth, 4))
        assert t.expected_tokens(accept) == pytest.approx(ref.expected_tokens(accept), abs=1e-12)
        t2 = cs.DraftTree.from_json(t.to_json())
        assert [tuple(p) for p in t2.paths] == ref.paths
        assert json.loads(t.to_json())["paths"] == [list(p) for p in ref.paths]

    @pytest.mark.parametrize(
        "depth,ranks,budget,max_depth,max_rank",
        [
            (3, 8, 16, 3, None),
            (6, 8, 64, 6, None),
            (4, 5, 30, 3, None),
            (5, 6, 40, 5, 3),
            (4, 6, 25, 4, [5, 3, 2, 1]),
        ],
    )
    def test_greedy_tree(self, depth, ranks, budget, max_depth, max_rank):
        cs = _cs()
        for seed in range(4):
            rng = np.random.default_rng(seed)
            accepts = [
                bd.accept_matrix(depth, ranks),
                _decaying_accept(rng, depth, ranks),
                rng.uniform(0.0, 1.0, (depth, ranks)),
            ]  # last: not rank-monotone
            for a in accepts:
                ref = o.Tree.greedy(a, budget, max_depth=max_depth, max_rank=max_rank)
                t = cs.DraftTree.greedy(a, budget=budget, max_depth=max_depth, max_rank=max_rank)
                self._same_tree(t, ref)

    def test_greedy_tree_with_ties(self):
        cs = _cs()
        a = np.array([[0.5, 0.5, 0.25, 0.25], [0.5, 0.5, 0.25, 0.25], [0.5, 0.5, 0.5, 0.5]])
        for budget in (3, 6, 10, 17):
            ref = o.Tree.greedy(a, budget)
            t = cs.DraftTree.greedy(a, budget=budget)
            pset = {tuple(p) for p in t.paths}
            assert all(p[:-1] in pset for p in pset if len(p) > 1), "not ancestor-closed"
            assert t.expected_tokens(a) == pytest.approx(ref.expected_tokens(a), abs=1e-12)

    @staticmethod
    def _same_tree(t, ref):
        assert t.num_nodes == ref.num_nodes == len(t)
        assert [tuple(p) for p in t.paths] == ref.paths
        np.testing.assert_array_equal(t.parents, ref.parents)
        np.testing.assert_array_equal(t.depths, ref.depths)
        np.testing.assert_array_equal(t.ranks, ref.ranks)
        assert t.max_depth == ref.max_depth
        for i in range(ref.num_nodes):
            assert list(t.children(i)) == ref.children(i)
        m = np.asarray(t.ancestor_mask())
        assert m.dtype == np.bool_
        np.testing.assert_array_equal(m, ref.ancestor_mask())
        for past in (0, 7):
            b = np.asarray(t.attention_bias(past))
            assert b.dtype == np.float32
            np.testing.assert_array_equal(b, ref.attention_bias(past))
            p = np.asarray(t.position_ids(past))
            assert p.dtype == np.int64
            np.testing.assert_array_equal(p, ref.position_ids(past))
        lp = np.asarray(t.leaf_paths())
        assert lp.dtype == np.int32
        np.testing.assert_array_equal(lp, ref.leaf_paths())

    # -- verification ----------------------------------------------------------------------
    @pytest.mark.parametrize("case", ["greedy", "point_mass"])
    @pytest.mark.parametrize("kind", ["topk", "iid", "swor"])
    def test_verify_tree_deterministic(self, case, kind):
        """T=0 (greedy), or top_k=1 (p is a point mass: every accept/reject is certain)."""
        cs = _cs()
        accept = bd.accept_matrix(3)
        ref = o.Tree.greedy(accept, 16, max_depth=3)
        tree = cs.DraftTree.greedy(accept, budget=16, max_depth=3)
        t, k = (0.0, 0) if case == "greedy" else (0.9, 1)
        params, oparams = cs.SamplingParams(temperature=t, top_k=k), o.Params(t, k)
        gen, rng = cs.Generator(seed=3), np.random.default_rng(3)
        accepted = []
        for trial in range(40):
            tok, logits = bd.tree_inputs(ref, 257, np.random.default_rng(trial), boost=1.5)
            dp = None
            if kind != "topk":
                dp = np.random.default_rng(100 + trial).dirichlet(np.ones(257), size=ref.num_nodes)
                dp = dp.astype(np.float32)
            r = cs.verify_tree(tree, tok, logits, params, gen, draft_probs=dp, draft_kind=kind)
            e = o.verify_tree(ref, tok, logits, oparams, rng, dp, kind)
            np.testing.assert_array_equal(r.tokens, e.tokens, err_msg=f"trial {trial}")
            np.testing.assert_array_equal(r.nodes, e.nodes, err_msg=f"trial {trial}")
            assert r.num_accepted == e.num_accepted
            accepted.append(e.num_accepted)
        assert 0 < np.mean(accepted) < 3  # both paths exercised

    @pytest.mark.parametrize("case", ["greedy", "point_mass"])
    @pytest.mark.parametrize("with_q", [False, True])
    def test_verify_chain_deterministic(self, case, with_q):
        cs = _cs()
        t, k = (0.0, 0) if case == "greedy" else (0.9, 1)
        params, oparams = cs.SamplingParams(temperature=t, top_k=k), o.Params(t, k)
        gen, rng = cs.Generator(seed=4), np.random.default_rng(4)
        for trial in range(30):
            r0 = np.random.default_rng(trial)
            logits = (r0.standard_normal((5, 100)) * 2).astype(np.float32)
            drafts = np.argmax(logits[:4] + r0.standard_normal((4, 100)), axis=1).astype(np.int32)
            q = r0.dirichlet(np.ones(100), size=4).astype(np.float32) if with_q else None
            r = cs.verify_chain(logits, drafts, params, gen, draft_probs=q)
            e = o.verify_chain(logits, drafts, oparams, rng, q)
            np.testing.assert_array_equal(r.tokens, e.tokens, err_msg=f"trial {trial}")
            np.testing.assert_array_equal(r.nodes, e.nodes, err_msg=f"trial {trial}")
            assert r.num_accepted == e.num_accepted

    @pytest.mark.parametrize("kind", ["topk", "iid", "swor"])
    def test_verify_tree_law_at_every_position(self, kind):
        cs = _cs()
        rng = np.random.default_rng(7)
        vocab = 5
        paths = [(0,), (1,), (0, 0), (0, 1), (1, 0)]
        ref, tree = o.Tree.from_paths(paths), cs.DraftTree.from_paths(paths)
        logits = (rng.standard_normal((ref.num_nodes, vocab)) * 1.5).astype(np.float32)
        q = rng.dirichlet(np.ones(vocab), size=ref.num_nodes).astype(np.float32)
        params = cs.SamplingParams(temperature=0.9, top_k=4)
        gen = cs.Generator(seed=7)
        dp = None if kind == "topk" else q
        res = [
            cs.verify_tree(tree, tok, logits, params, gen, draft_probs=dp, draft_kind=kind)
            for tok in _draft_tokens(ref, q, 4000, kind, rng)
        ]
        laws = o.warp(logits, o.Params(0.9, 4)).astype(np.float64)
        pv = _node_law_pvalues(_emitted_at(res, ref.num_nodes, vocab), laws)
        _assert_every_position_lawful(pv, ref.num_nodes)

    def test_verify_tree_batch(self):
        cs = _cs()
        rng = np.random.default_rng(8)
        budgets = [4, 16, 9, 1, 12]
        trees = [cs.DraftTree.greedy(bd.accept_matrix(3), budget=n, max_depth=3) for n in budgets]
        refs = [o.Tree(t.paths) for t in trees]
        parts = [bd.tree_inputs(r, 300, rng, boost=1.5) for r in refs]
        tok = np.concatenate([p[0] for p in parts])
        logits = np.concatenate([p[1] for p in parts])
        # greedy: identical to the oracle
        g0 = cs.SamplingParams(temperature=0.0)
        gens = [cs.Generator(seed=9).fork(i) for i in range(len(trees))]
        got = cs.verify_tree_batch(trees, tok, logits, g0, gens)
        exp = o.verify_tree_batch(refs, tok, logits, o.Params(0.0), [None] * len(trees))
        for r, e in zip(got, exp):
            np.testing.assert_array_equal(r.tokens, e.tokens)
            np.testing.assert_array_equal(r.nodes, e.nodes)
        # sampled: stream b equals a lone verify_tree with the same generator state
        params = cs.SamplingParams(temperature=0.9, top_k=50)
        gens = [cs.Generator(seed=9).fork(i) for i in range(len(trees))]
        copies = [g.copy() for g in gens]
        got = cs.verify_tree_batch(trees, tok, logits, params, gens)
        start = 0
        for b, t in enumerate(trees):
            end = start + t.num_nodes
            r = cs.verify_tree(t, tok[start:end], logits[start:end], params, copies[b])
            np.testing.assert_array_equal(got[b].tokens, r.tokens)
            np.testing.assert_array_equal(got[b].nodes, r.nodes)
            start = end

    # -- groups ----------------------------------------------------------------------------
    @staticmethod
    def _embeddings_and_threshold(vocab=200, dim=32, seed=12, lo=0.55, hi=0.65):
        """Clustered embeddings and a threshold in the widest gap of their cosines in [lo, hi],
        so float32 rounding cannot flip a membership."""
        emb = bd.clustered_embeddings(vocab, dim, np.random.default_rng(seed))
        e = emb.astype(np.float64)
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        cos = np.unique(np.concatenate([[lo, hi], (e @ e.T).ravel()]))
        cos = cos[(cos >= lo) & (cos <= hi)]
        i = int(np.argmax(np.diff(cos)))
        assert cos[i + 1] - cos[i] > 2e-5, "no threshold far enough from every cosine"
        return emb, float(0.5 * (cos[i] + cos[i + 1]))

    def test_groups_from_embeddings(self):
        cs = _cs()
        emb, th = self._embeddings_and_threshold()
        vocab = emb.shape[0]
        ref = o.Groups.from_embeddings(emb, th)
        grp = cs.AcousticGroups.from_embeddings(emb, th)
        assert grp.num_groups == ref.num_groups == vocab
        sizes = np.diff(ref.indptr)
        assert sizes.max() > 2  # non-trivial groups
        for k in range(vocab):
            np.testing.assert_array_equal(np.sort(grp.members(k)), ref.members(k), f"group {k}")
            np.testing.assert_array_equal(np.sort(grp.groups_of(k)), ref.groups_of(k), f"tok {k}")
        self._same_coarse(grp, ref, vocab)

    def test_groups_singletons(self):
        cs = _cs()
        emb, th = self._embeddings_and_threshold()
        ref = o.Groups.from_embeddings(emb, th)
        # pick tokens that do share a group, and force them to be singletons
        multi = [k for k in range(ref.num_groups) if len(ref.members(k)) > 2][:5]
        ref = o.Groups.from_embeddings(emb, th, singletons=multi)
        grp = cs.AcousticGroups.from_embeddings(emb, th, singletons=multi)
        for k in range(ref.num_groups):
            np.testing.assert_array_equal(np.sort(grp.members(k)), ref.members(k), f"group {k}")

    def test_groups_from_members_and_coarse(self):
        cs = _cs()
        vocab = 50
        rng = np.random.default_rng(13)
        members = [
            sorted({k} | set(rng.integers(0, vocab, size=rng.integers(0, 4)).tolist()))
            for k in range(vocab)
        ]
        members += [[3, 4, 5, 6, 7]]  # an extra, 51st group
        ref = o.Groups.from_members(members, vocab)
        grp = cs.AcousticGroups.from_members(members, vocab)
        assert grp.num_groups == ref.num_groups
        for k in range(ref.num_groups):
            np.testing.assert_array_equal(np.sort(grp.members(k)), ref.members(k))
        self._same_coarse(grp, ref, vocab)

    @staticmethod
    def _same_coarse(grp, ref, vocab):
        probs = np.random.default_rng(14).dirichlet(np.ones(vocab) * 0.3, size=(2, 3))
        probs = probs.astype(np.float32)
        got = np.asarray(grp.coarse(probs))
        assert got.shape == (2, 3, ref.num_groups)
        np.testing.assert_allclose(got, ref.coarse(probs), rtol=0, atol=1e-6)
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-5)

    def test_verify_chain_coarse_law(self):
        """The law of the group emitted at every position == the target's coarse law there."""
        cs = _cs()
        emb, th = self._embeddings_and_threshold(vocab=12, dim=3, seed=15, lo=0.3, hi=0.7)
        ref = o.Groups.from_embeddings(emb, th)
        grp = cs.AcousticGroups.from_embeddings(emb, th)
        vocab = emb.shape[0]
        rng = np.random.default_rng(15)
        logits = rng.standard_normal((3, vocab)).astype(np.float32)
        q = rng.dirichlet(np.ones(vocab), size=2).astype(np.float32)
        params = cs.SamplingParams(temperature=1.0)
        gen = cs.Generator(seed=15)
        laws = ref.coarse(o.warp(logits, o.Params(1.0)).astype(np.float64))
        emitted = []
        for d in _chain_drafts(q, 4000, rng):
            r = cs.verify_chain_coarse(grp, logits, d, q, params, gen)
            assert r.groups.shape == r.tokens.shape
            for tk, gk in zip(r.tokens, r.groups):
                assert tk in ref.members(gk)
            emitted.append(SimpleNamespace(nodes=r.nodes, tokens=r.groups))
        pv = _node_law_pvalues(_emitted_at(emitted, 3, ref.num_groups), laws)
        _assert_every_position_lawful(pv, 3)

    def test_verify_chain_law_at_every_position(self):
        cs = _cs()
        rng = np.random.default_rng(17)
        vocab = 6
        logits = rng.standard_normal((4, vocab)).astype(np.float32)
        q = rng.dirichlet(np.ones(vocab), size=3).astype(np.float32)
        params = cs.SamplingParams(temperature=1.0)
        gen = cs.Generator(seed=17)
        laws = o.warp(logits, o.Params(1.0)).astype(np.float64)
        for dp in (q, None):
            res = [
                cs.verify_chain(logits, d, params, gen, draft_probs=dp)
                for d in _chain_drafts(q, 4000, rng)
            ]
            _assert_every_position_lawful(_node_law_pvalues(_emitted_at(res, 4, vocab), laws), 4)

    # -- kv commit -------------------------------------------------------------------------
    @pytest.mark.parametrize("dtype", [np.float32, np.float16])
    @pytest.mark.parametrize("with_rows", [False, True])
    def test_kv_commit(self, dtype, with_rows):
        cs = _cs()
        rng = np.random.default_rng(16)
        cache = bd.kv_cache(rng, capacity=40).astype(dtype)
        ref = cache.copy()
        nodes = np.array([0, 2, 3, 9], dtype=np.int32)
        rows = rng.standard_normal((5, 2, 8, 17, 128)).astype(dtype) if with_rows else None
        n1 = cs.kv_commit(cache, 20, nodes, rows) if with_rows else cs.kv_commit(cache, 20, nodes)
        n2 = o.kv_commit(ref, 20, nodes, rows)
        assert n1 == n2 == 24
        np.testing.assert_array_equal(cache, ref)
