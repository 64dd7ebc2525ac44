"""Per-stream slots of a batched step graph's caches (the engine's steppers and FSQ's)."""

from __future__ import annotations

import numpy as np


class SlotCache:
    """The per-stream state of a batched temporal graph: each of `slots` slots owns rows of
    one preallocated self-attention K/V block [L, slots, heads, max_frames, hd] and cross K/V
    block [L, slots, heads, max_phonemes, hd] (shared by both model families' steppers)."""

    def __init__(self, session, slots: int, max_frames: int, max_phonemes: int):
        L, _, heads, _, hd = {i.name: i.shape for i in session.get_inputs()}["past_keys"]
        self.session = session
        self.max_frames, self.max_phonemes = int(max_frames), int(max_phonemes)
        # np.zeros maps pages lazily: memory is committed only as streams write their rows.
        self.keys = np.zeros((L, slots, heads, self.max_frames, hd), np.float32)
        self.values = np.zeros_like(self.keys)
        self.cross_k = np.zeros((L, slots, heads, self.max_phonemes, hd), np.float32)
        self.cross_v = np.zeros_like(self.cross_k)
        self.frames = np.zeros(slots, np.int64)  # rows of self K/V written per slot
        self.phonemes = np.zeros(slots, np.int64)

    def load(self, slot: int, cross_keys: np.ndarray, cross_values: np.ndarray) -> None:
        """Starts a stream in `slot` from the encoder's [L, 1, heads, P, hd] cross K/V."""
        p = cross_keys.shape[3]
        if p > self.max_phonemes:
            raise ValueError(f"input: {p} phonemes, more than the limit {self.max_phonemes}")
        self.cross_k[:, slot, :, :p] = cross_keys[:, 0]
        self.cross_v[:, slot, :, :p] = cross_values[:, 0]
        self.phonemes[slot], self.frames[slot] = p, 0
