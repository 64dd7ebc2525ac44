"""Statistical conformance of cs.verify_tree_coarse (docs/design.md section 2, "Coarse-grained
acceptance in a top-k tree"; contract in section 4).

The exact-law variable is the emitted group. In a top-k tree the node tokens are fixed given the
root, so the node a position is emitted at is a function of the emitted prefix, and the contract
("at every position the emitted group follows the target's coarse law given the emitted prefix")
reads: for every depth d, the pair (node reached at depth d, group emitted there) has law
reach(i) * P_c,i(k), plus one cell "stopped before depth d". reach() follows from the rule
itself: at node i a group G ~ P_c,i is drawn and the walk descends into the lowest-rank child
whose token belongs to G, else stops. Both the per-depth laws and the law of the stop node are
checked, with overlapping groups from AcousticGroups.from_embeddings (one for every row) and
per-depth groups (a list of T, as for RVQ levels). Each check is run on a numpy reference, which
must pass it, and on deliberately broken verifiers (numpy variants with a wrong acceptance or
residual rule; codecspec run at a perturbed target temperature), which must fail it.

With singleton groups the method is the exact top-k rule: the result must equal
verify_tree(..., draft_kind="topk") for identical Generator states, on many random trees.
"""

import numpy as np
import pytest
from stats import (
    N_DRAWS,
    NpTree,
    assert_law,
    bigram_tables,
    check_result_invariants,
    counts_of,
    draft_tree_tokens,
    group_weights,
    law_ok,
    make_logits,
    random_tree_paths,
    sample_rows,
)

import codecspec as cs

ROOT = 4

PATHS = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 1, 0), (1, 0, 0)]


def sp(params):
    t, k, p = params
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


def members_of(grp):
    return [grp.members(k).tolist() for k in range(grp.num_groups)]


def embedding_groups(seed, v, dim, threshold):
    e = np.random.default_rng(seed).standard_normal((v, dim)).astype(np.float32)
    return cs.AcousticGroups.from_embeddings(e, threshold)


# --------------------------------------------------------------------------------------------
# exact laws and a numpy reference (rows: P_rows[i] = warped target of node i, W_rows[i] = w of
# node i's groups [G_i, V]; the node tokens are the same in every trial)


def child_of_group(nt, tok_row, i, w):
    """For every group k of row i: the lowest-rank child whose token is in k, or -1."""
    out = np.full(w.shape[0], -1, dtype=np.int64)
    for c in reversed(nt.children[i]):  # rank order, so the lowest rank is written last
        out[w[:, tok_row[c]] > 0] = c
    return out


def exact_reach(nt, tok_row, P_rows, W_rows):
    """(reach [T], stop law [T]) of the coarse top-k walk."""
    reach = np.zeros(nt.T)
    reach[0] = 1.0
    stop = np.zeros(nt.T)
    for i in range(nt.T):
        pc = W_rows[i] @ P_rows[i]
        dest = child_of_group(nt, tok_row, i, W_rows[i])
        for c in nt.children[i]:
            reach[c] = reach[i] * pc[dest == c].sum()
        stop[i] = reach[i] * pc[dest < 0].sum()
    return reach, stop


def depth_laws(nt, tok_row, P_rows, W_rows):
    """For every depth d: law over cells (j-th node at depth d, group) + one "not reached"."""
    reach, _ = exact_reach(nt, tok_row, P_rows, W_rows)
    laws = []
    for d in range(nt.max_depth + 1):
        nodes = [i for i in range(nt.T) if nt.depths[i] == d]
        g = W_rows[nodes[0]].shape[0]
        law = np.zeros(len(nodes) * g + 1)
        for j, i in enumerate(nodes):
            law[j * g : (j + 1) * g] = reach[i] * (W_rows[i] @ P_rows[i])
        law[-1] = max(0.0, 1.0 - law[:-1].sum())
        laws.append(law / law.sum())
    return laws


