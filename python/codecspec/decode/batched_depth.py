"""The RVQ depth loop of `DepthDecoder` for many frames per graph call.

`BatchedDepth` decodes c1..c_{G-1} of many frames at once: frames of different streams in
the serving engine, and the frames a temporal speculation round emitted for one stream
(`codecspec.decode.temporal`). The depth graph has no batch axis, so the frames' queries are
concatenated along the query axis and their caches along the past axis of one block; a
block-diagonal attention bias keeps each frame to its own rows. AR is the same loop with a
root-only tree (one token per round), so one code path serves AR, speculation and any mix of
the two; the ragged trees of a round are verified by one `verify_tree_batch` call per
sampling law. When every frame is AR, a batch-axis variant of the graph runs instead.

Every frame draws from its own generator (a lane's), so its codes do not depend on which
other frames share the call.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

import codecspec as cs
from codecspec.decode.depth import DepthDecoder
from codecspec.graphs.config import embedding_row, zero_row
from codecspec.runtime.kv import split_kv
from codecspec.runtime.session import open_session

ROOT_ONLY = cs.DraftTree.from_paths([])


def batch_depth_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """The depth graph with a real batch axis: input_ids/position_ids [B, S], input_embeds
    [B, S, H], attention_bias [B, S, T], past K/V [L*B, kv, P, hd] (= [L, B, kv, P, hd]);
    hidden [B, S, H], new K/V [L, kv, B*S, hd] (query b*S + s). The builder's graph runs its
    attention at batch 1 (Unsqueeze / Squeeze around it); those become identities.
    onnxruntime's GroupQueryAttention accepts batch > 1 only for S = 1 with a past, or for
    any S without one, so AR steps and prefills run batched this way (see BatchedDepth)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    fixed = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in g.input}
    fixed.update({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in g.output})
    kv = lambda n: ["layers_x_batch", fixed[n][1], "past_len", fixed[n][3]]  # noqa: E731
    shapes = {
        "input_ids": ["batch", "step"],
        "input_embeds": ["batch", "step", fixed["input_embeds"][-1]],
        "position_ids": ["batch", "step"],
        "attention_bias": ["batch", "step", "total_len"],
        "past_keys": kv("past_keys"),
        "past_values": kv("past_values"),
        "hidden": ["batch", "step", fixed["hidden"][-1]],
    }
    for vi in list(g.input) + list(g.output):
        if vi.name in shapes:
            vi.type.tensor_type.shape.Clear()
            for d in shapes[vi.name]:
                dim = vi.type.tensor_type.shape.dim.add()
                if isinstance(d, str):
                    dim.dim_param = d
                else:
                    dim.dim_value = d
    for name, v in (("bq_axis1", 1), ("bq_idx2", 2), ("bq_idx0", 0)):
        g.initializer.append(numpy_helper.from_array(np.array([v], np.int64), name))
    nodes = []
    for n in g.node:
        if n.name in ("n_ids_b", "n_pos_b", "n_hidden"):  # the batch-1 axis, now real
            n = helper.make_node("Identity", [n.input[0]], list(n.output), name=n.name)
        elif n.name == "n_bias4":  # [B, S, T] -> [B, 1, S, T]
            n.input[1] = "bq_axis1"
        elif n.name == "n_total_len64":  # T is now the bias's third axis
            n.input[1] = "bq_idx2"
        elif n.op_type == "Split" and n.input[0] in ("past_keys", "past_values"):
            del n.input[1:]  # equal split into the layers: [B, kv, P, hd] each
        elif n.op_type == "GroupQueryAttention":
            n.input[5] = "seqlens_kb"
        nodes.append(n)
        if n.name == "n_seqlens_k":  # one sequence length per batch row
            nodes += [
                helper.make_node("Shape", ["input_ids"], ["bq_ids_shape"]),
                helper.make_node("Gather", ["bq_ids_shape", "bq_idx0"], ["bq_batch"]),
                helper.make_node("Expand", ["seqlens_k", "bq_batch"], ["seqlens_kb"]),
            ]
    names = {n.name for n in nodes}
    want = {"n_ids_b", "n_pos_b", "n_hidden", "n_bias4", "n_total_len64", "n_seqlens_k"}
    if not want <= names:
        raise ValueError(f"model: not the builder's depth graph (lacks {sorted(want - names)})")
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    return m


