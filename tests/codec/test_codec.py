"""Reference codec (codecspec.codec) and the corpus recipe (models/recipe/corpus.py).

Tiny configurations only: synthetic chirp/harmonic mixtures train a 16-level codec with 16-entry
codebooks in about a second. The recipe tests need espeak-ng and a fortunes package and are
skipped without them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from paths import REPO

from codecspec.codec import (
    Codec,
    CodecConfig,
    frame_features,
    griffin_lim,
    kmeans,
    load_codes,
    log_spectral_distance,
    read_wav,
    resample,
    rvq_decode,
    rvq_encode,
    rvq_fit,
    save_codes,
    write_wav,
)
from codecspec.codec.features import istft, stft

SR = 16000
ROOT = REPO
TINY = CodecConfig(pca_dim=16, codebook_size=16)


def synth_signal(seconds: float, seed: int) -> np.ndarray:
    """Gliding harmonic tones, noise bursts and pauses: varied spectra, like a toy speech."""
    rng = np.random.default_rng(seed)
    out = []
    while sum(map(len, out)) < seconds * SR:
        n = int(rng.uniform(0.15, 0.6) * SR)
        t = np.arange(n) / SR
        kind = rng.integers(3)
        if kind == 0:
            f0 = rng.uniform(90, 260) * (1 + rng.uniform(-0.3, 0.3) * t / t[-1])
            ph = 2 * np.pi * np.cumsum(f0) / SR
            seg = sum(np.sin(h * ph) / h for h in range(1, 12) if h * f0.max() < SR / 2)
        elif kind == 1:
            seg = rng.standard_normal(n) * np.hanning(n)
        else:
            seg = np.zeros(n)
        out.append(0.3 * seg * np.hanning(n))
    return np.concatenate(out)[: int(seconds * SR)].astype(np.float32)


@pytest.fixture(scope="module")
def tiny_codec() -> Codec:
    feats = np.concatenate([frame_features(synth_signal(10.0, s), TINY) for s in range(3)])
    return Codec.fit(feats, TINY, iters=4, seed=0)


# ---- configuration and framing contracts -------------------------------------------------
def test_config_contract():
    c = CodecConfig()
    assert c.frame_rate == 12.5 and c.frame_hop == 1280 and c.sample_rate == 16000
    assert c.n_codebooks == 16 and 256 <= c.codebook_size <= 2048
    assert c.subframes * c.stft_hop == c.frame_hop
    assert c.feature_dim == c.subframes * c.n_mels
    assert [c.num_frames(n) for n in (1, 1279, 1280, 1281, 16000)] == [1, 1, 1, 2, 13]


@pytest.mark.parametrize("n", [1, 1279, 1280, 1281, 16000, 20000])
def test_frame_features_shape(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 0.1
    f = frame_features(x, TINY)
    assert f.shape == (-(-n // 1280), 640) and f.dtype == np.float32
    assert np.all(np.isfinite(f))
    # digital silence maps to the log floor, not -inf
    z = frame_features(np.zeros(n, np.float32), TINY)
    assert np.allclose(z, np.log(TINY.log_offset))


def test_stft_istft_identity():
    x = synth_signal(1.3, 5).astype(np.float64)
    frames = -(-x.size // 160)
    y = istft(stft(x, 1024, 160, 640, frames), 1024, 160, 640, x.size)
    assert np.max(np.abs(x - y)) < 1e-9


# ---- codec ----------------------------------------------------------------------------------
def test_encode_decode_shapes(tiny_codec):
    for n in (1280, 5000, 16000):
        x = synth_signal(n / SR, 7 + n)
        codes = tiny_codec.encode(x)
        t = -(-n // 1280)
        assert codes.shape == (t, 16) and codes.dtype == np.int32
        assert codes.min() >= 0 and codes.max() < TINY.codebook_size
        y = tiny_codec.decode(codes, n_iter=4)
        assert y.shape == (t * 1280,) and y.dtype == np.float32 and np.all(np.isfinite(y))
        # fewer levels: same length, coarser features
        assert tiny_codec.decode(codes[:, :3], n_iter=2).shape == y.shape
        assert tiny_codec.decode_features(codes[:, :1]).shape == (t, 640)


def test_encode_resamples(tiny_codec):
    x = synth_signal(1.0, 11)
    up = resample(x, 16000, 22050)
    assert tiny_codec.encode(up, sample_rate=22050).shape == tiny_codec.encode(x).shape


def test_save_load_round_trip(tiny_codec, tmp_path):
    size = tiny_codec.save(tmp_path / "c.npz")
    assert size == (tmp_path / "c.npz").stat().st_size > 0
    c2 = Codec.load(tmp_path / "c.npz")
    assert c2.cfg == tiny_codec.cfg
    assert c2.codebooks.dtype == np.float16 and c2.components.dtype == np.float16
    x = synth_signal(3.0, 21)
    codes = tiny_codec.encode(x)
    assert np.array_equal(c2.encode(x), codes)
    # codes stored as int16 (the corpus format) decode to the same features
    f1 = tiny_codec.decode_features(codes)
    f2 = c2.decode_features(codes.astype(np.int16))
    assert np.array_equal(f1, f2)


def test_codes_file_round_trip(tiny_codec, tmp_path):
    codes = [tiny_codec.encode(synth_signal(s, i)) for i, s in enumerate((1.0, 2.5, 0.2))]
    save_codes(tmp_path / "codes.npz", ["a", "b", "c"], ["train", "test", "train"], codes, 12.5)
    back = load_codes(tmp_path / "codes.npz")
    assert list(back) == ["a", "b", "c"]
    for k, c in zip("abc", codes):
        assert back[k].dtype == np.int16 and np.array_equal(back[k], c)
    assert list(load_codes(tmp_path / "codes.npz", split="test")) == ["b"]
    with pytest.raises(ValueError, match="ids, splits and codes"):
        save_codes(tmp_path / "x.npz", ["a"], [], codes[:1], 12.5)


def test_codes_round_trip_first_level(tiny_codec):
    # re-encoding what one level decodes to lands on the same codeword
    codes = tiny_codec.encode(synth_signal(3.0, 23))[:, :1]
    again = tiny_codec.encode_features(tiny_codec.decode_features(codes), n_levels=1)
    assert np.array_equal(again, codes)


def test_every_level_carries_information(tiny_codec):
    x = synth_signal(6.0, 99)  # not in the training signals
    f = tiny_codec.features(x)
    codes = tiny_codec.encode_features(f)
    mse = [np.mean((tiny_codec.decode_features(codes[:, :k]) - f) ** 2) for k in range(1, 17)]
    assert all(a > b for a, b in zip(mse, mse[1:])), mse


def test_decode_is_deterministic(tiny_codec):
    codes = tiny_codec.encode(synth_signal(1.0, 3))
    assert np.array_equal(tiny_codec.decode(codes, n_iter=3), tiny_codec.decode(codes, n_iter=3))


# ---- k-means / RVQ --------------------------------------------------------------------------
def _blobs(n, seed):
    rng = np.random.default_rng(seed)
    centers = np.array([[0, 0], [10, 0], [0, 10], [10, 10]], dtype=np.float32)
    return centers[rng.integers(4, size=n)] + 0.3 * rng.standard_normal((n, 2)).astype(np.float32)


def test_kmeans_deterministic_and_finds_clusters():
    x = _blobs(2000, 0)
    a, b = kmeans(x, 4, iters=5, seed=3), kmeans(x, 4, iters=5, seed=3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, kmeans(x, 4, iters=5, seed=4))
    found = np.sort(np.round(a / 10).astype(int), axis=0)
    assert sorted(map(tuple, np.round(a / 10).astype(int))) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert found.shape == (4, 2)


def test_kmeans_more_clusters_than_distinct_points():
    x = np.repeat(np.eye(3, dtype=np.float32), 5, axis=0)
    c = kmeans(x, 6, iters=3, seed=0)
    assert c.shape == (6, 3) and np.all(np.isfinite(c))


def test_rvq_error_decreases_on_held_out_data():
    rng = np.random.default_rng(0)
    scale = np.linspace(3.0, 0.3, 8).astype(np.float32)
    train = rng.standard_normal((4000, 8)).astype(np.float32) * scale
    test = rng.standard_normal((1000, 8)).astype(np.float32) * scale
    books = rvq_fit(train, 16, 16, iters=5, seed=1)
    assert books.shape == (16, 16, 8) and books.dtype == np.float16
    assert np.array_equal(books, rvq_fit(train, 16, 16, iters=5, seed=1))
    codes = rvq_encode(test, books)
    err = [np.mean((rvq_decode(codes[:, :k], books) - test) ** 2) for k in range(1, 17)]
    assert all(a > b for a, b in zip(err, err[1:])), err
    assert err[-1] < 0.2 * err[0]


# ---- audio ----------------------------------------------------------------------------------
@pytest.mark.parametrize("sr_in,sr_out", [(22050, 16000), (16000, 22050), (48000, 16000)])
@pytest.mark.parametrize("freq", [440.0, 3000.0])
def test_resampler_sine_accuracy(sr_in, sr_out, freq):
    n = sr_in // 2
    x = np.sin(2 * np.pi * freq * np.arange(n) / sr_in)
    y = resample(x, sr_in, sr_out)
    assert y.size == -(-n * sr_out // sr_in)
    ref = np.sin(2 * np.pi * freq * np.arange(y.size) / sr_out)
    edge = sr_out // 50  # the zero-padded ends ring; judge the interior
    assert np.max(np.abs(y[edge:-edge] - ref[edge:-edge])) < 1e-3


def test_resampler_rejects_aliases():
    x = np.sin(2 * np.pi * 10000 * np.arange(22050) / 22050)  # above the new Nyquist
    y = resample(x, 22050, 16000)
    assert np.max(np.abs(y[500:-500])) < 1e-3


def test_wav_round_trip(tmp_path):
    x = synth_signal(0.5, 1)
    write_wav(tmp_path / "a.wav", x, SR)
    y, sr = read_wav(tmp_path / "a.wav")
    assert sr == SR and y.shape == x.shape and np.max(np.abs(x - y)) <= 1.0 / 32767


def test_griffin_lim_recovers_a_tone():
    x = synth_signal(1.0, 4).astype(np.float64)
    frames = x.size // 160 + 1
    mag = np.abs(stft(x, 1024, 160, 640, frames))
    y = griffin_lim(mag, 1024, 160, 640, x.size, n_iter=16)
    noise = np.random.default_rng(0).standard_normal(x.size) * 0.1
    assert log_spectral_distance(x, y) < 0.5 * log_spectral_distance(x, noise)


# ---- errors name the argument ---------------------------------------------------------------
def test_bad_input_raises_value_error(tiny_codec, tmp_path):
    c = tiny_codec
    cases = [
        (lambda: c.encode(np.zeros((2, 100), np.float32)), "wav"),
        (lambda: c.encode(np.zeros(0, np.float32)), "wav"),
        (lambda: c.encode(np.array([0.0, np.nan] * 700, np.float32)), "wav"),
        (lambda: c.encode(np.array(["a"] * 10)), "wav"),
        (lambda: c.encode(np.zeros(1000), sample_rate=0), "sample_rate"),
        (lambda: c.decode(np.full((3, 16), 16)), "codes"),
        (lambda: c.decode(np.full((3, 16), -1)), "codes"),
        (lambda: c.decode(np.zeros((3, 17), np.int32)), "codes"),
        (lambda: c.decode(np.zeros((3, 16), np.float32)), "codes"),
        (lambda: c.decode(np.zeros(16, np.int32)), "codes"),
        (lambda: c.project(np.zeros((3, 10))), "features"),
        (lambda: Codec.fit(np.zeros((100, 10)), TINY), "features"),
        (lambda: Codec.fit(np.zeros((8, 640)), TINY), "features"),
        (lambda: CodecConfig(frame_hop=1000), "frame_hop"),
        (lambda: CodecConfig(pca_dim=0), "pca_dim"),
        (lambda: CodecConfig(pca_dim=10_000), "pca_dim"),
        (lambda: CodecConfig(n_mels=400), "n_mels"),
        (lambda: kmeans(np.zeros((10, 2)), 0), "k"),
        (lambda: kmeans(np.zeros((0, 2)), 2), "x"),
        (lambda: kmeans(np.full((4, 2), np.inf), 2), "x"),
        (lambda: rvq_fit(np.zeros((10, 2)), 0, 2), "n_levels"),
        (lambda: resample(np.zeros(10), 0, 16000), "sr_in"),
        (lambda: resample(np.zeros(10), 16000, 2.5), "sr_out"),
        (lambda: write_wav(tmp_path / "x.wav", np.zeros(10), -1), "sample_rate"),
    ]
    for fn, name in cases:
        with pytest.raises(ValueError, match=rf"^{name}\b"):  # "k" is not "kmeans"
            fn()
    (tmp_path / "bad.npz").write_bytes(b"not a codec")
    with pytest.raises(ValueError, match=r"^path\b"):
        Codec.load(tmp_path / "bad.npz")
    np.save(tmp_path / "plain.npy", np.zeros(3))
    with pytest.raises(ValueError, match=r"^path\b"):
        Codec.load(tmp_path / "plain.npy")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match=r"^path\b"):
        Codec.load(tmp_path / "other.npz")


def test_mel_filterbank_too_fine_is_rejected():
    with pytest.raises(ValueError, match="n_mels"):
        Codec(
            CodecConfig(n_mels=300, pca_dim=8),
            np.zeros(2400),
            np.zeros((2400, 8)),
            np.zeros((16, 1024, 8)),
        )


# ---- corpus recipe (needs espeak-ng and fortunes) -------------------------------------------
def _load_recipe(name):
    spec = importlib.util.spec_from_file_location(
        f"recipe_{name}", ROOT / "models/recipe" / f"{name}.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def corpus_mod():
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (apt-get install espeak-ng)")
    mod = _load_recipe("corpus")
    if not mod.load_texts("en", 24, 220):
        pytest.skip("no English fortunes installed (apt-get install fortunes-min)")
    return mod


def _digest(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "corpus.json"
    }


def test_recipe_split_by_text_and_deterministic(corpus_mod, tmp_path):
    argv = "--hours 0.004 --seed 3 --languages en --batch 4 --workers 1 --no-install".split()
    argv += ["--test-fraction", "0.5"]
    for run in ("a", "b"):
        assert corpus_mod.main(argv + ["--out", str(tmp_path / run)]) == 0
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")  # byte-identical files
    rows = [json.loads(s) for s in (tmp_path / "a/manifest.jsonl").read_text().splitlines()]
    assert rows
    split_of: dict = {}
    for r in rows:
        assert split_of.setdefault(r["text_id"], r["split"]) == r["split"]
        assert r["phonemes"] and r["language"] == "en" and r["voice"].endswith(r["variant"])
        x, sr = read_wav(tmp_path / "a" / r["path"])
        assert sr == 16000 and x.size == r["num_samples"]
        assert abs(r["duration"] - x.size / sr) < 1e-3
    train = {r["text"] for r in rows if r["split"] == "train"}
    test = {r["text"] for r in rows if r["split"] == "test"}
    assert train and test and not train & test
    by_text: dict = {}
    for r in rows:
        by_text.setdefault(r["text_id"], []).append(r)
    for group in by_text.values():
        assert len(group) == 3 and len({g["variant"] for g in group}) == 3
    stats = json.loads((tmp_path / "a/corpus.json").read_text())
    assert stats["utterances"] == len(rows) and stats["hours"] >= 0.004


def test_recipe_skip_texts_continues_the_order(corpus_mod, tmp_path):
    """--skip-texts N renders texts the first run did not reach, each with the split and
    renditions the unskipped order gives it (a fresh corpus beyond a shorter one)."""
    argv = "--hours 0.012 --seed 3 --languages en --batch 4 --workers 1 --no-install".split()
    argv += ["--test-fraction", "0.5", "--renditions", "1"]
    assert corpus_mod.main(argv + ["--out", str(tmp_path / "all")]) == 0
    assert corpus_mod.main(argv + ["--out", str(tmp_path / "skip"), "--skip-texts", "4"]) == 0

    def rows(run):
        lines = (tmp_path / run / "manifest.jsonl").read_text().splitlines()
        return [json.loads(s) for s in lines]

    every, skipped = rows("all"), rows("skip")
    keys = ("text", "split", "variant", "pitch", "rate", "gap")
    assert len(every) > 4, "the first run must reach past the skipped texts"
    shared = [r for r in every if r["text_id"] not in {e["text_id"] for e in every[:4]}]
    assert [tuple(r[k] for k in keys) for r in skipped[: len(shared)]] == [
        tuple(r[k] for k in keys) for r in shared
    ]
    assert not {r["text"] for r in every[:4]} & {r["text"] for r in skipped}


def test_recipe_audio_encodes(corpus_mod, tiny_codec, tmp_path):
    argv = "--hours 0.001 --languages en --batch 1 --workers 1 --no-install --out".split()
    corpus_mod.main(argv + [str(tmp_path)])
    row = json.loads((tmp_path / "manifest.jsonl").read_text().splitlines()[0])
    x, _ = read_wav(tmp_path / row["path"])
    codes = tiny_codec.encode(x)
    assert codes.shape == (-(-x.size // 1280), 16)


def test_clean_text_rejects_non_prose():
    mod = _load_recipe("corpus")
    ok = mod.clean_text("Courage is grace\nunder pressure.\n\t\t-- Hemingway", "en", 10, 200)
    assert ok == "Courage is grace under pressure."
    assert mod.clean_text("see http://example.com/x now", "en", 10, 200) is None
    assert mod.clean_text("  |\\_/|  ascii cat art  ", "en", 10, 200) is None
    assert mod.clean_text("short", "en", 10, 200) is None
    assert mod.clean_text("Ogni assurdita' ha un campione.", "it", 10, 200) == (
        "Ogni assurdità ha un campione."
    )