def counts_per_depth(nt, node_at, grp_at, W_rows):
    counts = []
    for d in range(nt.max_depth + 1):
        nodes = [i for i in range(nt.T) if nt.depths[i] == d]
        g = W_rows[nodes[0]].shape[0]
        lut = np.full(nt.T, -1, dtype=np.int64)
        lut[nodes] = np.arange(len(nodes))
        have = node_at[:, d] >= 0
        cell = np.full(node_at.shape[0], len(nodes) * g, dtype=np.int64)
        cell[have] = lut[node_at[have, d]] * g + grp_at[have, d]
        counts.append(counts_of(cell, len(nodes) * g + 1))
    return counts


def np_verify_tree_coarse(rng, nt, tok_row, P_rows, W_rows, n, bug=None):
    """Vectorised reference of the coarse top-k walk: (node_at, grp_at [n, D+1], stop [n]).

    bug None | "no_residual" (a rejected child's groups are not removed from the residual)
    | "token_accept" (the exact token-level test u <= p_res(x), the group then drawn from
    w[., x]; the correction group from the coarse residual)."""
    D = nt.max_depth
    node_at = np.full((n, D + 1), -1, dtype=np.int64)
    grp_at = np.full((n, D + 1), -1, dtype=np.int64)
    stop = np.full(n, -1, dtype=np.int64)
    cur = np.zeros(n, dtype=np.int64)
    for i in range(nt.T):
        idx = np.flatnonzero((cur == i) & (stop < 0))
        if idx.size == 0:
            continue
        m, d, w, p = idx.size, nt.depths[i], W_rows[i], P_rows[i]
        node_at[idx, d] = i
        kids = nt.children[i]
        if not kids:  # leaf: bonus token y ~ p, its group ~ w[., y]
            y = sample_rows(rng, np.broadcast_to(p, (m, p.size)))
            grp_at[idx, d] = sample_rows(rng, w[:, y].T)
            stop[idx] = i
            continue
        res = np.tile(w @ p, (m, 1))
        pres = np.tile(p, (m, 1))
        done = np.zeros(m, dtype=bool)
        for c in kids:
            x = tok_row[c]
            inx = w[:, x] > 0
            u = 1.0 - rng.random(m)
            if bug == "token_accept":
                acc = (u <= pres[:, x]) & ~done
                k = sample_rows(rng, np.broadcast_to(w[:, x], (m, w.shape[0])))
            else:
                acc = (u <= res[:, inx].sum(axis=1)) & ~done
                k = sample_rows(rng, np.where(inx[None, :], res, 0.0))
            grp_at[idx[acc], d] = k[acc]
            cur[idx[acc]] = c
            done |= acc
            if bug == "token_accept":
                pres[:, x] = 0.0
                pres /= np.maximum(pres.sum(axis=1, keepdims=True), 1e-300)
            if bug != "no_residual":
                new = np.where(inx[None, :], 0.0, res)
                s = new.sum(axis=1, keepdims=True)
                res = np.where(s > 0, new / np.where(s > 0, s, 1.0), res)
        rej = ~done
        if rej.any():
            grp_at[idx[rej], d] = sample_rows(rng, res[rej])
            stop[idx[rej]] = i
    return node_at, grp_at, stop


