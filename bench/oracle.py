"""Plain-numpy reference implementation of codecspec's sampling core.

Written independently from the Rust code, from the contract in docs/design.md section 4 and
docs/api-extensions.md. It serves two purposes:

* the baseline for the speed targets in ``bench/test_bench_core.py`` (a reasonable, vectorised
  numpy implementation: only the rows the verifier visits are warped, top-k uses argpartition);
* an independent cross-check (``bench/test_oracle_agrees.py``).

Randomness comes from a ``numpy.random.Generator``; its stream is *not* codecspec's Philox
stream, so compare laws or greedy (deterministic) results with codecspec, never sampled tokens.

Conventions (same as the contract):

* warp order: temperature, top-k (ties broken towards the lowest index), top-p (keeps every
  token whose probability equals the boundary token's); temperature 0 = argmax point mass
  (lowest index on ties);
* uniforms are drawn in (0, 1] and acceptance compares strictly (``u * q(x) < p(x)``), so a
  zero-probability token is never accepted and ``q(x) == 0`` always rejects;
* an all-zero residual falls back to the node's warped target distribution.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

__all__ = [
    "Params",
    "Result",
    "Tree",
    "Groups",
    "warp",
    "warp_row",
    "sample",
    "verify_chain",
    "verify_tree",
    "verify_tree_batch",
    "verify_chain_coarse",
    "kv_commit",
]


# --------------------------------------------------------------------------------------------
# Sampling parameters and warp
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """Mirror of ``cs.SamplingParams`` (any object with these three attributes works)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


def _params(p) -> tuple[float, int, float]:
    t, k, tp = float(p.temperature), int(p.top_k), float(p.top_p)
    if not (t >= 0.0 and np.isfinite(t)):
        raise ValueError(f"temperature must be finite and >= 0, got {t}")
    if k < 0:
        raise ValueError(f"top_k must be >= 0, got {k}")
    if not (0.0 < tp <= 1.0):
        raise ValueError(f"top_p must be in (0, 1], got {tp}")
    return t, k, tp


def _check_logits(logits: np.ndarray, name: str = "logits") -> np.ndarray:
    x = np.asarray(logits)
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last axis, got shape {x.shape}")
    if not (x < np.inf).all():  # one pass catches NaN and +inf
        raise ValueError(f"{name} holds NaN or +inf")
    if not (x.max(axis=-1) > -np.inf).all():
        raise ValueError(f"{name} has a row with no finite logit")
    return x


def _topk_idx(z: np.ndarray, k: int) -> np.ndarray:
    """Indices [R, k] of the k largest entries per row, ties broken towards the lowest index.

    argpartition does the work; rows whose k-th value is tied beyond the cut (rare with real
    logits) are redone exactly.
    """
    v = z.shape[1]
    idx = np.argpartition(z, v - k, axis=1)[:, v - k :]
    kth = np.take_along_axis(z, idx, axis=1).min(axis=1, keepdims=True)
    for r in np.flatnonzero((z >= kth).sum(axis=1) > k):
        gt = np.flatnonzero(z[r] > kth[r])
        idx[r] = np.concatenate([gt, np.flatnonzero(z[r] == kth[r])[: k - gt.shape[0]]])
    return idx


def _softmax_topp(z: np.ndarray, t: float, tp: float) -> np.ndarray:
    """Rows of float64 logits -> temperature softmax, then top-p (boundary ties kept)."""
    e = np.exp((z - z.max(axis=-1, keepdims=True)) * (1.0 / t))
    p = e / e.sum(axis=-1, keepdims=True)
    if tp < 1.0:
        sp = -np.sort(-p, axis=-1)
        m = np.minimum((np.cumsum(sp, axis=-1) < tp).sum(axis=-1), p.shape[-1] - 1)
        thresh = np.take_along_axis(sp, m[..., None], axis=-1)
        p = np.where(p >= thresh, p, 0.0)
        p /= p.sum(axis=-1, keepdims=True)
    return p


def _warp_sparse(flat: np.ndarray, t: float, k: int, tp: float):
    """(idx [R, k] or None for all columns, probs [R, k or V] float64); needs t > 0."""
    if 0 < k < flat.shape[1]:
        idx = _topk_idx(flat, k)
        return idx, _softmax_topp(np.take_along_axis(flat, idx, axis=1).astype(np.float64), t, tp)
    return None, _softmax_topp(flat.astype(np.float64), t, tp)


