"""The talker's step for several streams in one graph call (the serving engine's streams).

`rows_graph` rewrites the in-place talker graph (attention="in_place", any weights) so that
its call takes one row per stream instead of one stream's rows: input_embeds [B, H] and
position_ids [B] become a batch of B one-row sequences ([B, 1, H], positions [B, 1]), each
layer's cache input is [B, kv_heads, capacity, head_dim] (a slot-major buffer, `TalkerSlots`),
and GroupQueryAttention reads each row's own length from its position (seqlens_k = position,
total length = the largest position + 1) and writes the row's keys at that position. Nothing
else changes: the same operators over the same weights (the rewritten file points at the
weights of the graph it came from).

Why a row of this call is the row alone, bit for bit: every operator is computed per row
(the norms, RoPE at the row's own position, the SwiGLU), GroupQueryAttention sums each row's
scores over its own keys only (onnxruntime's CPU kernel: a batch of rows with pasts of other
lengths, right-padded into one buffer, gives each row the bits it gets alone), and the
MatMuls compute a row alike in calls of any number of rows where the kernels do (fp32 MLAS
SGEMM; MatMulNBits at accuracy_level 4 in the blocks `row_probe.row_exact_block` picks for
the talker: 32 at 4 bits, 64 at 8 bits on the AVX-512 Xeon). `rows_agree` checks it on the
loaded graphs before the engine batches anything; where rows differ, the engine keeps the
per-stream step.

Memory: every slot has the buffer's capacity (the longest stream's rows, doubled as it
grows), but pages are touched only where a stream wrote, so a slot holds about the rows the
longest stream it served filled (0.6B: 224 KiB per position, as a per-stream cache; until
the buffer next grows, which copies only the rows the current streams hold).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from codecspec.graphs.config import zero_row
from codecspec.runtime.graph_format import IN_PLACE_KV
from codecspec.runtime.kv import KVCache

__all__ = ["TalkerSlots", "rows_agree", "rows_graph", "rows_graph_path"]

_ROWS = "B"  # the rewritten graph's row (stream) axis


def _node_by_output(graph: onnx.GraphProto) -> dict:
    return {o: n for n in graph.node for o in n.output}


def _i64(graph: onnx.GraphProto, name: str, values) -> str:
    graph.initializer.append(onnx.numpy_helper.from_array(np.array(values, np.int64), name))
    return name


def rows_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """The in-place talker graph `model` rewritten to one row per stream (module doc).
    Changes `model` in place and returns it; ValueError for a graph of another shape."""
    g = model.graph
    by_out = _node_by_output(g)
    need = ("ids_b", "pos_b", "last_pos", "last_pos32", "total1", "total_len", "hidden", "x0")
    missing = [n for n in need if n not in by_out]
    if missing:
        raise ValueError(f"model: not an in-place talker graph (no {missing})")
    axis1 = _i64(g, "rows_axis1", [1])
    # [B] ids and positions -> [B, 1]: a batch of one-row sequences
    for name in ("ids_b", "pos_b"):
        by_out[name].input[1] = axis1
    # input_embeds [B, H] -> [B, 1, H] before it joins the (all-zero) table rows
    x0 = by_out["x0"]
    x0.input[1] = "embeds_b"
    added = [helper.make_node("Unsqueeze", ["input_embeds", axis1], ["embeds_b"])]
    # seqlens_k: each row's own position (its past length); total: the largest + 1
    last = by_out["last_pos"]
    last.op_type, last.input[:] = "Identity", ["position_ids"]
    del last.attribute[:]
    total1 = by_out["total1"]
    total1.input[0] = "rows_max_pos"
    added.append(
        helper.make_node("ReduceMax", ["last_pos32"], ["rows_max_pos"], keepdims=1, axes=[0])
    )
    by_out["hidden"].input[1] = axis1  # [B, 1, H] -> [B, H]
    nodes = added + list(g.node)
    del g.node[:]
    g.node.extend(_topological(nodes))
    _rows_io(g)
    del g.value_info[:]  # stale one-stream shapes would contradict the new axis
    props = {p.key: p.value for p in model.metadata_props}
    props["codecspec.attention"] = "in_place_rows"
    helper.set_model_props(model, props)
    return model


def _topological(nodes: list) -> list:
    """`nodes` in an order where every node follows its inputs' producers."""
    produced = {o for n in nodes for o in n.output}
    done: set = set()
    out, pending = [], list(nodes)
    while pending:
        rest = []
        for n in pending:
            if all(i in done or i not in produced for i in n.input):
                out.append(n)
                done.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError("model: the rewritten talker graph has a cycle")
        pending = rest
    return out


