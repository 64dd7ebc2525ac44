"""Draft acceptance: how often the drafts hold the code the exact model samples (numpy only).

* `measure_acceptance`: a[d][r], the probability that the true code at draft depth d is the
  rank-r draft candidate, on free-generation frames of the exact model, teacher-forced
  (calibration's measurement (a), docs/calibration.md), with the per-frame ranks it comes
  from (`draft_ranks`), which replay any tree exactly (`budget.simulate_tree`).
* `depth_acceptance`: top-1 drafts of the depth decoder's offsets (head reuse: zero offsets)
  against codes the exact model sampled, per draft depth: exact = the draft is the sampled
  code; group = the draft's similarity group at θ (cos of the codec's code embeddings >= θ,
  `CodecV2.embeddings`) holds the sampled code.
* `temporal_acceptance`: per frame, Σ_x min(p(x), q(x)) of the warped target and draft c0
  distributions (the probability that exact speculative sampling accepts one draft token), and
  the same over groups, Σ_g min(P(g), Q(g)) for a partition of the c0 vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.calibrate.offsets import OffsetDrafter
from codecspec.progress import bar

__all__ = [
    "Acceptance",
    "draft_ranks",
    "measure_acceptance",
    "depth_acceptance",
    "warped_probs",
    "temporal_acceptance",
    "group_partition",
    "group_acceptance_matrix",
]


def draft_ranks(z, codes, drafter, num_ranks: int, *, progress: bool = False) -> np.ndarray:
    """int32 [N, G-1, K]: rank of the true code among the drafts of the node holding c_l.

    Entry [n, l, d] is the rank (cs.topk order: by logit, ties to the lower index) of
    c_{l+2+d} in draft_logits(z_l)[d]; `num_ranks` means "not among the first num_ranks", -1
    means there is no such code (l + 2 + d > G-1). drafter: anything with
    `draft_logits(z_node [N, H], level) -> [N, K, V]` (OffsetDrafter, MedusaHeads).
    """
    z = np.asarray(z, np.float32)
    codes = np.asarray(codes)
    N, G, _ = z.shape
    K = int(drafter.K)
    M = int(num_ranks)
    out = np.full((N, G - 1, K), -1, np.int32)
    levels = bar(range(G - 2), "draft ranks", G - 2, show=progress)
    for lv, d, tgt, x in _draft_rows(drafter, z, levels):
        t = codes[:, tgt]
        tl = x[np.arange(N), t][:, None]
        before = np.arange(x.shape[-1])[None, :] < t[:, None]
        rank = (x > tl).sum(1) + ((x == tl) & before).sum(1)
        out[:, lv, d] = np.minimum(rank, M)
    return out


def _draft_rows(drafter, z, levels):
    """(node level l, draft depth d, the level l + 2 + d it drafts, draft logits [N, V]) of
    every draft a round starting at a level of `levels` takes (none past the last level)."""
    G = z.shape[1]
    for lv in levels:
        logits = drafter.draft_logits(z[:, lv + 1], lv)  # [N, K, V]
        for d in range(min(int(drafter.K), G - 2 - lv)):
            yield lv, d, lv + 2 + d, logits[:, d]


@dataclass
class Acceptance:
    """a[d][r] with the per-frame ranks it was computed from."""

    matrix: np.ndarray  # float64 [K, M]
    counts: np.ndarray  # int64 [K]: (frame, level) samples behind each row
    ranks: np.ndarray  # int32 [N, G-1, K], see draft_ranks
    name: str = "offsets"
    num_parameters: int = 0

    @property
    def K(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def M(self) -> int:
        return int(self.matrix.shape[1])

    def top(self, r: int) -> np.ndarray:
        """P(true code within the first r candidates) per depth."""
        return self.matrix[:, :r].sum(axis=1)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "num_parameters": self.num_parameters,
            "matrix": self.matrix.tolist(),
            "counts": self.counts.tolist(),
            "top1": self.top(1).tolist(),
            "top5": self.top(min(5, self.M)).tolist(),
        }


def measure_acceptance(
    z,
    codes,
    heads=None,
    offsets=None,
    *,
    drafter=None,
    K: Optional[int] = None,
    num_ranks: int = 32,
    frames: Optional[np.ndarray] = None,
    progress: bool = False,
) -> Acceptance:
    """a[d][r] = P(c_{l+2+d} == rank-r candidate of draft_logits(z_l)[d]) over frames and levels.

    Drafts come from `drafter` (e.g. MedusaHeads) or from heads + offsets (offsets None =
    zeros, i.e. plain head reuse; then K defaults to 3). Averaged over every node level that
    can start a round at that depth (l = 0..G-3-d); the marginal, not conditioned on the
    earlier depths being accepted (that is what the greedy tree's independence model uses;
    `simulate_tree` gives the exact figure).
    """
    if drafter is None:
        if heads is None:
            raise ValueError("measure_acceptance: pass heads (+ offsets) or a drafter")
        heads = np.asarray(heads, np.float32)
        if offsets is None:
            k = 3 if K is None else int(K)
            drafter = OffsetDrafter(heads, np.zeros((k, heads.shape[2]), np.float32), "zero")
        else:
            drafter = OffsetDrafter(heads, np.asarray(offsets, np.float32))
    z = np.asarray(z, np.float32)
    codes = np.asarray(codes)
    if frames is not None:
        z, codes = z[frames], codes[frames]
    M = int(min(num_ranks, drafter.V))
    ranks = draft_ranks(z, codes, drafter, M, progress=progress)
    Kd = ranks.shape[2]
    mat = np.zeros((Kd, M), np.float64)
    counts = np.zeros(Kd, np.int64)
    for d in range(Kd):
        r = ranks[:, :, d]
        r = r[r >= 0]
        counts[d] = r.size
        if r.size:
            mat[d] = np.bincount(r, minlength=M + 1)[:M] / r.size
    return Acceptance(
        mat,
        counts,
        ranks,
        getattr(drafter, "name", "drafter"),
        int(getattr(drafter, "num_parameters", 0)),
    )


def depth_acceptance(z, codes, heads, offsets, level_embeddings, thetas) -> dict:
    """z [N, G, H]: the depth decoder's node states teacher-forced on `codes` [N, G];
    level_embeddings: per codec level a unit-row array [V, E]. Returns {"exact": [K],
    "group": {θ: [K]}} over every node level that can start a round at each depth."""
    z = np.asarray(z, np.float32)
    codes = np.asarray(codes, np.int64)
    drafter = OffsetDrafter(np.asarray(heads, np.float32), np.asarray(offsets, np.float32))
    N, G, _ = z.shape
    K = drafter.K
    hit = [[] for _ in range(K)]
    top = [[] for _ in range(K)]
    tgt_codes = [[] for _ in range(K)]
    levels = [[] for _ in range(K)]
    for _, d, tgt, x in _draft_rows(drafter, z, range(G - 2)):
        t1 = x.argmax(axis=1)  # ties to the lower index, as cs.topk
        hit[d].append(t1 == codes[:, tgt])
        top[d].append(t1)
        tgt_codes[d].append(codes[:, tgt])
        levels[d].append(np.full(N, tgt))
    out = {"exact": [float(np.concatenate(h).mean()) for h in hit], "group": {}}
    emb = [np.asarray(e, np.float32) for e in level_embeddings]
    for theta in thetas:
        per = []
        for d in range(K):
            a, b, lv = (np.concatenate(x[d]) for x in (top, tgt_codes, levels))
            cos = np.empty(len(a), np.float32)
            for level in np.unique(lv):
                m = lv == level
                cos[m] = (emb[level][a[m]] * emb[level][b[m]]).sum(1)
            per.append(float((cos >= theta - 1e-6).mean()))
        out["group"][str(theta)] = per
    return out


def warped_probs(logits, params: cs.SamplingParams) -> np.ndarray:
    """[N, V] float64: softmax(logits / T) restricted to the top-k (no top-p), as cs.sample
    draws with top_p = 1."""
    x = np.asarray(logits, np.float64) / max(params.temperature, 1e-9)
    k = int(params.top_k) if params.top_k else x.shape[1]
    kth = np.sort(x, axis=1)[:, -k][:, None]
    x = np.where(x >= kth, x, -np.inf)
    x -= x.max(axis=1, keepdims=True)
    p = np.exp(x)
    return p / p.sum(axis=1, keepdims=True)


def group_partition(embeddings, theta: float) -> np.ndarray:
    """int [V]: a partition of the vocabulary into groups of cos >= θ (greedy: the most
    frequent-first order is not known here, so codes in index order claim their unclaimed
    neighbours)."""
    e = np.asarray(embeddings, np.float32)
    gid = np.full(len(e), -1, np.int64)
    g = 0
    for i in range(len(e)):
        if gid[i] >= 0:
            continue
        near = (e @ e[i] >= theta - 1e-6) & (gid < 0)
        gid[near] = g
        g += 1
    return gid


def temporal_acceptance(target_logits, draft_logits, params, partition=None) -> dict:
    """{"exact": mean Σ min(p, q), "group": mean Σ_g min(P(g), Q(g))} over frames."""
    p = warped_probs(target_logits, params)
    q = warped_probs(draft_logits, params)
    out = {"exact": float(np.minimum(p, q).sum(1).mean()), "frames": int(len(p))}
    if partition is not None:
        n = int(partition.max()) + 1
        P = np.zeros((len(p), n))
        Q = np.zeros((len(q), n))
        for b in range(len(p)):
            P[b] = np.bincount(partition, weights=p[b], minlength=n)
            Q[b] = np.bincount(partition, weights=q[b], minlength=n)
        out["group"] = float(np.minimum(P, Q).sum(1).mean())
    return out


def group_acceptance_matrix(
    z, codes, heads, offsets, level_groups, num_ranks: int = 8, seed: int = 0
):
    """a_g[d][r]: P(the rank-r draft candidate at depth d is the *first* one inside the
    emitted group), the group-level analogue of calibration's a[d][r], so that
    `cs.DraftTree.greedy(a_g, budget)` shapes a tree for PCG depth verification. The emitted
    group of a sampled code c is drawn uniformly from the groups holding it (the coarse law's
    w[g, c] = 1 / |groups_of(c)|). level_groups: per codec level a `cs.AcousticGroups`."""
    rng = np.random.default_rng(seed)
    z = np.asarray(z, np.float32)
    codes = np.asarray(codes, np.int64)
    drafter = OffsetDrafter(np.asarray(heads, np.float32), np.asarray(offsets, np.float32))
    N, G, _ = z.shape
    K, M = drafter.K, int(num_ranks)
    counts = np.zeros((K, M + 1), np.int64)
    ranks = np.full((N, G - 1, K), -1, np.int32)  # as calibrate.draft_ranks, group-level
    member = {}  # (level, group) -> its codes
    for lv, d, tgt, x in _draft_rows(drafter, z, range(G - 2)):
        top = np.argsort(-x, axis=1, kind="stable")[:, :M]
        grp = level_groups[tgt]
        for n in range(N):
            gs = grp.groups_of(int(codes[n, tgt]))
            key = (tgt, int(gs[rng.integers(len(gs))]))
            if key not in member:
                member[key] = set(grp.members(key[1]).tolist())
            near = member[key]
            hit = next((r for r, c in enumerate(top[n]) if int(c) in near), M)
            counts[d, hit] += 1
            ranks[n, lv, d] = hit
    total = counts.sum(axis=1)
    matrix = counts[:, :M] / np.maximum(total[:, None], 1)
    return Acceptance(matrix, total, ranks, "offsets (group level)", drafter.num_parameters)
