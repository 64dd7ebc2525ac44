"""The RVQ reference's `generate` (the engine's loop with one slot,
`codecspec.pipeline.loop.run_inline`): its codes are exactly those of the plain per-frame
recipe written out here (temporal step, c0 sampled on the host, the depth loop, the frame's
latent fed back), for the same seed, AR and spec."""

from __future__ import annotations

import numpy as np
import pytest

import codecspec as cs
from codecspec.families.reference.model import (
    MODEL_FILES,
    ReferenceTTS,
    TemporalStepper,
    default_model_dir,
)
from codecspec.frontend.text import BOS, EOS

pytestmark = pytest.mark.skipif(
    not all((default_model_dir() / f).is_file() for f in MODEL_FILES),
    reason="no shipped reference model",
)
PHONEMES = "hˈɛloʊ wˈɜːld"


def _by_hand(tts: ReferenceTTS, frames: int, mode: str, seed: int) -> np.ndarray:
    lang, spk = tts.ids("en")
    ids = np.concatenate([[BOS], tts.frontend.vocab.encode(PHONEMES), [EOS]]).astype(np.int64)
    ck, cv = tts.encoder.run(
        ["cross_keys", "cross_values"],
        {"phonemes": ids[None], "language": np.array([lang]), "speaker": np.array([spk])},
    )
    stepper = TemporalStepper(tts.temporal, ck, cv, spk, frames)
    g, latent = cs.Generator(seed), None
    codes = np.zeros((frames, tts.depth.G), np.int64)
    for t in range(frames):
        h, logits = stepper.step(latent)
        codes[t] = tts.depth.decode_frame(h, cs.sample(logits, tts.params, g), g, mode)
        latent = tts._latent(codes[t])
    return codes


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_generate_is_the_per_frame_recipe(mode):
    tts = ReferenceTTS(provider="cpu", threads=1)
    s = tts.generate("", phonemes=PHONEMES, mode=mode, seed=3, decode_audio=False)
    np.testing.assert_array_equal(s.codes, _by_hand(tts, len(s.codes), mode, 3))
    frames, G, depth = len(s.codes), tts.depth.G, tts.depth.tree.max_depth
    if mode == "ar":
        assert s.depth_calls == (G - 1) * frames
    else:  # a prefill, then rounds emitting at most depth + 1 codes each
        assert frames * (1 + -(-(G - 2) // (depth + 1))) <= s.depth_calls <= (G - 1) * frames
    assert 0 < s.depth_seconds and 0 < s.temporal_seconds