def _rows_io(g: onnx.GraphProto) -> None:
    """The inputs' and outputs' declared shapes with the row axis."""
    caches = tuple(p.split(".")[0] + "." for p in IN_PLACE_KV)  # past_key.i, present_value.i
    for vi in list(g.input) + list(g.output):
        rows = vi.name in ("input_ids", "input_embeds", "position_ids", "hidden")
        if rows or vi.name.startswith(caches):
            dim = vi.type.tensor_type.shape.dim[0]
            dim.Clear()
            dim.dim_param = _ROWS


def rows_graph_path(step_graph: Path) -> Path:
    """The row-batched twin of the in-place talker graph at `step_graph` (`<name>.rows.onnx`
    beside it), written on first use, atomically. Its weights are the step graph's own: a
    graph whose weights live in a .data file beside it points at that file; an inline one
    (fp32) gets a .data file of its own."""
    step_graph = Path(step_graph)
    dst = step_graph.with_name(step_graph.stem + ".rows.onnx")
    if dst.is_file():
        return dst
    model = onnx.load(str(step_graph), load_external_data=False)
    external = any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)
    rows_graph(model)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    try:
        if external:
            onnx.save(model, str(tmp / dst.name))
        else:
            onnx.save(
                model,
                str(tmp / dst.name),
                save_as_external_data=True,
                location=dst.name + ".data",
                size_threshold=1024,
            )
            os.replace(tmp / (dst.name + ".data"), dst.with_name(dst.name + ".data"))
        os.replace(tmp / dst.name, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


class TalkerSlots:
    """The K/V of up to `slots` talkers in one slot-major buffer (per layer
    [slots, kv_heads, capacity, head_dim], keys and values apart) and their steps as one call
    of the row-batched graph (`session`, over `rows_graph_path`). A talker attached to a slot
    (`attach`) keeps its cache there: its own one-row step and prefill read and write that
    slot in place, and `step` runs several attached talkers' next positions at once. The
    buffer grows (doubling, up to the talkers' max_positions) when a talker needs more rows;
    every attached talker is then re-bound to the new buffer."""

    def __init__(self, session, config, slots: int, max_positions: int):
        self.session, self.config = session, config
        self.slots, self.max_positions = int(slots), int(max_positions)
        self.talkers: dict = {}  # slot -> Talker
        self.keys = self.values = None
        self.capacity = 0
        self.calls = 0  # batched calls run
        self.rows_stepped = 0  # talker steps they ran (padding rows not counted)
        self._calls: dict = {}  # rows -> (io binding, ids, embeds, pos, hidden)

    def attach(self, talker, slot: int) -> None:
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot: expected 0..{self.slots - 1}, got {slot}")
        talker.home, talker.cache = (self, int(slot)), None
        self.talkers[int(slot)] = talker

    def view(self, slot: int, length: int) -> KVCache:
        return KVCache.over(self.keys[:, slot], self.values[:, slot], length)

    def reserve(self, capacity: int) -> None:
        """At least `capacity` rows per slot (the rows held so far kept)."""
        if capacity <= self.capacity:
            return
        c = self.config
        new = max(int(capacity), min(2 * self.capacity, self.max_positions))
        shape = (c.num_layers, self.slots, c.num_kv_heads, new, c.head_dim)
        old_keys, old_values = self.keys, self.values
        # np.zeros leaves pages untouched until written: only the rows streams hold are
        # copied, so a slot's memory is what its own stream filled, not the longest one's
        self.keys, self.values = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        for slot in range(self.slots):
            n = self._length(slot)
            if not n:
                continue
            self.keys[:, slot, :, :n] = old_keys[:, slot, :, :n]
            self.values[:, slot, :, :n] = old_values[:, slot, :, :n]
        self.capacity, self._calls = new, {}
        for slot, t in self.talkers.items():  # their views point at the old buffer
            if t.cache is not None:
                t.cache = self.view(slot, t.cache.length)
                t._bind_step()

    def step(self, talkers: list, rows, live=None) -> list:
        """The hidden state of each talker's next position (each an attached talker with its
        input row in `rows`), from one call; a talker that cannot step (ValueError from
        `Talker.next_position`) gets its exception in its place and the others go on.
        `live`: the slots whose caches are in use (None: every attached one); a slot below
        the last stepping one that does not step gets a padding row (see below)."""
        out: list = [None] * len(talkers)
        go = []
        for i, t in enumerate(talkers):
            try:
                t.next_position()  # grows the buffer where this talker is full
                go.append(i)
            except ValueError as e:
                out[i] = e
        if not go:
            return out
        slot_of = {talkers[i].home[1]: i for i in go}
        b = max(slot_of) + 1
        # rows for slots in 0..b-1 that do not step: a padding row at the slot's own length,
        # the row it writes next anyway (its K/V there are overwritten before being read);
        # a slot in no use gets position 0 (the next stream there prefills from scratch)
        keep = set(self.talkers) if live is None else set(live) | set(slot_of)
        length = [self._length(s) if s in keep else 0 for s in range(b)]
        self.reserve(max(length) + 1)
        io, ids, embeds, pos, hidden = self._call(b)
        embeds[...] = 0.0
        for s in range(b):
            pos[s] = length[s]
            if s in slot_of:
                embeds[s] = rows[slot_of[s]]
        self.session.run_with_iobinding(io)
        self.calls += 1
        self.rows_stepped += len(slot_of)
        for s, i in slot_of.items():
            talkers[i].stepped()
            out[i] = hidden[s].copy()
        return out

    def _length(self, slot: int) -> int:
        t = self.talkers.get(slot)
        return 0 if t is None or t.cache is None else t.cache.length

    def _call(self, b: int) -> tuple:
        """The bound call of the first `b` slots (made once per buffer)."""
        call = self._calls.get(b)
        if call is not None:
            return call
        c = self.config
        ids = np.full(b, zero_row(c), np.int64)  # every input comes through input_embeds
        embeds = np.zeros((b, c.hidden_size), np.float32)
        pos = np.zeros(b, np.int64)
        hidden = np.zeros((b, c.hidden_size), np.float32)
        io = self.session.io_binding()
        for name, arr in (("input_ids", ids), ("input_embeds", embeds), ("position_ids", pos)):
            io.bind_input(name, "cpu", 0, arr.dtype.type, arr.shape, arr.ctypes.data)
        io.bind_output("hidden", "cpu", 0, np.float32, hidden.shape, hidden.ctypes.data)
        for i in range(c.num_layers):
            for names, kv in zip((IN_PLACE_KV[::2], IN_PLACE_KV[1::2]), (self.keys, self.values)):
                layer = kv[i, :b]  # contiguous: the first b slots of layer i
                io.bind_input(
                    names[0].format(i), "cpu", 0, np.float32, layer.shape, layer.ctypes.data
                )
                io.bind_output(
                    names[1].format(i), "cpu", 0, np.float32, layer.shape, layer.ctypes.data
                )
        call = self._calls[b] = (io, ids, embeds, pos, hidden)
        return call


def rows_agree(graph, session, slots: int, seed: int = 0) -> bool:
    """Whether a batched step gives every talker the bits of its own one-row step, on this
    device at these weights: three talkers with pasts of other lengths in slots 0, 1 and
    `slots` - 1 (the rows between are padding, so the call has as many rows as the engine's
    largest), stepped alone and together, then the first two again in a call of two rows.
    Thirteen graph calls of one to four rows: about as long as a dozen talker steps."""
    from .talker import Talker

    if slots < 2:
        return True
    c = graph.config
    rng = np.random.default_rng(seed)
    picks = sorted({0, 1, slots - 1})
    lens = [1, 4, 2][: len(picks)]  # distinct pasts, few rows: a cheap probe at load
    prompts = [rng.standard_normal((n, c.hidden_size)).astype(np.float32) * 0.05 for n in lens]
    rows = rng.standard_normal((2, len(picks), c.hidden_size)).astype(np.float32) * 0.05
    head = np.zeros((1, c.hidden_size), np.float32)
    alone = []
    for i, p in enumerate(prompts):
        t = Talker(graph, head)
        t.prefill(p, capacity=len(p) + 2)
        alone.append([t.step(rows[k, i]) for k in range(2 if i < 2 else 1)])
    shared = TalkerSlots(session, c, slots, c.max_positions)
    together = []
    for slot, p in zip(picks, prompts):
        t = Talker(graph, head)
        shared.attach(t, slot)
        t.prefill(p, capacity=len(p) + 2)
        together.append(t)
    first = shared.step(together, rows[0])
    second = shared.step(together[:2], rows[1, :2])
    got = [[first[i]] + ([second[i]] if i < 2 else []) for i in range(len(picks))]
    return all(np.array_equal(a, b) for ra, rb in zip(alone, got) for a, b in zip(ra, rb))
