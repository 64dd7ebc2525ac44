"""In-context voice cloning (Base checkpoints, reference audio + its transcript) against the
official implementation's outputs.

tests/data/qwen3_clone/ comes from scripts/qwen3_clone_fixtures.py (official qwen-tts 0.1.1
classes, torch); these tests need neither.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from codecspec.codec.audio import read_wav
from codecspec.families.qwen3_tts.encoder import SpeechEncoder
from codecspec.graphs import qwen3_encoder

DATA = Path(__file__).parent / "data" / "qwen3_clone"
MODEL = DATA / "base_icl"
CLIPS = ("ref_a", "ref_b")


def _fixtures():
    return np.load(DATA / "base_icl.fixtures.npz")


def _cases() -> list:
    return json.loads((DATA / "base_icl.cases.json").read_text(encoding="utf-8"))


def _clip(name: str) -> np.ndarray:
    wav, sr = read_wav(DATA / f"{name}.wav")
    assert sr == 24000
    return wav


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("qwen3_clone_cache")


@pytest.fixture(scope="module")
def encoder(cache):
    return SpeechEncoder.load(MODEL / "speech_tokenizer", cache_dir=cache)


# ---------------------------------------------------------------------- the encoder
@pytest.mark.parametrize("clip", CLIPS)
def test_encoder_codes_equal_the_official_ones(encoder, clip):
    want = _fixtures()[f"clip_{clip}_codes"]
    got = encoder.encode(_clip(clip))
    assert got.shape == want.shape  # ceil(samples / 1920) frames, 16 codes
    assert np.array_equal(got, want), np.argwhere(got != want)[:5]


def test_encoder_fixtures_are_not_degenerate():
    """Every codebook uses several entries, and the clips are not whole frames long (so the
    right padding of the strided convolutions is exercised)."""
    z = _fixtures()
    for clip in CLIPS:
        codes = z[f"clip_{clip}_codes"]
        assert min(len(np.unique(codes[:, k])) for k in range(codes.shape[1])) >= 3
        assert len(_clip(clip)) % 1920


def test_encoder_graph_is_cached(encoder, cache):
    again = SpeechEncoder.load(MODEL / "speech_tokenizer", cache_dir=cache)
    assert again.graph_path == encoder.graph_path
    assert len(list(Path(cache).glob("qwen3-speech-encoder-*"))) == 1


def _zero_padded_downsample(orig):
    def pad(g, x, left, stride, mode, label):
        return orig(g, x, left, stride, "constant", label)

    return pad


def _stride_one_downsample(orig):
    def conv(g, x, w, b, label, stride=1, dilation=1, mode="constant"):
        return orig(g, x, w, b, label, 1 if label == "downsample" else stride, dilation, mode)

    return conv


@pytest.mark.parametrize(
    "attr,breaker",
    [("_pad_time", _zero_padded_downsample), ("_conv", _stride_one_downsample)],
)
def test_a_broken_encoder_is_caught(tmp_path, monkeypatch, attr, breaker):
    """The comparison above can fail: an encoder that pads the downsampling conv with zeros
    instead of repeating the edge frame, or downsamples with stride 1, gives other codes."""
    monkeypatch.setattr(qwen3_encoder, attr, breaker(getattr(qwen3_encoder, attr)))
    broken = SpeechEncoder.load(MODEL / "speech_tokenizer", cache_dir=tmp_path)
    z = _fixtures()
    for clip in CLIPS:
        got, want = broken.encode(_clip(clip)), z[f"clip_{clip}_codes"]
        assert got.shape != want.shape or not np.array_equal(got, want)


def test_a_folder_without_encoder_weights_is_refused(tmp_path):
    (tmp_path / "config.json").write_text((MODEL / "speech_tokenizer" / "config.json").read_text())
    with pytest.raises(ValueError, match="encoder tensors missing"):
        SpeechEncoder.load(tmp_path, cache_dir=tmp_path / "cache")
