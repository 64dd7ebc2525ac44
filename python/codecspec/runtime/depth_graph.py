"""One ONNX Runtime session over a depth-decoder graph built by `codecspec.graphs`.

Knows the graph's I/O contract (docs/graphs.md) and nothing about trees or sampling. Two kinds
of graph exist: heads="graph" returns verify and draft logits for every query node;
heads="hidden" returns final-norm hidden states and leaves the heads to the host
(`codecspec.HeadBank`), which on a CPU is much cheaper (see docs/graphs.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np
import onnx

from codecspec.runtime.graph_format import (
    GRAPH_VERSION,
    IN_PLACE_KV,
    DepthDecoderConfig,
    read_graph_metadata,
)
from codecspec.runtime.kv import join_kv, split_kv
from codecspec.runtime.session import ModelSource, open_session

_GRAPH_OUT = ("logits", "draft_logits", "new_keys", "new_values")
_ORT_TYPES = {np.dtype(np.float32): np.float32, np.dtype(np.int64): np.int64}
_HIDDEN_OUT = ("hidden", "new_keys", "new_values")
_JOINED = {"new_keys": "new_kv", "new_values": None}  # attention="placed" graphs (runtime.kv)


def heads_sidecar(model_path: Union[str, Path]) -> Path:
    """Where the LM heads of a heads="hidden" graph are stored: beside the .onnx file."""
    p = Path(model_path)
    return p.with_name(p.stem + ".heads.npy")


def write_heads_sidecar(model_path: Union[str, Path], heads) -> Path:
    """Stores a heads="hidden" graph's LM heads (float32) beside it; returns the path."""
    side = heads_sidecar(model_path)
    np.save(side, np.asarray(heads, np.float32))
    return side


def _config_of(meta: dict) -> DepthDecoderConfig:
    if meta["graph_version"] != GRAPH_VERSION:
        raise ValueError(
            f"model: unsupported codecspec graph version {meta['graph_version']!r} "
            f"(this library reads {GRAPH_VERSION!r})"
        )
    return DepthDecoderConfig.from_dict(meta["config"])


