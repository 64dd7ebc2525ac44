"""Speaker similarity (evaluation/speaker_similarity.py): the numpy GE2E encoder equals
Resemblyzer's own on checked-in clips (official.npz, made by tests/data/speaker/make_official.py
with torch), tells espeak-ng's voices apart (a clip scores its own voice above every other),
scores a degraded clip of the same voice lower, and the torch-free checkpoint reader refuses
files that are not checkpoints or that would build other objects."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from paths import DATA

from codecspec.codec.audio import read_wav
from codecspec.evaluation.speaker_similarity import SpeakerEncoder, encoder_weights
from codecspec.evaluation.torch_legacy import read_legacy_checkpoint
from codecspec.frontend import espeak

CLIPS = DATA / "speaker"
# espeak-ng variants (voice qualities), not accents: the encoder hears timbre, and en-us and
# en-gb-scotland share the default variant (0.86 across them, 0.82 within en-us)
VOICES = ["en-us", "en-us+f3", "en-us+m3", "en-us+klatt", "en+m7"]
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Seven silver spoons were lost."]


@pytest.fixture(scope="module")
def enc():
    return SpeakerEncoder()


@pytest.mark.parametrize("clip", ["en-us_f3", "en-gb-scotland"])
def test_the_embedding_is_resemblyzers(enc, clip):
    official = np.load(CLIPS / "official.npz")
    wav, sr = read_wav(CLIPS / f"{clip}.wav")
    got = enc.embed(wav, sr)
    assert got.shape == (256,) and abs(np.linalg.norm(got) - 1) < 1e-5
    assert np.abs(got - official[clip]).max() < 1e-5
    # the package's webrtcvad trimming changes nothing on clips without long silences
    assert enc.similarity(got, official[f"{clip}.trimmed"]) > 0.999


@pytest.fixture(scope="module")
def clips():
    return {(v, i): espeak.render(t, v) for v in VOICES for i, t in enumerate(TEXTS)}


def _embeddings(encoder, clips) -> dict:
    return {k: encoder.embed(r.audio, r.sample_rate) for k, r in clips.items()}


def _confused(emb) -> list:
    """Voices whose first clip scores some other voice's second clip at least as high as
    its own voice's."""
    out = []
    for v in VOICES:
        own = SpeakerEncoder.similarity(emb[v, 0], emb[v, 1])
        others = [SpeakerEncoder.similarity(emb[v, 0], emb[o, 1]) for o in VOICES if o != v]
        if own <= max(others):
            out.append((v, own, others))
    return out


@pytest.fixture(scope="module")
def voices(enc, clips):
    return _embeddings(enc, clips)


def test_a_clip_scores_its_own_voice_above_every_other(voices):
    assert not _confused(voices)


def test_noise_lowers_the_similarity_to_the_same_voice(enc, voices, clips):
    r = clips["en-us", 0]
    noise = np.random.default_rng(0).standard_normal(len(r.audio)).astype(np.float32)
    noisy = r.audio + noise * 3 * r.audio.std()
    clean = enc.similarity(voices["en-us", 0], voices["en-us", 1])
    assert enc.similarity(enc.embed(noisy, r.sample_rate), voices["en-us", 1]) < clean - 0.2


def test_a_broken_encoder_does_not_tell_the_voices_apart(clips):
    """The voice test above must fail on an encoder whose mel bands are reversed."""
    broken = SpeakerEncoder()
    w_ih, w_hh, bias = broken.layers[0]
    broken.layers[0] = (w_ih[::-1].copy(), w_hh, bias)
    assert _confused(_embeddings(broken, clips))


def test_bad_clips_name_the_argument(enc):
    with pytest.raises(ValueError, match="sample_rate"):
        enc.embed(np.zeros(1600, np.float32), 16000.0)
    with pytest.raises(ValueError, match="sample_rate"):
        enc.embed(np.zeros(1600, np.float32), 100)
    with pytest.raises(ValueError, match="wav"):
        enc.embed(np.zeros(0, np.float32), 16000)
    with pytest.raises(ValueError, match="wav"):
        enc.embed(np.full(1600, np.nan, np.float32), 16000)
    short = enc.embed(np.random.default_rng(1).standard_normal(800).astype(np.float32), 16000)
    assert np.isfinite(short).all()  # shorter than one window: padded, one window


def _legacy_file(path, obj_pickle: bytes) -> None:
    with open(path, "wb") as f:
        for header in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
            pickle.dump(header, f, protocol=2)
        f.write(obj_pickle)
        pickle.dump([], f, protocol=2)


def test_the_reader_refuses_what_is_not_a_checkpoint(tmp_path):
    state = read_legacy_checkpoint(encoder_weights())["model_state"]
    assert state["lstm.weight_ih_l0"].shape == (1024, 40)

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, ("true",))

    evil = tmp_path / "evil.pt"
    _legacy_file(evil, pickle.dumps({"x": Evil()}, protocol=2))
    with pytest.raises(ValueError, match="refuses to build"):
        read_legacy_checkpoint(evil)
    other = tmp_path / "other.pt"
    other.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match="path"):
        read_legacy_checkpoint(other)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(encoder_weights().read_bytes()[:100_000])
    with pytest.raises(ValueError, match="path"):
        read_legacy_checkpoint(cut)
