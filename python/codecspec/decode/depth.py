"""The RVQ depth loop: autoregressive baseline and lossless tree speculation on one graph.

Per frame the decoder gets the temporal model's hidden state and c0 and produces c1..c_{G-1}.
Positions inside the frame: 0 = hidden state, 1 = c0, k+1 = c_k; the node holding c_l is read
by LM head l, which predicts c_{l+1}.

Speculative round (root = last sampled code c_m, not yet in the KV cache):
  tree nodes at depth d hold the top-ranked candidates for c_{m+d}, taken from the draft
  logits that the previous call produced for its last accepted node; one graph call scores
  root + tree; `verify_tree` accepts a path and samples one correction/bonus token from the
  exact target; the root's and accepted nodes' K/V rows are committed. The target never sees
  the draft offsets, so the output law is the model's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import codecspec as cs
from codecspec.graphs.config import embedding_row, zero_row
from codecspec.runtime.depth_graph import DepthGraph
from codecspec.runtime.kv import KVCache

MODES = ("ar", "spec")


@dataclass
class DecodeStats:
    """Counters over all frames decoded so far."""

    frames: int = 0
    calls: int = 0
    codes: int = 0
    accepted: int = 0
    rounds: int = 0
    accepted_hist: list = field(default_factory=list)

    @property
    def calls_per_frame(self) -> float:
        return self.calls / max(self.frames, 1)

    @property
    def tokens_per_call(self) -> float:
        """Codes produced by the depth loop per graph call (the prefill call included)."""
        return self.codes / max(self.calls, 1)

    def reset(self) -> None:
        self.__init__()


def _prune(tree: cs.DraftTree, depth: int) -> cs.DraftTree:
    return cs.DraftTree.from_paths([p for p in tree.paths if len(p) <= depth])


class DepthDecoder:
    """Decodes c1..c_{G-1} for each frame, autoregressively or by tree speculation.

    graph: a DepthGraph (or anything DepthGraph accepts). tree: the draft tree (e.g. from
    `codecspec calibrate`); its depth is capped at the graph's number of draft offsets.
    offsets: [K, H] learned position offsets (None = zeros, i.e. plain head reuse).
    """

    def __init__(
        self,
        graph,
        tree: cs.DraftTree | None = None,
        offsets: np.ndarray | None = None,
        params: cs.SamplingParams | None = None,
        provider: str = "auto",
        threads: int | None = None,
    ):
        self.graph = graph if isinstance(graph, DepthGraph) else DepthGraph(graph, provider, threads)
        c = self.graph.config
        self.config = c
        self.G, self.V, self.K = c.num_codebooks, c.codebook_size, c.num_draft_offsets
        self.params = params or cs.SamplingParams(0.9, 50, 1.0)
        self.offsets = self._check_offsets(offsets)
        self.zero_offsets = np.zeros_like(self.offsets)
        self.cache = KVCache(c.num_layers, c.num_kv_heads, c.head_dim, self.G + 1)
        self.stats = DecodeStats()
        self._zero_embeds = {}
        self.set_tree(tree if tree is not None else cs.DraftTree.chain(min(self.K, self.G - 2)))

    def _check_offsets(self, offsets) -> np.ndarray:
        want = (self.K, self.config.hidden_size)
        if offsets is None:
            return np.zeros(want, np.float32)
        offsets = np.ascontiguousarray(offsets, dtype=np.float32)
        if offsets.shape != want:
            raise ValueError(f"offsets: expected shape {want}, got {offsets.shape}")
        if not np.all(np.isfinite(offsets)):
            raise ValueError("offsets: contains NaN or inf")
        return offsets

    def set_tree(self, tree: cs.DraftTree) -> None:
        if tree.max_depth > self.K:
            raise ValueError(
                f"tree: depth {tree.max_depth} exceeds the graph's {self.K} draft offsets"
            )
        if tree.num_nodes < 2:
            raise ValueError("tree: needs at least one draft node")
        self.tree = tree
        self.num_ranks = int(tree.ranks.max()) + 1
        # Near the end of a frame fewer levels remain: tree truncated to each possible depth,
        # with its per-depth rank lookups and masks precomputed (past length is m + 1).
        self._trees = {}
        for d in range(1, min(tree.max_depth, self.G - 2) + 1):
            t = _prune(tree, d)
            depths = t.depths.astype(np.int64)
            self._trees[d] = {
                "tree": t,
                "depths": depths,
                "ranks": t.ranks.astype(np.int64),
                "bias": {p: t.attention_bias(p) for p in range(2, self.G)},
                "pos": {p: t.position_ids(p) for p in range(2, self.G)},
            }

    def _embeds(self, q: int) -> np.ndarray:
        z = self._zero_embeds.get(q)
        if z is None:
            z = self._zero_embeds[q] = np.zeros((q, self.config.input_width), np.float32)
        return z

    # ------------------------------------------------------------------ shared prefill
    def _prefill(self, hidden: np.ndarray, c0: int, offsets: np.ndarray):
        c = self.config
        ids = np.array([zero_row(c), embedding_row(c, 0, int(c0))], np.int64)
        embeds = np.zeros((2, c.input_width), np.float32)
        embeds[0] = hidden
        bias = np.array([[0.0, -np.inf], [0.0, 0.0]], np.float32)
        self.cache.reset()
        pk, pv = self.cache.past()
        logits, drafts, nk, nv = self.graph(
            ids, embeds, np.array([0, 1], np.int64), bias, pk, pv,
            np.zeros(2, np.int64), offsets,
        )
        self.cache.commit(nk, nv, [0, 1])
        return logits[1], drafts[1]

    def _check_frame(self, hidden, c0) -> np.ndarray:
        hidden = np.asarray(hidden, dtype=np.float32).reshape(-1)
        if hidden.shape[0] != self.config.input_width:
            raise ValueError(
                f"hidden: expected {self.config.input_width} values, got {hidden.shape[0]}"
            )
        if not (0 <= int(c0) < self.config.c0_vocab_size):
            raise ValueError(f"c0: must be in [0, {self.config.c0_vocab_size}), got {c0}")
        return hidden

    # ------------------------------------------------------------------ autoregressive
    def _frame_ar(self, hidden, c0, g: cs.Generator) -> np.ndarray:
        c = self.config
        codes = np.empty(self.G, np.int64)
        codes[0] = c0
        logits, _ = self._prefill(hidden, c0, self.zero_offsets)
        codes[1] = cs.sample(logits, self.params, g)
        calls = 1
        embeds = self._embeds(1)
        for m in range(1, self.G - 1):
            past = m + 1
            pk, pv = self.cache.past()
            out = self.graph(
                np.array([embedding_row(c, m, int(codes[m]))], np.int64), embeds,
                np.array([past], np.int64), np.zeros((1, past + 1), np.float32), pk, pv,
                np.array([m], np.int64), self.zero_offsets,
            )
            self.cache.commit(out[2], out[3], [0])
            codes[m + 1] = cs.sample(out[0][0], self.params, g)
            calls += 1
        self._count(calls, self.G - 1)
        return codes

    # ------------------------------------------------------------------ speculative
    def _frame_spec(self, hidden, c0, g: cs.Generator) -> np.ndarray:
        c, G = self.config, self.G
        codes = np.empty(G, np.int64)
        codes[0] = c0
        logits, draft = self._prefill(hidden, c0, self.offsets)
        codes[1] = cs.sample(logits, self.params, g)
        calls, m = 1, 1
        level_base = c.c0_vocab_size - c.codebook_size  # row of (level l, code x) = base + l*V + x
        while m < G - 1:
            spec = self._trees[min(self.tree.max_depth, G - 1 - m)]
            tree, depths = spec["tree"], spec["depths"]
            d = int(depths[-1])
            cand = cs.topk(draft[:d], self.num_ranks)  # [d, M] candidates per depth
            tokens = np.empty(tree.num_nodes, np.int32)
            tokens[0] = codes[m]
            tokens[1:] = cand[depths[1:] - 1, spec["ranks"][1:]]
            levels = m + depths
            ids = level_base + levels * self.V + tokens
            past = m + 1
            pk, pv = self.cache.past()
            logits, drafts, nk, nv = self.graph(
                ids, self._embeds(tree.num_nodes), spec["pos"][past], spec["bias"][past],
                pk, pv, np.minimum(levels, G - 2), self.offsets,
            )
            r = cs.verify_tree(tree, tokens, logits, self.params, g, draft_kind="topk")
            nodes = r.nodes
            self.cache.commit(nk, nv, np.concatenate(([0], nodes)).astype(np.int32))
            out = r.tokens[: G - 1 - m]  # a bonus past c_{G-1} does not exist: drop it
            codes[m + 1 : m + 1 + len(out)] = out
            self.stats.accepted += len(nodes)
            self.stats.rounds += 1
            draft = drafts[nodes[-1] if len(nodes) else 0]
            m += len(nodes) + 1
            calls += 1
        self._count(calls, G - 1)
        return codes

    def _count(self, calls: int, codes: int) -> None:
        self.stats.frames += 1
        self.stats.calls += calls
        self.stats.codes += codes

    # ------------------------------------------------------------------ public
    def decode_frame(self, hidden, c0: int, generator: cs.Generator, mode: str = "spec"):
        """Codes c0..c_{G-1} (int64 [G]) for one frame."""
        if mode not in MODES:
            raise ValueError(f"mode: must be one of {MODES}, got {mode!r}")
        hidden = self._check_frame(hidden, c0)
        step = self._frame_spec if mode == "spec" else self._frame_ar
        return step(hidden, int(c0), generator)

    def decode_frames(self, hiddens, c0s, generator: cs.Generator, mode: str = "spec",
                      progress: bool = False):
        """Codes int64 [N, G] for N frames (hiddens [N, H_in], c0s [N])."""
        hiddens = np.asarray(hiddens, np.float32)
        c0s = np.asarray(c0s)
        if hiddens.ndim != 2 or len(hiddens) != len(c0s):
            raise ValueError(
                f"hiddens: expected [N, H] matching c0s [N], got {hiddens.shape} and {c0s.shape}"
            )
        it = range(len(c0s))
        if progress:
            from codecspec.progress import bar

            it = bar(it, desc=f"decode {mode}")
        return np.stack([self.decode_frame(hiddens[i], c0s[i], generator, mode) for i in it])
