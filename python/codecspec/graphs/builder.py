"""ONNX graphs of a depth decoder for one speculative round (whole draft tree as the query).

Graph I/O contract (batch 1, Q query tokens, P past tokens, T = P + Q):

inputs
    input_ids       int64   [Q]            row of the concatenated input table (see config.py)
    input_embeds    float32 [Q, H_in]      added to the gathered rows (zeros for code tokens)
    position_ids    int64   [Q]            RoPE positions, each < config.max_positions
    attention_bias  float32 [Q, T]         additive: 0 visible, -inf hidden; every row must see
                                           at least one key
    past_keys       float32 [L, KVH, P, hd]  keys after RoPE
    past_values     float32 [L, KVH, P, hd]
    head_ids        int64   [Q]            heads="graph" only: head j predicts c_{j+1}
    draft_offsets   float32 [K, H]         heads="graph" only: b_1..b_K (zeros = head reuse)
outputs
    logits          float32 [Q, V]         heads="graph" only: heads[head_ids[i]] . z_i
    draft_logits    float32 [Q, K, V]      heads="graph" only: heads[min(head_ids[i]+j, G-2)]
                                           . (z_i + b_j), j = 1..K
    hidden          float32 [Q, H]         z = final_norm(h)
    new_keys        float32 [L, KVH, Q, hd]  this call's rows, after RoPE
    new_values      float32 [L, KVH, Q, hd]

heads="grouped" has the I/O of heads="graph", but K' = rows of draft_offsets may be anything
from 0 to K (0: an autoregressive call, no draft logits) and each head is its own MatMul with a
constant weight, applied only to the (node, offset) pairs that use it: a call reads the heads
its nodes need, not all G-1, and weight-only quantisation (graphs.quantize) covers the heads.

variant="plain" uses standard ONNX ops only (opset 13..17): no contrib ops, static ranks.
variant="cpu" uses ONNX Runtime com.microsoft contrib ops (GroupQueryAttention with causal=0 and
an additive bias, RotaryEmbedding, BranchwiseRMSNorm, SkipSimplifiedLayerNormalization,
QuickGelu), developed against onnxruntime 1.32; `cpu_variant_supported()` checks the installed
one.
Both need Q >= 1; variant="cpu" also Q <= 4096 (RotaryEmbedding cache rows).

attention="placed" (either variant) makes every query row's arithmetic independent of the call
it is in: each row gathers the keys it sees into one slot per position (one frame's positions,
< min(max_positions, num_codebooks + 1); empty slots masked) and attends over those, so a tree
node in a verify call is computed by the same operations, in the same order, as the
autoregressive call at its position. It reads attention_bias as a mask (0 visible, anything
else hidden) and takes a row's visible keys, in column order, as its positions 0, 1, 2, ...
(keys laid out in the order they were made, as the runtime's depth cache and trees keep
them); a row sees at most that many keys. The default, attention="call",
attends over the call's columns as they come (GroupQueryAttention on variant="cpu"): a
one-row call and a several-row call round differently (~1e-7), which quantised weights
amplify (docs/qwen3_tts.md). attention="placed_op" (variant="cpu") is "placed" with each
layer's attention in one codecspec operator (`ai.codecspec` PlacedAttention, served by the
Rust core; runtime.custom_ops): the same I/O and the same row-exactness, ~75 fewer nodes per
call; its sessions need the operators registered (DepthGraph does it from the metadata).
With heads="grouped" it also routes the (node, offset) pairs to their heads with two codecspec
operators (RouteRows before the heads, MergeRows after) instead of ~90 standard nodes.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from typing import Optional, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from codecspec.runtime.graph_format import (
    _META_ATTENTION,
    _META_CONFIG,
    _META_HEADS,
    _META_IO,
    _META_LAYOUT,
    _META_ROW_MULTIPLE,
    _META_VARIANT,
    _META_VERSION,
    GRAPH_VERSION,
    IN_PLACE_KV,
)

from .config import DepthDecoderConfig, table_layout
from .placed_attention import placed_attention, placed_slots
from .weights import DepthDecoderWeights

__all__ = [
    "GraphBuilder",
    "INPUT_NAMES",
    "OUTPUT_NAMES",
    "build_depth_graph",
    "save_model",
    "graph_io_names",
    "count_nodes",
    "cpu_variant_supported",
]

INPUT_NAMES = (
    "input_ids",
    "input_embeds",
    "position_ids",
    "attention_bias",
    "past_keys",
    "past_values",
    "head_ids",
    "draft_offsets",
)
OUTPUT_NAMES = ("logits", "draft_logits", "hidden", "new_keys", "new_values")
# attention="placed" graphs read and write K/V joined and position-major (docs/graphs.md)
JOINED_KV = {"past_keys": "past_kv", "past_values": None, "new_keys": "new_kv", "new_values": None}
HEADS_MODES = ("graph", "hidden", "grouped")
ATTENTION_MODES = ("call", "placed", "in_place", "placed_op")
_CODECSPEC_OPS = "ai.codecspec"  # runtime.custom_ops.DOMAIN (no runtime import here)

# Above this a serialized ModelProto risks protobuf's 2 GiB limit.
_INLINE_LIMIT = 1_800_000_000


def graph_io_names(
    heads: str = "graph", attention: str = "call", num_layers: Optional[int] = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(input names, output names) of a graph built with this heads and attention mode, in
    graph order. attention="placed": one joined past_kv input and new_kv output in place of
    the keys' and values' pairs; "in_place": no attention_bias, and per layer (num_layers
    needed) a past_key.i / past_value.i input and present_key.i / present_value.i output
    (IN_PLACE_KV) in place of the stacked ones."""
    _check_choice("heads", heads, HEADS_MODES)
    _check_choice("attention", attention, ATTENTION_MODES)
    if heads in ("graph", "grouped"):
        names = INPUT_NAMES, OUTPUT_NAMES
    else:
        names = INPUT_NAMES[:6], ("hidden", "new_keys", "new_values")
    if attention == "call":
        return names
    if attention == "in_place":
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers: attention='in_place' needs it, got {num_layers!r}")
        layers = range(num_layers)
        pk, pv, nk, nv = IN_PLACE_KV
        past = [pk.format(i) for i in layers] + [pv.format(i) for i in layers]
        present = [nk.format(i) for i in layers] + [nv.format(i) for i in layers]
        ins = [n for n in names[0] if n not in ("attention_bias", "past_keys", "past_values")]
        outs = [n for n in names[1] if n not in ("new_keys", "new_values")]
        return tuple(ins[:3] + past + ins[3:]), tuple(outs + present)
    return tuple(
        tuple(JOINED_KV.get(n, n) for n in part if JOINED_KV.get(n, n) is not None)
        for part in names
    )