def run_coarse_tree(groups_arg, tree, nt, tok_row, L_rows, params, g, n):
    """cs.verify_tree_coarse n times with one Generator: result arrays like stats' drivers plus
    node_at / grp_at [n, D+1] (the node each position was emitted at and its group)."""
    D = nt.max_depth
    out = np.full((n, D + 2), -1, dtype=np.int64)
    nodes = np.full((n, D + 1), -1, dtype=np.int64)
    node_at = np.full((n, D + 1), -1, dtype=np.int64)
    grp_at = np.full((n, D + 1), -1, dtype=np.int64)
    lens, nacc, nlens = (np.zeros(n, dtype=np.int64) for _ in range(3))
    t32 = np.ascontiguousarray(tok_row, dtype=np.int32)
    for i in range(n):
        r = cs.verify_tree_coarse(groups_arg, tree, t32, L_rows, params, g)
        y, nd, gr = np.asarray(r.tokens), np.asarray(r.nodes), np.asarray(r.groups)
        assert y.size == gr.size == nd.size + 1 == r.num_accepted + 1 <= D + 1
        out[i, : y.size] = y
        nodes[i, : nd.size] = nd
        lens[i], nacc[i], nlens[i] = y.size, nd.size, nd.size
        node_at[i, : y.size] = np.concatenate([[0], nd])
        grp_at[i, : y.size] = gr
    res = dict(tokens=out, lens=lens, nacc=nacc, nodes=nodes, nlens=nlens)
    return res, node_at, grp_at


def laws_ok(counts, laws, n):
    return all(law_ok(c, law, n) for c, law in zip(counts, laws))


def assert_laws(counts, laws, n, what):
    for d, (c, law) in enumerate(zip(counts, laws)):
        assert_law(c, law, n, what=f"{what}: (node, group) at depth {d}")


# --------------------------------------------------------------------------------------------
# configs: (id, V, (temperature, top_k, top_p), groups per depth (None = one for every row))

CONFIGS = [
    ("v13-T1.0-shared-emb", 13, (1.0, 0, 1.0), "shared"),
    ("v20-T0.8-k6-per-depth", 20, (0.8, 6, 1.0), "per_depth"),
]


def _groups_for(kind, v, depth):
    if kind == "shared":
        grp = embedding_groups(13, v, 3, 0.85)
        return grp, [grp] * depth
    rng = np.random.default_rng(77)
    per_depth = [embedding_groups(20, v, 3, 0.9), embedding_groups(21, v, 4, 0.8)]
    for _ in range(depth - 2):  # a from_members level: {k} plus a few random tokens
        mem = [sorted({k, *rng.choice(v, size=int(rng.integers(0, 4))).tolist()}) for k in range(v)]
        per_depth.append(cs.AcousticGroups.from_members(mem, v))
    return None, per_depth


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_coarse_tree_group_law(cfg):
    name, v, params, kind = cfg
    n = N_DRAWS
    rng = np.random.default_rng(500 + v)
    nt = NpTree(PATHS)
    tree = cs.DraftTree.from_paths(PATHS)
    np.testing.assert_array_equal(tree.parents, nt.parents)
    L, P, _, Q = bigram_tables(rng, nt.max_depth + 1, v, params)
    tok_row = draft_tree_tokens(rng, nt, Q, ROOT, 1, "topk")[0]  # top-k: fixed given the root
    shared, per_depth = _groups_for(kind, v, nt.max_depth + 1)
    row_groups = [per_depth[d] for d in nt.depths]
    groups_arg = shared if shared is not None else row_groups
    W_rows = [group_weights(members_of(g), v) for g in row_groups]
    assert any((w > 0).sum(axis=0).max() > 1 for w in W_rows), "groups must overlap"
    L_rows = np.ascontiguousarray(L[nt.depths, tok_row])
    P_rows = P[nt.depths, tok_row]

    g = cs.Generator(seed=v)
    res, node_at, grp_at = run_coarse_tree(groups_arg, tree, nt, tok_row, L_rows, sp(params), g, n)
    assert g.step == n
    tok = np.broadcast_to(tok_row, (n, nt.T))
    # exact structure: a path of node tokens, the correction is no rejected child's token, and
    # every emitted token belongs to its emitted group (in its row's groups)
    stop = check_result_invariants(nt, tok, res, v, distinct_rejections=True)
    for d in range(nt.max_depth + 1):
        m = node_at[:, d] >= 0
        for i in np.unique(node_at[m, d]):
            mi = m & (node_at[:, d] == i)
            y = res["tokens"][mi, d]
            assert (W_rows[i][grp_at[mi, d], y] > 0).all(), "token outside its emitted group"

    laws = depth_laws(nt, tok_row, P_rows, W_rows)
    _, stop_law = exact_reach(nt, tok_row, P_rows, W_rows)
    np.testing.assert_allclose(stop_law.sum(), 1.0, atol=1e-12)
    assert laws[1][-1] < 0.6 and laws[2][-1] < 0.9, "the tree must accept often"
    counts = counts_per_depth(nt, node_at, grp_at, W_rows)
    assert_laws(counts, laws, n, name)
    assert_law(counts_of(stop, nt.T), stop_law, n, what=f"{name}: stop node")

    # the expected laws are right: the numpy reference satisfies them
    na, ga, st = np_verify_tree_coarse(rng, nt, tok_row, P_rows, W_rows, n)
    assert laws_ok(counts_per_depth(nt, na, ga, W_rows), laws, n)
    assert law_ok(counts_of(st, nt.T), stop_law, n)
    # power: broken acceptance / residual rules fail the same per-depth checks
    for bug in ("no_residual", "token_accept"):
        na, ga, _ = np_verify_tree_coarse(rng, nt, tok_row, P_rows, W_rows, n, bug)
        assert not laws_ok(counts_per_depth(nt, na, ga, W_rows), laws, n), bug
    # power, through codecspec: the target warped at another temperature (a perturbed law)
    t, k, p = params
    _, na, ga = run_coarse_tree(
        groups_arg, tree, nt, tok_row, L_rows, sp((1.6 * t, k, p)), cs.Generator(seed=1), n
    )
    assert not laws_ok(counts_per_depth(nt, na, ga, W_rows), laws, n), "perturbed temperature"


