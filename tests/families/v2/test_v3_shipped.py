"""The shipped reference model v3 (the default): files and budget, the stop head, and that it
says the text — Whisper recognises its words well above chance, and the same clips cut into
shuffled 80 ms blocks (the broken variant) fall back to chance."""

import json

import numpy as np
import pytest

from codecspec.families.v2.model import V2_FILES, V2TTS, default_v3_dir
from codecspec.frontend import espeak
from codecspec.pipeline.registry import resolve_model_dir

MODEL = default_v3_dir()
pytestmark = [
    pytest.mark.skipif(not (MODEL / "model.json").is_file(), reason="no shipped v3 folder"),
    pytest.mark.skipif(
        not espeak.available(),
        reason="libespeak-ng.so.1 is not installed (apt-get install espeak-ng)",
    ),
]


@pytest.fixture(scope="module")
def tts():
    return V2TTS(MODEL, provider="cpu", threads=1)


def test_v3_is_the_default_and_fits_the_budget():
    assert resolve_model_dir(None) == MODEL
    meta = json.loads((MODEL / "model.json").read_text())
    assert meta["conditioning"] == "phoneme_track" and meta["codec_file"] == "codec.npz"
    for f in V2_FILES + ("codec.npz", "offsets.npy", "tree.json", "MODEL_CARD.md"):
        assert (MODEL / f).is_file() and (MODEL / f).stat().st_size, f
    total = sum(p.stat().st_size for p in MODEL.rglob("*") if p.is_file())
    assert total <= 60 * 2**20, f"the v3 folder must stay within 60 MB, got {total / 2**20:.1f} MB"


def test_the_shipped_shared_depth_decoder(tts):
    """Seed 002's decoder ships beside the per-position one: tied to the folder's own codec
    codebooks, at most a quarter of the per-position decoder's weights, and it speaks (AR
    and speculative, the stop head ending the sentence near the phoneme track's end)."""
    from codecspec.graphs.shared import load_shared, needs_codebooks

    spec, arrays = load_shared(MODEL / "depth_shared.npz")
    assert needs_codebooks(spec) and spec["per_level_head"]
    cfg = tts.depth.graph.config
    H, V, G = cfg.hidden_size, cfg.codebook_size, cfg.num_codebooks
    body = sum(a.size for k, a in arrays.items() if k.startswith("layers.0."))
    positional = 2 * (G - 1) * V * H + cfg.num_layers * body + H  # tables, heads, layers
    assert sum(a.size for a in arrays.values()) <= positional / 4
    shared = V2TTS(MODEL, provider="cpu", threads=1, depth="shared")
    text = "The boats rocked against the harbour wall all night."
    _, track = tts.phoneme_track(text, "en", None)
    for mode in ("ar", "spec"):
        s = shared.generate(text, seed=1, mode=mode, temporal="ar", decode_audio=False)
        assert not s.hit_max_frames, mode
        assert 0.8 * len(track) <= s.frames <= 1.2 * len(track), (mode, s.frames, len(track))


def test_the_stop_head_ends_near_the_tracks_end(tts):
    text = "The boats rocked against the harbour wall all night."
    _, track = tts.phoneme_track(text, "en", None)
    for seed in range(3):
        s = tts.generate(text, seed=seed, mode="ar", temporal="ar")
        assert not s.hit_max_frames, "the stop head must end the sentence"
        assert 0.8 * len(track) <= s.frames <= 1.2 * len(track), (s.frames, len(track))
        assert np.sqrt(np.mean(s.wav**2)) > 1e-3, "silent output"


@pytest.mark.parametrize(
    "text",
    [
        # espeak-ng's audio ends right after the last sound (its closing pause lasts ~7 ms), so
        # the track's last frame is inside that sound: held there past the end, the model went
        # on saying it and both ran to the max-length guard at every seed tried
        "Every time I look at you I am more convinced of Darwin's theory.",
        "Some demolitions chimed impersonal through our gorier.",
    ],
)
def test_a_track_ending_inside_its_last_sound_still_stops(tts, text):
    _, track = tts.phoneme_track(text, "en", None)
    for seed in range(2):
        s = tts.generate(text, seed=seed, mode="ar", temporal="ar", decode_audio=False)
        assert not s.hit_max_frames and s.frames <= 1.15 * len(track), (s.frames, len(track))


def _shuffled(wav, hop, seed):
    n = len(wav) // hop
    blocks = wav[: n * hop].reshape(n, hop)
    return blocks[np.random.default_rng(seed).permutation(n)].reshape(-1)


def test_whisper_understands_it_and_not_its_shuffled_copy(tts):
    pytest.importorskip("faster_whisper", reason="the [quality] extra is not installed")
    from codecspec.evaluation import intelligibility as intel

    rows = intel.resolve_sentences(6)
    rec = intel.Recognizer("base", threads=2)
    clips, broken = [], []
    for i, r in enumerate(rows):
        s = tts.generate(r["text"], seed=i, mode="ar", temporal="ar")
        clips.append((r["id"], 0, s.wav, s.sample_rate))
        broken.append((r["id"], 0, _shuffled(s.wav, 1280, i), s.sample_rate))
    good = intel.score(clips, rows, recognizer=rec)["words_recognised"]
    bad = intel.score(broken, rows, recognizer=rec)["words_recognised"]
    assert good >= 0.2, f"v3 speech: only {good:.0%} of the words recognised"
    assert bad < good - 0.1, f"shuffled copy {bad:.0%} vs {good:.0%}"
