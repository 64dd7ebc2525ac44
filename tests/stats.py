"""Statistical conformance helpers, written against the contract (docs/design.md sections 2 and 4).

Everything here is plain numpy float64 and independent of codecspec:

* ``law_violations`` / ``law_ok`` / ``assert_law``: per-cell check of empirical counts against an
  exact law, |count - n*pi| <= 6*sqrt(n*pi*(1-pi)) + 5, and cells with pi == 0 exactly zero.
* ``np_warp``: reference warp (temperature, top-k, top-p; temperature 0 = point mass).
* ``NpTree``: node order / parents / children from rank paths (DESIGN node order).
* drafting helpers (top-k / i.i.d. / without replacement), vectorised over trials.
* ``np_verify_tree``: a vectorised numpy reference verifier with optional deliberate bugs, used
  to show that each statistical check has power (a broken verifier must fail it).
* exact laws: first-token, (first token, second token | STOP), stop node / num_accepted.
"""

from __future__ import annotations

import itertools

import numpy as np

N_DRAWS = 65_536
SIGMAS = 6.0
SLACK = 5.0


# --------------------------------------------------------------------------------------------
# law checker


def law_violations(counts, probs, n, sigmas: float = SIGMAS, slack: float = SLACK):
    """Cells whose count is outside the bound; [] when the counts are consistent with ``probs``.

    Returns a list of ``(cell, count, expected, bound)``; ``cell`` is a tuple index into
    ``probs``'s shape (``("total",)`` when the counts do not add up to ``n``).
    """
    probs = np.asarray(probs, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if counts.size == probs.size:
        counts = counts.reshape(probs.shape)
    if counts.shape != probs.shape:
        raise AssertionError(f"test bug: counts shape {counts.shape} != probs {probs.shape}")
    total = probs.sum()
    if not np.isfinite(total) or abs(total - 1.0) > 1e-9 or (probs < 0).any():
        raise AssertionError(f"test bug: expected law is not a distribution (sum={total!r})")
    out = []
    if counts.sum() != n:
        out.append((("total",), float(counts.sum()), float(n), 0.0))
    expected = n * probs
    bound = sigmas * np.sqrt(n * probs * (1.0 - probs)) + slack
    bound = np.where(probs == 0.0, 0.0, bound)
    bad = np.abs(counts - expected) > bound
    for flat in np.flatnonzero(bad):
        cell = np.unravel_index(flat, probs.shape)
        cell = tuple(int(c) for c in cell)
        out.append(
            (cell, float(counts.flat[flat]), float(expected.flat[flat]), float(bound.flat[flat]))
        )
    return out


def law_ok(counts, probs, n, **kw) -> bool:
    return not law_violations(counts, probs, n, **kw)


def assert_law(counts, probs, n, what: str = "law", **kw):
    viol = law_violations(counts, probs, n, **kw)
    if viol:
        viol.sort(key=lambda v: -abs(v[1] - v[2]) / max(v[3], 1e-12))
        lines = [f"{what}: {len(viol)} cell(s) outside 6-sigma bound (n={n}); worst first:"]
        for cell, c, e, b in viol[:12]:
            lines.append(f"  cell {cell}: count {c:.0f}, expected {e:.2f}, bound +-{b:.2f}")
        p = np.asarray(probs, dtype=np.float64)
        emp = np.asarray(counts, dtype=np.float64) / n
        lines.append(f"  total variation distance {0.5 * np.abs(emp - p).sum():.5f}")
        raise AssertionError("\n".join(lines))


def counts_of(outcomes, num_cells: int) -> np.ndarray:
    outcomes = np.asarray(outcomes).ravel()
    assert outcomes.min() >= 0 and outcomes.max() < num_cells, "outcome index out of range"
    return np.bincount(outcomes, minlength=num_cells).astype(np.float64)


# --------------------------------------------------------------------------------------------
# reference warp


def _warp_row(row: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    v = row.size
    out = np.zeros(v, dtype=np.float64)
    if temperature == 0:
        out[int(np.argmax(row))] = 1.0  # np.argmax returns the lowest index among ties
        return out
    z = row / temperature
    m = z.max()
    e = np.exp(z - m)
    probs = e / e.sum()
    idx = np.arange(v)
    if 0 < top_k < v:
        order = np.lexsort((idx, -z))  # descending value, ties -> lowest index first
        keep = np.zeros(v, dtype=bool)
        keep[order[:top_k]] = True
        probs = np.where(keep, probs, 0.0)
        probs = probs / probs.sum()
    if top_p < 1.0:
        order = np.lexsort((idx, -probs))
        sp = probs[order]
        cum = np.cumsum(sp)
        j = int(np.searchsorted(cum, top_p, side="left"))  # first j with cum[j] >= top_p
        j = min(j, v - 1)
        boundary = sp[j]
        keep = np.zeros(v, dtype=bool)
        keep[order[: j + 1]] = True
        keep |= probs == boundary
        keep &= probs > 0
        probs = np.where(keep, probs, 0.0)
        probs = probs / probs.sum()
    return probs


def np_warp(logits, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """Exact float64 warp of ``logits[..., V]`` (order: temperature, top-k, top-p)."""
    x = np.asarray(logits, dtype=np.float64)
    v = x.shape[-1]
    flat = x.reshape(-1, v)
    out = np.empty_like(flat)
    for i in range(flat.shape[0]):
        out[i] = _warp_row(flat[i], temperature, top_k, top_p)
    return out.reshape(x.shape)


def top_p_margin(logits, temperature: float, top_k: int, top_p: float) -> float:
    """Smallest |cumulative mass - top_p| over rows (float rounding safety for boundary tests)."""
    if top_p >= 1.0 or temperature == 0:
        return np.inf
    x = np.asarray(logits, dtype=np.float64)
    flat = x.reshape(-1, x.shape[-1])
    best = np.inf
    for row in flat:
        pr = _warp_row(row, temperature, top_k, 1.0)
        sp = np.sort(pr)[::-1]
        cum = np.cumsum(sp)[sp > 0]
        best = min(best, float(np.min(np.abs(cum - top_p))))
    return best


def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    return np_warp(logits, temperature, 0, 1.0)


def make_logits(rng, shape, scale=1.5, ninf_frac=0.0, params=None, margin=1e-5):
    """Random float32 logits with an optional fraction of -inf entries (never a whole row).

    When ``params`` = (T, top_k, top_p) is given, redraw until every row's top-p boundary is at
    least ``margin`` away from any cumulative mass (so float32 vs float64 cannot flip it).
    """
    for _ in range(1000):
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        if ninf_frac > 0:
            mask = rng.random(shape) < ninf_frac
            flat_mask = mask.reshape(-1, shape[-1])
            keep = rng.integers(0, shape[-1], size=flat_mask.shape[0])
            flat_mask[np.arange(flat_mask.shape[0]), keep] = False  # >= 1 finite entry per row
            x = np.where(flat_mask.reshape(shape), np.float32(-np.inf), x)
        if params is None or top_p_margin(x, *params) >= margin:
            return x
    raise AssertionError("test bug: could not draw logits with a safe top-p margin")


# --------------------------------------------------------------------------------------------
# trees (independent re-implementation of the node order in docs/api-extensions.md)


class NpTree:
    """Rank-path tree; node order = root, then paths sorted by (depth, path)."""

    def __init__(self, paths):
        paths = [tuple(int(r) for r in p) for p in paths]
        self.paths = sorted(paths, key=lambda p: (len(p), p))
        self.nodes = [()] + self.paths
        self.index = {p: i for i, p in enumerate(self.nodes)}
        self.T = len(self.nodes)
        self.parents = np.array([-1] + [self.index[p[:-1]] for p in self.paths], dtype=np.int64)
        self.depths = np.array([len(p) for p in self.nodes], dtype=np.int64)
        self.ranks = np.array([0] + [p[-1] for p in self.paths], dtype=np.int64)
        self.children = [[] for _ in range(self.T)]
        for i in range(1, self.T):
            self.children[self.parents[i]].append(i)
        for ch in self.children:
            ch.sort(key=lambda c: self.ranks[c])
        self.max_depth = int(self.depths.max())
        self.leaves = [i for i in range(self.T) if not self.children[i]]

    def is_leaf(self, i):
        return not self.children[i]


def chain_paths(k: int):
    return [(0,) * d for d in range(1, k + 1)]


# --------------------------------------------------------------------------------------------
# sampling helpers (numpy, vectorised)


def sample_rows(rng, probs: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``probs`` (rows need not be normalised)."""
    probs = np.asarray(probs, dtype=np.float64)
    cdf = np.cumsum(probs, axis=-1)
    u = (1.0 - rng.random(probs.shape[:-1])) * cdf[..., -1]  # u in (0, total]
    idx = (cdf < u[..., None]).sum(axis=-1)
    return np.minimum(idx, probs.shape[-1] - 1)


def topk_tokens(q: np.ndarray, m: int) -> np.ndarray:
    """Top-m tokens of each row of q, descending, ties -> lowest index first."""
    return np.argsort(-q, axis=-1, kind="stable")[..., :m]


def draft_tree_tokens(rng, tree: NpTree, Q: np.ndarray, root_token: int, n: int, kind: str):
    """Node tokens [n, T]: node i's children are drafted from Q[depth_i, token_i].

    kind: "topk" (rank r child = r-th most likely token of q, distinct), "iid" (independent draws
    from q), "swor" (sequential draws from q with previous siblings zeroed and renormalised).
    """
    tok = np.zeros((n, tree.T), dtype=np.int64)
    tok[:, 0] = root_token
    rows = np.arange(n)
    for i in range(tree.T):
        ch = tree.children[i]
        if not ch:
            continue
        q = Q[tree.depths[i], tok[:, i]]
        if kind == "topk":
            order = np.argsort(-q, axis=-1, kind="stable")
            for c in ch:
                tok[:, c] = order[:, tree.ranks[c]]
        elif kind == "iid":
            for c in ch:
                tok[:, c] = sample_rows(rng, q)
        elif kind == "swor":
            qq = q.copy()
            for c in ch:
                tok[:, c] = sample_rows(rng, qq)
                qq[rows, tok[:, c]] = 0.0
        else:
            raise ValueError(kind)
    return tok


# --------------------------------------------------------------------------------------------
# numpy reference verifier (vectorised over trials), with deliberate bugs for power checks


def np_verify_tree(rng, tree: NpTree, tok, P, Q, kind: str, bug: str | None = None):
    """Reference verification of ``n`` trials at once.

    P: [D, V, V] warped target probs; node i's row is P[depth_i, tok_i]. Q likewise (draft
    rows; ignored for kind "topk", where children are point masses).
    bug: None | "accept_p" (accept with p(x) instead of min(1, p/q)) | "no_residual" (never
    update the residual) | "no_renorm" (update the residual but do not renormalise it)
    | "ignore_q_update" (swor without zeroing q).
    Returns (tokens [n, D_max + 1] padded with -1, num_accepted [n], stop_node [n]).
    """
    n, T = tok.shape
    D = tree.max_depth
    out = np.full((n, D + 1), -1, dtype=np.int64)
    nacc = np.zeros(n, dtype=np.int64)
    stop = np.full(n, -1, dtype=np.int64)
    cur = np.zeros(n, dtype=np.int64)
    for i in range(T):
        idx = np.flatnonzero((cur == i) & (stop < 0))
        if idx.size == 0:
            continue
        m = idx.size
        r = np.arange(m)
        d = tree.depths[i]
        p0 = P[d, tok[idx, i]]
        p = p0.copy()
        q = None if kind == "topk" else Q[d, tok[idx, i]].copy()
        accepted = np.zeros(m, dtype=bool)
        for c in tree.children[i]:
            live = ~accepted
            x = tok[idx, c]
            u = 1.0 - rng.random(m)
            px = p[r, x]
            if kind == "topk":
                acc = u < px
            else:
                qx = q[r, x]
                if bug == "accept_p":
                    acc = u < px
                else:
                    acc = (qx > 0) & (u * qx < px)
            acc &= live
            rej = live & ~acc
            if acc.any():
                out[idx[acc], d] = x[acc]
                nacc[idx[acc]] = d + 1
                cur[idx[acc]] = c
            accepted |= acc
            # residual update on the rejected rows
            if kind == "topk":
                newp = p.copy()
                if bug != "no_residual":
                    newp[r, x] = 0.0
            else:
                newp = p if bug == "no_residual" else np.maximum(p - q, 0.0)
            if bug not in ("no_renorm", "no_residual"):
                s = newp.sum(axis=1, keepdims=True)
                newp = np.where(s > 0, newp / np.where(s > 0, s, 1.0), p0)
            p = np.where(rej[:, None], newp, p)
            if kind == "swor" and bug != "ignore_q_update":
                newq = q.copy()
                newq[r, x] = 0.0
                s = newq.sum(axis=1, keepdims=True)
                newq = newq / np.where(s > 0, s, 1.0)
                q = np.where(rej[:, None], newq, q)
        done = ~accepted
        if done.any():
            y = sample_rows(rng, p[done])
            out[idx[done], d] = y
            stop[idx[done]] = i
    assert (stop >= 0).all()
    return out, nacc, stop


# --------------------------------------------------------------------------------------------
# exact laws


def exact_root_split(p, q, child_tokens, kind, draft_law=None):
    """Exact (P[y1 = a and y1 accepted as a root child], P[y1 = a and stop]) for one draft
    realisation ``child_tokens`` (in rank order) under the DESIGN residual rule of ``kind``."""
    v = p.size
    acc = np.zeros(v)
    p_res = p.astype(np.float64).copy()
    q_cur = None if q is None else q.astype(np.float64).copy()
    reach = 1.0
    for x in child_tokens:
        if kind == "topk":
            a = p_res[x]
        else:
            a = 0.0 if q_cur[x] <= 0 else min(1.0, p_res[x] / q_cur[x])
        acc[x] += reach * a
        reach *= 1.0 - a
        if kind == "topk":
            p_res[x] = 0.0
            s = p_res.sum()
            p_res = p_res / s if s > 0 else p.copy()
        else:
            nr = np.maximum(p_res - q_cur, 0.0)
            s = nr.sum()
            p_res = nr / s if s > 0 else p.copy()
            if kind == "swor":
                q_cur[x] = 0.0
                s = q_cur.sum()
                if s > 0:
                    q_cur = q_cur / s
    return acc, reach * p_res


def exact_root_law(p, q, m, kind, rule=None):
    """Exact (acc[a], stop[a]) at the root marginalised over the root's m drafted children.

    kind = how the children are drafted ("topk" uses the top-m of q, or q=None with fixed
    tokens is not supported here); rule = residual rule used to verify (default: kind).
    """
    rule = kind if rule is None else rule
    v = p.size
    acc = np.zeros(v)
    stp = np.zeros(v)
    if kind == "topk":
        toks = topk_tokens(q, m)
        return exact_root_split(p, None if rule == "topk" else q, list(toks), rule)
    if kind == "iid":
        for tup in itertools.product(range(v), repeat=m):
            w = float(np.prod(q[list(tup)]))
            if w == 0.0:
                continue
            a, s = exact_root_split(p, q, tup, rule)
            acc += w * a
            stp += w * s
    elif kind == "swor":
        for tup in itertools.permutations(range(v), m):
            w = 1.0
            rem = 1.0
            for x in tup:
                if rem <= 0:
                    w = 0.0
                    break
                w *= q[x] / rem
                rem -= q[x]
            if w == 0.0:
                continue
            a, s = exact_root_split(p, q, tup, rule)
            acc += w * a
            stp += w * s
    else:
        raise ValueError(kind)
    return acc, stp


def two_token_law(acc, stp, P1):
    """Law of (y1, y2 | STOP) as an array [V, V + 1]: column V = STOP.

    acc[a]: P(y1 = a, accepted as child); then y2 ~ P1[a] (the child's own target row)."""
    v = acc.size
    law = np.zeros((v, v + 1))
    law[:, :v] = acc[:, None] * P1
    law[:, v] = stp
    return law


def two_token_outcomes(tokens, nacc, v):
    """Outcome index for (y1, y2 | STOP) from padded result tokens and num_accepted."""
    y1 = tokens[:, 0]
    y2 = np.where(nacc >= 1, tokens[:, 1], v)
    return y1 * (v + 1) + y2


def exact_stop_node_law(tree: NpTree, tok_row, P):
    """Topk kind, fixed node tokens: law of the node at which verification stops."""
    reach = np.zeros(tree.T)
    reach[0] = 1.0
    law = np.zeros(tree.T)
    for i in range(tree.T):
        p = P[tree.depths[i], tok_row[i]]
        rest = reach[i]
        for c in tree.children[i]:
            reach[c] = reach[i] * p[tok_row[c]]
            rest -= reach[c]
        law[i] = max(rest, 0.0)
    return law / law.sum()


def chain_nacc_law(P, Q, root, k, point_mass_drafts=False):
    """Exact law of num_accepted for a K-draft chain with depth-bigram target P[j, prev] and
    drafter Q[j, prev]; drafts with q given (min(p, q)) or point masses (q * p)."""
    alpha = np.zeros(P.shape[-1])
    p0, q0 = P[0, root], Q[0, root]
    alpha = q0 * p0 if point_mass_drafts else np.minimum(p0, q0)
    reach = [1.0, alpha.sum()]
    for j in range(1, k):
        pj, qj = P[j], Q[j]  # [V(prev), V]
        step = qj * pj if point_mass_drafts else np.minimum(pj, qj)
        alpha = alpha @ step
        reach.append(alpha.sum())
    reach.append(0.0)
    reach = np.array(reach)
    return reach[:-1] - reach[1:]


def group_weights(members, v):
    """w[k, t] = 1/|groups(t)| if t in group k (DESIGN section 2)."""
    g = len(members)
    inc = np.zeros((g, v))
    for k, mem in enumerate(members):
        inc[k, list(mem)] = 1.0
    deg = inc.sum(axis=0)
    assert (deg > 0).all()
    return inc / deg[None, :]


# --------------------------------------------------------------------------------------------
# context-dependent targets / drafters ("depth bigram": the row of a node at depth d whose token
# is t is table[d, t]), and drivers that run codecspec once per trial


def bigram_tables(rng, depth, v, params, ninf_frac=0.1, q_temp=1.0, q_noise=1.0, q_top_k=0):
    """Target logits L [depth, V, V] (float32, some -inf), warped target P (float64), draft
    logits Ql (finite, correlated with L) and the draft law Q = warp(Ql, q_temp, q_top_k)."""
    L = make_logits(rng, (depth, v, v), ninf_frac=ninf_frac, params=params)
    fill = (rng.standard_normal(L.shape) - 1.0).astype(np.float32)
    base = np.where(np.isfinite(L), L, fill)
    Ql = (base + q_noise * rng.standard_normal(L.shape)).astype(np.float32)
    P = np_warp(L, *params)
    Q = np_warp(Ql, q_temp, q_top_k, 1.0)
    return L, P, Ql, Q


def _store(r, i, out, lens, nacc, nodes, nlens):
    y = np.asarray(r.tokens)
    nd = np.asarray(r.nodes)
    assert y.size <= out.shape[1], f"trial {i}: {y.size} tokens emitted, tree allows fewer"
    assert nd.size <= nodes.shape[1], f"trial {i}: {nd.size} nodes, tree allows fewer"
    out[i, : y.size] = y
    lens[i] = y.size
    nacc[i] = r.num_accepted
    nodes[i, : nd.size] = nd
    nlens[i] = nd.size


def _alloc(n, depth):
    out = np.full((n, depth + 2), -1, dtype=np.int64)
    nodes = np.full((n, depth + 1), -1, dtype=np.int64)
    z = np.zeros(n, dtype=np.int64)
    return out, z.copy(), z.copy(), nodes, z.copy()


def run_tree_trials(tree, nt: NpTree, tok, Lt, params, g, kind, Qt=None):
    """cs.verify_tree once per trial with one Generator advanced per call.

    tok [n, T] node tokens; node i's target row is Lt[depth_i, tok_i] (Qt likewise, or None).
    Returns dict(tokens, lens, nacc, nodes, nlens) with -1 padding.
    """
    import codecspec as cs

    n = tok.shape[0]
    out, lens, nacc, nodes, nlens = _alloc(n, nt.max_depth)
    dep = nt.depths
    tok32 = np.ascontiguousarray(tok, dtype=np.int32)
    for i in range(n):
        t = tok32[i]
        rows = Lt[dep, t]
        q = None if Qt is None else Qt[dep, t]
        r = cs.verify_tree(tree, t, rows, params, g, draft_probs=q, draft_kind=kind)
        _store(r, i, out, lens, nacc, nodes, nlens)
    return dict(tokens=out, lens=lens, nacc=nacc, nodes=nodes, nlens=nlens)


def run_chain_trials(tok, Lt, params, g, Qt=None):
    """cs.verify_chain once per trial; tok [n, K+1]: column 0 = committed token, then drafts.
    Row j of target_logits = Lt[j, tok_j]; row j of draft_probs = Qt[j, tok_j] (or None)."""
    import codecspec as cs

    n, k1 = tok.shape
    out, lens, nacc, nodes, nlens = _alloc(n, k1 - 1)
    ar = np.arange(k1)
    tok32 = np.ascontiguousarray(tok, dtype=np.int32)
    for i in range(n):
        t = tok32[i]
        rows = Lt[ar, t]
        if Qt is None:
            r = cs.verify_chain(rows, t[1:], params, g)
        else:
            r = cs.verify_chain(rows, t[1:], params, g, draft_probs=Qt[ar[:-1], t[:-1]])
        _store(r, i, out, lens, nacc, nodes, nlens)
    return dict(tokens=out, lens=lens, nacc=nacc, nodes=nodes, nlens=nlens)


def check_result_invariants(nt: NpTree, tok, res, v, distinct_rejections=True):
    """Structural invariants of every trial (exact, not statistical).

    * len(tokens) == num_accepted + 1 == len(nodes) + 1, all tokens in [0, V)
    * nodes form a root-to-node path and carry the emitted tokens
    * (distinct_rejections) the correction token is never the token of a child of the stop
      node (it was rejected, so its residual mass is 0), unless the stop node is a leaf.
    Returns the stop node of every trial.
    """
    out, lens, nacc, nodes, nlens = (res[k] for k in ("tokens", "lens", "nacc", "nodes", "nlens"))
    n = tok.shape[0]
    rows = np.arange(n)
    assert (lens == nacc + 1).all(), "len(tokens) != num_accepted + 1"
    assert (nlens == nacc).all(), "len(nodes) != num_accepted"
    assert (nacc >= 0).all() and (nacc <= nt.max_depth).all(), "num_accepted out of range"
    valid = np.arange(out.shape[1])[None, :] < lens[:, None]
    assert ((out >= 0) & (out < v))[valid].all(), "emitted token outside [0, V)"
    for j in range(nt.max_depth):
        m = nacc > j
        if not m.any():
            continue
        nd = nodes[m, j]
        assert ((nd > 0) & (nd < nt.T)).all(), "node id out of range"
        prev = np.zeros(m.sum(), dtype=np.int64) if j == 0 else nodes[m, j - 1]
        assert (nt.parents[nd] == prev).all(), "r.nodes is not a root-to-node path"
        assert (tok[m][np.arange(m.sum()), nd] == out[m, j]).all(), "token != node token"
    stop = np.where(nacc > 0, nodes[rows, np.maximum(nacc - 1, 0)], 0)
    if distinct_rejections:
        corr = out[rows, nacc]
        for i in range(nt.T):
            m = stop == i
            for c in nt.children[i]:
                assert (corr[m] != tok[m, c]).all(), (
                    f"correction token equals rejected child {c}'s token at node {i}"
                )
    return stop


# --------------------------------------------------------------------------------------------
# coarse-grained acceptance (PCG), first two positions


def coarse_two_group_law(P0, Q0, P1, w):
    """Exact law of (k1, k2 | STOP) for verify_chain_coarse, [G, G + 1] (column G = STOP).

    x ~ Q0, k ~ w[., x], accept with min(1, Pc(k)/Qc(k)); after acceptance of x the next group
    follows coarse(P1[x]) (the target row of context x); on rejection k1 ~ norm(max(Pc - Qc, 0)).
    """
    g = w.shape[0]
    pc, qc = w @ P0, w @ Q0
    ratio = np.where(qc > 0, np.minimum(1.0, pc / np.where(qc > 0, qc, 1.0)), 0.0)
    law = np.zeros((g, g + 1))
    law[:, :g] = ((w * Q0[None, :]) * ratio[:, None]) @ (P1 @ w.T)
    law[:, g] = pc - np.minimum(pc, qc)
    return law


def np_coarse_two_groups(rng, P0, Q0, P1, w, x1, bug=None):
    """Numpy reference of the first two emitted groups (outcome index as in the law above).

    bug "token_accept": accept with min(1, p(x)/q(x)) (token level) but emit the rejection group
    from the coarse residual norm(max(Pc - Qc, 0)), i.e. groups from the wrong law."""
    g = w.shape[0]
    n = x1.size
    pc, qc = w @ P0, w @ Q0
    k = sample_rows(rng, w[:, x1].T)
    u = 1.0 - rng.random(n)
    if bug == "token_accept":
        a = np.minimum(1.0, P0[x1] / Q0[x1])
    else:
        a = np.minimum(1.0, pc[k] / qc[k])
    acc = u < a
    res = np.maximum(pc - qc, 0.0)
    kr = sample_rows(rng, np.broadcast_to(res, (n, g)))
    k1 = np.where(acc, k, kr)
    k2 = sample_rows(rng, P1[x1] @ w.T)
    return k1 * (g + 1) + np.where(acc, k2, g)


def random_tree_paths(rng, n_nodes, max_depth=4, max_rank=3):
    """Random ancestor- and rank-closed set of n_nodes rank paths (root excluded), shuffled."""
    paths = []
    nchild = {(): 0}
    for _ in range(10 * n_nodes + 10):
        if len(paths) >= n_nodes:
            break
        cands = [p for p in nchild if len(p) < max_depth and nchild[p] < max_rank]
        if not cands:
            break
        par = cands[int(rng.integers(len(cands)))]
        child = par + (nchild[par],)
        nchild[par] += 1
        nchild[child] = 0
        paths.append(child)
    order = rng.permutation(len(paths))
    return [paths[i] for i in order]


def greedy_walk(nt: NpTree, tok_row, rows):
    """Greedy verification by brute force: (tokens, nodes); ties -> lowest index; the first
    child in rank order carrying the argmax token is followed."""
    node, tokens, nodes = 0, [], []
    while True:
        y = int(np.argmax(rows[node]))
        nxt = [c for c in nt.children[node] if tok_row[c] == y]
        if not nxt:
            tokens.append(y)
            return tokens, nodes
        node = nxt[0]
        tokens.append(y)
        nodes.append(node)


def check_support(res, P, root):
    """Every emitted token has positive target probability in its own context (depth-bigram
    tables: position j's row is P[j, previous token]); catches u = 0 / q = 0 style bugs."""
    out, lens = res["tokens"], res["lens"]
    n = out.shape[0]
    prev = np.full(n, root, dtype=np.int64)
    for j in range(out.shape[1]):
        m = lens > j
        if not m.any():
            break
        y = out[m, j]
        p = P[j, prev[m], y]
        assert (p > 0).all(), f"position {j}: emitted a token with zero target probability"
        prev[m] = y


def complete_sequences(rng, res, P, root, length):
    """Emitted tokens completed autoregressively from the target to ``length`` positions
    (position j samples from P[j, previous token]); the completed sequence must follow the
    target's autoregressive law exactly, whatever was accepted."""
    out, lens = res["tokens"], res["lens"]
    n = out.shape[0]
    seq = np.empty((n, length), dtype=np.int64)
    prev = np.full(n, root, dtype=np.int64)
    for j in range(length):
        have = lens > j
        y = np.empty(n, dtype=np.int64)
        y[have] = out[have, j]
        if (~have).any():
            y[~have] = sample_rows(rng, P[j, prev[~have]])
        seq[:, j] = y
        prev = y
    return seq


def pair_laws(P, root, length):
    """Exact laws of consecutive pairs (y_{j-1}, y_j), j = 1..length-1, of the depth-bigram
    target, flattened to [V * V]."""
    m = P[0, root]
    laws = []
    for j in range(1, length):
        joint = m[:, None] * P[j]
        laws.append(joint.ravel())
        m = joint.sum(axis=0)
    return laws