# ---------------------------------------------------------------------- graph assembly helper
class GraphBuilder:
    """Accumulates nodes and initializers; names every value uniquely. Public: the Qwen3-TTS
    family's speech-tokenizer graphs are built with it too."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._used: set[str] = set()
        self._consts: dict[tuple, str] = {}

    def fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self._used:
            k += 1
            name = f"{hint}_{k}"
        self._used.add(name)
        return name

    def init(self, hint: str, array: np.ndarray) -> str:
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def i64(self, values, hint: str = "const") -> str:
        """Shared int64 constant (shapes, axes, split sizes, indices)."""
        arr = np.asarray(values, dtype=np.int64)
        key = ("i64", arr.shape, tuple(arr.ravel().tolist()))
        if key not in self._consts:
            self._consts[key] = self.init(hint, arr)
        return self._consts[key]

    def f32(self, value, hint: str = "constf") -> str:
        arr = np.asarray(value, dtype=np.float32)
        key = ("f32", arr.shape, tuple(arr.ravel().tolist()))
        if key not in self._consts:
            self._consts[key] = self.init(hint, arr)
        return self._consts[key]

    def op(
        self,
        op_type: str,
        inputs,
        hint: Optional[str] = None,
        n_out: int = 1,
        domain: str = "",
        outputs=None,
        **attrs,
    ):
        if outputs is None:
            base = hint or op_type.lower()
            outputs = [self.fresh(base if n_out == 1 else f"{base}_{k}") for k in range(n_out)]
        else:
            for o in outputs:
                self._used.add(o)
        node = helper.make_node(
            op_type,
            list(inputs),
            list(outputs),
            name=self.fresh(f"n_{outputs[0]}"),
            domain=domain,
            **attrs,
        )
        self.nodes.append(node)
        return outputs[0] if len(outputs) == 1 else list(outputs)


def _check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


# ---------------------------------------------------------------------- weight preparation
def _f64(w: DepthDecoderWeights, name: str) -> np.ndarray:
    return w[name].astype(np.float64)


def _input_table(c: DepthDecoderConfig, w: DepthDecoderWeights):
    """(table, embeds_matrix or None). With an input projection the table is pre-projected.

    proj(row + e) = (row @ W^T + b) + e @ W^T, so projecting the table once (bias folded into
    every row, the zero row included) leaves only the external embeddings to project per call;
    it also shrinks the table from H_in to H columns.
    """
    Hin = c.input_width
    table = np.concatenate(
        [
            _f64(w, "c0_embedding"),
            _f64(w, "code_embeddings").reshape(-1, Hin),
            np.zeros((1, Hin)),
        ]
    )
    if not c.has_input_proj:
        return table.astype(np.float32), None
    wp = _f64(w, "input_proj.weight")
    bp = _f64(w, "input_proj.bias")
    return (table @ wp.T + bp).astype(np.float32), wp.T.astype(np.float32)


def _inv_freq(c: DepthDecoderConfig) -> np.ndarray:
    return 1.0 / (c.rope_theta ** (np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim))


def _rope_angles(c: DepthDecoderConfig) -> np.ndarray:
    """[max_positions, head_dim/2] rotation angles."""
    return np.arange(c.max_positions, dtype=np.float64)[:, None] * _inv_freq(c)[None, :]


def _plain_rope_tables(c: DepthDecoderConfig, w: DepthDecoderWeights):
    """Per-layer, per-head RoPE tables with the q/k norm weights folded in.

    For n the RMS-normalised head vector and g the norm weight, RoPE(g * n) =
    n * (g * cos) + swap(n) * (sign * g[swapped] * sin), where swap exchanges the two halves
    and sign is -1 on the first half (HF rotate_half). Folding g, the 1/sqrt(hd) attention
    scale (q only) and the sqrt(hd) of the sum-of-squares normalisation into the tables
    leaves four nodes per layer for norm weight + RoPE + scaling.
    Shapes: [L * (nh + kvh), max_positions, hd].
    """
    hd, h2 = c.head_dim, c.head_dim // 2
    ang = _rope_angles(c)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=1)  # [P, hd]
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=1)
    sign = np.concatenate([-np.ones(h2), np.ones(h2)])
    perm = np.concatenate([np.arange(h2, hd), np.arange(0, h2)])
    cos_tabs, sin_tabs = [], []
    for i in range(c.num_layers):
        # q: norm sqrt(hd) times attention 1/sqrt(hd) cancel; k keeps the sqrt(hd).
        gq = _f64(w, f"layers.{i}.q_norm")
        gk = _f64(w, f"layers.{i}.k_norm") * np.sqrt(hd)
        for g, n in ((gq, c.num_heads), (gk, c.num_kv_heads)):
            ct = cos * g[None, :]
            st = sin * (sign * g[perm])[None, :]
            cos_tabs.append(np.broadcast_to(ct, (n,) + ct.shape))
            sin_tabs.append(np.broadcast_to(st, (n,) + st.shape))
    return (
        np.concatenate(cos_tabs).astype(np.float32),
        np.concatenate(sin_tabs).astype(np.float32),
        perm.astype(np.int64),
    )


def _qkv_matrix(c: DepthDecoderConfig, w: DepthDecoderWeights, i: int, scale=None) -> np.ndarray:
    m = np.concatenate(
        [
            _f64(w, f"layers.{i}.q_proj"),
            _f64(w, f"layers.{i}.k_proj"),
            _f64(w, f"layers.{i}.v_proj"),
        ]
    ).T
    if scale is not None:
        m = m * scale[:, None]
    return m.astype(np.float32)


def _gate_up_matrix(c: DepthDecoderConfig, w: DepthDecoderWeights, i: int, scale=None):
    m = np.concatenate([_f64(w, f"layers.{i}.gate_proj"), _f64(w, f"layers.{i}.up_proj")]).T
    if scale is not None:
        m = m * scale[:, None]
    return m.astype(np.float32)


def _t32(w: DepthDecoderWeights, name: str) -> np.ndarray:
    return np.ascontiguousarray(w[name].T, dtype=np.float32)


# ---------------------------------------------------------------------- shared graph pieces
def _split_layers(g: GraphBuilder, tensor: str, num_layers: int, hint: str) -> list[str]:
    """[L, ...] -> L tensors [1, ...]."""
    if num_layers == 1:
        return [tensor]
    return g.op("Split", [tensor, g.i64([1] * num_layers)], hint=hint, n_out=num_layers, axis=0)


def _heads_part(g: GraphBuilder, c: DepthDecoderConfig, w: DepthDecoderWeights, z: str) -> None:
    """Verify and draft logits, one gathered head matrix per (node, offset) pair.

    Row j = 0 is the verify head with no offset; rows 1..K the draft heads with b_j. Gathering
    [Q, K+1, V, H] head weights is the costly part for large V*H (see docs/graphs.md).
    """
    K = c.num_draft_offsets
    heads = g.init("heads", w["heads"])
    hid = g.op("Unsqueeze", ["head_ids", g.i64([1])], hint="head_ids_col")
    idx = g.op("Add", [hid, g.i64(np.arange(K + 1))], hint="head_idx")
    idx = g.op("Min", [idx, g.i64(c.num_lm_heads - 1)], hint="head_idx_clamped")
    offs = g.op(
        "Concat", [g.f32(np.zeros((1, c.hidden_size))), "draft_offsets"], hint="offsets0", axis=0
    )
    zc = g.op("Unsqueeze", [z, g.i64([1])], hint="z_col")
    vec = g.op("Add", [zc, offs], hint="head_inputs")
    vec = g.op("Unsqueeze", [vec, g.i64([3])], hint="head_inputs_col")
    hw = g.op("Gather", [heads, idx], hint="head_weights", axis=0)
    lg = g.op("MatMul", [hw, vec], hint="all_logits4")
    lg = g.op("Squeeze", [lg, g.i64([3])], hint="all_logits")
    lv, _ = g.op(
        "Split",
        [lg, g.i64([1, K])],
        hint="logit_split",
        n_out=2,
        axis=1,
        outputs=[g.fresh("verify_logits3"), "draft_logits"],
    )
    g.op("Squeeze", [lv, g.i64([1])], outputs=["logits"])


def _grouped_heads_part(g: GraphBuilder, c: DepthDecoderConfig, w: DepthDecoderWeights, z: str):
    """Verify and draft logits with one constant-weight MatMul per head.

    Pairs (node i, offset j), j = 0..K' (j = 0: the verify head, no offset), use head
    min(head_ids[i] + j, G-2). Each head gathers the pair rows that use it (NonZero of the
    pair's head index, empty for the heads a call does not need, which then cost no weight
    read) and one ScatterND puts the rows back in pair order.
    """
    V, H = c.codebook_size, c.hidden_size
    offs = g.op("Concat", [g.f32(np.zeros((1, H))), "draft_offsets"], hint="offsets0", axis=0)
    cols = g.op("Gather", [g.op("Shape", [offs]), g.i64([0])], hint="pair_cols")  # [K' + 1]
    x = g.op("Add", [g.op("Unsqueeze", [z, g.i64([1])], hint="z_col"), offs], hint="pair_x")
    x = g.op("Reshape", [x, g.i64([-1, H])], hint="pair_rows")  # [Q (K'+1), H]
    ncol = g.op("Squeeze", [cols, g.i64([0])], hint="pair_cols_scalar")
    zero, one = (g.op("Squeeze", [g.i64([v]), g.i64([0])], hint=f"scalar{v}") for v in (0, 1))
    step = g.op("Range", [zero, ncol, one], hint="pair_step")
    hid = g.op("Unsqueeze", ["head_ids", g.i64([1])], hint="head_ids_col")
    hp = g.op("Min", [g.op("Add", [hid, step], hint="pair_head"), g.i64(c.num_lm_heads - 1)])
    hp = g.op("Reshape", [hp, g.i64([-1])], hint="pair_head_flat")
    heads = np.asarray(w["heads"], np.float32)
    ys, idxs = [], []
    for h in range(c.num_lm_heads):
        hit = g.op("Equal", [hp, g.i64(h)], hint=f"uses_head{h}")
        idx = g.op("Reshape", [g.op("NonZero", [hit]), g.i64([-1])], hint=f"rows_head{h}")
        rows = g.op("Gather", [x, idx], hint=f"x_head{h}", axis=0)
        wt = g.init(f"head{h}_t", np.ascontiguousarray(heads[h].T))
        ys.append(g.op("MatMul", [rows, wt], hint=f"logits_head{h}"))
        idxs.append(idx)
    y = g.op("Concat", ys, hint="pair_logits_by_head", axis=0)
    where = g.op("Unsqueeze", [g.op("Concat", idxs, hint="pair_order", axis=0), g.i64([1])])
    shape = g.op("Concat", [g.op("Shape", [hp]), g.i64([V])], hint="pair_logits_shape", axis=0)
    zero = g.op(
        "ConstantOfShape",
        [shape],
        hint="pair_zero",
        value=numpy_helper.from_array(np.zeros(1, np.float32)),
    )
    out = g.op("ScatterND", [zero, where, y], hint="pair_logits")
    out = g.op(
        "Reshape",
        [out, g.op("Concat", [g.i64([-1]), cols, g.i64([V])], hint="pair_grid", axis=0)],
        hint="pair_logits_grid",
    )  # [Q, K'+1, V]
    g.op("Squeeze", [g.op("Gather", [out, g.i64([0])], axis=1), g.i64([1])], outputs=["logits"])
    g.op(
        "Slice",
        [out, g.i64([1]), g.i64([np.iinfo(np.int64).max]), g.i64([1])],
        outputs=["draft_logits"],
    )


def _routed_heads_part(g: GraphBuilder, c: DepthDecoderConfig, w: DepthDecoderWeights, z: str):
    """`_grouped_heads_part` with its routing as codecspec's own operators: RouteRows gathers
    each head's (node, offset) rows in one node, MergeRows puts the heads' logits back in pair
    order. The same values bit for bit (the same additions, then copies) from G + 2 nodes
    instead of ~5 G + 20: the standard-ops routing's dispatch cost ~0.3 ms of a 2.5 ms call
    of Qwen3-TTS's code predictor, which uses one of its 15 heads per AR call."""
    n = c.num_lm_heads
    routed = g.op(
        "RouteRows",
        [z, "draft_offsets", "head_ids"],
        hint="routed",
        n_out=n + 1,
        domain=_CODECSPEC_OPS,
        num_heads=n,
        row_multiple=1,  # set_row_multiple changes it where the device needs it
    )
    heads = np.asarray(w["heads"], np.float32)
    ys = [
        g.op(
            "MatMul",
            [routed[1 + h], g.init(f"head{h}_t", np.ascontiguousarray(heads[h].T))],
            hint=f"logits_head{h}",
        )
        for h in range(n)
    ]
    g.op(
        "MergeRows",
        [routed[0], "head_ids", *ys],
        outputs=["logits", "draft_logits"],
        domain=_CODECSPEC_OPS,
        num_heads=n,
    )


