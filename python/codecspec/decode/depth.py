"""The RVQ depth loop: autoregressive baseline and lossless tree speculation on one graph.

Per frame the decoder gets the temporal model's hidden state and c0 and produces c1..c_{G-1}.
Positions inside the frame: 0 = hidden state, 1 = c0, k+1 = c_k; the node holding c_l is read
by LM head l, which predicts c_{l+1}.

Speculative round (root = last sampled code c_m, not yet in the KV cache):
  tree nodes at depth d hold the top-ranked candidates for c_{m+d}, taken from the draft
  logits of the previous call's last accepted node (head_{l+j}(z_l + b_j)); one graph call
  scores root + tree; `verify_tree` accepts a path and samples one correction/bonus token from
  the exact target; the root's and accepted nodes' K/V rows are committed. The target never
  sees the draft offsets, so the output law is the model's own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.graphs.config import embedding_row, zero_row
from codecspec.progress import bar
from codecspec.runtime.depth_graph import DepthGraph, heads_sidecar
from codecspec.runtime.kv import KVCache

MODES = ("ar", "spec")
COARSE_MODE = "pcg"  # speculative with group-level acceptance (needs set_groups); lossy by
# design at the token level, exact at the level of the groups


@dataclass
class DecodeStats:
    """Counters over all frames decoded since the last reset."""

    frames: int = 0
    calls: int = 0
    codes: int = 0
    accepted: int = 0
    rounds: int = 0
    # Drafts the verifier decided on: per round, the accepted path plus the first rejected
    # depth (when the round's tree went deeper). accepted / trials = acceptance per depth.
    trials: int = 0
    graph_seconds: float = 0.0  # inside the graph calls (the rest of a frame is host work)
    head_reads: Optional[int] = None  # set to 0 to count the LM heads graph calls read

    @property
    def calls_per_frame(self) -> float:
        return self.calls / max(self.frames, 1)

    @property
    def tokens_per_call(self) -> float:
        """Codes produced by the depth loop per graph call (the prefill call included)."""
        return self.codes / max(self.calls, 1)

    @property
    def accepted_per_round(self) -> float:
        return self.accepted / max(self.rounds, 1)

    @property
    def acceptance(self) -> float:
        """Accepted drafts per draft depth reached (a chain tree: the top-1 acceptance)."""
        return self.accepted / max(self.trials, 1)

    def reset(self) -> None:
        self.frames = self.calls = self.codes = self.accepted = self.rounds = self.trials = 0
        self.graph_seconds = 0.0
        if self.head_reads is not None:
            self.head_reads = 0


def _prune(tree: cs.DraftTree, depth: int) -> cs.DraftTree:
    return cs.DraftTree.from_paths([p for p in tree.paths if len(p) <= depth])


def _load_heads(graph: DepthGraph, heads) -> cs.HeadBank:
    if isinstance(heads, cs.HeadBank):  # another decoder's bank over the same graph: shared
        return heads
    if heads is None:
        side = heads_sidecar(graph.path) if graph.path is not None else None
        if side is None or not side.is_file():
            raise ValueError(
                "heads: this graph leaves the LM heads to the host (heads='hidden'); pass "
                f"heads=[G-1, V, H] weights or put them in {side or '<model>.heads.npy'}"
            )
        heads = np.load(side)
    c = graph.config
    want = (c.num_codebooks - 1, c.codebook_size, c.hidden_size)
    heads = np.asarray(heads, np.float32)
    if heads.shape != want:
        raise ValueError(f"heads: expected shape {want}, got {heads.shape}")
    return cs.HeadBank(heads)


def stage_params(meta: dict, params=None, depth_params=None) -> cs.SamplingParams:
    """The depth stage's sampling law (levels 1..): `depth_params` if given, else `params`
    (one law for both stages, as before per-stage sampling), else the folder's
    "depth_sampling", else its "sampling". A folder may sample its depth levels cooler than
    c0 where that was measured to say more words (docs/quality.md)."""
    if depth_params is not None:
        return depth_params
    if params is not None:
        return params
    spec = meta.get("depth_sampling", meta["sampling"])
    try:
        return cs.SamplingParams(**spec)
    except (TypeError, ValueError) as e:
        raise ValueError(f"model.json: depth_sampling {spec!r} is not a sampling law ({e})") from e


class DepthDecoder:
    """Decodes c1..c_{G-1} for each frame, autoregressively or by tree speculation.

    graph: a DepthGraph, an .onnx path, bytes or an onnx.ModelProto. tree: the draft tree
    (e.g. from `codecspec calibrate`), depth <= the graph's number of draft offsets. offsets:
    [K, H] learned position offsets (None = zeros, i.e. plain head reuse). heads: LM head
    weights [G-1, V, H] for heads="hidden" graphs (default: the `.heads.npy` sidecar), or
    another decoder's `bank` over the same graph (shared, not copied).
    """

    def __init__(
        self,
        graph,
        tree: cs.DraftTree | None = None,
        offsets: np.ndarray | None = None,
        params: cs.SamplingParams | None = None,
        provider: str = "auto",
        threads: int | None = None,
        heads=None,
    ):
        self.graph = (
            graph if isinstance(graph, DepthGraph) else DepthGraph(graph, provider, threads)
        )
        c = self.config = self.graph.config
        self.G, self.V, self.K = c.num_codebooks, c.codebook_size, c.num_draft_offsets
        self.bank = None if self.graph.heads_in_graph else _load_heads(self.graph, heads)
        self.params = params or cs.SamplingParams(0.9, 50, 1.0)
        self.offsets = self._check_offsets(offsets)
        self.zero_offsets = np.zeros_like(self.offsets)
        # Positions 0..G-1 of a frame plus one accepted leaf at c_{G-1}.
        self.cap = self.G + 1
        self.cache = KVCache.for_graph(self.graph, self.cap)
        self.stats = DecodeStats()
        # Row of (level l >= 1, code x) in the graph's input table = base + l * V + x.
        self._level_base = c.c0_vocab_size - c.codebook_size
        self._zero_row = zero_row(c)
        self._prefill_rows = np.array([0, 1], np.int32)
        self._first_row = np.zeros(1, np.int32)
        self._bind_fixed_calls()
        self.set_tree(tree if tree is not None else cs.DraftTree.chain(min(self.K, self.G - 2)))
        self.level_groups = None  # per level 0..G-1: cs.AcousticGroups, for mode "pcg"
        self._coarse = False
        self.draft_control = None  # a ControlledDrafts (benchmarks), else the real drafts

    @classmethod
    def from_dir(cls, model_dir, **kw) -> DepthDecoder:
        """Loads `depth.onnx`, and `offsets.npy` / `tree.json` when present, from a folder."""
        d = Path(model_dir)
        if not (d / "depth.onnx").is_file():
            raise FileNotFoundError(f"model_dir: no depth.onnx in {d}")
        if "offsets" not in kw:
            from codecspec.decode.offsets_file import load_offsets

            for name in ("offsets.npz", "offsets.npy"):
                if (d / name).is_file():
                    kw["offsets"] = load_offsets(d / name)[0]
                    break
        if "tree" not in kw and (d / "tree.json").is_file():
            kw["tree"] = cs.DraftTree.from_json((d / "tree.json").read_text())
        return cls(d / "depth.onnx", **kw)

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
        """Switches the draft tree; binds its graph call and precomputes its masks."""
        if tree.max_depth > self.K:
            raise ValueError(f"tree: depth {tree.max_depth} exceeds the graph's {self.K} offsets")
        if tree.num_nodes < 2:
            raise ValueError("tree: needs at least one draft node")
        self.tree = tree
        self.num_ranks = int(tree.ranks.max()) + 1
        t_full = tree.num_nodes
        self._tree_call = self.graph.bind(t_full, *self.cache.past)
        self._tree_call.offsets[...] = self.offsets
        # Near the end of a frame fewer levels remain: the tree pruned to each possible depth.
        # Canonical node order is depth-first-sorted, so a pruned tree is a prefix of the full
        # one; the call keeps its full query length and the extra rows only see themselves.
        self._trees = {}
        for d in range(1, min(tree.max_depth, self.G - 2) + 1):
            t = _prune(tree, d)
            n = t.num_nodes
            bias, pos = {}, {}
            for past in range(2, self.G):
                b = np.full((t_full, self.cap + t_full), -np.inf, np.float32)
                b[:n, :past] = 0.0
                b[:n, self.cap : self.cap + n] = t.attention_bias(0)
                b[np.arange(n, t_full), self.cap + np.arange(n, t_full)] = 0.0
                bias[past] = b
                p = np.full(t_full, past, np.int64)
                p[:n] = t.position_ids(past)
                pos[past] = p
            depths = t.depths.astype(np.int64)
            # Per root level m: the level of every node, its head and its input-table base
            # row, so that a round only adds the drafted tokens.
            levels = {m: m + depths for m in range(1, self.G - 1)}
            self._trees[d] = {
                "tree": t,
                "n": n,
                "bias": bias,
                "pos": pos,
                "levels": levels,
                "heads": {m: np.minimum(lv, self.G - 2) for m, lv in levels.items()},
                "id_base": {m: self._level_base + lv * self.V for m, lv in levels.items()},
                "draft_at": (depths[1:] - 1, t.ranks[1:].astype(np.int64)),
                "tokens": np.empty(n, np.int32),
            }
        self._rows = np.zeros(t_full + 1, np.int32)  # committed rows: root, accepted nodes

    def _bind_fixed_calls(self) -> None:
        c = self.config
        # A heads="grouped" graph scores draft heads only when asked: AR calls bind none.
        no_drafts = 0 if self.graph.grouped_heads else None
        self._prefill_calls = {}
        for spec in (False, True):
            pc = self.graph.bind(2, *self.cache.past, None if spec else no_drafts)
            pc.ids[0] = zero_row(c)
            pc.pos[:] = (0, 1)
            pc.bias[:] = -np.inf
            pc.bias[0, self.cap] = pc.bias[1, self.cap] = pc.bias[1, self.cap + 1] = 0.0
            self._prefill_calls[spec] = pc
        self._step_call = self.graph.bind(1, *self.cache.past, no_drafts)
        # Rows of the AR step's bias per past length: past columns visible, then itself.
        self._step_bias = {}
        for past in range(2, self.G):
            b = np.full((1, self.cap + 1), -np.inf, np.float32)
            b[0, :past] = 0.0
            b[0, self.cap] = 0.0
            self._step_bias[past] = b

    # ------------------------------------------------------------------ graph + heads
    def _run(self, call) -> None:
        # Graph time inside the loop, apart from host work: how much of a frame the host costs.
        t0 = time.perf_counter()
        call.run()
        self.stats.graph_seconds += time.perf_counter() - t0
        if self.stats.head_reads is not None:
            self.stats.head_reads += self._heads_touched(call)

    def _heads_touched(self, call) -> int:
        """LM heads a call reads: a heads="grouped" graph only those its (node, offset) pairs
        use; a host bank one per node at most (verification reads them lazily)."""
        if not self.graph.grouped_heads:
            return 0
        k = call.offsets.shape[0]
        used = np.minimum(call.heads[:, None] + np.arange(k + 1)[None, :], self.G - 2)
        return int(np.unique(used).size)

    def _target_row(self, call, node: int, level: int) -> np.ndarray:
        if self.bank is None:
            return call.logits[node]
        return self.bank.logits(min(level, self.G - 2), call.hidden[node])

    def _candidates(self, call, node: int, level: int, depth: int) -> np.ndarray:
        """[depth, M] top-ranked drafts for levels level+2 .. level+1+depth from `node`."""
        if self.bank is None:
            cand = cs.topk(call.draft_logits[node, :depth], self.num_ranks)
        else:
            cand = self.bank.draft_candidates(
                call.hidden[node], min(level + 1, self.G - 2), self.offsets[:depth], self.num_ranks
            )
        if self.draft_control is not None:  # benchmarks only: drafts of a set acceptance
            cand = self.draft_control(cand, level + 2)
        return cand

    def set_groups(self, level_groups) -> None:
        """Per-level similarity groups (a list of G `cs.AcousticGroups`, one per codebook
        level, each over the codebook) for mode "pcg"; None removes them."""
        if level_groups is not None:
            level_groups = list(level_groups)
            if len(level_groups) != self.G:
                raise ValueError(f"level_groups: expected {self.G} levels, got {len(level_groups)}")
            for k, grp in enumerate(level_groups[1:], 1):
                if not isinstance(grp, cs.AcousticGroups) or grp.vocab_size != self.V:
                    raise ValueError(
                        f"level_groups: level {k} must be AcousticGroups over {self.V} codes"
                    )
        self.level_groups = level_groups

    def _verify(self, call, tree, n, tokens, heads, g):
        if self._coarse:  # children of node i sit at level levels[i] + 1
            levels = self._round_levels
            logits = np.stack([self._target_row(call, i, int(heads[i])) for i in range(n)])
            groups = [self.level_groups[min(int(lv) + 1, self.G - 1)] for lv in levels[:n]]
            return cs.verify_tree_coarse(groups, tree, tokens, logits, self.params, g)
        if self.bank is None:
            return cs.verify_tree(tree, tokens, call.logits[:n], self.params, g)
        return cs.verify_tree_hidden(
            tree, tokens, call.hidden[:n], heads, self.bank, self.params, g
        )

    # ------------------------------------------------------------------ shared prefill
    def _prefill(self, hidden: np.ndarray, c0: int, spec: bool):
        pc = self._prefill_calls[spec]
        pc.ids[1] = embedding_row(self.config, 0, int(c0))
        pc.embeds[0] = hidden
        pc.offsets[...] = self.offsets if spec else 0.0
        self.cache.reset()
        self._run(pc)
        self.cache.commit_call(pc, self._prefill_rows)
        return pc

    # ------------------------------------------------------------------ autoregressive
    def _frame_ar(self, hidden, c0, g: cs.Generator) -> np.ndarray:
        codes = np.empty(self.G, np.int64)
        codes[0] = c0
        pc = self._prefill(hidden, c0, False)
        codes[1] = cs.sample(self._target_row(pc, 1, 0), self.params, g)
        sc = self._step_call
        for m in range(1, self.G - 1):
            past = m + 1
            sc.ids[0] = self._level_base + m * self.V + codes[m]
            sc.pos[0] = past
            sc.bias[...] = self._step_bias[past]
            sc.heads[0] = m
            self._run(sc)
            self.cache.commit_call(sc, self._first_row)
            codes[m + 1] = cs.sample(self._target_row(sc, 0, m), self.params, g)
        self._count(self.G - 1, self.G - 1)
        return codes

    # ------------------------------------------------------------------ speculative
    def _frame_spec(self, hidden, c0, g: cs.Generator) -> np.ndarray:
        G, tc = self.G, self._tree_call
        codes = np.empty(G, np.int64)
        codes[0] = c0
        pc = self._prefill(hidden, c0, True)
        codes[1] = cs.sample(self._target_row(pc, 1, 0), self.params, g)
        calls, m = 1, 1
        cand = self._candidates(pc, 1, 0, min(self.tree.max_depth, G - 2))
        while m < G - 1:
            spec = self._trees[min(self.tree.max_depth, G - 1 - m)]
            tree, n, tokens = spec["tree"], spec["n"], spec["tokens"]
            tokens[0] = codes[m]
            tokens[1:] = cand[spec["draft_at"]]
            levels, heads = spec["levels"][m], spec["heads"][m]
            past = m + 1
            np.add(spec["id_base"][m], tokens, out=tc.ids[:n])
            tc.ids[n:] = self._zero_row
            tc.pos[...] = spec["pos"][past]
            tc.bias[...] = spec["bias"][past]
            tc.heads[:n] = heads
            self._run(tc)
            self._round_levels = levels  # for coarse verification: per-node level
            r = self._verify(tc, tree, n, tokens, heads, g)
            nodes = r.nodes
            rows = self._rows[: len(nodes) + 1]
            rows[1:] = nodes  # rows[0] = 0: the root
            self.cache.commit_call(tc, rows)
            emitted = r.tokens[: G - 1 - m]  # a bonus past c_{G-1} does not exist: drop it
            codes[m + 1 : m + 1 + len(emitted)] = emitted
            self.stats.accepted += len(nodes)
            self.stats.trials += min(len(nodes) + 1, tree.max_depth)
            self.stats.rounds += 1
            calls += 1
            last = int(nodes[-1]) if len(nodes) else 0
            m += len(nodes) + 1
            if m < G - 1:
                cand = self._candidates(
                    tc, last, int(levels[last]), min(self.tree.max_depth, G - 1 - m)
                )
        self._count(calls, G - 1)
        return codes

    def _count(self, calls: int, codes: int) -> None:
        self.stats.frames += 1
        self.stats.calls += calls
        self.stats.codes += codes

    # ------------------------------------------------------------------ public
    def _check_frame(self, hidden, c0) -> np.ndarray:
        hidden = np.asarray(hidden, dtype=np.float32).reshape(-1)
        if hidden.shape[0] != self.config.input_width:
            raise ValueError(
                f"hidden: expected {self.config.input_width} values, got {hidden.shape[0]}"
            )
        if not np.all(np.isfinite(hidden)):
            raise ValueError("hidden: contains NaN or inf")
        if not (0 <= int(c0) < self.config.c0_vocab_size):
            raise ValueError(f"c0: must be in [0, {self.config.c0_vocab_size}), got {c0}")
        return hidden

    def decode_frame(self, hidden, c0: int, generator: cs.Generator, mode: str = "spec"):
        """Codes c0..c_{G-1} (int64 [G]) for one frame."""
        if mode not in MODES + (COARSE_MODE,):
            raise ValueError(f"mode: must be one of {MODES + (COARSE_MODE,)}, got {mode!r}")
        if mode == COARSE_MODE and self.level_groups is None:
            raise ValueError("mode: 'pcg' needs per-level groups (DepthDecoder.set_groups)")
        hidden = self._check_frame(hidden, c0)
        if self.draft_control is not None:
            self.draft_control.begin_frame()
        self._coarse = mode == COARSE_MODE
        step = self._frame_ar if mode == "ar" else self._frame_spec
        return step(hidden, int(c0), generator)

    def decode_frames(
        self, hiddens, c0s, generator: cs.Generator, mode: str = "spec", progress: bool = False
    ) -> np.ndarray:
        """Codes int64 [N, G] for N frames (hiddens [N, H_in], c0s [N])."""
        hiddens = np.asarray(hiddens, np.float32)
        c0s = np.asarray(c0s)
        if hiddens.ndim != 2 or c0s.ndim != 1 or len(hiddens) != len(c0s):
            raise ValueError(
                f"hiddens: expected [N, H] matching c0s [N], got {hiddens.shape} and {c0s.shape}"
            )
        it = bar(range(len(c0s)), f"decode {mode}", show=progress)
        return np.stack([self.decode_frame(hiddens[i], c0s[i], generator, mode) for i in it])


class ControlledDrafts:
    """Drafts whose top-ranked candidate is right with probability `acceptance`, for timing
    the speculative loop of a model whose real drafts cannot be had (random weights of a
    real shape): set `truth` to the frame's greedy codes (from an AR decode at temperature
    0), attach as `DepthDecoder.draft_control`, decode greedily. The graph calls, draft heads
    included, run as they would; only the candidates are replaced after the fact. Right or
    wrong is drawn per draft, independently; lower ranks are always wrong. Verification is
    the real one, so `DecodeStats.acceptance` measures what the verifier accepted.
    """

    def __init__(self, acceptance: float, vocab_size: int, seed: int = 0):
        if not (np.isfinite(acceptance) and 0.0 <= acceptance <= 1.0):
            raise ValueError(f"acceptance: expected a number in [0, 1], got {acceptance!r}")
        self.acceptance, self.V = float(acceptance), int(vocab_size)
        self.rng = np.random.default_rng(seed)
        self.truth: np.ndarray | None = None

    def begin_frame(self) -> None:
        """Called by the decoder before each frame (`truth` is set by the caller here)."""

    def __call__(self, cand: np.ndarray, first_level: int) -> np.ndarray:
        if self.truth is None:
            raise ValueError("truth: set the frame's greedy codes before decoding")
        depth, ranks = cand.shape
        t = self.truth[first_level : first_level + depth].astype(np.int64)[:, None]
        wrong = (t + 1 + np.arange(ranks)[None, :]) % self.V  # never the truth
        out = wrong.astype(cand.dtype)
        right = self.rng.random(depth) < self.acceptance
        out[right, 0] = t[right, 0]
        return out


class SequencedDrafts(ControlledDrafts):
    """`ControlledDrafts` for a run of frames whose greedy codes are known in order (an
    earlier AR run of the same request, greedy, so an exact mode makes the same frames):
    frame j's drafts are right about `truths[j]`. For timing a whole pipeline end to end."""

    def __init__(self, acceptance: float, vocab_size: int, truths, seed: int = 0):
        super().__init__(acceptance, vocab_size, seed)
        self.truths = np.asarray(truths)
        self.frame = -1

    def rewind(self) -> None:
        """The next frame decoded is frame 0 again."""
        self.frame = -1

    def begin_frame(self) -> None:
        self.frame += 1
        if self.frame >= len(self.truths):
            raise ValueError(
                f"truths: frame {self.frame} decoded, only {len(self.truths)} frames known"
            )
        self.truth = self.truths[self.frame]