class DepthGraph:
    """A loaded verifier graph. `heads_in_graph` says which kind it is."""

    def __init__(
        self,
        model: Union[ModelSource, onnx.ModelProto],
        provider: str = "auto",
        threads: int | None = None,
    ):
        self.path = None
        # a graph built in memory (the shared depth decoder's expansion) is kept, so its
        # batch-axis variant can be derived as a file's is (`onnx_model`)
        self.proto = model if isinstance(model, onnx.ModelProto) else None
        self._reads = None  # perf.GraphReads, counted on first use
        if isinstance(model, onnx.ModelProto):
            from codecspec.perf import graph_reads

            self._reads = graph_reads(model)  # no parse: the proto is at hand
            source = model.SerializeToString()
            meta = read_graph_metadata(model)
        else:
            source = model
            if not isinstance(model, (bytes, bytearray)):
                self.path = Path(model)
                if not self.path.is_file():
                    raise FileNotFoundError(f"model: no such ONNX file: {model}")
            try:
                meta = read_graph_metadata(model)
            except Exception as e:
                raise ValueError(f"model: not a codecspec depth graph ({e})") from e
        self.config: DepthDecoderConfig = _config_of(meta)
        # heads="grouped": draft rows per call may be 0..K (AR calls bind none)
        self.grouped_heads = meta.get("heads") == "grouped"
        # attention="placed_op": the graph's attention is codecspec's own operator
        self.attention = meta.get("attention", "call")
        # every call padded to a multiple of this many rows (graphs.builder.set_row_multiple)
        self.row_multiple = int(meta.get("row_multiple", 1))
        self.session = open_session(
            source, provider=provider, threads=threads, custom_ops=self.attention == "placed_op"
        )
        outputs = {o.name for o in self.session.get_outputs()}
        self.heads_in_graph = "logits" in outputs
        # K/V joined and position-major (runtime.kv): attention="placed" graphs
        inputs = {i.name for i in self.session.get_inputs()}
        self.kv_joined = "past_kv" in inputs
        # the cache written in place: the caller's buffers are past and present at once
        self.kv_in_place = IN_PLACE_KV[0].format(0) in inputs
        want = _GRAPH_OUT if self.heads_in_graph else _HIDDEN_OUT
        if self.kv_joined:
            want = tuple(_JOINED.get(n, n) for n in want if _JOINED.get(n, n) is not None)
        if self.kv_in_place:
            L = self.config.num_layers
            want = tuple(n for n in want if n not in ("new_keys", "new_values"))
            missing = [n.format(i) for n in IN_PLACE_KV[2:] for i in range(L)]
            missing = [n for n in missing if n not in outputs]
            if missing:
                raise ValueError(f"model: graph lacks outputs {missing[:4]}")
        missing = [n for n in want if n not in outputs]
        if missing:
            raise ValueError(f"model: graph lacks outputs {missing}")
        self.outputs = want
        self.provider = self.session.get_providers()[0]
        self.calls = 0

    def onnx_model(self) -> onnx.ModelProto | None:
        """The graph as an ONNX model (read from its file, or the one it was built from);
        None for a graph given as bytes."""
        if self.proto is not None:
            return self.proto
        return None if self.path is None else onnx.load(str(self.path))

    def weight_reads(self):
        """Bytes of weights one call reads (`codecspec.perf.GraphReads`); None for a graph
        given as serialized bytes (not kept)."""
        if self._reads is None and self.path is not None:
            from codecspec.perf import graph_reads

            self._reads = graph_reads(self.path)
        return self._reads

    def __call__(
        self,
        input_ids: np.ndarray,
        input_embeds: np.ndarray,
        position_ids: np.ndarray,
        attention_bias: np.ndarray,
        past_keys: np.ndarray,
        past_values: np.ndarray,
        head_ids: np.ndarray | None = None,
        draft_offsets: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """heads="graph": [logits, draft_logits, new_keys, new_values];
        heads="hidden": [hidden, new_keys, new_values]. K/V in and out are [L, kvh, P, hd]
        whatever the graph's own layout (a joined graph's are converted: a convenience for
        probes and tests; decoding binds the cache in the graph's layout, see bind)."""
        self.calls += 1
        if self.kv_in_place:
            return self._call_in_place(
                input_ids,
                input_embeds,
                position_ids,
                past_keys,
                past_values,
                head_ids,
                draft_offsets,
            )
        q = len(position_ids)
        if self.row_multiple > 1 and q % self.row_multiple:
            return self._call_padded(
                input_ids,
                input_embeds,
                position_ids,
                attention_bias,
                past_keys,
                past_values,
                head_ids,
                draft_offsets,
            )
        feeds = {
            "input_ids": input_ids,
            "input_embeds": input_embeds,
            "position_ids": position_ids,
            "attention_bias": attention_bias,
        }
        if self.kv_joined:
            feeds["past_kv"] = join_kv(past_keys, past_values)
        else:
            feeds.update(past_keys=past_keys, past_values=past_values)
        if self.heads_in_graph:
            feeds["head_ids"] = head_ids
            feeds["draft_offsets"] = draft_offsets
        out = self.session.run(self.outputs, feeds)
        if self.kv_joined:
            kv = split_kv(out.pop(), self.config.num_kv_heads)
            out += [np.ascontiguousarray(a) for a in kv]
        return out

    def _call_padded(self, ids, embeds, pos, bias, past_keys, past_values, heads, offsets):
        """__call__ for a graph whose calls are padded (row_multiple): the call's rows, then
        padding rows that see only themselves and that no head scores; their outputs are
        dropped."""
        q = len(pos)
        qp = padded_rows(q, self.row_multiple)
        past = np.shape(bias)[1] - q
        full = np.full((qp, past + qp), -np.inf, np.float32)
        full[:q, : past + q] = bias
        full[np.arange(q, qp), past + np.arange(q, qp)] = 0.0
        extra = qp - q
        out = self(
            np.concatenate([np.asarray(ids, np.int64), np.zeros(extra, np.int64)]),
            np.concatenate([embeds, np.zeros((extra, np.shape(embeds)[1]), np.float32)]),
            np.concatenate([np.asarray(pos, np.int64), np.zeros(extra, np.int64)]),
            full,
            past_keys,
            past_values,
            np.concatenate([np.asarray(heads, np.int64), np.full(extra, PADDING_HEAD, np.int64)]),
            draft_offsets=offsets,
        )
        # [logits, draft_logits | hidden, ..., new_keys, new_values]: rows on axis 0, K/V on 2
        n_kv = 2
        return [a[:q] for a in out[:-n_kv]] + [
            np.ascontiguousarray(a[:, :, :q]) for a in out[-n_kv:]
        ]

    def _call_in_place(self, ids, embeds, pos, past_keys, past_values, heads, offsets):
        """__call__ for an in-place graph: the past's P rows then this call's Q rows at
        positions P .. P+Q-1 (the only layout it computes; its causal mask replaces the
        bias). The caller's arrays are not written."""
        L, P, q = self.config.num_layers, np.shape(past_keys)[2], len(pos)
        if not np.array_equal(np.asarray(pos), np.arange(P, P + q)):
            raise ValueError(f"position_ids: an in-place graph computes positions {P}..{P + q - 1}")
        grow = ((0, 0), (0, 0), (0, q), (0, 0))
        cache = [
            np.ascontiguousarray(np.pad(a, grow), np.float32) for a in (past_keys, past_values)
        ]
        feeds = {"input_ids": ids, "input_embeds": embeds, "position_ids": pos}
        for i in range(L):
            for name, kv in zip(IN_PLACE_KV[:2], cache):
                feeds[name.format(i)] = kv[i][None]
        if self.heads_in_graph:
            feeds.update(head_ids=heads, draft_offsets=offsets)
        names = list(self.outputs) + [n.format(i) for n in IN_PLACE_KV[2:] for i in range(L)]
        out = self.session.run(names, feeds)
        k = len(self.outputs)
        keys = np.concatenate(out[k : k + L])[:, :, P:]
        values = np.concatenate(out[k + L :])[:, :, P:]
        return out[:k] + [np.ascontiguousarray(keys), np.ascontiguousarray(values)]

    def bind(
        self, q: int, past_keys: np.ndarray, past_values: np.ndarray, drafts: int | None = None
    ) -> BoundCall:
        """A call of fixed query length `q` whose inputs and outputs live in preallocated
        numpy buffers, bound by pointer (see BoundCall). The past in the graph's layout
        (`KVCache.past`): keys and values, or for a joined graph (`kv_joined`) the joined
        array as past_keys and None. `drafts`: draft offsets the call scores
        (heads="grouped" graphs: 0..K, 0 for an AR call; otherwise always K)."""
        return BoundCall(self, q, past_keys, past_values, drafts)


class BoundCall:
    """One graph call shape with every input and output bound by pointer (IOBinding).

    The host writes inputs in place (`ids`, `embeds`, `pos`, `bias`, `heads`, `offsets`) and
    reads outputs in place (`hidden` or `logits` / `draft_logits`, `new_keys`, `new_values`;
    for a joined graph `new_kv`, of which `new_keys` / `new_values` are views).
    The past K/V inputs are the host cache itself at full capacity; `bias` masks the columns
    past the valid length. Nothing is allocated or copied per call, and a call costs a few
    microseconds of Python instead of tens.
    """

    def __init__(
        self,
        graph: DepthGraph,
        q: int,
        past_keys: np.ndarray,
        past_values: np.ndarray,
        drafts: int | None = None,
    ):
        c = graph.config
        K = c.num_draft_offsets if drafts is None else int(drafts)
        if not 0 <= K <= c.num_draft_offsets or (
            K != c.num_draft_offsets and not graph.grouped_heads
        ):
            raise ValueError(f"drafts: this graph scores exactly {c.num_draft_offsets}, got {K}")
        cap = _past_capacity(graph, past_keys, past_values)
        self.graph, self.q = graph, q
        # A graph of row_multiple m runs q rounded up to m rows: the extra rows see only
        # themselves and no head scores them (head -1); the host's arrays below are views of
        # the first q rows (new K/V keep all rows: commits pick rows by index).
        qp = padded_rows(q, graph.row_multiple)
        self.ids = np.zeros(qp, np.int64)
        self.embeds = np.zeros((qp, c.input_width), np.float32)
        self.pos = np.zeros(qp, np.int64)
        self.bias = np.zeros((qp, cap + qp), np.float32)
        self.heads = np.zeros(qp, np.int64)
        self.offsets = np.zeros((K, c.hidden_size), np.float32)
        if qp > q:
            self.bias[:, cap + q :] = -np.inf
            self.bias[q:] = -np.inf
            self.bias[np.arange(q, qp), cap + np.arange(q, qp)] = 0.0
            self.heads[q:] = PADDING_HEAD
        if graph.kv_in_place:
            # layer i of the host cache is both the past and the present: the graph writes
            # this call's rows at their positions and nothing is committed afterwards
            self.new_keys = self.new_values = None
            past = {}
            for i in range(c.num_layers):
                for name, kv in zip(IN_PLACE_KV, (past_keys, past_values) * 2):
                    past[name.format(i)] = kv[i][None]
        elif graph.kv_joined:
            self.new_kv = np.zeros((c.num_layers, qp, 2 * c.num_kv_heads * c.head_dim), np.float32)
            self.new_keys, self.new_values = split_kv(self.new_kv, c.num_kv_heads)
            past = {"past_kv": past_keys}
        else:
            kv = (c.num_layers, c.num_kv_heads, qp, c.head_dim)
            self.new_keys = np.zeros(kv, np.float32)
            self.new_values = np.zeros(kv, np.float32)
            past = {"past_keys": past_keys, "past_values": past_values}
        if graph.heads_in_graph:
            self.logits = np.zeros((qp, c.codebook_size), np.float32)
            self.draft_logits = np.zeros((qp, K, c.codebook_size), np.float32)
            self.hidden = None
        else:
            self.hidden = np.zeros((qp, c.hidden_size), np.float32)
            self.logits = self.draft_logits = None
        self._past = (past_keys, past_values)  # keep the bound buffers alive
        io = graph.session.io_binding()
        inputs = {"input_ids": self.ids, "input_embeds": self.embeds, "position_ids": self.pos}
        if not graph.kv_in_place:  # an in-place graph's mask is causal over the positions
            inputs["attention_bias"] = self.bias
        inputs.update({n: a for n, a in past.items() if not n.startswith("present")})
        if graph.heads_in_graph:
            inputs.update(head_ids=self.heads, draft_offsets=self.offsets)
        for name, arr in inputs.items():
            io.bind_input(name, "cpu", 0, _ORT_TYPES[arr.dtype], arr.shape, arr.ctypes.data)
        outputs = {name: getattr(self, name) for name in graph.outputs}  # new_kv included
        outputs.update({n: a for n, a in past.items() if n.startswith("present")})
        for name, arr in outputs.items():
            io.bind_output(name, "cpu", 0, np.float32, arr.shape, arr.ctypes.data)
        self.io = io
        if qp > q:  # the host sees the call's own rows (and, in the bias, their columns)
            self.ids, self.embeds, self.pos = self.ids[:q], self.embeds[:q], self.pos[:q]
            self.bias, self.heads = self.bias[:q, : cap + q], self.heads[:q]
            for name in ("logits", "draft_logits", "hidden"):
                if getattr(self, name) is not None:
                    setattr(self, name, getattr(self, name)[:q])

    def run(self) -> None:
        self.graph.calls += 1
        self.graph.session.run_with_iobinding(self.io)


PADDING_HEAD = -1  # the head id of a padding row: RouteRows scores it with no head


def padded_rows(q: int, multiple: int) -> int:
    """Rows a call of `q` rows runs in a graph whose calls are padded to `multiple`."""
    return -(-q // multiple) * multiple


def _past_capacity(graph: DepthGraph, past_keys, past_values) -> int:
    """The past's rows, after checking it is in the graph's layout."""
    c = graph.config
    if graph.kv_joined:
        want = (c.num_layers, 2 * c.num_kv_heads * c.head_dim)
        shape = getattr(past_keys, "shape", None)
        if past_values is not None or shape is None or len(shape) != 3:
            raise ValueError(
                "past_keys: this graph reads K/V joined: pass KVCache.past (kv [L, P, "
                f"{want[1]}], None), got {shape} and {type(past_values).__name__}"
            )
        if (shape[0], shape[2]) != want or not past_keys.flags.c_contiguous:
            raise ValueError(
                f"past_keys: expected C-contiguous [{want[0]}, P, {want[1]}], got {shape}"
            )
        return shape[1]
    shape = getattr(past_keys, "shape", None)
    if (
        shape is None
        or len(shape) != 4
        or (shape[0], shape[1], shape[3]) != (c.num_layers, c.num_kv_heads, c.head_dim)
        or getattr(past_values, "shape", None) != shape
        or not _contiguous(graph, past_keys)
        or not _contiguous(graph, past_values)
    ):
        raise ValueError(
            f"past_keys: expected C-contiguous keys and values [{c.num_layers}, "
            f"{c.num_kv_heads}, P, {c.head_dim}] each, got {shape}"
        )
    return shape[2]


def _contiguous(graph: DepthGraph, kv: np.ndarray) -> bool:
    """An in-place graph binds the cache layer by layer, so each layer must be contiguous
    (a slot of a buffer several caches share, `KVCache.over`); the others bind it whole."""
    if graph.kv_in_place:
        return all(kv[i].flags.c_contiguous for i in range(kv.shape[0]))
    return kv.flags.c_contiguous