# --------------------------------------------------------------------------------------------
# singleton groups == verify_tree(..., "topk"), exactly


def _random_case(rng, v):
    paths = random_tree_paths(rng, int(rng.integers(1, 14)))
    nt = NpTree(paths)
    tok = np.zeros(nt.T, dtype=np.int32)
    tok[0] = rng.integers(v)
    for i in range(nt.T):
        kids = nt.children[i]
        if kids:
            tok[kids] = rng.choice(v, size=len(kids), replace=False)
    L = make_logits(rng, (nt.T, v), ninf_frac=0.15 * rng.integers(0, 2))
    for i in range(nt.T):  # favour the rank-0 child so that deep paths get accepted
        if nt.children[i]:
            L[i, tok[nt.children[i][0]]] = 2.5
    return cs.DraftTree.from_paths(paths), nt, tok, L


def test_coarse_tree_singletons_equal_verify_tree_topk():
    rng = np.random.default_rng(600)
    all_params = [(1.0, 0, 1.0), (0.9, 5, 1.0), (1.3, 0, 0.8), (0.7, 4, 0.9), (0.0, 0, 1.0)]
    singles = {v: cs.AcousticGroups.from_members([[t] for t in range(v)], v) for v in (3, 11, 64)}
    deep = 0
    for case in range(1500):
        v = (3, 11, 64)[case % 3]
        tree, nt, tok, L = _random_case(rng, v)
        params = sp(all_params[case % len(all_params)])
        grp = singles[v] if case % 2 else [singles[v]] * nt.T
        g1 = cs.Generator(seed=case, stream=case % 5)
        g1.random(case % 3)  # some steps in
        g2 = g1.copy()
        r1 = cs.verify_tree_coarse(grp, tree, tok, L, params, g1)
        r2 = cs.verify_tree(tree, tok, L, params, g2, draft_kind="topk")
        np.testing.assert_array_equal(r1.tokens, r2.tokens, err_msg=f"case {case}")
        np.testing.assert_array_equal(r1.nodes, r2.nodes, err_msg=f"case {case}")
        assert r1.num_accepted == r2.num_accepted
        np.testing.assert_array_equal(r1.groups, r1.tokens)
        assert r2.groups is None
        assert g1.step == g2.step
        deep += r2.num_accepted >= 2
    assert deep > 150, deep  # the comparison exercised deep acceptances, not only the root