def _rms_plain(g: GraphBuilder, x: str, n: float, eps: float, hint: str) -> str:
    """x * sqrt(n) / sqrt(sum(x^2) + n * eps): the sqrt(n) is folded into the next weights."""
    ss = g.op("ReduceSumSquare", [x], hint=f"{hint}_ss", axes=[-1], keepdims=1)
    ss = g.op("Add", [ss, g.f32(n * eps)], hint=f"{hint}_sse")
    r = g.op("Sqrt", [ss], hint=f"{hint}_rms")
    return g.op("Div", [x, r], hint=hint)


# ---------------------------------------------------------------------- plain variant
# Node and initializer names come from a counter in call order, so the helpers below emit
# their nodes in exactly the order the single-function builders did: the graphs (and
# their golden hashes) stay byte-identical.
def _embed_inputs(g: GraphBuilder, c: DepthDecoderConfig, w: DepthDecoderWeights, ids: str) -> str:
    """x0 = the input table's rows for `ids` + input_embeds (projected first when the backbone's
    hidden size differs from the depth decoder's)."""
    table, embeds_w = _input_table(c, w)
    bits = table.view(np.uint32)
    if not np.any(bits & 0xFFFF):  # bfloat16 values (a bf16 checkpoint's): stored as such
        # Half the bytes, the same floats: a lookup table whose rows a long decode touches
        # all over (126 MB at Qwen3-TTS 0.6B) stays half as large in resident memory.
        name = g.fresh("input_table")
        g.inits.append(_bf16_tensor(name, (bits >> 16).astype(np.uint16)))
        e = g.op("Gather", [name, ids], hint="row_embeds_bf16", axis=0)
        e = g.op("Cast", [e], hint="row_embeds", to=TensorProto.FLOAT)
    else:
        e = g.op("Gather", [g.init("input_table", table), ids], hint="row_embeds", axis=0)
    if embeds_w is None:
        return g.op("Add", [e, "input_embeds"], hint="x0")
    pe = g.op("MatMul", ["input_embeds", g.init("input_proj_t", embeds_w)], hint="embeds_proj")
    return g.op("Add", [e, pe], hint="x0")


