"""Attention whose every query row is computed as it would be alone (build_depth_graph's
attention="placed").

Why: speculation keeps the autoregressive law only if a tree node's logits are the AR step's
logits bit for bit once the weights are quantised (MatMulNBits quantises each activation row,
so a 1e-7 difference in its input can move a whole quantisation step). A fused attention
kernel sums a one-row call and a several-row call in different orders, and a verify call
holds a node's ancestors in other key columns, over another key width, than the AR call.

How: each row gathers the keys it sees into one slot per position, W = one frame's positions
(min(max_positions, num_codebooks + 1): the hidden state, c0 .. c_{G-1}) wide whatever the
call, empty slots masked. Scores, softmax and the weighted sum then run over the
same slots in the same order for a row in any call, and every op used treats rows (the
leading batch axis) independently: Einsum batched over the rows (onnxruntime runs it as a
batched MatMul; two Einsums read the gathered slots in place, where MatMul needed two
transposes of them: -0.15 ms per 0.6B call), Softmax over the last axis, Add, Gather. Bit
equality is an onnxruntime property, not a spec's: tests/graphs/test_placed_attention.py
checks it on the machine it runs on.
The slots are computed once per call from the attention bias alone: a key is visible to a
row where attention_bias is 0, and the row's visible keys, in column order, fill its slots
0, 1, 2, ... (keys are laid out in the order they were made: the cache commits in order, and a
tree row sees its ancestors, sorted by depth, then itself). So any layout that keeps that
order works, the serving engine's several streams in one call included.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

__all__ = ["placed_slots", "placed_attention", "slot_count"]


def placed_slots(g, c) -> dict:
    """What every layer shares: {"src": [Q, W] column of the call's keys ([past | new]) in
    each row's slot w (0 where the slot is empty), "bias": [Q, 1, 1, W] 0 for a filled slot,
    -inf for an empty one, "past": per layer the past keys and values position-major
    [1, P, 2 * kvh * hd] (keys' heads, then values'), split from the graph's past_kv}."""
    W = slot_count(c)
    seen = g.op("Equal", ["attention_bias", g.f32(0.0)], hint="key_seen")  # [Q, T]
    # A row's visible keys, in column order, are its positions 0, 1, 2, ...: keys are laid
    # out in the order they were made (the cache commits in order; a tree row sees its
    # ancestors, sorted by depth, then itself), so a key's slot is its rank among them.
    rank = g.op("CumSum", [g.op("Cast", [seen], to=TensorProto.INT64), g.i64(1)], hint="rank1")
    rank = g.op("Sub", [rank, g.i64(1)], hint="key_rank")
    slot_of = g.op(
        "Equal",
        [g.op("Unsqueeze", [rank, g.i64([1])]), g.i64(np.arange(W).reshape(W, 1))],
        hint="slot_of_key",
    )  # [Q, W, T]
    hit = g.op("And", [g.op("Unsqueeze", [seen, g.i64([1])]), slot_of], hint="slot_hit")
    hit = g.op("Cast", [hit], hint="slot_hit_f", to=TensorProto.FLOAT)  # [Q, W, T]
    src = g.op("ArgMax", [hit], hint="slot_src", axis=2, keepdims=0)  # [Q, W]
    filled = g.op("ReduceMax", [hit], hint="slot_filled", axes=[2], keepdims=0)
    filled = g.op("Cast", [filled], hint="slot_filled_b", to=TensorProto.BOOL)
    bias = g.op("Where", [filled, g.f32(0.0), g.f32(-np.inf)], hint="slot_bias2")
    bias = g.op("Unsqueeze", [bias, g.i64([1, 2])], hint="slot_bias")  # [Q, 1, 1, W]
    # The past arrives joined and position-major ([L, P, 2 * kvh * hd], the host cache's
    # layout), so a layer gathers a row's slots of keys and values with one Gather and no
    # per-call copy of the past (which cost 0.33 ms per int4 0.6B call as a transpose).
    L = c.num_layers
    layers = ["past_kv"] if L == 1 else g.op("Split", ["past_kv", g.i64([1] * L)], n_out=L, axis=0)
    return {"src": src, "bias": bias, "past": layers}


def slot_count(c) -> int:
    """Slots per row: one frame's positions (a depth decoder's calls never hold more)."""
    return min(c.max_positions, c.num_codebooks + 1)


def placed_attention(g, c, i: int, q: str, kv: str, slots: dict, hint: str) -> str:
    """Layer i's attention of q [Q, kvh, grp, hd] (scaled by 1/sqrt(hd) already) over each
    row's slots of the past and this call's keys and values kv [1, Q, 2 * kvh * hd]:
    [Q, heads * hd]."""
    kvh, hd = c.num_kv_heads, c.head_dim
    keys = g.op("Concat", [slots["past"][i], kv], hint=hint + "kv_all", axis=1)  # [1, T, .]
    rows = g.op("Gather", [keys, slots["src"]], hint=hint + "kv_slots", axis=1)  # [1,Q,W,.]
    rows = g.op("Reshape", [rows, g.i64([-1, slot_count(c), 2 * kvh, hd])], hint=hint + "kv_q")
    k, v = g.op("Split", [rows, g.i64([kvh, kvh])], hint=hint + "k_v", n_out=2, axis=2)
    s = g.op("Einsum", [q, k], hint=hint + "scores", equation="qhgd,qwhd->qhgw")
    s = g.op("Add", [s, slots["bias"]], hint=hint + "scores_b")
    p = g.op("Softmax", [s], hint=hint + "probs", axis=-1)
    o = g.op("Einsum", [p, v], hint=hint + "attn", equation="qhgw,qwhd->qhgd")
    return g.op("Reshape", [o, g.i64([-1, c.num_heads * hd])], hint=hint + "attn_flat")