def test_coarse_tree_greedy_follows_shared_groups():
    grp = cs.AcousticGroups.from_members([[0, 1], [1, 2], [3], [2, 3]], 4)
    tree = cs.DraftTree.from_paths([(0,), (1,), (0, 0)])  # nodes: root, (0), (1), (0, 0)
    L = np.zeros((4, 4), dtype=np.float32)
    L[0, 2] = 5.0  # root argmax 2: child (0) holds 0 (no shared group), child (1) holds 1
    L[2, 3] = 5.0  # node 2 argmax 3; node 2 is a leaf
    g = cs.Generator(seed=0)
    r = cs.verify_tree_coarse(grp, tree, [0, 0, 1, 3], L, sp((0.0, 0, 1.0)), g)
    assert r.tokens.tolist() == [1, 3] and r.nodes.tolist() == [2]
    assert r.groups.tolist() == [1, 2]  # 1 stands for 2 via group 1; the bonus 3's lowest group
    assert g.step == 0


# --------------------------------------------------------------------------------------------
# bad inputs


def test_coarse_tree_bad_inputs_name_the_argument():
    v = 5
    grp = cs.AcousticGroups.from_members([[0, 1], [1, 2], [2, 3], [3, 4]], v)
    other = cs.AcousticGroups.from_members([[t] for t in range(v + 1)], v + 1)
    tree = cs.DraftTree.from_paths([(0,), (1,), (0, 0)])
    T = tree.num_nodes
    tok = np.array([0, 1, 2, 3], dtype=np.int32)
    L = np.zeros((T, v), dtype=np.float32)
    p = sp((1.0, 0, 1.0))
    g = cs.Generator(seed=3)

    def bad(arg, groups=grp, tok=tok, L=L):
        with pytest.raises(ValueError, match=rf"^{arg}\b"):
            cs.verify_tree_coarse(groups, tree, tok, L, p, g)

    bad("groups", groups=other)
    bad("groups", groups=[grp] * (T - 1))
    bad("groups", groups=[grp] * (T + 1))
    bad("groups", groups=[])
    bad("groups", groups=[grp, grp, other, grp])
    bad("groups", groups=[grp, grp, 3, grp])
    bad("groups", groups=None)
    bad("groups", groups=7)
    bad("groups", groups="groups")
    bad("groups", groups={"a": grp})
    bad("groups", L=L[:, :4])  # the groups' vocabulary differs from the logits' V
    bad("target_logits", L=np.full((T, v), np.nan, dtype=np.float32))
    bad("target_logits", L=np.full((T, v), np.inf, dtype=np.float32))
    bad("target_logits", L=np.full((T, v), -np.inf, dtype=np.float32))
    bad("target_logits", L=L[:-1])
    bad("target_logits", L=L[0])
    bad("target_logits", L="x")
    bad("node_tokens", tok=tok[:-1])
    bad("node_tokens", tok=np.array([0, 1, 2, 5], dtype=np.int32))
    bad("node_tokens", tok=np.array([0, 1, -1, 3], dtype=np.int32))
    bad("node_tokens", tok=np.array([0, 1, 1, 3], dtype=np.int32))  # duplicate siblings
    bad("node_tokens", tok=np.array([0.0, 1.5, 2.0, 3.0]))
    bad("node_tokens", tok=tok[None, :])
    assert g.step == 0, "failed calls draw nothing"
    # a list of T (list or tuple) and one shared object are both fine
    cs.verify_tree_coarse(tuple([grp] * T), tree, tok, L, p, g)
    cs.verify_tree_coarse(grp, tree, tok, L, p, g)
    assert g.step == 2