class _ARStep:
    """The batch-axis graph bound for one AR step of n streams (S = 1) over the cache view
    [L*n, kv, cap, hd]."""

    def __init__(self, depth: BatchedDepth, n: int):
        c, cap = depth.config, depth.cap
        kv = (c.num_layers * n, c.num_kv_heads, cap, c.head_dim)
        size = int(np.prod(kv))
        self.keys = depth.kflat[:size].reshape(kv)
        self.values = depth.vflat[:size].reshape(kv)
        self.ids = np.zeros((n, 1), np.int64)
        self.embeds = np.zeros((n, 1, c.input_width), np.float32)
        self.pos = np.zeros((n, 1), np.int64)
        self.bias = np.zeros((n, 1, cap + 1), np.float32)
        self.hidden = np.zeros((n, 1, c.hidden_size), np.float32)
        new = (c.num_layers, c.num_kv_heads, n, c.head_dim)
        self.new_keys, self.new_values = np.zeros(new, np.float32), np.zeros(new, np.float32)
        io = depth.batch_session.io_binding()
        for name, a in (
            ("input_ids", self.ids),
            ("input_embeds", self.embeds),
            ("position_ids", self.pos),
            ("attention_bias", self.bias),
            ("past_keys", self.keys),
            ("past_values", self.values),
        ):
            io.bind_input(name, "cpu", 0, a.dtype, a.shape, a.ctypes.data)
        for name, a in (
            ("hidden", self.hidden),
            ("new_keys", self.new_keys),
            ("new_values", self.new_values),
        ):
            io.bind_output(name, "cpu", 0, a.dtype, a.shape, a.ctypes.data)
        self.io, self.session = io, depth.batch_session

    def run(self) -> None:
        self.session.run_with_iobinding(self.io)


@dataclass
class DepthLane:
    """One stream's place in a batched depth step: its mode, sampling law and generator."""

    spec: bool
    params: cs.SamplingParams
    generator: cs.Generator
    codes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    level: int = 1  # the last sampled code c_level is the next round's root
    cand: np.ndarray | None = None
    failed: Exception | None = None

    @property
    def done(self) -> bool:
        return self.failed is not None or self.level >= len(self.codes) - 1


class _Layout:
    """Bound graph call for n streams with fixed per-stream query blocks (`sizes`)."""

    def __init__(self, depth: BatchedDepth, sizes: tuple[int, ...]):
        n, cap = len(sizes), depth.cap
        self.sizes = np.array(sizes, np.int64)
        self.qoff = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        self.q = int(self.sizes.sum())
        self.cols = n * cap
        used = depth.row_floats * self.cols
        if depth.graph.kv_joined:  # one array, both halves: [L, cols, 2 kvh hd]
            c = depth.config
            self.kv = depth.kflat[: 2 * used].reshape(c.num_layers, self.cols, -1)
            self.keys, self.values = split_kv(self.kv, c.num_kv_heads)
            past = (self.kv, None)
        else:
            self.kv = None
            self.keys = depth.kflat[:used].reshape(depth.kv_shape(self.cols))
            self.values = depth.vflat[:used].reshape(depth.kv_shape(self.cols))
            past = (self.keys, self.values)
        self.call = depth.graph.bind(self.q, *past, 0 if depth.grouped else None)

    def put(self, dst, src=slice(None)) -> None:
        """Copies rows `src` of this layout's call's new K/V into its past columns `dst`."""
        call = self.call
        if self.kv is not None:
            self.kv[:, dst] = call.new_kv[:, src]
        else:
            self.keys[:, :, dst] = call.new_keys[:, :, src]
            self.values[:, :, dst] = call.new_values[:, :, src]


