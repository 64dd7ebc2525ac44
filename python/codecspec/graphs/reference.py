"""Plain numpy forward pass of the depth decoder, written for reading, not for speed.

It follows the Qwen3 / Qwen3-TTS code-predictor semantics directly (no folding of weights):
pre-norm residual blocks; RMSNorm x * rsqrt(mean(x^2) + eps) * w; per-head q_norm / k_norm
before RoPE; RoPE in the HF "rotate_half" convention; GQA by repeating kv heads; softmax
attention scaled by 1/sqrt(head_dim) with an additive bias; SwiGLU MLP down(silu(gate) * up).
It is the oracle the ONNX graphs are tested against, and `compute_head_logits` is also what a
host uses with heads="hidden" graphs.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .config import DepthDecoderConfig, embedding_row, zero_row
from .weights import DepthDecoderWeights

__all__ = [
    "ReferenceOutput",
    "input_hidden",
    "forward_hidden",
    "compute_head_logits",
    "reference_run",
    "tree_attention_bias",
    "example_feeds",
]


class ReferenceOutput(NamedTuple):
    hidden: np.ndarray  # [Q, H] after the final norm
    new_keys: np.ndarray  # [L, KVH, Q, hd] after RoPE
    new_values: np.ndarray  # [L, KVH, Q, hd]
    logits: Optional[np.ndarray] = None  # [Q, V]
    draft_logits: Optional[np.ndarray] = None  # [Q, K, V]


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rotate_half(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def _rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """x: [Q, heads, hd]; positions: [Q]."""
    hd = x.shape[-1]
    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # [Q, hd/2]
    emb = np.concatenate([ang, ang], axis=-1)[:, None, :]  # [Q, 1, hd]
    cos = np.cos(emb).astype(x.dtype)
    sin = np.sin(emb).astype(x.dtype)
    return x * cos + _rotate_half(x) * sin


def _softmax(s: np.ndarray) -> np.ndarray:
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def input_hidden(
    config: DepthDecoderConfig,
    weights: DepthDecoderWeights,
    input_ids: np.ndarray,
    input_embeds: np.ndarray,
    dtype=np.float64,
) -> np.ndarray:
    """[Q, H] model input: table row + external embedding, then the input projection if any."""
    c = config
    ids = np.asarray(input_ids, dtype=np.int64)
    e = np.asarray(input_embeds, dtype=dtype)
    if ids.ndim != 1:
        raise ValueError(f"input_ids must be 1-D, got shape {ids.shape}")
    if e.shape != (ids.shape[0], c.input_width):
        raise ValueError(
            f"input_embeds must have shape ({ids.shape[0]}, {c.input_width}), got {e.shape}"
        )
    if np.any(ids < 0) or np.any(ids >= c.table_rows):
        raise ValueError(f"input_ids must be in [0, {c.table_rows}), got {ids}")
    rows = np.zeros((ids.shape[0], c.input_width), dtype=dtype)
    c0 = weights["c0_embedding"]
    codes = weights["code_embeddings"]
    for i, r in enumerate(ids.tolist()):
        if r < c.c0_vocab_size:
            rows[i] = c0[r]
        elif r != zero_row(c):
            j, code = divmod(r - c.c0_vocab_size, c.codebook_size)
            rows[i] = codes[j, code]
    x = rows + e
    if c.has_input_proj:
        x = x @ weights["input_proj.weight"].astype(dtype).T + weights["input_proj.bias"].astype(
            dtype
        )
    return x


def forward_hidden(
    config: DepthDecoderConfig,
    weights: DepthDecoderWeights,
    x: np.ndarray,
    position_ids: np.ndarray,
    attention_bias: np.ndarray,
    past_keys: Optional[np.ndarray] = None,
    past_values: Optional[np.ndarray] = None,
    dtype=np.float64,
) -> ReferenceOutput:
    """Run the layers on model inputs x [Q, H]; returns hidden and this call's K/V rows."""
    c = config
    L, H, hd = c.num_layers, c.hidden_size, c.head_dim
    nh, kvh = c.num_heads, c.num_kv_heads
    x = np.asarray(x, dtype=dtype)
    Q = x.shape[0]
    if x.shape != (Q, H):
        raise ValueError(f"x must have shape (Q, {H}), got {x.shape}")
    pos = np.asarray(position_ids, dtype=np.int64)
    if pos.shape != (Q,) or np.any(pos < 0):
        raise ValueError(f"position_ids must be non-negative with shape ({Q},), got {pos}")
    if past_keys is None:
        past_keys = np.zeros((L, kvh, 0, hd), dtype)
    if past_values is None:
        past_values = np.zeros((L, kvh, 0, hd), dtype)
    past_keys = np.asarray(past_keys, dtype=dtype)
    past_values = np.asarray(past_values, dtype=dtype)
    P = past_keys.shape[2] if past_keys.ndim == 4 else -1
    for name, arr in (("past_keys", past_keys), ("past_values", past_values)):
        if arr.shape != (L, kvh, P, hd):
            raise ValueError(f"{name} must have shape ({L}, {kvh}, P, {hd}), got {arr.shape}")
    bias = np.asarray(attention_bias, dtype=dtype)
    if bias.shape != (Q, P + Q):
        raise ValueError(f"attention_bias must have shape ({Q}, {P + Q}), got {bias.shape}")
    if np.any(np.isnan(bias)) or np.any(bias == np.inf):
        raise ValueError("attention_bias must not hold NaN or +inf")
    if np.any(np.all(bias == -np.inf, axis=1)):
        raise ValueError("attention_bias: a query row hides every key")

    def W(name: str) -> np.ndarray:
        return weights[name].astype(dtype)

    eps = c.rms_norm_eps
    new_keys = np.zeros((L, kvh, Q, hd), dtype)
    new_values = np.zeros((L, kvh, Q, hd), dtype)
    for i in range(L):
        p = f"layers.{i}."
        h = _rms_norm(x, W(p + "input_norm"), eps)
        q = (h @ W(p + "q_proj").T).reshape(Q, nh, hd)
        k = (h @ W(p + "k_proj").T).reshape(Q, kvh, hd)
        v = (h @ W(p + "v_proj").T).reshape(Q, kvh, hd)
        q = _rope(_rms_norm(q, W(p + "q_norm"), eps), pos, c.rope_theta)
        k = _rope(_rms_norm(k, W(p + "k_norm"), eps), pos, c.rope_theta)
        new_keys[i] = k.transpose(1, 0, 2)
        new_values[i] = v.transpose(1, 0, 2)
        keys = np.concatenate([past_keys[i], new_keys[i]], axis=1)  # [kvh, T, hd]
        values = np.concatenate([past_values[i], new_values[i]], axis=1)
        keys = np.repeat(keys, c.kv_groups, axis=0)  # HF repeat_kv: head h uses kv head h // g
        values = np.repeat(values, c.kv_groups, axis=0)
        scores = q.transpose(1, 0, 2) @ keys.transpose(0, 2, 1) / float(np.sqrt(hd)) + bias[None]
        attn = (_softmax(scores) @ values).transpose(1, 0, 2).reshape(Q, nh * hd)
        x = x + attn @ W(p + "o_proj").T
        h = _rms_norm(x, W(p + "post_norm"), eps)
        gate = h @ W(p + "gate_proj").T
        up = h @ W(p + "up_proj").T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ W(p + "down_proj").T
    z = _rms_norm(x, W("final_norm"), eps)
    return ReferenceOutput(z, new_keys, new_values)