def _bf16_tensor(name: str, bits: np.ndarray) -> onnx.TensorProto:
    """A bfloat16 initializer from its uint16 bit patterns."""
    t = onnx.TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=bits.shape)
    t.raw_data = np.ascontiguousarray(bits, "<u2").tobytes()
    return t


def _plain_rope(g: GraphBuilder, c: DepthDecoderConfig, w: DepthDecoderWeights):
    """(cos per layer, sin per layer, the rotate-half permutation): the q/k norms are folded
    into the tables (one row per q/k head and layer), gathered at the call's positions once
    and split per layer."""
    L, nqk = c.num_layers, c.num_heads + c.num_kv_heads
    cos_t, sin_t, perm = _plain_rope_tables(c, w)
    cos_g = g.op("Gather", [g.init("rope_cos", cos_t), "position_ids"], hint="cos_q", axis=1)
    sin_g = g.op("Gather", [g.init("rope_sin", sin_t), "position_ids"], hint="sin_q", axis=1)
    if L > 1:
        sizes = g.i64([nqk] * L)
        cos_l = g.op("Split", [cos_g, sizes], hint="cos_l", n_out=L, axis=0)
        sin_l = g.op("Split", [sin_g, sizes], hint="sin_l", n_out=L, axis=0)
    else:
        cos_l, sin_l = [cos_g], [sin_g]
    return cos_l, sin_l, g.i64(perm, hint="rope_swap")