class BatchedDepth:
    """The depth loop of a `DepthDecoder` (its graph, heads, offsets and tree) for many
    streams per call. Per-stream caches are `cap` columns each of one preallocated block; a
    depth cache lives for one frame only, so a step may lay the streams out afresh."""

    def __init__(self, decoder: DepthDecoder, slots: int, provider="cpu", threads=None):
        # heads="grouped" graphs (Qwen3-TTS's code predictor) score the heads in the graph,
        # chosen per row by head_ids: their AR frames batch; their drafts come from the graph
        # per stream, so speculative frames of such a graph are not batched here.
        self.grouped = bool(decoder.graph.grouped_heads)
        if decoder.bank is None and not self.grouped:
            raise ValueError("decoder: batched depth decoding needs a heads='hidden' graph")
        # AR frames run on the batch-axis variant of the same graph: attention then costs
        # n x cap columns instead of (n x cap)^2 for the concatenated layout.
        # A graph not made by the library's builder keeps the concatenated layout for all.
        self.batch_session = None
        source = None if self.grouped else decoder.graph.onnx_model()
        if source is not None:
            try:
                model = batch_depth_graph(source)
            except ValueError:
                model = None
            if model is not None:
                self.batch_session = open_session(
                    model.SerializeToString(), provider=provider, threads=threads
                )
        self._ar_steps: OrderedDict = OrderedDict()
        self.dec, self.graph, self.bank = decoder, decoder.graph, decoder.bank
        c = self.config = decoder.config
        self.G, self.V, self.cap = decoder.G, decoder.V, decoder.cap
        self.row_floats = c.num_layers * c.num_kv_heads * c.head_dim
        self.slots = int(slots)
        # a joined graph's past is one array of both halves (runtime.kv): kflat holds it
        joined = decoder.graph.kv_joined
        size = self.row_floats * self.cap * self.slots
        self.kflat = np.zeros(2 * size if joined else size, np.float32)
        self.vflat = None if joined else np.zeros_like(self.kflat)
        self.tree = decoder.tree
        self.depth = min(self.tree.max_depth, self.G - 2)
        self._layouts: OrderedDict = OrderedDict()
        self._zero_row = zero_row(c)
        self._level_base = c.c0_vocab_size - c.codebook_size
        self.calls = 0  # graph calls
        self.lane_calls = 0  # streams served per call, summed: codes / lane_calls = codes per
        self.codes_out = 0  # call of one stream (1 for AR, more when speculation accepts)

    def kv_shape(self, cols: int) -> tuple[int, ...]:
        c = self.config
        return (c.num_layers, c.num_kv_heads, cols, c.head_dim)

    def _layout(self, sizes: tuple[int, ...], prefill: bool = False) -> _Layout:
        # Prefill calls write `embeds` (the temporal hidden state); round calls need them
        # zero, so the two never share buffers even when their block sizes agree.
        key = (prefill, sizes)
        lay = self._layouts.get(key)
        if lay is None:
            lay = self._layouts[key] = _Layout(self, sizes)
            if len(self._layouts) > 32:  # bound memory: batch compositions vary over time
                self._layouts.popitem(last=False)
        else:
            self._layouts.move_to_end(key)
        return lay

    def _follow_tree(self) -> None:
        """The decoder's tree may have been swapped (`DepthDecoder.set_tree`) since the last
        call: rebuild what was derived from it."""
        if self.tree is not self.dec.tree:
            self.tree = self.dec.tree
            self.depth = min(self.tree.max_depth, self.G - 2)
            self._layouts.clear()
            self.__dict__.pop("_pruned_cache", None)

    # ------------------------------------------------------------------ one frame
    def decode(self, hiddens: np.ndarray, lanes: list[DepthLane]) -> None:
        """Fills `lane.codes[1:]` of every lane (codes[0] = c0 is set by the caller)."""
        if len(lanes) > self.slots:
            raise ValueError(f"lanes: {len(lanes)} frames, more than the {self.slots} slots")
        self._follow_tree()
        if self.grouped and any(ln.spec for ln in lanes):
            raise ValueError("lanes: a heads='grouped' graph batches AR frames only")
        if self.batch_session is not None and not any(ln.spec for ln in lanes):
            self._decode_ar(hiddens, lanes)
            return
        sizes = tuple(self.tree.num_nodes if ln.spec else 1 for ln in lanes)
        lay = self._layout(sizes)
        self._prefill(hiddens, lanes)
        while not all(ln.done for ln in lanes):
            self._round(lay, lanes)

    def _prefill(self, hiddens, lanes) -> None:
        # Two rows per stream: the temporal hidden state (as an embedding) and c0.
        n, cap = len(lanes), self.cap
        pre = self._layout(tuple([2] * n), prefill=True)
        call = pre.call
        call.ids[0::2] = self._zero_row
        call.ids[1::2] = [embedding_row(self.config, 0, int(ln.codes[0])) for ln in lanes]
        call.embeds[0::2] = hiddens
        call.pos[0::2], call.pos[1::2] = 0, 1
        call.bias[...] = -np.inf
        q0 = pre.cols + 2 * np.arange(n)
        call.bias[2 * np.arange(n), q0] = 0.0
        call.bias[2 * np.arange(n) + 1, q0] = 0.0
        call.bias[2 * np.arange(n) + 1, q0 + 1] = 0.0
        self._run(call)
        # The prefill's K/V rows go to each stream's own columns of the shared block, which
        # the round layout reads through its own view of the same memory.
        dst = (np.arange(n)[:, None] * cap + np.arange(2)).reshape(-1)
        pre.put(dst)
        self._past = np.full(n, 2, np.int64)
        if self.grouped:
            rows = None
            logits = call.logits[1::2][:n, None]  # head 0 (head_ids all 0) on c0's row
        else:
            rows = call.hidden[1::2][:n]
            logits = self.bank.logits_rows(0, np.ascontiguousarray(rows))[:, None]  # head 0
        tokens = _sample_roots_of([(ln, ROOT_ONLY, logits[i], None) for i, ln in enumerate(lanes)])
        for i, ln in enumerate(lanes):
            if ln.failed is None:
                ln.codes[1] = tokens[i][0]
                ln.level = 1
                if ln.spec:
                    ln.cand = self._candidates(rows[i], 0, self.depth)
        self.calls += 1
        self.lane_calls += n
        self.codes_out += n

    def _ar_step(self, n: int) -> _ARStep:
        step = self._ar_steps.get(n)
        if step is None:
            step = self._ar_steps[n] = _ARStep(self, n)
            if len(self._ar_steps) > 32:
                self._ar_steps.popitem(last=False)
        else:
            self._ar_steps.move_to_end(n)
        return step

    def _decode_ar(self, hiddens: np.ndarray, lanes) -> None:
        """All lanes AR: the streams are in lockstep, one batch-axis call per level."""
        n, G, V, cap = len(lanes), self.G, self.V, self.cap
        st = self._ar_step(n)
        c = self.config
        ids = np.empty((n, 2), np.int64)
        ids[:, 0] = self._zero_row
        ids[:, 1] = [embedding_row(c, 0, int(ln.codes[0])) for ln in lanes]
        embeds = np.zeros((n, 2, c.input_width), np.float32)
        embeds[:, 0] = hiddens
        causal = np.array([[0.0, -np.inf], [0.0, 0.0]], np.float32)
        empty = np.zeros((c.num_layers * n, c.num_kv_heads, 0, c.head_dim), np.float32)
        hidden, nk, nv = self.batch_session.run(
            None,
            {
                "input_ids": ids,
                "input_embeds": embeds,
                "position_ids": np.tile(np.arange(2, dtype=np.int64), (n, 1)),
                "attention_bias": np.broadcast_to(causal, (n, 2, 2)).copy(),
                "past_keys": empty,
                "past_values": empty,
            },
        )
        # new K/V rows are query b*2 + s; the cache view is [L, n, kv, cap, hd].
        kv5 = (c.num_layers, n, c.num_kv_heads, cap, c.head_dim)
        keys, values = st.keys.reshape(kv5), st.values.reshape(kv5)
        split = (c.num_layers, c.num_kv_heads, n, 2, c.head_dim)
        keys[:, :, :, :2] = nk.reshape(split).transpose(0, 2, 1, 3, 4)
        values[:, :, :, :2] = nv.reshape(split).transpose(0, 2, 1, 3, 4)
        self.calls += 1
        self.lane_calls += n
        self._ar_level(lanes, hidden[:, 1], 0)
        for m in range(1, G - 1):
            past = m + 1
            st.ids[:, 0] = [self._level_base + m * V + int(ln.codes[m]) for ln in lanes]
            st.pos[:] = past
            st.bias[...] = -np.inf
            st.bias[:, 0, :past] = 0.0
            st.bias[:, 0, cap] = 0.0
            self._run(st)
            keys[:, :, :, past] = st.new_keys.transpose(0, 2, 1, 3)
            values[:, :, :, past] = st.new_values.transpose(0, 2, 1, 3)
            self.calls += 1
            self.lane_calls += n
            self._ar_level(lanes, st.hidden[:, 0], m)
        for ln in lanes:
            ln.level = G - 1

    def _ar_level(self, lanes, rows, m: int) -> None:
        """c_{m+1} of every live lane from head m on its hidden row (streams on a real batch
        axis never see each other, so a failed lane's rows are simply not sampled)."""
        live = [i for i, ln in enumerate(lanes) if ln.failed is None]
        logits = self.bank.logits_rows(m, np.ascontiguousarray(rows[live]))  # one host call
        items = [(lanes[i], ROOT_ONLY, logits[k : k + 1], None) for k, i in enumerate(live)]
        for i, tok in zip(live, _sample_roots_of(items)):
            if tok is not None:
                lanes[i].codes[m + 1] = tok[0]
                self.codes_out += 1

    def _candidates(self, z: np.ndarray, level: int, depth: int) -> np.ndarray:
        return self.bank.draft_candidates(
            z, min(level + 1, self.G - 2), self.dec.offsets[:depth], self.dec.num_ranks
        )

    def _round(self, lay: _Layout, lanes) -> None:
        call, cap, G = lay.call, self.cap, self.G
        call.ids[:] = self._zero_row
        call.bias[...] = -np.inf
        diag = np.arange(lay.q)
        call.bias[diag, lay.cols + diag] = 0.0  # padding rows see only themselves
        call.pos[:] = 0
        work = []
        for i, ln in enumerate(lanes):
            if ln.done:
                continue
            spec = self._tree_for(ln)
            tree, n = spec["tree"], spec["n"]
            tokens = np.empty(n, np.int32)
            tokens[0] = ln.codes[ln.level]
            if n > 1:
                tokens[1:] = ln.cand[spec["draft_at"]]
            levels = ln.level + spec["depths"]
            q0, past = int(lay.qoff[i]), int(self._past[i])
            rows = slice(q0, q0 + n)
            call.ids[rows] = self._level_base + levels * self.V + tokens
            if self.grouped:
                call.heads[rows] = np.minimum(levels, G - 2)
            call.pos[rows] = past + spec["depths"]
            call.bias[rows, i * cap : i * cap + past] = 0.0
            call.bias[rows, lay.cols + q0 : lay.cols + q0 + n] = spec["bias"]
            work.append((i, ln, tree, tokens, levels))
        self._run(call)
        problems = []
        for i, ln, tree, tokens, levels in work:
            q0 = int(lay.qoff[i])
            heads = np.minimum(levels, G - 2)
            if self.grouped:
                logits = call.logits[q0 : q0 + len(tokens)]
            else:
                logits = np.stack(
                    [self.bank.logits(int(h), call.hidden[q0 + j]) for j, h in enumerate(heads)]
                )
            problems.append((ln, tree, logits, tokens))
        results = verify_lanes(problems)
        self._commit(lay, work, results)
        self.calls += 1
        self.lane_calls += len(work)

    def _tree_for(self, ln: DepthLane) -> dict:
        if not ln.spec:
            return _ROOT_SPEC
        d = min(self.depth, self.G - 1 - ln.level)
        return self._pruned(d)

    def _pruned(self, d: int) -> dict:
        cache = self.__dict__.setdefault("_pruned_cache", {})
        if d not in cache:
            t = self.dec._trees[d]["tree"]
            cache[d] = {
                "tree": t,
                "n": t.num_nodes,
                "depths": t.depths.astype(np.int64),
                "bias": t.attention_bias(0),
                "draft_at": self.dec._trees[d]["draft_at"],
            }
        return cache[d]

    def _commit(self, lay: _Layout, work, results) -> None:
        call, cap, G = lay.call, self.cap, self.G
        src, dst = [], []
        for (i, ln, _tree, _tokens, levels), r in zip(work, results):
            if r is None:
                continue
            nodes = r.nodes
            q0, past = int(lay.qoff[i]), int(self._past[i])
            rows = np.concatenate([[0], nodes]).astype(np.int64)
            src.append(q0 + rows)
            dst.append(i * cap + past + np.arange(len(rows)))
            self._past[i] = past + len(rows)
            m = ln.level
            emitted = r.tokens[: G - 1 - m]  # a bonus past c_{G-1} does not exist: drop it
            ln.codes[m + 1 : m + 1 + len(emitted)] = emitted
            ln.level = m + len(nodes) + 1
            self.codes_out += len(emitted)
            if ln.spec and not ln.done:
                last = int(nodes[-1]) if len(nodes) else 0
                d = min(self.depth, G - 1 - ln.level)
                ln.cand = self._candidates(call.hidden[q0 + last], int(levels[last]), d)
        if src:
            s, d = np.concatenate(src), np.concatenate(dst)
            lay.put(d, s)

    def _run(self, call) -> None:
        call.run()


