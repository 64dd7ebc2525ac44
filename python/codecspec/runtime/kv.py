"""Host-owned fixed-capacity KV cache for the depth decoder.

The verify graph returns only this call's K/V rows; the accepted path's rows are copied into
place by the Rust commit helper, so the cache never grows or reallocates during decoding.
The graph reads the cache directly at full capacity (bound by pointer, see
`runtime.depth_graph.BoundCall`); the attention bias hides rows past `length`.

Two layouts, the graph's choice: keys and values apart, head-major [L, kv_heads, P, hd] each
(attention="call" graphs), or joined and position-major [L, P, 2 * kv_heads * hd], a
position's keys then its values (attention="placed" graphs read a row's slots of both with
one gather and need no per-call copy of the past). `keys` / `values` are views in the first
layout either way.
"""

from __future__ import annotations

import numpy as np

import codecspec as cs


def join_kv(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """[L, kvh, P, hd] keys and values -> the joined layout [L, P, 2 * kvh * hd] (a copy)."""
    L, _, P, _ = np.shape(keys)
    kv = np.concatenate([keys, values], axis=1).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(kv, np.float32).reshape(L, P, -1)


def split_kv(kv: np.ndarray, kv_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """The joined layout [L, P, 2 * kvh * hd] -> views (keys, values), [L, kvh, P, hd] each."""
    L, P, width = kv.shape
    heads = kv.reshape(L, P, 2 * kv_heads, width // (2 * kv_heads)).transpose(0, 2, 1, 3)
    return heads[:, :kv_heads], heads[:, kv_heads:]


class KVCache:
    """keys/values float32 [layers, kv_heads, capacity, head_dim]; `length` rows are valid.
    joined=True: one array `kv` [layers, capacity, 2 * kv_heads * head_dim] holds both, and
    `keys` / `values` are views of it."""

    @classmethod
    def for_graph(cls, graph, capacity: int) -> KVCache:
        """A cache of `capacity` rows in the layout `graph` (a DepthGraph) reads."""
        c = graph.config
        return cls(c.num_layers, c.num_kv_heads, c.head_dim, capacity, joined=graph.kv_joined)

    def __init__(
        self, layers: int, kv_heads: int, head_dim: int, capacity: int, joined: bool = False
    ):
        for name, v in (
            ("layers", layers),
            ("kv_heads", kv_heads),
            ("head_dim", head_dim),
            ("capacity", capacity),
        ):
            if int(v) <= 0:
                raise ValueError(f"{name}: must be > 0, got {v}")
        self.joined = bool(joined)
        if self.joined:
            self.kv = np.zeros((layers, capacity, 2 * kv_heads * head_dim), np.float32)
            self.keys, self.values = split_kv(self.kv, kv_heads)
        else:
            shape = (layers, kv_heads, capacity, head_dim)
            self.kv = None
            self.keys = np.zeros(shape, np.float32)
            self.values = np.zeros(shape, np.float32)
        self.capacity = capacity
        self.length = 0

    @classmethod
    def over(cls, keys: np.ndarray, values: np.ndarray, length: int = 0) -> KVCache:
        """A cache whose keys / values [layers, kv_heads, capacity, head_dim] are the given
        arrays, not copies: a slot of a buffer several caches share (the Qwen3 talker's
        batched step, families/qwen3_tts/talker_rows.py). Each layer must be C-contiguous."""
        if np.shape(keys) != np.shape(values) or len(np.shape(keys)) != 4:
            raise ValueError(
                f"keys: expected keys and values of one 4-d shape, got {np.shape(keys)}"
            )
        cache = cls.__new__(cls)
        cache.joined, cache.kv = False, None
        cache.keys, cache.values = keys, values
        cache.capacity, cache.length = int(keys.shape[2]), int(length)
        return cache

    @property
    def past(self) -> tuple:
        """The arrays a graph call binds as its past (`DepthGraph.bind`'s past_keys and
        past_values): (keys, values), or (kv, None) when joined."""
        return (self.kv, None) if self.joined else (self.keys, self.values)

    def reset(self) -> None:
        self.length = 0

    def commit(self, new_keys: np.ndarray, new_values: np.ndarray, nodes) -> None:
        """Append rows `nodes` (query indices, increasing) of this call's new K/V
        (split layout; a joined cache takes `commit_call`)."""
        if self.joined:
            raise ValueError("new_keys: a joined cache commits a call's new_kv (commit_call)")
        cs.kv_commit(self.keys, self.length, nodes, new_keys)
        self.length = cs.kv_commit(self.values, self.length, nodes, new_values)

    def commit_call(self, call, nodes) -> None:
        """Append rows `nodes` of a bound call's new K/V, in this cache's layout."""
        if self.joined:
            self.length = cs.kv_commit(self.kv, self.length, nodes, call.new_kv)
        else:
            self.commit(call.new_keys, call.new_values, nodes)


class RingKVCache:
    """A sliding-window self-attention cache of fixed capacity C >= W (the window) for a step
    graph with fixed-shape cache inputs: keys/values float32 [layers, 1, heads, C, head_dim]
    and `positions` int64 [C], the frame index held by each slot (-1 = empty). Frame t lives in
    slot t % C; the graph masks by position (a query at t sees frames t-W+1..t), so the slot
    order does not matter and memory is constant however long the utterance. Capacity beyond
    W lets a draft LM write frames that are later rejected (`rewind`) without evicting frames
    the window still needs."""

    def __init__(self, layers: int, heads: int, capacity: int, head_dim: int):
        for name, v in (
            ("layers", layers),
            ("heads", heads),
            ("capacity", capacity),
            ("head_dim", head_dim),
        ):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise ValueError(f"{name}: must be a positive int, got {v!r}")
        shape = (int(layers), 1, int(heads), int(capacity), int(head_dim))
        self.keys = np.zeros(shape, np.float32)
        self.values = np.zeros(shape, np.float32)
        self.positions = np.full(int(capacity), -1, np.int64)
        self.capacity = int(capacity)

    def reset(self) -> None:
        self.positions[:] = -1

    def rewind(self, frames: int) -> None:
        """Forget every frame at position >= `frames` (rejected drafts)."""
        self.positions[self.positions >= frames] = -1

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes + self.positions.nbytes

    def commit(self, new_keys: np.ndarray, new_values: np.ndarray, positions) -> None:
        """Store frames `positions` (increasing, one per row of new_* [L, 1, heads, n, hd]);
        rows past len(positions) are dropped (rejected drafts)."""
        pos = np.asarray(positions, np.int64).reshape(-1)
        ks = np.shape(new_keys)
        if len(ks) != 5 or ks[:3] != self.keys.shape[:3] or ks[4] != self.keys.shape[4]:
            raise ValueError(
                f"new_keys: expected [*{self.keys.shape[:3]}, n, {self.keys.shape[4]}], got {ks}"
            )
        if np.shape(new_values) != ks:
            raise ValueError(
                f"new_values: expected the shape of new_keys {ks}, got {np.shape(new_values)}"
            )
        if len(pos) > ks[3]:
            raise ValueError(f"positions: {len(pos)} frames, the new K/V hold {ks[3]}")
        first = max(0, len(pos) - self.capacity)  # only the last C frames can be held
        rows = slice(first, len(pos))
        pos = pos[first:]
        slots = pos % self.capacity
        self.keys[:, :, :, slots] = new_keys[:, :, :, rows]
        self.values[:, :, :, slots] = new_values[:, :, :, rows]
        self.positions[slots] = pos
