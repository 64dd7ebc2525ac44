"""Host-owned fixed-capacity KV cache for the depth decoder.

The verify graph returns only this call's K/V rows; the accepted path's rows are copied into
place by the Rust commit helper, so the cache never grows or reallocates during decoding.
The graph reads `keys` / `values` directly at full capacity (bound by pointer, see
`runtime.depth_graph.BoundCall`); the attention bias hides rows past `length`.
"""

from __future__ import annotations

import numpy as np

import codecspec as cs


class KVCache:
    """keys/values float32 [layers, kv_heads, capacity, head_dim]; `length` rows are valid."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int):
        for name, v in (
            ("layers", layers),
            ("kv_heads", kv_heads),
            ("head_dim", head_dim),
            ("capacity", capacity),
        ):
            if int(v) <= 0:
                raise ValueError(f"{name}: must be > 0, got {v}")
        shape = (layers, kv_heads, capacity, head_dim)
        self.keys = np.zeros(shape, np.float32)
        self.values = np.zeros(shape, np.float32)
        self.capacity = capacity
        self.length = 0

    def reset(self) -> None:
        self.length = 0

    def commit(self, new_keys: np.ndarray, new_values: np.ndarray, nodes) -> None:
        """Append rows `nodes` (query indices, increasing) of this call's new K/V."""
        cs.kv_commit(self.keys, self.length, nodes, new_keys)
        self.length = cs.kv_commit(self.values, self.length, nodes, new_values)