def _law_key(p: cs.SamplingParams) -> tuple:
    return (p.temperature, p.top_k, p.top_p)


_ROOT_SPEC = {
    "tree": ROOT_ONLY,
    "n": 1,
    "depths": np.zeros(1, np.int64),
    "bias": np.zeros((1, 1), np.float32),
    "draft_at": None,
}


def _sample_roots_of(items) -> list:
    """Root-only draws for [(lane, tree, logits [1, V], _)]: tokens per lane (None where the
    lane failed). A root-only verify draws exactly what `cs.sample` draws."""
    problems = [(ln, tree, logits, np.zeros(1, np.int32)) for ln, tree, logits, _ in items]
    return [None if r is None else r.tokens for r in verify_lanes(problems)]


def sample_roots(logits: np.ndarray, lanes: list[DepthLane]) -> list:
    """c0 of every lane from the temporal logits [n, V] (one core call per sampling law)."""
    return _sample_roots_of([(ln, ROOT_ONLY, logits[i][None], None) for i, ln in enumerate(lanes)])


def verify_lanes(problems) -> list:
    """[(lane, tree, target logits [T, V], node tokens [T])] -> VerifyResult per problem: one
    `verify_tree_batch` call per distinct sampling law over the lanes whose rows are finite;
    a lane with NaN/inf rows fails alone and the others are unaffected."""
    out: list = [None] * len(problems)
    groups: dict = {}
    for k, (ln, _tree, logits, _tokens) in enumerate(problems):
        if not np.isfinite(logits).all():
            ln.failed = FloatingPointError("the model produced non-finite logits")
            continue
        groups.setdefault(_law_key(ln.params), []).append(k)
    for ks in groups.values():
        ps = [problems[k] for k in ks]
        res = cs.verify_tree_batch(
            [p[1] for p in ps],
            np.concatenate([p[3] for p in ps]),
            np.concatenate([p[2] for p in ps]),
            ps[0][0].params,
            [p[0].generator for p in ps],
        )
        for k, r in zip(ks, res):
            out[k] = r
    return out


