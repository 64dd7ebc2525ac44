"""Calibration's (b): the latency profile of a depth-graph call against its query length
(`measure_latency`), the real decoder's per-call glue (`measure_overhead`) and its frame time,
AR against a tree (`measure_end_to_end`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

import codecspec as cs
from codecspec.progress import bar
from codecspec.runtime.kv import split_kv

log = logging.getLogger("codecspec.calibrate")

__all__ = ["LatencyProfile", "measure_end_to_end", "measure_latency", "measure_overhead"]


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
    it = bar(range(warmup + repeats), "latency sweeps", warmup + repeats, show=progress)
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
    it = bar(range(len(c0s)), "end-to-end", len(c0s), show=progress)
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
