"""espeak-ng's evaluation clips (tests/data/espeak_eval_clips.npz) and the degraded copies a
quality measure must score far worse: shared by the word and phoneme recognizer tests."""

from __future__ import annotations

import numpy as np
from paths import DATA

CLIPS = DATA / "espeak_eval_clips.npz"


def load_clips() -> list:
    """[(sentence id, seed 0, float32 waveform, sample rate)], as `intelligibility.score`
    takes clips."""
    with np.load(CLIPS) as z:
        sr = int(z["sample_rate"])
        return [
            (k, 0, z[k].astype(np.float32) / 32768.0, sr)
            for k in sorted(z.files)
            if k != "sample_rate"
        ]


def shuffled_blocks(wav, sr, block_s=0.08, seed=0):
    """The clip with its 80 ms blocks in a random order: the same sounds, no words."""
    n = int(block_s * sr)
    blocks = [wav[i : i + n] for i in range(0, len(wav), n)]
    order = np.random.default_rng(seed).permutation(len(blocks))
    return np.concatenate([blocks[i] for i in order])
