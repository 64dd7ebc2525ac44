"""Tiny FSQ folders told espeak-ng's phoneme track (the aligned family and its voice-prefix
variant), and the check that streams run together keep their own codes."""

from __future__ import annotations

import json

import numpy as np

import codecspec as cs
from codecspec.families.fsq.codec import FSQCodec
from codecspec.families.fsq.model import FSQFamily
from codecspec.model_store import named_model_dir
from codecspec.pipeline.loop import run_inline, run_together


def frames(n=3000, seed=0) -> np.ndarray:
    """Feature frames with a decaying spectrum of components (a codec fits levels to it)."""
    basis = np.random.default_rng(0).normal(size=(24, 640))
    z = np.random.default_rng(seed + 1).normal(size=(n, 24)) * (3.0 * 0.85 ** np.arange(24))
    return (z @ basis / 8.0 - 4.0).astype(np.float32)


def aligned_folder(d, build, **cfg):
    """An aligned FSQ folder in `d` with v3's text side: a 40-bit codec, an `FSQModelConfig`
    of tiny sizes (`cfg` overrides), the model `build(config)` returns (torch, exported
    here), model.json. Returns (codec, temporal model)."""
    import torch

    from codecspec.families.fsq.torch_model import FSQModelConfig, export_onnx

    v3 = json.loads((named_model_dir("v3") / "model.json").read_text())
    codec = FSQCodec.fit(frames(), bits=40.0)
    codec.save(d / "fsqcodec.npz")
    sizes = dict(channel_dim=4, d_model=32, num_heads=2, ff_size=64, encoder_layers=1)
    sizes |= dict(decoder_layers=2, fourier_bands=4, dropout=0.0, ar_layers=0, aligned=True)
    config = FSQModelConfig(
        vocab_size=len(v3["frontend"]["vocab"]["symbols"]) + 8,
        num_languages=1,
        levels=codec.cfg.levels,
        groups=codec.cfg.groups,
        **(sizes | cfg),
    )
    torch.manual_seed(0)
    tm = build(config)
    export_onnx(tm, d)
    meta = {
        "format": "codecspec-fsq-tts/1",
        "frontend": v3["frontend"],
        **codec.cfg.to_meta(),
        "sampling": {"temperature": 0.9, "top_k": 0, "top_p": 1.0},
        "voices": {"en": "en-us"},
        "default_speaker": "f1",
        "pace_unit": 1.0,
        "max_pace": 1.5,
        "config": config.to_dict(),
        "conditioning": "phoneme_track",
        "espeak_rate": 170,
        "espeak_pitch": 50,
    }
    (d / "model.json").write_text(json.dumps(meta))
    return codec, tm


def assert_streams_keep_their_codes(tts, reqs, seed: int) -> list:
    """`reqs` run together as one batch equal each run alone (same generator forks);
    returns the batch's codes."""
    family = FSQFamily(tts, len(reqs), 400, 400)
    states = [family.prepare(r, cs.Generator(seed).fork(b)) for b, r in enumerate(reqs)]
    batch = run_together(family, states)
    for b, r in enumerate(reqs):
        alone = FSQFamily(tts, 1, 400, 400)
        state = alone.prepare(r, cs.Generator(seed).fork(b))
        np.testing.assert_array_equal(np.stack(list(run_inline(alone, state))), batch[b])
    return batch