def warp(logits, params) -> np.ndarray:
    """Warped target distribution, float32 ``[..., V]`` (computed in float64)."""
    x = _check_logits(logits)
    t, k, tp = _params(params)
    shape = x.shape
    flat = x.reshape(-1, shape[-1])
    if t == 0.0:
        out = np.zeros(flat.shape, dtype=np.float32)
        out[np.arange(flat.shape[0]), np.argmax(flat, axis=1)] = 1.0
        return out.reshape(shape)
    idx, p = _warp_sparse(flat, t, k, tp)
    if idx is None:
        return p.astype(np.float32).reshape(shape)
    out = np.zeros(flat.shape, dtype=np.float32)
    np.put_along_axis(out, idx, p.astype(np.float32), axis=1)
    return out.reshape(shape)


def warp_row(row: np.ndarray, t: float, k: int, tp: float) -> np.ndarray:
    """Warp one row of (validated) logits to a dense float64 probability vector.

    The per-node hot path of the verifiers: softmax and top-p see the k kept entries only.
    """
    v = row.shape[0]
    out = np.zeros(v, dtype=np.float64)
    if t == 0.0:
        out[int(np.argmax(row))] = 1.0
        return out
    if 0 < k < v:
        idx = np.argpartition(row, v - k)[v - k :]
        zk = row[idx]
        kth = zk.min()
        if np.count_nonzero(row >= kth) > k:  # boundary ties: the lowest indices win
            gt = np.flatnonzero(row > kth)
            idx = np.concatenate([gt, np.flatnonzero(row == kth)[: k - gt.shape[0]]])
            zk = row[idx]
        out[idx] = _softmax_topp(zk.astype(np.float64), t, tp)
        return out
    return _softmax_topp(row.astype(np.float64), t, tp)


def _uniform(rng: np.random.Generator) -> float:
    return 1.0 - rng.random()  # (0, 1]


def _draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw; never returns an index whose probability is zero."""
    c = np.cumsum(probs)
    i = int(np.searchsorted(c, _uniform(rng) * c[-1], side="left"))
    i = min(i, probs.shape[0] - 1)
    while probs[i] <= 0.0:  # only reachable through rounding at the top of the CDF
        i -= 1
    return i


def sample(logits, params, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``logits [..., V]`` (int32 ``[...]``), vectorised."""
    x = _check_logits(logits)
    t, k, tp = _params(params)
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    if t == 0.0:
        return np.argmax(flat, axis=1).astype(np.int32).reshape(lead)
    idx, p = _warp_sparse(flat, t, k, tp)
    c = np.cumsum(p, axis=1)
    u = (1.0 - rng.random(flat.shape[0])) * c[:, -1]
    j = np.minimum((c < u[:, None]).sum(axis=1), p.shape[1] - 1)
    rows = np.arange(flat.shape[0])
    for r in np.flatnonzero(p[rows, j] <= 0.0):  # rounding guard: a token that has mass
        j[r] = np.flatnonzero(p[r] > 0.0)[-1]
    tok = j if idx is None else idx[rows, j]
    return tok.astype(np.int32).reshape(lead)


# --------------------------------------------------------------------------------------------
# Draft trees
# --------------------------------------------------------------------------------------------


