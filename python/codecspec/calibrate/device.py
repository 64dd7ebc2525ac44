"""Per-device calibration of the depth-speculation draft tree.

Three measurements, then a choice:

(a) acceptance a[d][r]: on free-generation frames of the exact model, teacher-forced, the
    probability that the true code at depth d+1 of a round equals the rank-r candidate of the
    draft (top-k of the draft logits of the node before the round's root). Every frame also
    yields the rank of each true code, which lets any tree be replayed exactly: the top-k
    verify walk descends into the child whose token equals the code the target samples, and
    in free generation that code is the recorded one, so replaying the walk on the recorded
    frames gives the empirical calls per frame of that tree under the model's own law.
(b) latency: median ms of one verify call vs query length (graph call) plus the host work of
    that call (top-k + verify_tree for a tree call, one sample for an AR step).
(c) choice: for each node budget N, the greedy tree for a; per-frame time = prefill + Σ rounds
    cost(q_round) (rounds near the frame end use the tree cut to the remaining depth) against
    prefill + (G-2) AR steps; the N with the best simulated speed-up wins.

`calibrate()` does everything end to end and writes tree.json, device_profile.json (the
measurements), decision.json (what `auto` acts on: `codecspec.calibrate.decision`), the offsets
and plots. See docs/calibration.md.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

import codecspec as cs
from codecspec.calibrate.data import (
    collect_frames,
    read_heads,
    synthetic_inputs,
    teacher_forced_hidden,
)
from codecspec.calibrate.decision import DECISION_FILE, Decision, write_decision
from codecspec.calibrate.offsets import (
    OffsetDrafter,
    config_hash,
    heads_hash,
    load_offsets,
    offsets_path_for,
    save_offsets,
    split_frames,
    train_offsets,
)
from codecspec.runtime.kv import split_kv
from codecspec.runtime.session import session_threads

log = logging.getLogger("codecspec.calibrate")

__all__ = [
    "Acceptance",
    "BudgetRow",
    "CalibrationResult",
    "LatencyProfile",
    "TreeSimulation",
    "calibrate",
    "choose_budget",
    "cpu_model",
    "decision_device",
    "draft_ranks",
    "measure_acceptance",
    "measure_end_to_end",
    "measure_latency",
    "measure_overhead",
    "params_dict",
    "predict_tree",
    "simulate_tree",
    "utc_now",
]

PROFILE_FORMAT = "codecspec.device_profile"
PROFILE_VERSION = 1
DEFAULT_BUDGETS = (1, 2, 4, 8, 12, 16, 24, 32)


# ---------------------------------------------------------------------- (a) acceptance
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
    levels = range(G - 2)
    if progress:
        from codecspec.progress import bar

        levels = bar(levels, desc="draft ranks", total=G - 2)
    for lv in levels:
        logits = drafter.draft_logits(z[:, lv + 1], lv)  # [N, K, V]
        V = logits.shape[-1]
        for d in range(K):
            tgt = lv + 2 + d
            if tgt > G - 1:
                break
            x = logits[:, d]
            t = codes[:, tgt]
            tl = x[np.arange(N), t][:, None]
            before = np.arange(V)[None, :] < t[:, None]
            rank = (x > tl).sum(1) + ((x == tl) & before).sum(1)
            out[:, lv, d] = np.minimum(rank, M)
    return out


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


# ---------------------------------------------------------------------- (b) latency
@dataclass
class LatencyProfile:
    """Median ms per call vs query length q (interpolated linearly between measured q)."""

    qs: list
    graph_ms: list  # median graph call
    host_ms: list  # median host work of that call (sample / topk + verify_tree)
    past_len: int
    repeats: int
    samples: Optional[np.ndarray] = None  # [repeats, len(qs)] graph ms
    prefill_ms: Optional[float] = None  # q=2 with no past (the frame's first call)
    unsupported: list = field(default_factory=list)  # query lengths the graph rejects
    overhead_ms: float = 0.0  # per-call decoder glue (Python, KV copies), see measure_overhead

    @property
    def max_query(self) -> int:
        """Largest query length measured (larger trees are not offered)."""
        return int(max(self.qs))

    def graph(self, q: float) -> float:
        return float(np.interp(q, self.qs, self.graph_ms))

    def host(self, q: float) -> float:
        return float(np.interp(q, self.qs, self.host_ms))

    def cost(self, q: float, prefill: bool = False) -> float:
        """ms of one decoder call with q query tokens (graph + host + glue)."""
        if prefill and self.prefill_ms is not None:
            return self.prefill_ms + self.host(1) + self.overhead_ms
        return self.graph(q) + self.host(q) + self.overhead_ms

    def ratio(self, q: float) -> float:
        return self.cost(q) / self.cost(1)

    def to_dict(self) -> dict:
        return {
            "qs": list(map(int, self.qs)),
            "graph_ms": [round(x, 5) for x in self.graph_ms],
            "host_ms": [round(x, 5) for x in self.host_ms],
            "total_ms": [round(g + h, 5) for g, h in zip(self.graph_ms, self.host_ms)],
            "prefill_ms": None if self.prefill_ms is None else round(self.prefill_ms, 5),
            "past_len": self.past_len,
            "repeats": self.repeats,
            "unsupported_qs": list(map(int, self.unsupported)),
            "overhead_ms": round(self.overhead_ms, 5),
        }


def _latency_feeds(c, q: int, past_len: int, rng) -> dict:
    pos = np.minimum(past_len + np.arange(q), c.max_positions - 1).astype(np.int64)
    level = np.clip(pos - 1, 1, c.num_codebooks - 1)
    ids = c.c0_vocab_size + (level - 1) * c.codebook_size + rng.integers(0, c.codebook_size, q)
    L, kvh, hd = c.num_layers, c.num_kv_heads, c.head_dim
    past = rng.standard_normal((L, past_len, 2 * kvh * hd)).astype(np.float32)
    keys, values = (np.ascontiguousarray(a) for a in split_kv(past, kvh))
    return {
        "input_ids": ids.astype(np.int64),
        "input_embeds": np.zeros((q, c.input_width), np.float32),
        "position_ids": pos,
        "attention_bias": np.zeros((q, past_len + q), np.float32),
        # the graph takes one of the two layouts (runtime.kv); _sweep_feeds keeps its own
        "past_keys": keys,
        "past_values": values,
        "past_kv": past,
        "head_ids": np.clip(pos - 1, 0, c.num_codebooks - 2).astype(np.int64),
        "draft_offsets": np.zeros((c.num_draft_offsets, c.hidden_size), np.float32),
    }


def _host_tree(q: int, K: int) -> cs.DraftTree:
    """A q-node tree of depth <= K shaped like calibrated ones (wide at depth 1)."""
    a = np.array([[0.5 * 0.5**r for r in range(max(q, 2))]] * K) * 0.9 ** np.arange(K)[:, None]
    return cs.DraftTree.greedy(a, q - 1, max_depth=K)


def _time_host(c, q: int, params, rng, reps: int, bank=None) -> float:
    """Median ms of the host work of one decoder call, as DepthDecoder does it.

    With `bank` (heads="hidden" graphs) the head products are host work too: the target rows
    the verify walk visits and the next round's draft candidates.
    """
    V, K, H = c.codebook_size, c.num_draft_offsets, c.hidden_size
    g = cs.Generator(0)
    times = []
    if q == 1:
        x = rng.standard_normal(V).astype(np.float32)
        zq = rng.standard_normal(H).astype(np.float32)
        for _ in range(reps):
            t0 = time.perf_counter()
            cs.sample(x if bank is None else bank.logits(0, zq), params, g)
            times.append(time.perf_counter() - t0)
        return 1e3 * float(np.median(times))
    tree = _host_tree(q, K)
    M = int(tree.ranks.max()) + 1
    logits = rng.standard_normal((q, V)).astype(np.float32)
    draft = rng.standard_normal((K, V)).astype(np.float32)
    hidden = rng.standard_normal((q, H)).astype(np.float32)
    offsets = np.zeros((K, H), np.float32)
    node_heads = np.minimum(1 + tree.depths, c.num_codebooks - 2).astype(np.int64)
    depths = tree.depths.astype(np.int64)
    ranks = tree.ranks.astype(np.int64)
    for _ in range(reps):
        t0 = time.perf_counter()
        if bank is None:
            cand = cs.topk(draft[: tree.max_depth], M)
        else:
            cand = bank.draft_candidates(hidden[0], 1, offsets[: tree.max_depth], M)
        tokens = np.empty(q, np.int32)
        tokens[0] = 0
        tokens[1:] = cand[depths[1:] - 1, ranks[1:]]
        if bank is None:
            cs.verify_tree(tree, tokens, logits, params, g, draft_kind="topk")
        else:
            cs.verify_tree_hidden(tree, tokens, hidden, node_heads, bank, params, g)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def measure_latency(
    graph,
    qs: Sequence[int] = (1, 2, 4, 8, 12, 16, 24, 32),
    past_len: int = 8,
    repeats: int = 30,
    warmup: int = 3,
    *,
    params: Optional[cs.SamplingParams] = None,
    provider: str = "cpu",
    threads: Optional[int] = None,
    host: bool = True,
    heads: Optional[np.ndarray] = None,
    seed: int = 0,
    progress: bool = True,
) -> LatencyProfile:
    """Median ms per verify call vs query length on this device.

    graph: a DepthGraph, DepthDecoder or ONNX path. Sweeps are interleaved (each repeat visits
    every q in a fresh random order) after `warmup` untimed sweeps, so drifting machine load
    spreads over all q; medians resist the outliers of a shared machine. Also times the
    prefill shape (q=2, no past) and, with host=True, the host work per call (for heads="hidden"
    graphs including the host-side head products: `heads`, or the model's sidecar).
    """
    graph = _as_depth_graph(graph, provider, threads)
    c = graph.config
    qs = sorted({int(q) for q in qs} | {1})
    if qs[0] < 1:
        raise ValueError(f"qs: query lengths must be >= 1, got {qs}")
    rng = np.random.default_rng(seed)
    names, feeds, pre = _sweep_feeds(graph, qs, past_len, rng)
    unsupported = _unsupported_lengths(graph, names, feeds, qs)
    qs = [q for q in qs if q not in unsupported]
    if not qs or qs[0] != 1:
        raise ValueError("graph: a single-token call fails; cannot profile latency")
    params = params or cs.SamplingParams(0.9, 50, 1.0)
    bank = _host_head_bank(graph, heads) if host else None
    keys = list(qs) + ["prefill"]
    samples = _interleaved_sweeps(
        graph, names, feeds, pre, keys, rng, repeats, warmup, params, bank, host, progress
    )
    med = np.median(samples, axis=0)
    host_ms = [_time_host(c, q, params, rng, max(5, repeats), bank) if host else 0.0 for q in qs]
    return LatencyProfile(
        qs=list(qs),
        graph_ms=med[:-1].tolist(),
        host_ms=host_ms,
        past_len=int(past_len),
        repeats=int(repeats),
        samples=samples[:, :-1],
        prefill_ms=float(med[-1]),
        unsupported=unsupported,
    )


def _as_depth_graph(graph, provider: str, threads):
    """The DepthGraph behind a DepthDecoder, or one opened from a path: latency is a property
    of the graph call alone."""
    from codecspec.runtime.depth_graph import DepthGraph

    if hasattr(graph, "graph") and isinstance(graph.graph, DepthGraph):
        graph = graph.graph
    if not isinstance(graph, DepthGraph):
        graph = DepthGraph(graph, provider, threads)
    return graph


def _sweep_feeds(graph, qs, past_len: int, rng):
    """(output names, feeds per q, prefill feeds), each limited to the inputs this graph
    declares (graphs differ: heads="hidden" ones take no draft offsets, some no head ids).
    The prefill is the first call of a frame: two tokens, no past, causal mask."""
    c = graph.config
    feeds = {q: _latency_feeds(c, q, past_len, rng) for q in qs}
    pre = _latency_feeds(c, 2, 0, rng)
    pre["position_ids"] = np.arange(2, dtype=np.int64)
    pre["attention_bias"] = np.array([[0.0, -np.inf], [0.0, 0.0]], np.float32)
    names = list(getattr(graph, "outputs", ("logits", "draft_logits", "new_keys", "new_values")))
    accepted = {i.name for i in graph.session.get_inputs()}
    feeds = {q: {k: v for k, v in f.items() if k in accepted} for q, f in feeds.items()}
    pre = {k: v for k, v in pre.items() if k in accepted}
    return names, feeds, pre


def _unsupported_lengths(graph, names, feeds, qs) -> list:
    """Query lengths this graph refuses. Some graphs cap the query length (the contrib
    RotaryEmbedding kernel refuses more query tokens than its cos/sin cache has rows): probe
    once, drop what fails, report it."""
    import onnxruntime as ort

    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # the expected failure would otherwise print an ORT error
    unsupported = []
    for q in list(qs):
        try:
            graph.session.run(names, feeds[q], quiet)
        except Exception as e:  # onnxruntime raises its own exception types
            log.warning("query length %d fails on this graph; excluded (%s)", q, str(e)[:200])
            unsupported.append(q)
    return unsupported


def _host_head_bank(graph, heads):
    """For a heads="hidden" graph the head products are host work, timed with the rest of the
    host work: a HeadBank over `heads` or the model's sidecar. None when the graph has its
    heads inside."""
    if getattr(graph, "heads_in_graph", True):
        return None
    if heads is None:
        from codecspec.calibrate.data import read_heads

        heads = read_heads(graph.path)
    return cs.HeadBank(np.ascontiguousarray(heads, np.float32))


def _interleaved_sweeps(
    graph, names, feeds, pre, keys, rng, repeats, warmup, params, bank, host, progress
) -> np.ndarray:
    """[repeats, len(keys)] ms of graph calls: each sweep visits every key (q, or "prefill")
    in a fresh random order so drifting machine load spreads over all of them; the first
    `warmup` sweeps are not kept."""
    c, run = graph.config, graph.session.run
    samples = np.zeros((repeats, len(keys)))
    it = range(warmup + repeats)
    if progress:
        from codecspec.progress import bar

        it = bar(it, desc="latency sweeps", total=warmup + repeats)
    for rep in it:
        for i in rng.permutation(len(keys)):
            f = pre if keys[i] == "prefill" else feeds[keys[i]]
            if host:
                # The decoder's host work (head GEMVs, verify) runs right before each call and
                # evicts part of the graph's weights from cache: time the call after it.
                _time_host(c, 2 if keys[i] == "prefill" else keys[i], params, rng, 1, bank)
            t0 = time.perf_counter()
            run(names, f)
            dt = time.perf_counter() - t0
            if rep >= warmup:
                samples[rep - warmup, i] = 1e3 * dt
    return samples


# ---------------------------------------------------------------------- (c) choice
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


# ---------------------------------------------------------------------- decoder glue
def measure_overhead(
    graph, latency: LatencyProfile, hiddens, c0s, *, params=None, heads=None, seed: int = 0
) -> float:
    """Per-call glue of the real decoder (ms), stored in `latency.overhead_ms` and returned.

    Times AR frames of the DepthDecoder and subtracts what the profile already explains
    (prefill + (G-2) single-token calls, graph + host). What remains (Python, cache copies,
    input assembly) is paid by every call, speculative or not, so it favours fewer calls:
    on small models it is a large share of a call and moves the best budget.
    """
    from codecspec.decode.depth import DepthDecoder

    dec = DepthDecoder(graph, params=params, heads=heads)
    hiddens = np.asarray(hiddens, np.float32)
    g = cs.Generator(seed).fork(3)
    dec.decode_frame(hiddens[0], int(c0s[0]), g.copy(), "ar")  # warm-up
    times = []
    for i in range(len(c0s)):
        t0 = time.perf_counter()
        dec.decode_frame(hiddens[i], int(c0s[i]), g, "ar")
        times.append(1e3 * (time.perf_counter() - t0))
    G = dec.G
    latency.overhead_ms = 0.0
    model = latency.cost(2, prefill=True) + (G - 2) * latency.cost(1)
    latency.overhead_ms = max(0.0, (float(np.median(times)) - model) / (G - 1))
    return latency.overhead_ms


# ---------------------------------------------------------------------- end to end check
def measure_end_to_end(
    graph,
    tree,
    offsets,
    hiddens,
    c0s,
    *,
    params=None,
    heads=None,
    seed: int = 0,
    progress: bool = False,
) -> dict:
    """Wall-clock ms per frame of the real DepthDecoder, AR vs speculative, interleaved.

    Includes everything the calibration model leaves out (Python glue, KV copies, varying
    past length), so it is the figure to trust on this machine.
    """
    from codecspec.decode.depth import DepthDecoder

    dec = DepthDecoder(graph, tree=tree, offsets=offsets, params=params, heads=heads)
    hiddens = np.asarray(hiddens, np.float32)
    g_ar, g_sp = cs.Generator(seed).fork(1), cs.Generator(seed).fork(2)
    t_ar, t_sp = [], []
    it = range(len(c0s))
    if progress:
        from codecspec.progress import bar

        it = bar(it, desc="end-to-end", total=len(c0s))
    dec.decode_frame(hiddens[0], int(c0s[0]), g_ar.copy(), "spec")  # warm-up
    dec.decode_frame(hiddens[0], int(c0s[0]), g_ar.copy(), "ar")
    dec.stats.reset()
    spec_calls = spec_frames = 0
    for i in it:
        for mode in ("ar", "spec") if i % 2 == 0 else ("spec", "ar"):
            before = dec.stats.calls
            t0 = time.perf_counter()
            dec.decode_frame(hiddens[i], int(c0s[i]), g_ar if mode == "ar" else g_sp, mode)
            dt = 1e3 * (time.perf_counter() - t0)
            if mode == "ar":
                t_ar.append(dt)
            else:
                t_sp.append(dt)
                spec_calls += dec.stats.calls - before
                spec_frames += 1
    G = dec.G
    ar_ms, sp_ms = float(np.median(t_ar)), float(np.median(t_sp))
    cpf = spec_calls / max(spec_frames, 1)
    return {
        "frames": len(c0s),
        "ar_ms_per_frame": ar_ms,
        "spec_ms_per_frame": sp_ms,
        "speedup": ar_ms / sp_ms,
        "spec_calls_per_frame": cpf,
        "spec_tokens_per_call": (G - 1) / cpf if cpf else 0.0,
    }


# ---------------------------------------------------------------------- end to end
@dataclass
class CalibrationResult:
    out_dir: Path
    config: Any
    budget: int
    tree: cs.DraftTree
    offsets: np.ndarray
    acceptance: Acceptance
    acceptance_zero: Acceptance
    latency: LatencyProfile
    rows: list
    train_history: Any = None
    acceptance_medusa: Optional[Acceptance] = None
    ablation: dict = field(default_factory=dict)
    end_to_end: Optional[dict] = None
    profile: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    decision: Optional[Decision] = None  # what `auto` acts on (decision.json)

    @property
    def best(self) -> BudgetRow:
        return next(r for r in self.rows if r.budget == self.budget)

    @property
    def predicted_speedup(self) -> float:
        return self.best.speedup_predicted

    @property
    def simulated_speedup(self) -> float:
        return self.best.speedup_simulated

    def summary(self) -> str:
        b = self.best
        lines = [
            f"chosen N={self.budget}: tokens/call sim {b.simulated_tokens_per_call:.3f} "
            f"(pred {b.predicted_tokens_per_call:.3f}), calls/frame "
            f"{b.simulated_calls_per_frame:.2f}, speed-up sim {b.speedup_simulated:.3f} "
            f"(pred {b.speedup_predicted:.3f}, simple {b.speedup_simple:.3f})",
        ]
        for name, ab in self.ablation.items():
            lines.append(
                f"  {name}: tokens/call {ab['simulated_tokens_per_call']:.3f} "
                f"at N={ab['budget']}, speed-up {ab['speedup_simulated']:.3f}"
            )
        if self.end_to_end:
            e = self.end_to_end
            lines.append(
                f"  measured decoder: {e['ar_ms_per_frame']:.3f} -> "
                f"{e['spec_ms_per_frame']:.3f} ms/frame ({e['speedup']:.3f}x)"
            )
        return "\n".join(lines)


def cpu_model() -> str:
    """This CPU's model name (/proc/cpuinfo; the platform's processor name elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def utc_now() -> str:
    """The time now, UTC ISO 8601 to the second: the date stamp of calibration files."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _quantised_rows(provider: str, threads: Optional[int], hidden: int, tree_nodes: int) -> dict:
    """What speculation over int8 / int4 weights keeps on this device: per precision, whether
    a MatMulNBits row is the same bits alone and in a verify call, or how far it moves
    against float rounding (graphs.row_probe), for an [H, H] MatMul and calls of up to the
    chosen tree's size."""
    from codecspec.graphs.row_probe import cpu_simd_flags, probe_weights

    rows = sorted({2, 5, 17, max(2, tree_nodes)})
    out: dict[str, Any] = {"cpu_simd": cpu_simd_flags(), "size": [hidden, hidden]}
    for weights in ("int8", "int4"):
        try:
            probe = probe_weights(
                weights, (hidden, hidden), rows=rows, provider=provider, threads=threads
            )
            out[weights] = probe.to_dict()
        except ValueError as e:  # no quantiser (onnx_ir) or no kernel on this provider
            out[weights] = {"error": str(e)}
    return out


def _ablation_row(acc: Acceptance, latency, budget) -> dict:
    _, rows = choose_budget(acc, latency, [budget])
    r = rows[0]
    return {
        "budget": budget,
        "num_parameters": acc.num_parameters,
        "top1": acc.top(1).tolist(),
        "simulated_tokens_per_call": r.simulated_tokens_per_call,
        "simulated_tokens_per_round": r.simulated_tokens_per_round,
        "predicted_tokens_per_round": r.predicted_tokens_per_round,
        "speedup_simulated": r.speedup_simulated,
    }


def calibrate(
    model_path: Union[str, os.PathLike],
    out_dir: Union[str, os.PathLike],
    *,
    offsets: Union[None, str, os.PathLike, np.ndarray] = None,
    frames: int = 512,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    provider: str = "cpu",
    seed: int = 0,
    params: Optional[cs.SamplingParams] = None,
    threads: Optional[int] = None,
    inputs: Optional[tuple] = None,
    heads: Optional[np.ndarray] = None,
    val_fraction: float = 0.25,
    train_kwargs: Optional[dict] = None,
    medusa: bool = False,
    medusa_kwargs: Optional[dict] = None,
    num_ranks: Optional[int] = None,
    past_len: int = 8,
    latency_repeats: int = 30,
    end_to_end_frames: int = 32,
    overhead_frames: int = 32,
    save_beside_model: bool = True,
    plots: bool = True,
    progress: bool = True,
) -> CalibrationResult:
    """Calibrate the draft tree of `model_path` (a codecspec depth graph) on this device.

    1. frames: `frames` free-generation frames of the exact model (AR, `params`, `seed`) on
       `inputs` = (hiddens [N, H_in], c0s [N]) or synthetic ones; teacher-forced hidden states.
       `heads` [G-1, V, H]: the LM heads, needed only for a heads="hidden" graph without a
       `<model>.heads.npy` sidecar.
    2. offsets: loaded (path) / given (array), or trained on a (1 - val_fraction) share of the
       frames and written to out_dir/offsets.npz (with metadata) and out_dir/offsets.npy (bare
       array, what DepthDecoder.from_dir reads), and beside the model unless disabled.
    3. acceptance on the held-out frames (all frames when offsets were given), for the offsets
       and for zero offsets (and Medusa heads with medusa=True) as ablations.
    4. latency profile for q in {1, 2} ∪ {N + 1}; 5. best N; 6. optional end-to-end check with
       the real decoder; 7. tree.json, device_profile.json (with what int8 / int4
       speculation keeps on this device: `quantised_rows`), decision.json (the one decision
       format, `calibrate.decision`), PNG plots.
    """
    t_start = time.monotonic()
    params = params or cs.SamplingParams(0.9, 50, 1.0)
    run = _open_for_calibration(model_path, out_dir, provider, threads, heads, params, seed)
    run.progress = progress
    _collect_corpus(run, inputs, frames)  # 1.
    if offsets is None:  # 2.
        offs, history, eval_idx = _train_and_save_offsets(
            run, val_fraction, train_kwargs, save_beside_model
        )
    else:
        offs, history = _given_offsets(offsets, run.graph.config, run.heads), None
        eval_idx = np.arange(len(run.codes))
    acc, acc0, acc_med = _acceptances(  # 3.
        run, offs, budgets, num_ranks, eval_idx, medusa, medusa_kwargs, offsets is None
    )
    lat = _calibration_latency(run, budgets, past_len, latency_repeats, overhead_frames)  # 4.
    budget, rows = choose_budget(acc, lat, budgets)  # 5.
    tree = next(r for r in rows if r.budget == budget).tree
    ablation = _ablations(acc, acc0, acc_med, lat, budget)
    e2e = _end_to_end_check(run, tree, offs, end_to_end_frames)  # 6.
    (run.out / "tree.json").write_text(tree.to_json())  # 7.
    run.files["tree"] = str(run.out / "tree.json")
    result = CalibrationResult(
        out_dir=run.out, config=run.graph.config, budget=budget, tree=tree, offsets=offs,
        acceptance=acc, acceptance_zero=acc0, latency=lat, rows=rows, train_history=history,
        acceptance_medusa=acc_med, ablation=ablation, end_to_end=e2e, files=run.files,
    )  # fmt: skip
    result.profile = _write_device_profile(result, run, provider, threads, eval_idx, t_start)
    result.decision = _write_decision(result, run)
    _finish_calibration(result, plots=plots)
    return result


@dataclass
class _CalibrationRun:
    """What every calibration step shares: the model, the caller's settings, where files go,
    and (after step 1) the corpus of frames."""

    model_path: Path
    out: Path
    graph: Any
    heads: np.ndarray
    params: Any
    seed: int
    progress: bool = True
    files: dict = field(default_factory=dict)
    hiddens: Any = None
    c0s: Any = None
    codes: Any = None
    z: Any = None


def _open_for_calibration(model_path, out_dir, provider, threads, heads, params, seed):
    """The output folder, the depth graph and its LM heads, checked against each other: every
    later step (frames, offsets, acceptance) multiplies by these heads, so a mismatch must fail
    before any work."""
    from codecspec.runtime.depth_graph import DepthGraph

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_path = Path(model_path)
    graph = DepthGraph(model_path, provider, threads)
    c = graph.config
    heads = read_heads(model_path) if heads is None else np.ascontiguousarray(heads, np.float32)
    want = (c.num_lm_heads, c.codebook_size, c.hidden_size)
    if heads.shape != want:
        raise ValueError(f"heads: expected shape {want}, got {heads.shape}")
    return _CalibrationRun(model_path, out, graph, heads, params, seed)


def _collect_corpus(run: _CalibrationRun, inputs, frames: int) -> None:
    """Step 1: free-generation AR frames of the exact model on the caller's inputs (cut to
    `frames`) or synthetic ones, and their teacher-forced hidden states: the data acceptance
    is measured (and offsets trained) on."""
    if inputs is None:
        hiddens, c0s = synthetic_inputs(run.graph.config, frames, run.seed)
    else:
        hiddens, c0s = (np.asarray(x) for x in inputs)
        hiddens, c0s = hiddens[:frames], c0s[:frames]
    gen = cs.Generator(run.seed)
    codes = collect_frames(
        run.graph, hiddens, c0s, gen, "ar", params=run.params, heads=run.heads,
        progress=run.progress,
    )  # fmt: skip
    run.z = teacher_forced_hidden(run.graph, hiddens, c0s, codes, progress=run.progress)
    run.hiddens, run.c0s, run.codes = hiddens, c0s, codes


def _train_and_save_offsets(
    run: _CalibrationRun, val_fraction: float, train_kwargs, save_beside_model: bool
):
    """Step 2: train offsets on a share of the frames and write them (out_dir and, unless
    disabled, beside the model, where DepthDecoder finds them). Returns (offsets, history, the
    frames acceptance is measured on: the held-out ones, or all when none were held out)."""
    c, N = run.graph.config, len(run.codes)
    train_idx, val_idx = split_frames(N, val_fraction, run.seed)
    kw = dict(epochs=20)
    kw.update(train_kwargs or {})
    offs, history = train_offsets(
        run.z, run.codes, run.heads, c.num_draft_offsets, val_frames=val_idx, seed=run.seed,
        progress=run.progress, **kw,
    )  # fmt: skip
    meta = {
        "config_hash": config_hash(c),
        "heads_hash": heads_hash(run.heads),
        "model": run.model_path.name,
        "train_loss": float(np.mean(history.train_loss[-10:])),
        "heldout": history.final,
        "heldout_zero_offsets": history.baseline,
        "frames": N,
        "num_train": history.num_train,
        "sampling": params_dict(run.params),
        "seed": run.seed,
    }
    run.files["offsets"] = str(save_offsets(run.out / "offsets.npz", offs, meta))
    np.save(run.out / "offsets.npy", offs)
    run.files["offsets_npy"] = str(run.out / "offsets.npy")
    if save_beside_model:
        try:
            run.files["offsets_beside_model"] = str(
                save_offsets(offsets_path_for(run.model_path), offs, meta)
            )
        except OSError as e:
            log.warning("could not write offsets beside the model (%s)", e)
    eval_idx = val_idx if len(val_idx) else np.arange(N)
    return offs, history, eval_idx


def _given_offsets(offsets, c, heads) -> np.ndarray:
    """Step 2 with the caller's offsets (a file, checked against the model's hashes, or an
    array), shape checked: the tree search assumes one offset row per draft depth."""
    K, H = c.num_draft_offsets, c.hidden_size
    if isinstance(offsets, (str, os.PathLike)):
        offs, _ = load_offsets(offsets, config=c, heads=heads)
    else:
        offs = np.ascontiguousarray(offsets, np.float32)
    if offs.shape != (K, H):
        raise ValueError(f"offsets: expected shape ({K}, {H}), got {offs.shape}")
    return offs


def _acceptances(
    run: _CalibrationRun, offs, budgets, num_ranks, eval_idx, medusa, medusa_kwargs, heldout
):
    """Step 3: acceptance of the offsets and, as ablations, of zero offsets and (medusa=True) of
    Medusa heads; all on the same frames so the rows compare. Medusa heads validate on the
    held-out frames only when the offsets were trained here (`heldout`)."""
    c, z, codes, heads = run.graph.config, run.z, run.codes, run.heads
    K = c.num_draft_offsets
    M = int(num_ranks or min(max(budgets), c.codebook_size))
    acc = measure_acceptance(z, codes, heads, offs, num_ranks=M, frames=eval_idx)
    acc0 = measure_acceptance(z, codes, heads, None, K=K, num_ranks=M, frames=eval_idx)
    acc_med = None
    if medusa:
        from codecspec.calibrate.medusa import train_medusa

        kw = dict(epochs=20)
        kw.update(medusa_kwargs or {})
        heads_m, _ = train_medusa(
            z, codes, heads, K, val_frames=eval_idx if heldout else None, seed=run.seed,
            progress=run.progress, **kw,
        )  # fmt: skip
        acc_med = measure_acceptance(z, codes, drafter=heads_m, num_ranks=M, frames=eval_idx)
    return acc, acc0, acc_med


def _calibration_latency(run: _CalibrationRun, budgets, past_len, repeats, overhead_frames):
    """Step 4: the latency profile at exactly the query lengths the budgets need (1 for AR, 2 for
    the prefill, N + 1 for every budget N: the tree's nodes plus its root), then the real
    decoder's per-call glue on `overhead_frames` frames."""
    qs = sorted({1, 2} | {int(b) + 1 for b in budgets})
    lat = measure_latency(
        run.graph, qs, past_len=past_len, repeats=repeats, params=run.params, heads=run.heads,
        seed=run.seed, progress=run.progress,
    )  # fmt: skip
    if overhead_frames:
        n = min(int(overhead_frames), len(run.codes))
        measure_overhead(
            run.graph, lat, run.hiddens[:n], run.c0s[:n], params=run.params, heads=run.heads,
            seed=run.seed,
        )  # fmt: skip
    return lat


def _ablations(acc, acc0, acc_med, lat, budget) -> dict:
    """Step 5's comparison: the chosen budget's row for each drafter (zero offsets, Medusa, the
    offsets), in the order device_profile.json has always listed them."""
    ablation = {"zero_offsets": _ablation_row(acc0, lat, budget)}
    if acc_med is not None:
        ablation["medusa"] = _ablation_row(acc_med, lat, budget)
    ablation["offsets"] = _ablation_row(acc, lat, budget)
    return ablation


def _end_to_end_check(run: _CalibrationRun, tree, offs, frames: int) -> Optional[dict]:
    """Step 6: the real decoder, AR vs the chosen tree, on the first `frames` frames (None when
    0); its own seed so it does not replay the corpus's draws."""
    if not frames:
        return None
    n = min(int(frames), len(run.codes))
    return measure_end_to_end(
        run.graph, tree, offs, run.hiddens[:n], run.c0s[:n], params=run.params,
        heads=run.heads, seed=run.seed + 7, progress=run.progress,
    )  # fmt: skip


def _device_header(graph, model_path: Path, heads) -> dict:
    """Where the profile was measured (machine, runtime, model): what decides whether a later
    run may reuse it."""
    import onnxruntime as ort

    c = graph.config
    return {
        "format": PROFILE_FORMAT,
        "version": PROFILE_VERSION,
        "date": utc_now(),
        "provider": graph.provider,
        "heads_in_graph": bool(getattr(graph, "heads_in_graph", True)),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": int(session_threads(graph.session)),
        "onnxruntime_version": ort.__version__,
        "codecspec_version": cs.__version__,
        "platform": platform.platform(),
        "model": {
            "path": str(model_path),
            "config_hash": config_hash(c),
            "heads_hash": heads_hash(heads),
            "config": c.to_dict(),
        },
    }


def _write_device_profile(
    r: CalibrationResult, run: _CalibrationRun, provider, threads, eval_idx, t_start: float
) -> dict:
    """Step 7: device_profile.json (keys in their historical order), written to out_dir."""
    best, history, tree = r.best, r.train_history, r.tree
    acc_med = r.acceptance_medusa
    profile = {
        **_device_header(run.graph, run.model_path, run.heads),
        "sampling": params_dict(run.params),
        "seed": run.seed,
        "frames": len(run.codes),
        "acceptance_frames": int(len(eval_idx)),
        "latency": r.latency.to_dict(),
        "acceptance": r.acceptance.matrix.tolist(),
        "acceptance_counts": r.acceptance.counts.tolist(),
        "acceptance_zero_offsets": r.acceptance_zero.matrix.tolist(),
        "acceptance_medusa": None if acc_med is None else acc_med.matrix.tolist(),
        "budgets": [row.to_dict() for row in r.rows],
        "chosen_budget": r.budget,
        "tree_paths": [list(p) for p in tree.paths],
        "predicted_speedup": best.speedup_predicted,
        "simulated_speedup": best.speedup_simulated,
        "predicted_tokens_per_call": best.predicted_tokens_per_call,
        "simulated_tokens_per_call": best.simulated_tokens_per_call,
        # The profile's record of the rule, kept for the readers of older profiles (model
        # cards, recipes); `auto` acts on decision.json, written from the same rule.
        "speculation_pays": speculation_wins(best.speedup_simulated, r.end_to_end),
        "ablation": r.ablation,
        "end_to_end": r.end_to_end,
        "training": None
        if history is None
        else {
            "final": history.final,
            "baseline": history.baseline,
            "steps": len(history.steps),
            "seconds": history.seconds,
        },
        "offsets_file": run.files.get("offsets"),
        "quantised_rows": _quantised_rows(
            provider, threads, run.graph.config.hidden_size, tree.num_nodes
        ),
        "seconds": None,
    }
    profile["seconds"] = round(time.monotonic() - t_start, 2)
    (run.out / "device_profile.json").write_text(json.dumps(profile, indent=1))
    run.files["device_profile"] = str(run.out / "device_profile.json")
    return profile


def decision_device(profile: dict) -> dict:
    """The device a calibration decided on, from its profile's header: what to compare
    before trusting the decision on another machine (CPU, its SIMD flags, threads, runtime)."""
    from codecspec.graphs.row_probe import cpu_simd_flags

    keys = ("cpu_model", "cpu_count", "threads", "provider", "platform", "onnxruntime_version")
    device = {k: profile[k] for k in keys if k in profile}
    device["cpu_flags"] = cpu_simd_flags()
    return device


SPECULATION_RULE = "simulated_speedup > 1 and end_to_end_speedup > 1"


def speculation_wins(simulated: float, end_to_end: Optional[dict]) -> bool:
    """The calibration's rule: the best tree's replayed frame time beats the AR loop's, and so
    does the real decoder timed end to end where that was measured. The replay leaves out
    the Python glue and KV copies, so a tree it puts a few percent ahead can run behind
    (a v3 depth decoder: replayed 1.017x, timed 0.924x); the timed figure has the last word."""
    timed = (end_to_end or {}).get("speedup")
    return bool(simulated > 1.0 and (timed is None or timed > 1.0))


def _write_decision(r: CalibrationResult, run: _CalibrationRun) -> Decision:
    """Step 7's decision.json: speculate by `speculation_wins` (the rule device_profile.json's
    `speculation_pays` records too)."""
    best, e2e = r.best, r.end_to_end or {}
    speculate = speculation_wins(best.speedup_simulated, r.end_to_end)
    timed = e2e.get("speedup")
    why = (
        f"the best tree (N={r.budget}) replays at {best.speedup_simulated:.3f}x the AR loop"
        + (f" and runs at {timed:.3f}x it timed end to end" if timed is not None else "")
        + f" on this device: {'speculate' if speculate else 'decode AR'}"
    )
    measured = {
        "rule": SPECULATION_RULE,
        "chosen_budget": r.budget,
        "simulated_speedup": best.speedup_simulated,
        "predicted_speedup": best.speedup_predicted,
        "simulated_tokens_per_call": best.simulated_tokens_per_call,
        "simulated_calls_per_frame": best.simulated_calls_per_frame,
        "end_to_end_speedup": e2e.get("speedup"),
    }
    device = decision_device(r.profile)
    decision = write_decision(
        run.out / DECISION_FILE, speculate=speculate, why=why, measured=measured, device=device
    )
    run.files["decision"] = str(decision.source)
    return decision


def _finish_calibration(result: CalibrationResult, *, plots: bool) -> None:
    """Plots (their paths join result.files) and the log lines: a warning when no budget beats
    the AR loop, since the decoder's `auto` will then not speculate."""
    if plots:
        from codecspec.calibrate.plots import write_plots

        for k, p in write_plots(result, result.out_dir).items():
            result.files[k] = str(p)
    if not result.decision.speculate:
        log.warning(
            "no budget beats the AR loop on this device (best %.3fx at N=%d)",
            result.best.speedup_simulated,
            result.budget,
        )
    log.info("calibration:\n%s", result.summary())


def params_dict(p) -> dict:
    """SamplingParams as the JSON object calibration files record."""
    return {"temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p}
