"""Calibration's (c): per node budget the greedy tree of a[d][r], replayed on the recorded
frames (`simulate_tree`) and predicted (`predict_tree`); `choose_budget` keeps the fastest."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

import codecspec as cs
from codecspec.calibrate.acceptance import Acceptance
from codecspec.calibrate.latency import LatencyProfile

log = logging.getLogger("codecspec.calibrate")

__all__ = [
    "DEFAULT_BUDGETS",
    "BudgetRow",
    "TreeSimulation",
    "choose_budget",
    "predict_tree",
    "simulate_tree",
]

DEFAULT_BUDGETS = (1, 2, 4, 8, 12, 16, 24, 32)


@dataclass
class TreeSimulation:
    """Replay of the top-k verify walk of one tree on recorded frames."""

    budget: int
    frames: int
    calls_per_frame: float  # prefill included
    rounds_per_frame: float
    tokens_per_call: float  # (G-1) / calls_per_frame
    tokens_per_round: float  # mean accepted + 1 over rounds with the whole tree
    accepted_hist: list  # rounds (whole tree only) by number of accepted drafts
    q_hist: dict  # query length -> rounds per frame with that query length


def _cut_paths(tree: cs.DraftTree) -> dict[int, tuple[set, int]]:
    """depth cap -> (paths within it, query length of the cut tree incl. the root)."""
    out = {}
    for D in range(1, tree.max_depth + 1):
        ps = {tuple(p) for p in tree.paths if len(p) <= D}
        out[D] = (ps, len(ps) + 1)
    return out


def simulate_tree(tree: cs.DraftTree, ranks: np.ndarray) -> TreeSimulation:
    """Exact calls per frame of `tree` on the recorded frames (ranks from draft_ranks).

    Mirrors DepthDecoder._frame_spec: prefill yields c1; a round with root c_m takes its drafts
    from the node holding c_{m-1}, uses the tree cut to depth min(max_depth, G-1-m), accepts
    the longest path whose ranks match the true codes, and then emits one more code.
    """
    ranks = np.asarray(ranks)
    N, Gm1, K = ranks.shape
    G = Gm1 + 1
    if tree.max_depth > K:
        raise ValueError(f"tree: depth {tree.max_depth} exceeds the {K} measured depths")
    cuts = _cut_paths(tree)
    calls = rounds = 0
    full_rounds = full_tokens = 0
    hist = np.zeros(tree.max_depth + 1, np.int64)
    qh: dict[int, int] = {}
    rk = ranks.tolist()
    for n in range(N):
        m = 1
        calls += 1
        rn = rk[n]
        while m < G - 1:
            D = min(tree.max_depth, G - 1 - m)
            paths, q = cuts[D]
            row = rn[m - 1]
            path: tuple = ()
            for d in range(D):
                cand = path + (row[d],)
                if cand not in paths:
                    break
                path = cand
            a = len(path)
            if D == tree.max_depth:
                full_rounds += 1
                full_tokens += a + 1
                hist[a] += 1
            qh[q] = qh.get(q, 0) + 1
            m += a + 1
            calls += 1
            rounds += 1
    cpf = calls / N
    return TreeSimulation(
        budget=tree.num_nodes - 1,
        frames=N,
        calls_per_frame=cpf,
        rounds_per_frame=rounds / N,
        tokens_per_call=(G - 1) / cpf,
        tokens_per_round=full_tokens / max(full_rounds, 1),
        accepted_hist=hist.tolist(),
        q_hist={int(q): c / N for q, c in sorted(qh.items())},
    )


def _depth_mass(tree: cs.DraftTree, accept: np.ndarray) -> np.ndarray:
    """S[k] = Σ over depth-k nodes of Π a (S[0] = 1) = P(at least k drafts accepted)."""
    val = np.ones(tree.num_nodes)
    par, dep, rnk = tree.parents, tree.depths, tree.ranks
    S = np.zeros(tree.max_depth + 2)
    S[0] = 1.0
    for i in range(1, tree.num_nodes):
        val[i] = val[par[i]] * accept[dep[i] - 1, rnk[i]]
        S[dep[i]] += val[i]
    return S


def predict_tree(tree: cs.DraftTree, accept: np.ndarray, num_codebooks: int, cost=None) -> dict:
    """Independence-model prediction of one frame: calls, tokens/call and (with cost(q)) time.

    Exact expectation over the frame structure (prefill, cut trees at the frame end) given
    a[d][r]; only the independence of depths is assumed.
    """
    accept = np.asarray(accept, np.float64)
    G = int(num_codebooks)
    cuts = {}
    for D in range(1, tree.max_depth + 1):
        t = cs.DraftTree.from_paths([p for p in tree.paths if len(p) <= D])
        S = _depth_mass(t, accept)
        pa = S[: D + 1] - S[1 : D + 2]  # P(exactly a accepted), a = 0..D
        cuts[D] = (pa, t.num_nodes)
    E_calls = np.zeros(G + tree.max_depth + 2)
    E_time = np.zeros_like(E_calls)
    for m in range(G - 2, 0, -1):
        pa, q = cuts[min(tree.max_depth, G - 1 - m)]
        nxt = m + 1 + np.arange(len(pa))
        E_calls[m] = 1.0 + pa @ E_calls[nxt]
        E_time[m] = (cost(q) if cost else 0.0) + pa @ E_time[nxt]
    calls = 1.0 + E_calls[1]
    out = {
        "calls_per_frame": float(calls),
        "tokens_per_call": float((G - 1) / calls),
        "tokens_per_round": float(tree.expected_tokens(accept)),
    }
    if cost:
        out["ms_per_frame"] = float(cost(2, prefill=True) + E_time[1])
    return out


@dataclass
class BudgetRow:
    budget: int
    nodes: int
    max_depth: int
    predicted_tokens_per_round: float  # 1 + Σ Π a
    simulated_tokens_per_round: float
    predicted_calls_per_frame: float
    simulated_calls_per_frame: float
    predicted_tokens_per_call: float
    simulated_tokens_per_call: float
    cost_ratio: float  # cost(N+1) / cost(1)
    speedup_simple: float  # predicted tokens per round / cost ratio
    speedup_predicted: float  # frame time, independence model
    speedup_simulated: float  # frame time, replayed walks
    tree: Any = field(default=None, repr=False)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "tree"}
        d["paths"] = [list(p) for p in self.tree.paths] if self.tree is not None else None
        return d


def choose_budget(
    acceptance: Acceptance,
    latency: LatencyProfile,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    *,
    max_depth: Optional[int] = None,
) -> tuple[int, list[BudgetRow]]:
    """(best budget, one row per budget). The best maximises the simulated frame speed-up.

    AR frame = prefill + (G-2) single-token calls; speculative frame = prefill + the replayed
    rounds, each costing cost(q) for its (possibly cut) tree. The speed-up therefore already
    accounts for the first code coming from the prefill and for the shallower trees at the
    frame end.
    """
    a = acceptance.matrix
    K = acceptance.K if max_depth is None else min(int(max_depth), acceptance.K)
    G = acceptance.ranks.shape[1] + 1
    t_ar = latency.cost(2, prefill=True) + (G - 2) * latency.cost(1)
    rows = []
    for N in sorted({int(b) for b in budgets}):
        if N < 1:
            raise ValueError(f"budgets: must be >= 1, got {N}")
        if N + 1 > latency.max_query or N + 1 in latency.unsupported:
            log.warning("budget %d skipped: query length %d was not measured", N, N + 1)
            continue
        try:
            tree = cs.DraftTree.greedy(a, N, max_depth=K)
        except ValueError as e:
            log.warning("budget %d skipped (%s)", N, e)
            continue
        sim = simulate_tree(tree, acceptance.ranks)
        pred = predict_tree(tree, a, G, cost=latency.cost)
        t_sim = latency.cost(2, prefill=True) + sum(
            latency.cost(q) * per for q, per in sim.q_hist.items()
        )
        ratio = latency.ratio(tree.num_nodes)
        rows.append(
            BudgetRow(
                budget=N,
                nodes=tree.num_nodes,
                max_depth=tree.max_depth,
                predicted_tokens_per_round=pred["tokens_per_round"],
                simulated_tokens_per_round=sim.tokens_per_round,
                predicted_calls_per_frame=pred["calls_per_frame"],
                simulated_calls_per_frame=sim.calls_per_frame,
                predicted_tokens_per_call=pred["tokens_per_call"],
                simulated_tokens_per_call=sim.tokens_per_call,
                cost_ratio=ratio,
                speedup_simple=pred["tokens_per_round"] / ratio,
                speedup_predicted=t_ar / pred["ms_per_frame"],
                speedup_simulated=t_ar / t_sim,
                tree=tree,
            )
        )
    if not rows:
        raise ValueError("budgets: no usable budget")
    best = max(rows, key=lambda r: (r.speedup_simulated, -r.budget))
    return best.budget, rows