class Tree:
    """Draft tree in canonical node order: sorted by (depth, rank path lexicographically)."""

    def __init__(self, paths: Sequence[Sequence[int]]):
        ps = [tuple(int(r) for r in p) for p in paths]
        if any(len(p) == 0 for p in ps):
            raise ValueError("paths: empty path (the root is implicit)")
        if any(r < 0 for p in ps for r in p):
            raise ValueError("paths: negative rank")
        if len(set(ps)) != len(ps):
            raise ValueError("paths: duplicate path")
        pset = set(ps)
        for p in ps:
            if len(p) > 1 and p[:-1] not in pset:
                raise ValueError(f"paths: not ancestor-closed ({p[:-1]} missing)")
        ps.sort(key=lambda p: (len(p), p))
        self.paths: list[tuple[int, ...]] = ps
        n = len(ps) + 1
        index = {(): 0}
        for i, p in enumerate(ps, start=1):
            index[p] = i
        self.parents = np.full(n, -1, dtype=np.int32)
        self.depths = np.zeros(n, dtype=np.int32)
        self.ranks = np.zeros(n, dtype=np.int32)
        self.children_of: list[list[int]] = [[] for _ in range(n)]
        for i, p in enumerate(ps, start=1):
            par = index[p[:-1]]
            self.parents[i] = par
            self.depths[i] = len(p)
            self.ranks[i] = p[-1]
            self.children_of[par].append(i)  # node order => rank order among siblings
        self.num_nodes = n
        self.max_depth = int(self.depths.max())

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_paths(cls, paths) -> Tree:
        return cls(paths)

    @classmethod
    def chain(cls, k: int) -> Tree:
        return cls([(0,) * d for d in range(1, k + 1)])

    @classmethod
    def greedy(cls, accept, budget: int, max_depth=None, max_rank=None) -> Tree:
        """Best-first growth on the path value prod(accept[d, r]) to ``budget`` nodes.

        Popping a node pushes all its children (depth < max_depth, rank < max_rank[depth]).
        Equal values pop in canonical node order (shallower first, then smaller rank path),
        which keeps the tree ancestor-closed.
        """
        a = np.asarray(accept, dtype=np.float64)
        if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
            raise ValueError(f"accept must be [K, M] with K, M >= 1, got shape {a.shape}")
        if not np.isfinite(a).all() or (a < 0).any() or (a > 1).any():
            raise ValueError("accept must hold values in [0, 1]")
        kmax, m = a.shape
        depth_cap = kmax if max_depth is None else int(max_depth)
        if depth_cap < 1 or depth_cap > kmax:
            raise ValueError(f"max_depth must be in [1, {kmax}], got {max_depth}")
        if max_rank is None:
            ranks = [m] * depth_cap
        elif np.isscalar(max_rank):
            ranks = [min(int(max_rank), m)] * depth_cap
        else:
            ranks = [min(int(r), m) for r in max_rank][:depth_cap]
            if len(ranks) < depth_cap:
                raise ValueError("max_rank: one entry per depth is required")
        capacity, level = 0, 1
        for r in ranks:
            level *= r
            capacity += level
        if budget < 1 or budget > capacity:
            raise ValueError(f"budget must be in [1, {capacity}], got {budget}")
        heap: list = []

        def push_children(path: tuple[int, ...], value: float) -> None:
            d = len(path)
            if d >= depth_cap:
                return
            for r in range(ranks[d]):
                child = path + (r,)
                heapq.heappush(heap, (-(value * a[d, r]), len(child), child))

        push_children((), 1.0)
        chosen = []
        while len(chosen) < budget:
            _, _, path = heapq.heappop(heap)
            chosen.append(path)
            push_children(path, _path_value(a, path))
        return cls(chosen)

    # -- queries -------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.num_nodes

    def children(self, i: int) -> list[int]:
        return list(self.children_of[i])

    def expected_tokens(self, accept) -> float:
        a = np.asarray(accept, dtype=np.float64)
        return 1.0 + sum(_path_value(a, p) for p in self.paths)

    def ancestor_mask(self) -> np.ndarray:
        n = self.num_nodes
        mask = np.eye(n, dtype=bool)
        for d in range(1, self.max_depth + 1):  # one vectorised step per depth level
            rows = np.flatnonzero(self.depths == d)
            mask[rows] |= mask[self.parents[rows]]
        return mask

    def attention_bias(self, past_len: int) -> np.ndarray:
        if past_len < 0:
            raise ValueError("past_len must be >= 0")
        n = self.num_nodes
        bias = np.zeros((n, past_len + n), dtype=np.float32)
        bias[:, past_len:][~self.ancestor_mask()] = -np.inf
        return bias

    def position_ids(self, past_len: int) -> np.ndarray:
        if past_len < 0:
            raise ValueError("past_len must be >= 0")
        return past_len + self.depths.astype(np.int64)

    def leaf_paths(self) -> np.ndarray:
        leaves = [i for i in range(self.num_nodes) if not self.children_of[i]]
        out = np.full((len(leaves), self.max_depth + 1), -1, dtype=np.int32)
        for row, leaf in enumerate(leaves):
            chain = []
            i = leaf
            while i >= 0:
                chain.append(i)
                i = int(self.parents[i])
            out[row, : len(chain)] = chain[::-1]
        return out


def _path_value(a: np.ndarray, path: Sequence[int]) -> float:
    v = 1.0
    for d, r in enumerate(path):
        v *= a[d, r]
    return v


# --------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------


