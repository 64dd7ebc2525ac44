"""Per-stream slots of a batched step graph's caches (the engine's steppers and FSQ's)."""

from __future__ import annotations

import numpy as np

# A call attends over the longest stream's keys, the others' masked. Where one query row
# meets a key axis (a stream's one new frame), MLAS sums the attention in SIMD lanes over that
# axis, so its length decides which lane each key lands in: a stream's output would change in
# the last bits with the other streams of its call (measured on AVX2: ~7e-7 in the hidden
# state). Key axes are therefore padded to a multiple of KEY_ALIGN (masked, exact zeros in the
# sum): a stream's keys then fall in the same lanes alone and in any batch, and its codes are
# the same bits served or alone (tests/serve/test_serve_engine.py).
KEY_ALIGN = 16


def aligned(n: int) -> int:
    """`n` rounded up to a multiple of KEY_ALIGN."""
    return -(-int(n) // KEY_ALIGN) * KEY_ALIGN


class SlotCache:
    """The per-stream state of a batched temporal graph: each of `slots` slots owns rows of
    one preallocated self-attention K/V block [L, slots, heads, max_frames, hd] and cross K/V
    block [L, slots, heads, max_phonemes, hd] (shared by both model families' steppers)."""

    def __init__(self, session, slots: int, max_frames: int, max_phonemes: int):
        L, _, heads, _, hd = {i.name: i.shape for i in session.get_inputs()}["past_keys"]
        self.session = session
        self.max_frames, self.max_phonemes = int(max_frames), int(max_phonemes)
        # np.zeros maps pages lazily: memory is committed only as streams write their rows.
        # Rows up to the aligned lengths, so that padded key axes are slices (`key_lengths`).
        self.keys = np.zeros((L, slots, heads, aligned(self.max_frames), hd), np.float32)
        self.values = np.zeros_like(self.keys)
        self.cross_k = np.zeros((L, slots, heads, aligned(self.max_phonemes), hd), np.float32)
        self.cross_v = np.zeros_like(self.cross_k)
        self.frames = np.zeros(slots, np.int64)  # rows of self K/V written per slot
        self.phonemes = np.zeros(slots, np.int64)

    def key_lengths(self, t: np.ndarray, p: np.ndarray) -> tuple[int, int]:
        """(past rows, phoneme columns) of a call whose streams have t past frames and p
        phonemes: the longest of each, padded so that past + the new key and the phonemes are
        multiples of KEY_ALIGN. ValueError when a stream is past max_frames."""
        if int(t.max()) >= self.max_frames:
            raise ValueError(f"frames: a stream exceeds max_frames={self.max_frames}")
        return aligned(int(t.max()) + 1) - 1, aligned(int(p.max()))

    def load(self, slot: int, cross_keys: np.ndarray, cross_values: np.ndarray) -> None:
        """Starts a stream in `slot` from the encoder's [L, 1, heads, P, hd] cross K/V."""
        p = cross_keys.shape[3]
        if p > self.max_phonemes:
            raise ValueError(f"input: {p} phonemes, more than the limit {self.max_phonemes}")
        self.cross_k[:, slot, :, :p] = cross_keys[:, 0]
        self.cross_v[:, slot, :, :p] = cross_values[:, 0]
        self.phonemes[slot], self.frames[slot] = p, 0