# --------------------------------------------------------------------------- frame jobs
@dataclass
class FrameJob:
    """One frame's depth loop: the temporal hidden state and c0, the depth mode ("ar",
    "spec" or "pcg"), the sampling law and the frame's own generator."""

    hidden: np.ndarray
    c0: int
    mode: str
    params: cs.SamplingParams
    generator: cs.Generator


def frame_generator(stream: cs.Generator, t: int) -> cs.Generator:
    """Frame t's depth-loop generator: a fork of the stream's keyed by the frame index, so a
    frame's codes do not depend on how frames are grouped into calls (one per round of
    temporal speculation, several streams per engine step) nor on the order of the calls."""
    return stream.fork(int(t))


def decode_frames(batched: BatchedDepth, jobs: list) -> list:
    """Codes int64 [G] (or the exception that failed it) per `FrameJob`: the AR and exact
    speculative frames in one batched depth loop, group-law ("pcg") frames one by one
    through the decoder (its coarse verification has no batched form)."""
    out: list = [None] * len(jobs)
    batch = [i for i, j in enumerate(jobs) if j.mode != "pcg"]
    if batch:
        lanes = []
        for i in batch:
            codes = np.zeros(batched.G, np.int64)
            codes[0] = jobs[i].c0
            lanes.append(
                DepthLane(
                    spec=jobs[i].mode == "spec",
                    params=jobs[i].params,
                    generator=jobs[i].generator,
                    codes=codes,
                )
            )
        hiddens = np.stack([np.asarray(jobs[i].hidden, np.float32) for i in batch])
        batched.decode(hiddens, lanes)
        for i, ln in zip(batch, lanes):
            out[i] = ln.failed if ln.failed is not None else ln.codes
    for i, j in enumerate(jobs):
        if j.mode == "pcg":
            try:
                out[i] = batched.dec.decode_frame(j.hidden, j.c0, j.generator, "pcg")
            except Exception as e:  # this frame's own failure
                out[i] = e
    return out