@dataclass
class Result:
    tokens: np.ndarray  # int32: accepted drafts, then one correction / bonus token
    nodes: np.ndarray  # int32: accepted tree nodes (root excluded); chain: 1..num_accepted
    num_accepted: int
    groups: Optional[np.ndarray] = None  # coarse verification only


def _result(tokens: list[int], nodes: list[int], groups=None) -> Result:
    return Result(
        tokens=np.asarray(tokens, dtype=np.int32),
        nodes=np.asarray(nodes, dtype=np.int32),
        num_accepted=len(nodes),
        groups=None if groups is None else np.asarray(groups, dtype=np.int32),
    )


def _residual(p_res: np.ndarray, q: np.ndarray, p_node: np.ndarray) -> np.ndarray:
    r = np.maximum(p_res - q, 0.0)
    s = r.sum()
    return r / s if s > 0.0 else p_node


def verify_chain(target_logits, draft_tokens, params, rng, draft_probs=None) -> Result:
    """Speculative sampling along a chain of K drafts (target_logits [K+1, V])."""
    x = _check_logits(target_logits, "target_logits")
    t, k, tp = _params(params)
    drafts = np.asarray(draft_tokens, dtype=np.int64)
    kk, v = drafts.shape[0], x.shape[-1]
    if x.ndim != 2 or x.shape[0] != kk + 1:
        raise ValueError(f"target_logits must be [K+1, V] = [{kk + 1}, V], got {x.shape}")
    if ((drafts < 0) | (drafts >= v)).any():
        raise ValueError("draft_tokens out of range")
    tokens: list[int] = []
    for j in range(kk):
        xj = int(drafts[j])
        if t == 0.0:
            y = int(np.argmax(x[j]))
            tokens.append(y)
            if y != xj:
                return _result(tokens, list(range(1, j + 1)))
            continue
        p = warp_row(x[j], t, k, tp)
        if draft_probs is None:
            qx = 1.0
        else:
            q = np.asarray(draft_probs[j], dtype=np.float64)
            qx = q[xj]
        if qx > 0.0 and _uniform(rng) * qx < p[xj]:
            tokens.append(xj)
            continue
        if draft_probs is None:
            res = p.copy()
            res[xj] = 0.0
            s = res.sum()
            res = res / s if s > 0.0 else p
        else:
            res = _residual(p, q, p)
        tokens.append(_draw(res, rng))
        return _result(tokens, list(range(1, j + 1)))
    last = x[kk]
    tokens.append(int(np.argmax(last)) if t == 0.0 else _draw(warp_row(last, t, k, tp), rng))
    return _result(tokens, list(range(1, kk + 1)))


def verify_tree(
    tree: Tree, node_tokens, target_logits, params, rng, draft_probs=None, draft_kind="topk"
) -> Result:
    """Lossless tree verification; only the rows on the walked path are warped."""
    x = _check_logits(target_logits, "target_logits")
    tok = np.asarray(node_tokens)
    n = tree.num_nodes
    if x.ndim != 2 or x.shape[0] != n:
        raise ValueError(f"target_logits must be [T, V] with T={n}, got {x.shape}")
    if tok.shape != (n,):
        raise ValueError(f"node_tokens must be [T] with T={n}, got {tok.shape}")
    if draft_kind not in ("topk", "iid", "swor"):
        raise ValueError(f"draft_kind must be topk, iid or swor, got {draft_kind!r}")
    if draft_kind != "topk" and draft_probs is None:
        raise ValueError("draft_probs is required for draft_kind iid / swor")
    t, k, tp = _params(params)
    tokens: list[int] = []
    nodes: list[int] = []
    node = 0
    kids = tree.children_of
    while True:
        ch = kids[node]
        row = x[node]
        if t == 0.0:
            y = int(np.argmax(row))
            nxt = next((c for c in ch if int(tok[c]) == y), -1)
            tokens.append(y)
            if nxt < 0:
                return _result(tokens, nodes)
            nodes.append(nxt)
            node = nxt
            continue
        p = warp_row(row, t, k, tp)
        if not ch:  # leaf: bonus token
            tokens.append(_draw(p, rng))
            return _result(tokens, nodes)
        p_res = p
        accepted = -1
        if draft_kind == "topk":
            p_res = p.copy()
            mass = 1.0
            for c in ch:
                xc = int(tok[c])
                if mass > 0.0 and _uniform(rng) * mass < p_res[xc]:
                    accepted = c
                    break
                mass -= p_res[xc]
                p_res[xc] = 0.0
            if accepted < 0:
                s = p_res.sum()
                p_res = p_res / s if s > 0.0 else p
        else:
            q = np.asarray(draft_probs[node], dtype=np.float64).copy()
            for c in ch:
                xc = int(tok[c])
                qx = q[xc]
                if qx > 0.0 and _uniform(rng) * qx < p_res[xc]:
                    accepted = c
                    break
                p_res = _residual(p_res, q, p)
                if draft_kind == "swor":
                    q[xc] = 0.0
                    s = q.sum()
                    if s > 0.0:
                        q /= s
        if accepted < 0:
            tokens.append(_draw(p_res, rng))
            return _result(tokens, nodes)
        tokens.append(int(tok[accepted]))
        nodes.append(accepted)
        node = accepted