def _plain_attention(g: GraphBuilder, c, w, i: int, x: str, rope, bias: str, past_k, past_v):
    """Layer i's attention in standard ops: (x after the residual add, new keys, new values).
    RMS norms are folded into the following weights; query rows are grouped [kv head, group
    member, token] so one MatMul per kv head serves its whole group."""
    H, hd, eps = c.hidden_size, c.head_dim, c.rms_norm_eps
    nh, kvh = c.num_heads, c.num_kv_heads
    cos_l, sin_l, swap_idx = rope
    p = f"l{i}_"
    n = _rms_plain(g, x, H, eps, p + "in_norm")
    wqkv = _qkv_matrix(c, w, i, _f64(w, f"layers.{i}.input_norm") * np.sqrt(float(H)))
    qkv = g.op("MatMul", [n, g.init(p + "wqkv", wqkv)], hint=p + "qkv")
    qkv = g.op("Reshape", [qkv, g.i64([1, -1, nh + 2 * kvh, hd])], hint=p + "qkv4")
    qkv = g.op("Transpose", [qkv], hint=p + "qkv_t", perm=[0, 2, 1, 3])  # [1, heads, Q, hd]
    qk, v = g.op("Split", [qkv, g.i64([nh + kvh, kvh])], hint=p + "qk_v", n_out=2, axis=1)
    qk = _rms_plain(g, qk, hd, eps, p + "qk_norm")
    sw = g.op("Gather", [qk, swap_idx], hint=p + "qk_swap", axis=3)
    a = g.op("Mul", [qk, cos_l[i]], hint=p + "rope_a")
    b = g.op("Mul", [sw, sin_l[i]], hint=p + "rope_b")
    qk = g.op("Add", [a, b], hint=p + "qk_rope")
    q, k = g.op("Split", [qk, g.i64([nh, kvh])], hint=p + "q_k", n_out=2, axis=1)
    if isinstance(bias, dict):  # attention="placed": bias holds each row's key slots
        q = g.op("Transpose", [q], hint=p + "q_t", perm=[0, 2, 1, 3])  # [1, Q, nh, hd]
        q = g.op("Reshape", [q, g.i64([-1, kvh, nh // kvh, hd])], hint=p + "q_rows")
        kv = g.op("Concat", [k, v], hint=p + "kv_new", axis=1)  # [1, 2kvh, Q, hd]
        kv = g.op("Transpose", [kv], hint=p + "kv_new_t", perm=[0, 2, 1, 3])
        kv = g.op("Reshape", [kv, g.i64([1, -1, 2 * kvh * hd])], hint=p + "kv_new_rows")
        o = placed_attention(g, c, i, q, kv, bias, p)
        o = g.op("MatMul", [o, g.init(p + "wo", _t32(w, f"layers.{i}.o_proj"))], hint=p + "o")
        return g.op("Add", [x, o], hint=p + "x_attn"), (kv,)
    q = g.op("Reshape", [q, g.i64([1, kvh, -1, hd])], hint=p + "q_grouped")
    kall = g.op("Concat", [past_k[i], k], hint=p + "k_all", axis=2)
    vall = g.op("Concat", [past_v[i], v], hint=p + "v_all", axis=2)
    kt = g.op("Transpose", [kall], hint=p + "k_t", perm=[0, 1, 3, 2])
    s = g.op("MatMul", [q, kt], hint=p + "scores")
    s = g.op("Add", [s, bias], hint=p + "scores_b")
    pr = g.op("Softmax", [s], hint=p + "probs", axis=-1)
    o = g.op("MatMul", [pr, vall], hint=p + "attn")  # [1, kvh, grp*Q, hd]
    o = g.op("Reshape", [o, g.i64([nh, -1, hd])], hint=p + "attn_h")
    o = g.op("Transpose", [o], hint=p + "attn_t", perm=[1, 0, 2])
    o = g.op("Reshape", [o, g.i64([-1, nh * hd])], hint=p + "attn_flat")
    o = g.op("MatMul", [o, g.init(p + "wo", _t32(w, f"layers.{i}.o_proj"))], hint=p + "o")
    return g.op("Add", [x, o], hint=p + "x_attn"), (k, v)


def _plain_mlp(
    g: GraphBuilder, c: DepthDecoderConfig, w: DepthDecoderWeights, i: int, x: str
) -> str:
    """Layer i's SwiGLU MLP (norm folded into gate/up) and its residual add."""
    p = f"l{i}_"
    H = c.hidden_size
    n = _rms_plain(g, x, H, c.rms_norm_eps, p + "post_norm")
    wgu = _gate_up_matrix(c, w, i, _f64(w, f"layers.{i}.post_norm") * np.sqrt(float(H)))
    gu = g.op("MatMul", [n, g.init(p + "wgu", wgu)], hint=p + "gate_up")
    inter = c.intermediate_size
    gate, up = g.op("Split", [gu, g.i64([inter, inter])], hint=p + "gu", n_out=2, axis=-1)
    act = g.op("Mul", [gate, g.op("Sigmoid", [gate], hint=p + "sig")], hint=p + "silu")
    act = g.op("Mul", [act, up], hint=p + "swiglu")
    d = g.op("MatMul", [act, g.init(p + "wd", _t32(w, f"layers.{i}.down_proj"))], hint=p + "mlp")
    return g.op("Add", [x, d], hint=p + "x_out")


def _build_plain(
    g: GraphBuilder, c: DepthDecoderConfig, w: DepthDecoderWeights, attention: str
) -> str:
    """The decoder in standard ONNX ops only (any runtime); returns the hidden-state name."""
    L, H, grp = c.num_layers, c.hidden_size, c.kv_groups
    x = _embed_inputs(g, c, w, "input_ids")
    rope = _plain_rope(g, c, w)
    # Query rows are grouped [kv head, group member, token]: tile the bias over the group.
    bias = "attention_bias"
    past_k = past_v = None
    if attention == "placed":
        bias = placed_slots(g, c)
    else:
        if grp > 1:
            bias = g.op("Tile", [bias, g.i64([grp, 1])], hint="bias_tiled")
        past_k = _split_layers(g, "past_keys", L, "past_k")
        past_v = _split_layers(g, "past_values", L, "past_v")
    new = []
    for i in range(L):
        x, rows = _plain_attention(g, c, w, i, x, rope, bias, past_k, past_v)
        new.append(rows)
        x = _plain_mlp(g, c, w, i, x)
    z = _rms_plain(g, x, H, c.rms_norm_eps, "final_norm")
    final_w = (_f64(w, "final_norm") * np.sqrt(float(H))).astype(np.float32)
    z = g.op("Mul", [z, g.init("final_norm_w", final_w)], outputs=["hidden"])
    # L x [1, kvh, Q, hd] -> [L, kvh, Q, hd] (placed: L x [1, Q, 2 kvh hd] -> [L, Q, ...])
    names = ("new_kv",) if attention == "placed" else ("new_keys", "new_values")
    for part, name in enumerate(names):
        _stack_layers(g, [rows[part] for rows in new], name)
    return z


def _stack_layers(g: GraphBuilder, rows: list, name: str) -> None:
    """L per-layer tensors with a leading axis of 1 -> output `name` with L there."""
    if len(rows) == 1:
        g.op("Identity", rows, outputs=[name])
    else:
        g.op("Concat", rows, outputs=[name], axis=0)


# ---------------------------------------------------------------------- cpu variant
_MS = "com.microsoft"
_CPU_ROPE_ROWS = 4096  # longest query a variant="cpu" graph accepts


def _cpu_attention_inputs(g: GraphBuilder, c: DepthDecoderConfig, attention: str) -> dict:
    """What every layer's contrib attention shares: batched positions, the RoPE cache, the
    4-d bias, and GroupQueryAttention's seqlens_k / total length (from the bias's width); or
    with attention="placed", each row's key slots (placed_attention.placed_slots)."""
    pos = g.op("Unsqueeze", ["position_ids", g.i64([0])], hint="pos_b")
    # The contrib RotaryEmbedding kernel refuses a query longer than its cache has rows, even
    # when every position is in range, so the cache gets at least _CPU_ROPE_ROWS rows.
    rows = max(c.max_positions, _CPU_ROPE_ROWS)
    ang = np.arange(rows, dtype=np.float64)[:, None] * _inv_freq(c)[None, :]
    cos = g.init("rope_cos", np.cos(ang).astype(np.float32))
    sin = g.init("rope_sin", np.sin(ang).astype(np.float32))
    if attention == "placed":
        return dict(pos=pos, cos=cos, sin=sin, slots=placed_slots(g, c))
    if attention == "placed_op":  # each layer's op reads its past rows and the bias itself
        L = c.num_layers
        past = (
            ["past_kv"] if L == 1 else g.op("Split", ["past_kv", g.i64([1] * L)], n_out=L, axis=0)
        )
        return dict(pos=pos, cos=cos, sin=sin, placed_past=past)
    if attention == "in_place":
        # The cache's rows are its positions: the call's last position + 1 rows are filled
        # after it (GroupQueryAttention's total length; seqlens_k = total - 1).
        last = g.op("Gather", ["position_ids", g.i64([-1])], hint="last_pos", axis=0)
        total = g.op("Cast", [last], hint="last_pos32", to=TensorProto.INT32)
        seqlens = total  # [1]: the last position is total - 1
        total = g.op("Add", [total, g.init("one_i32", np.array([1], np.int32))], hint="total1")
        total = g.op("Squeeze", [total], hint="total_len")
        return dict(pos=pos, cos=cos, sin=sin, bias="", seqlens=seqlens, total=total, causal=1)
    bias = g.op("Unsqueeze", ["attention_bias", g.i64([0, 1])], hint="bias4")
    total = g.op("Shape", ["attention_bias"], hint="bias_shape")
    total = g.op("Gather", [total, g.i64([1])], hint="total_len64", axis=0)
    total = g.op("Cast", [total], hint="total_len1", to=TensorProto.INT32)
    seqlens = g.op("Sub", [total, g.init("one_i32", np.array([1], np.int32))], hint="seqlens_k")
    total = g.op("Squeeze", [total], hint="total_len")
    return dict(pos=pos, cos=cos, sin=sin, bias=bias, seqlens=seqlens, total=total)


def _cpu_attention(g: GraphBuilder, c, w, i: int, n: str, att: dict, past_k, past_v):
    """Layer i's attention from its normed input `n` with the contrib kernels (per-head RMS
    norm, RotaryEmbedding, GroupQueryAttention): (output projection, new keys, new values)."""
    hd, nh, kvh, eps = c.head_dim, c.num_heads, c.num_kv_heads, float(c.rms_norm_eps)
    p = f"l{i}_"
    qkv = g.op("MatMul", [n, g.init(p + "wqkv", _qkv_matrix(c, w, i))], hint=p + "qkv")
    qk, v = g.op(
        "Split", [qkv, g.i64([(nh + kvh) * hd, kvh * hd])], hint=p + "qk_v", n_out=2, axis=-1
    )
    # attention="placed" attends with plain ops: the 1/sqrt(hd) score scale that
    # GroupQueryAttention applies itself rides on the q norm's weights (RoPE is linear).
    q_scale = hd**-0.5 if "slots" in att or "placed_past" in att else 1.0
    qk_scale = np.concatenate(
        [
            np.broadcast_to(w[f"layers.{i}.q_norm"] * q_scale, (nh, hd)),
            np.broadcast_to(w[f"layers.{i}.k_norm"], (kvh, hd)),
        ]
    )
    qk = g.op(
        "BranchwiseRMSNorm",
        [qk, g.init(p + "qk_norm_w", qk_scale)],
        hint=p + "qk_norm",
        domain=_MS,
        num_branches=nh + kvh,
        epsilon=eps,
    )
    qk = g.op(
        "RotaryEmbedding",
        [qk, att["pos"], att["cos"], att["sin"]],
        hint=p + "qk_rope",
        domain=_MS,
        interleaved=0,
    )
    q, k = g.op("Split", [qk, g.i64([nh * hd, kvh * hd])], hint=p + "q_k", n_out=2, axis=-1)
    if "slots" in att or "placed_past" in att:
        kv = g.op("Concat", [k, v], hint=p + "kv_new", axis=-1)  # [1, Q, 2 * kvh * hd]
        attn = (
            _cpu_placed(g, c, i, q, kv, att["slots"], p)
            if "slots" in att
            else g.op(
                "PlacedAttention",
                [q, kv, att["placed_past"][i], "attention_bias"],
                hint=p + "attn",
                domain=_CODECSPEC_OPS,
                num_heads=nh,
                kv_num_heads=kvh,
            )
        )
        o = g.op("MatMul", [attn, g.init(p + "wo", _t32(w, f"layers.{i}.o_proj"))], hint=p + "o")
        return o, (kv,)
    in_place = att.get("causal") == 1
    gqa_in = [q, k, v, past_k[i], past_v[i], att["seqlens"], att["total"]]
    # in place: the present outputs are the caller's cache buffers (IN_PLACE_KV)
    present = (
        {"outputs": [g.fresh(p + "attn"), IN_PLACE_KV[2].format(i), IN_PLACE_KV[3].format(i)]}
        if in_place
        else {"hint": p + "attn", "n_out": 3}
    )
    attn = g.op(
        "GroupQueryAttention",
        gqa_in if in_place else gqa_in + ["", "", "", att["bias"]],
        domain=_MS,
        num_heads=nh,
        kv_num_heads=kvh,
        causal=att.get("causal", 0),
        **present,
    )[0]
    o = g.op("MatMul", [attn, g.init(p + "wo", _t32(w, f"layers.{i}.o_proj"))], hint=p + "o")
    return o, (k, v)


def _cpu_placed(g: GraphBuilder, c, i: int, q, kv, slots, p: str) -> str:
    """attention="placed" on the cpu variant's [1, Q, heads * hd] rows (q scaled by its norm
    weights) over this call's joined keys and values kv [1, Q, 2 * kvh * hd]:
    [1, Q, heads * hd]."""
    kvh, hd = c.num_kv_heads, c.head_dim
    q = g.op("Reshape", [q, g.i64([-1, kvh, c.num_heads // kvh, hd])], hint=p + "q_rows")
    o = placed_attention(g, c, i, q, kv, slots, p)
    return g.op("Unsqueeze", [o, g.i64([0])], hint=p + "attn")


def _cpu_mlp(g: GraphBuilder, c, w, i: int, o: str, x: str):
    """Layer i after attention: residual + post norm fused, the SwiGLU MLP (QuickGelu with
    alpha 1 is SiLU), then residual + the next layer's input norm (the final norm after the
    last layer) fused. Returns (normed input of the next layer, residual stream)."""
    L, eps = c.num_layers, float(c.rms_norm_eps)
    p = f"l{i}_"
    outs = g.op(
        "SkipSimplifiedLayerNormalization",
        [o, x, g.init(p + "post_norm", w[f"layers.{i}.post_norm"])],
        hint=p + "post_norm",
        n_out=4,
        domain=_MS,
        epsilon=eps,
    )
    n, x = outs[0], outs[3]
    gu = g.op("MatMul", [n, g.init(p + "wgu", _gate_up_matrix(c, w, i))], hint=p + "gate_up")
    inter = c.intermediate_size
    gate, up = g.op("Split", [gu, g.i64([inter, inter])], hint=p + "gu", n_out=2, axis=-1)
    act = g.op("QuickGelu", [gate], hint=p + "silu", domain=_MS, alpha=1.0)
    act = g.op("Mul", [act, up], hint=p + "swiglu")
    d = g.op("MatMul", [act, g.init(p + "wd", _t32(w, f"layers.{i}.down_proj"))], hint=p + "mlp")
    nxt = f"layers.{i + 1}.input_norm" if i + 1 < L else "final_norm"
    outs = g.op(
        "SkipSimplifiedLayerNormalization",
        [d, x, g.init(f"l{i + 1}_input_norm" if i + 1 < L else "final_norm_w", w[nxt])],
        hint=f"l{i + 1}_in_norm" if i + 1 < L else "z3",
        n_out=4,
        domain=_MS,
        epsilon=eps,
    )
    return outs[0], outs[3]


def _cpu_stack_kv(g: GraphBuilder, c: DepthDecoderConfig, rows: list, name: str) -> str:
    """L x [1, Q, kvh*hd] -> [L, kvh, Q, hd], the cache layout the runtime keeps."""
    L = c.num_layers
    t = rows[0] if L == 1 else g.op("Concat", rows, hint=name + "_cat", axis=0)
    t = g.op("Reshape", [t, g.i64([L, -1, c.num_kv_heads, c.head_dim])], hint=name + "_4d")
    return g.op("Transpose", [t], outputs=[name], perm=[0, 2, 1, 3])


def _build_cpu(
    g: GraphBuilder, c: DepthDecoderConfig, w: DepthDecoderWeights, attention: str
) -> str:
    """The decoder with onnxruntime's fused CPU contrib ops (batch dim of 1 added for them);
    returns the hidden-state name."""
    L = c.num_layers
    ids = g.op("Unsqueeze", ["input_ids", g.i64([0])], hint="ids_b")
    x = _embed_inputs(g, c, w, ids)  # [1, Q, H]
    att = _cpu_attention_inputs(g, c, attention)
    past_k = past_v = None
    if attention == "in_place":
        past_k = [IN_PLACE_KV[0].format(i) for i in range(L)]
        past_v = [IN_PLACE_KV[1].format(i) for i in range(L)]
    elif attention not in ("placed", "placed_op"):
        past_k = _split_layers(g, "past_keys", L, "past_k")
        past_v = _split_layers(g, "past_values", L, "past_v")
    n = g.op(
        "SimplifiedLayerNormalization",
        [x, g.init("l0_input_norm", w["layers.0.input_norm"])],
        hint="l0_in_norm",
        axis=-1,
        epsilon=float(c.rms_norm_eps),
    )
    new = []
    for i in range(L):
        o, rows = _cpu_attention(g, c, w, i, n, att, past_k, past_v)
        new.append(rows)
        n, x = _cpu_mlp(g, c, w, i, o, x)
    z = g.op("Squeeze", [n, g.i64([0])], outputs=["hidden"])
    if attention in ("placed", "placed_op"):  # position-major: L x [1, Q, 2 kvh hd] -> [L, Q, .]
        _stack_layers(g, [rows[0] for rows in new], "new_kv")
    elif attention == "in_place":
        pass  # GroupQueryAttention wrote them into the bound cache
    else:
        _cpu_stack_kv(g, c, [rows[0] for rows in new], "new_keys")
        _cpu_stack_kv(g, c, [rows[1] for rows in new], "new_values")
    return z


# ---------------------------------------------------------------------- public builder
def build_depth_graph(
    config: DepthDecoderConfig,
    weights: DepthDecoderWeights,
    *,
    variant: str = "cpu",
    heads: str = "graph",
    opset: int = 17,
    attention: str = "call",
) -> onnx.ModelProto:
    """Build the depth-decoder graph for `config` with `weights` baked in as initializers.
    attention: "call", "placed" (every row computed as it would be alone; module doc),
    "placed_op" (variant="cpu": the same with codecspec's attention operator) or "in_place"
    (variant="cpu": the cache written and read in place, IN_PLACE_KV)."""
    _check_choice("variant", variant, ("cpu", "plain"))
    _check_choice("heads", heads, HEADS_MODES)
    _check_choice("attention", attention, ATTENTION_MODES)
    if attention in ("in_place", "placed_op") and variant != "cpu":
        raise ValueError(f"attention: {attention!r} needs variant='cpu' (contrib operators)")
    if isinstance(opset, bool) or not isinstance(opset, int) or not 13 <= opset <= 17:
        raise ValueError(f"opset must be an int in [13, 17], got {opset!r}")
    if not isinstance(config, DepthDecoderConfig):
        raise ValueError(f"config must be a DepthDecoderConfig, got {type(config).__name__}")
    if not isinstance(weights, DepthDecoderWeights):
        weights = DepthDecoderWeights(weights)
    config.validate()
    weights.validate(config)
    c = config

    g = GraphBuilder()
    in_names, out_names = graph_io_names(heads, attention, config.num_layers)
    for name in INPUT_NAMES + OUTPUT_NAMES + ("past_kv", "new_kv") + in_names + out_names:
        g._used.add(name)
    z = (_build_plain if variant == "plain" else _build_cpu)(g, c, weights, attention)
    if heads == "graph":
        _heads_part(g, c, weights, z)
    elif heads == "grouped" and attention == "placed_op":  # codecspec's operators are served
        _routed_heads_part(g, c, weights, z)
    elif heads == "grouped":
        _grouped_heads_part(g, c, weights, z)

    in_specs, out_specs = _io_specs(c, heads)
    graph = helper.make_graph(
        g.nodes,
        f"codecspec_depth_{variant}_{heads}",
        [helper.make_tensor_value_info(n, *in_specs[n]) for n in in_names],
        [helper.make_tensor_value_info(n, *out_specs[n]) for n in out_names],
        g.inits,
    )
    imports = [helper.make_opsetid("", opset)]
    if variant == "cpu":
        imports.append(helper.make_opsetid(_MS, 1))
    if attention == "placed_op":
        imports.append(helper.make_opsetid(_CODECSPEC_OPS, 1))
    model = helper.make_model(
        graph, opset_imports=imports, producer_name="codecspec", producer_version=GRAPH_VERSION
    )
    # IR 8 keeps the file loadable by onnxruntime releases older than onnx's default IR.
    model.ir_version = 8
    helper.set_model_props(model, _metadata(c, variant, heads, attention, in_names, out_names))
    return model


def _io_specs(c: DepthDecoderConfig, heads: str) -> tuple[dict, dict]:
    """(type, shape) of every input and output name a graph of this config may have."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    L, KVH, hd = c.num_layers, c.num_kv_heads, c.head_dim
    V, H, K = c.codebook_size, c.hidden_size, c.num_draft_offsets
    Q, P, T = "num_query", "past_len", "total_len"
    in_specs = {
        "input_ids": (i64, [Q]),
        "input_embeds": (f32, [Q, c.input_width]),
        "position_ids": (i64, [Q]),
        "attention_bias": (f32, [Q, T]),
        "past_keys": (f32, [L, KVH, P, hd]),
        "past_values": (f32, [L, KVH, P, hd]),
        "past_kv": (f32, [L, P, 2 * KVH * hd]),
        "head_ids": (i64, [Q]),
        "draft_offsets": (f32, ["num_drafts" if heads == "grouped" else K, H]),
    }
    out_specs = {
        "logits": (f32, [Q, V]),
        "draft_logits": (f32, [Q, "num_drafts" if heads == "grouped" else K, V]),
        "hidden": (f32, [Q, H]),
        "new_keys": (f32, [L, KVH, Q, hd]),
        "new_values": (f32, [L, KVH, Q, hd]),
        "new_kv": (f32, [L, Q, 2 * KVH * hd]),
    }
    for i in range(L):  # attention="in_place": the caller's cache, layer by layer
        layer = (f32, [1, KVH, "cache_len", hd])
        for name in IN_PLACE_KV:
            (in_specs if name.startswith("past") else out_specs)[name.format(i)] = layer
    return in_specs, out_specs


def _metadata(c: DepthDecoderConfig, variant, heads, attention, in_names, out_names) -> dict:
    """The codecspec metadata a built graph carries (runtime.graph_format reads it)."""
    meta = {
        _META_VERSION: GRAPH_VERSION,
        _META_CONFIG: c.to_json(),
        _META_LAYOUT: json.dumps(table_layout(c), sort_keys=True),
        _META_VARIANT: variant,
        _META_HEADS: heads,
        _META_IO: json.dumps({"inputs": list(in_names), "outputs": list(out_names)}),
    }
    if attention != "call":  # graphs of the default mode stay byte-identical to older builds
        meta[_META_ATTENTION] = attention
    return meta


def set_row_multiple(model: onnx.ModelProto, multiple: int) -> onnx.ModelProto:
    """Marks a routed-heads graph (heads="grouped", attention="placed_op") so that every call
    runs an even number of rows (`multiple` 2; 1 undoes it): the runtime pads each call with
    rows that no head scores (`BoundCall`) and RouteRows rounds each head's rows the same way.
    Why: on AVX-512 MLAS a 4-bit MatMulNBits in blocks of 64 or 128 computes rows in pairs and
    a lone row by another kernel, so a row is the same bits in every call only when no row is
    ever alone (graphs.row_probe.row_exact_layout). Changes `model` in place and returns it."""
    if isinstance(multiple, bool) or multiple not in (1, 2):
        raise ValueError(f"multiple: must be 1 or 2, got {multiple!r}")
    routes = [n for n in model.graph.node if n.op_type == "RouteRows"]
    if not routes and multiple != 1:
        raise ValueError("model: only a routed-heads graph (attention='placed_op') pads its calls")
    for node in routes:
        del node.attribute[:]
        heads = len(node.output) - 1
        node.attribute.extend(
            [
                helper.make_attribute("num_heads", heads),
                helper.make_attribute("row_multiple", multiple),
            ]
        )
    props = [p for p in model.metadata_props if p.key != _META_ROW_MULTIPLE]
    del model.metadata_props[:]
    model.metadata_props.extend(props)
    if multiple != 1:
        helper.set_model_props(
            model, {**{p.key: p.value for p in props}, _META_ROW_MULTIPLE: str(multiple)}
        )
    return model


def count_nodes(model: onnx.ModelProto) -> int:
    return len(model.graph.node)


# ---------------------------------------------------------------------- persistence
def save_model(
    model: onnx.ModelProto,
    path: Union[str, os.PathLike],
    *,
    external_data: Optional[bool] = None,
) -> None:
    """Write `model` to `path`.

    external_data=None stores weights inline unless the model nears protobuf's 2 GiB limit;
    True always writes them to `<file name>.data` next to the .onnx file.
    """
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)  # as write_wav does
    if external_data is None:
        external_data = model.ByteSize() > _INLINE_LIMIT
    if not external_data:
        onnx.save_model(model, path)
        return
    # onnx rewrites tensors in place when externalising; keep the caller's model intact.
    m = copy.deepcopy(model)
    location = os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(path) or ".", location)
    if os.path.exists(data_path):
        os.remove(data_path)  # onnx appends to an existing data file
    onnx.save_model(
        m,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=location,
        size_threshold=1024,
    )
    # onnx creates the data file 0600 (its own choice since 1.17); a graph in a shared cache
    # must be readable by whoever may read the .onnx beside it, so give it the same mode.
    os.chmod(data_path, os.stat(path).st_mode & 0o777)


@functools.cache
def cpu_variant_supported() -> bool:
    """Whether the installed onnxruntime runs variant="cpu" graphs (builds and runs a tiny one)."""
    try:
        from codecspec.runtime.session import open_session

        from .reference import example_feeds

        c = DepthDecoderConfig(
            num_layers=1,
            hidden_size=16,
            num_heads=2,
            num_kv_heads=1,
            head_dim=8,
            intermediate_size=16,
            num_codebooks=3,
            codebook_size=8,
            c0_vocab_size=8,
            num_draft_offsets=1,
            max_positions=8,
        )
        m = build_depth_graph(c, DepthDecoderWeights.random(c, 0), variant="cpu")
        s = open_session(m.SerializeToString(), provider="cpu")
        s.run(None, example_feeds(c, num_query=2, past_len=1))
        return True
    except Exception:
        return False