def compute_head_logits(
    heads: np.ndarray,
    hidden: np.ndarray,
    head_ids: np.ndarray,
    draft_offsets: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Verify logits [Q, V] and, with offsets [K, H], draft logits [Q, K, V].

    logits[i] = heads[head_ids[i]] . hidden[i];
    draft_logits[i, j-1] = heads[min(head_ids[i] + j, G-2)] . (hidden[i] + b_j), j = 1..K.
    Rows are grouped by head, so each head matrix is read once per call and never copied: this
    is the host-side path for heads="hidden" graphs.
    """
    heads = np.asarray(heads)
    hidden = np.asarray(hidden)
    if heads.ndim != 3:
        raise ValueError(f"heads must have shape [G-1, V, H], got {heads.shape}")
    nheads, V, H = heads.shape
    if hidden.ndim != 2 or hidden.shape[1] != H:
        raise ValueError(f"hidden must have shape [Q, {H}], got {hidden.shape}")
    Q = hidden.shape[0]
    ids = np.asarray(head_ids)
    if ids.shape != (Q,) or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"head_ids must be integers with shape ({Q},), got {ids.shape}")
    if np.any(ids < 0) or np.any(ids >= nheads):
        raise ValueError(f"head_ids must be in [0, {nheads}), got {ids}")
    out_dtype = np.result_type(heads.dtype, hidden.dtype)
    logits = np.empty((Q, V), out_dtype)
    for h in np.unique(ids):
        rows = ids == h
        logits[rows] = hidden[rows] @ heads[h].T
    if draft_offsets is None:
        return logits, None
    offs = np.asarray(draft_offsets)
    if offs.ndim != 2 or offs.shape[1] != H:
        raise ValueError(f"draft_offsets must have shape [K, {H}], got {offs.shape}")
    K = offs.shape[0]
    target = np.minimum(ids[:, None] + np.arange(1, K + 1)[None, :], nheads - 1)  # [Q, K]
    inputs = hidden[:, None, :] + offs[None, :, :]  # [Q, K, H]
    draft = np.empty((Q, K, V), np.result_type(out_dtype, offs.dtype))
    for h in np.unique(target):
        sel = target == h
        draft[sel] = inputs[sel] @ heads[h].T
    return logits, draft


def reference_run(
    config: DepthDecoderConfig,
    weights: DepthDecoderWeights,
    feeds: dict,
    *,
    heads: str = "graph",
    dtype=np.float64,
) -> dict:
    """Same inputs and output names as a built graph (see builder.py), computed in `dtype`."""
    x = input_hidden(config, weights, feeds["input_ids"], feeds["input_embeds"], dtype)
    out = forward_hidden(
        config,
        weights,
        x,
        feeds["position_ids"],
        feeds["attention_bias"],
        feeds.get("past_keys"),
        feeds.get("past_values"),
        dtype,
    )
    res = {"hidden": out.hidden, "new_keys": out.new_keys, "new_values": out.new_values}
    if heads == "graph":
        logits, draft = compute_head_logits(
            weights["heads"].astype(dtype),
            out.hidden,
            feeds["head_ids"],
            np.asarray(feeds["draft_offsets"], dtype=dtype),
        )
        res["logits"] = logits
        res["draft_logits"] = draft
    elif heads != "hidden":
        raise ValueError(f"heads must be 'graph' or 'hidden', got {heads!r}")
    return res


# ---------------------------------------------------------------------- test / example inputs
def tree_attention_bias(parents, past_len: int) -> np.ndarray:
    """[T, past_len + T] additive bias: node i sees the whole past, itself and its ancestors.

    parents[0] = -1 and parents[i] < i (topological order), as in a DraftTree.
    """
    parents = [int(p) for p in parents]
    T = len(parents)
    bias = np.full((T, past_len + T), -np.inf, dtype=np.float32)
    bias[:, :past_len] = 0.0
    for i, p in enumerate(parents):
        if (i == 0 and p != -1) or (i > 0 and not 0 <= p < i):
            raise ValueError(f"parents[{i}] = {p} is not a valid topological parent")
        j = i
        while j >= 0:
            bias[i, past_len + j] = 0.0
            j = parents[j]
    return bias


def example_feeds(
    config: DepthDecoderConfig,
    num_query: int = 4,
    past_len: int = 0,
    seed: int = 0,
    parents=None,
    draft_offsets: Optional[np.ndarray] = None,
) -> dict:
    """Valid random graph inputs: a tree query (chain by default) after `past_len` tokens.

    Node i is code c_{d} at level d = past_len + depth(i) (level 0 = c0), except position 0,
    which is an external embedding (the talker hidden state) on the zero table row.
    """
    c = config
    rng = np.random.default_rng(seed)
    if parents is None:
        parents = [-1] + list(range(num_query - 1))
    Q = len(parents)
    depth = np.zeros(Q, np.int64)
    for i in range(1, Q):
        depth[i] = depth[parents[i]] + 1
    pos = past_len + depth
    if np.any(pos >= c.max_positions):
        raise ValueError(f"positions {pos} exceed config.max_positions={c.max_positions}")
    ids = np.zeros(Q, np.int64)
    embeds = np.zeros((Q, c.input_width), np.float32)
    for i in range(Q):
        if pos[i] == 0:
            ids[i] = zero_row(c)
            embeds[i] = rng.standard_normal(c.input_width)
        else:
            level = min(int(pos[i]) - 1, c.num_codebooks - 1)
            vocab = c.c0_vocab_size if level == 0 else c.codebook_size
            ids[i] = embedding_row(c, level, int(rng.integers(0, vocab)))
    L, kvh, hd = c.num_layers, c.num_kv_heads, c.head_dim
    feeds = {
        "input_ids": ids,
        "input_embeds": embeds,
        "position_ids": pos.astype(np.int64),
        "attention_bias": tree_attention_bias(parents, past_len),
        "past_keys": rng.standard_normal((L, kvh, past_len, hd), dtype=np.float32),
        "past_values": rng.standard_normal((L, kvh, past_len, hd), dtype=np.float32),
        # the node at position p >= 1 holds c_{p-1}; head p-1 predicts c_p from it
        "head_ids": np.clip(pos - 1, 0, c.num_lm_heads - 1).astype(np.int64),
        "draft_offsets": (
            np.zeros((c.num_draft_offsets, c.hidden_size), np.float32)
            if draft_offsets is None
            else np.asarray(draft_offsets, np.float32)
        ),
    }
    return feeds