def verify_tree_batch(
    trees, node_tokens, target_logits, params, rngs, draft_probs=None, draft_kind="topk"
) -> list[Result]:
    """Ragged batch: stream b owns rows offsets[b]:offsets[b+1] of the stacked inputs."""
    out = []
    start = 0
    for b, tr in enumerate(trees):
        end = start + tr.num_nodes
        dp = None if draft_probs is None else draft_probs[start:end]
        out.append(
            verify_tree(
                tr,
                node_tokens[start:end],
                target_logits[start:end],
                params,
                rngs[b],
                dp,
                draft_kind,
            )
        )
        start = end
    return out


# --------------------------------------------------------------------------------------------
# Coarse-grained acceptance (PCG)
# --------------------------------------------------------------------------------------------


class Groups:
    """Overlapping acoustic groups as CSR (group -> member tokens) with split weights."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, vocab_size: int):
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.indices = np.asarray(indices, dtype=np.int64)
        self.vocab_size = int(vocab_size)
        self.num_groups = self.indptr.shape[0] - 1
        counts = np.bincount(self.indices, minlength=self.vocab_size)
        if (counts == 0).any():
            raise ValueError("members: every token must belong to at least one group")
        self.counts = counts  # |groups(t)|
        self.group_ids = np.repeat(np.arange(self.num_groups), np.diff(self.indptr))
        # transposed CSR: token -> groups containing it (ascending group id)
        order = np.argsort(self.indices, kind="stable")
        self.t_groups = self.group_ids[order]
        self.t_indptr = np.concatenate([[0], np.cumsum(counts)])

    @classmethod
    def from_members(cls, members, vocab_size: int) -> Groups:
        rows = [np.unique(np.asarray(m, dtype=np.int64)) for m in members]
        for r in rows:
            if r.size == 0 or r[0] < 0 or r[-1] >= vocab_size:
                raise ValueError("members: empty group or token out of range")
        indptr = np.concatenate([[0], np.cumsum([r.size for r in rows])])
        return cls(indptr, np.concatenate(rows), vocab_size)

    @classmethod
    def from_embeddings(cls, emb, threshold: float, singletons=(), block: int = 1024) -> Groups:
        """Group k = {t : cos(e_k, e_t) >= threshold} | {k}; brute-force blocked cosine matrix.

        Tokens in ``singletons`` form a group of their own and join no other group.
        """
        e = np.asarray(emb, dtype=np.float32)
        if e.ndim != 2 or e.shape[0] == 0:
            raise ValueError(f"emb must be [V, D], got {e.shape}")
        if not np.isfinite(e).all():
            raise ValueError("emb holds NaN or inf")
        norms = np.linalg.norm(e, axis=1, keepdims=True)
        if (norms == 0).any():
            raise ValueError("emb has a zero row")
        e = e / norms
        v = e.shape[0]
        single = np.zeros(v, dtype=bool)
        single[np.asarray(singletons, dtype=np.int64)] = True
        th = np.float32(threshold)
        ptr_parts = []
        idx_parts = []
        for s in range(0, v, block):
            sims = e[s : s + block] @ e.T  # [b, V] float32
            hit = sims >= th
            rows = np.arange(s, min(s + block, v))
            hit[:, single] = False  # singleton tokens join no other group ...
            hit[single[rows]] = False  # ... and their own group holds only themselves
            hit[rows - s, rows] = True  # k is always in group k
            ptr_parts.append(hit.sum(axis=1))
            idx_parts.append(np.nonzero(hit)[1])  # row-major: sorted members per group
        indptr = np.concatenate([[0], np.cumsum(np.concatenate(ptr_parts))])
        return cls(indptr, np.concatenate(idx_parts), v)

    def members(self, k: int) -> np.ndarray:
        return self.indices[self.indptr[k] : self.indptr[k + 1]].astype(np.int32)

    def groups_of(self, t: int) -> np.ndarray:
        return self.t_groups[self.t_indptr[t] : self.t_indptr[t + 1]].astype(np.int32)

    def weights(self) -> np.ndarray:
        """w[k, t] for every stored (k, t) pair, aligned with ``indices``."""
        return 1.0 / self.counts[self.indices]

    def coarse(self, probs) -> np.ndarray:
        """P_c(k) = sum_t w[k, t] p(t), for probs [..., V] -> [..., num_groups] (float64)."""
        p = np.asarray(probs, dtype=np.float64)
        lead = p.shape[:-1]
        flat = p.reshape(-1, p.shape[-1])
        contrib = flat[:, self.indices] * self.weights()  # [R, nnz]
        csum = np.concatenate([np.zeros((flat.shape[0], 1)), np.cumsum(contrib, axis=1)], axis=1)
        out = csum[:, self.indptr[1:]] - csum[:, self.indptr[:-1]]
        return out.reshape(lead + (self.num_groups,))

    def coarse_row(self, p: np.ndarray) -> np.ndarray:
        return np.bincount(
            self.group_ids,
            weights=p[self.indices] / self.counts[self.indices],
            minlength=self.num_groups,
        )

    def draw_group_of(self, t: int, rng) -> int:
        """Group of token t drawn from w[., t] (uniform over the groups containing t)."""
        lo, hi = self.t_indptr[t], self.t_indptr[t + 1]
        n = int(hi - lo)
        i = min(max(int(np.ceil(_uniform(rng) * n)) - 1, 0), n - 1)
        return int(self.t_groups[lo + i])


def verify_chain_coarse(groups: Groups, target_logits, draft_tokens, draft_probs, params, rng):
    """PCG: accept draft x's group k ~ w[., x] with min(1, P_c(k) / Q_c(k))."""
    x = _check_logits(target_logits, "target_logits")
    t, k, tp = _params(params)
    drafts = np.asarray(draft_tokens, dtype=np.int64)
    kk = drafts.shape[0]
    if x.shape[0] != kk + 1:
        raise ValueError("target_logits must be [K+1, V]")
    tokens: list[int] = []
    gids: list[int] = []
    for j in range(kk):
        xj = int(drafts[j])
        p = warp_row(x[j], t, k, tp)
        q = np.asarray(draft_probs[j], dtype=np.float64)
        pc = groups.coarse_row(p)
        qc = groups.coarse_row(q)
        g = groups.draw_group_of(xj, rng)
        if qc[g] > 0.0 and _uniform(rng) * qc[g] < pc[g]:
            tokens.append(xj)
            gids.append(g)
            continue
        res = _residual(pc, qc, pc)
        g2 = _draw(res, rng)
        mem = groups.indices[groups.indptr[g2] : groups.indptr[g2 + 1]]
        wp = p[mem] / groups.counts[mem]
        tokens.append(int(mem[_draw(wp, rng)]))
        gids.append(g2)
        return _result(tokens, list(range(1, j + 1)), gids)
    p = warp_row(x[kk], t, k, tp)
    tb = _draw(p, rng)
    tokens.append(tb)
    gids.append(groups.draw_group_of(tb, rng))
    return _result(tokens, list(range(1, kk + 1)), gids)


# --------------------------------------------------------------------------------------------
# KV cache commit
# --------------------------------------------------------------------------------------------


def kv_commit(cache: np.ndarray, past_len: int, nodes, rows=None) -> int:
    """Move the accepted path's rows into place (in place); returns the new length."""
    nd = np.asarray(nodes, dtype=np.int64)
    n = nd.shape[0]
    if n and (np.diff(nd) <= 0).any():
        raise ValueError("nodes must be strictly increasing")
    cap = cache.shape[-2]
    if past_len + n > cap:
        raise ValueError("cache capacity exceeded")
    dst = np.arange(past_len, past_len + n)
    if rows is None:
        if n and past_len + nd[-1] >= cap:
            raise ValueError("nodes out of range")
        cache[..., dst, :] = cache[..., past_len + nd, :]  # RHS is gathered (copied) first
    else:
        cache[..., dst, :] = rows[..., nd, :]
    return past_len + n
