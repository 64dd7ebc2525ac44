"""Draft acceptance, exact and at the level of acoustic-similarity groups (numpy only).

* `depth_acceptance`: top-1 drafts of the depth decoder's offsets (head reuse: zero offsets)
  against codes the exact model sampled, per draft depth: exact = the draft is the sampled
  code; group = the draft's similarity group at θ (cos of the codec's code embeddings >= θ,
  `CodecV2.embeddings`) holds the sampled code.
* `temporal_acceptance`: per frame, Σ_x min(p(x), q(x)) of the warped target and draft c0
  distributions (the probability that exact speculative sampling accepts one draft token), and
  the same over groups, Σ_g min(P(g), Q(g)) for a partition of the c0 vocabulary.
"""

from __future__ import annotations

import numpy as np

import codecspec as cs
from codecspec.calibrate.device import Acceptance
from codecspec.calibrate.offsets import OffsetDrafter

__all__ = [
    "depth_acceptance",
    "warped_probs",
    "temporal_acceptance",
    "group_partition",
    "group_acceptance_matrix",
]


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
    for lv in range(G - 2):
        logits = drafter.draft_logits(z[:, lv + 1], lv)  # [N, K, V]
        for d in range(K):
            tgt = lv + 2 + d
            if tgt > G - 1:
                break
            t1 = logits[:, d].argmax(axis=1)  # ties to the lower index, as cs.topk
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
    for lv in range(G - 2):
        logits = drafter.draft_logits(z[:, lv + 1], lv)  # [N, K, V]
        for d in range(K):
            tgt = lv + 2 + d
            if tgt > G - 1:
                break
            top = np.argsort(-logits[:, d], axis=1, kind="stable")[:, :M]
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
