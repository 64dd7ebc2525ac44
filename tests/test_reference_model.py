"""The shipped reference TTS: synth, bench and the speculative law on the real model."""

import json
import shutil

import numpy as np
import pytest
from test_decode import OffsetShiftedVerifier

import codecspec as cs
from codecspec.cli import main
from codecspec.codec.audio import read_wav
from codecspec.decode import DepthDecoder
from codecspec.fidelity import per_position_pvalues
from codecspec.tts.bench import load_frames
from codecspec.tts.model import MODEL_FILES, ReferenceTTS, default_model_dir

MODEL = default_model_dir()
BENCH_KEYS = {
    "ar_calls_per_frame",
    "spec_calls_per_frame",
    "tokens_per_call",
    "ar_ms_per_frame",
    "spec_ms_per_frame",
    "speedup",
    "fidelity_min_p",
    "tree_nodes",
}
HELLO = "həlˈoʊ wˈɜːld | ðɪs ɪz ɐ tˈɛst"  # espeak-ng's IPA for "Hello world. This is a test."


@pytest.fixture(scope="module")
def tts():
    return ReferenceTTS(provider="cpu", threads=1)


def test_shipped_files_exist_and_fit_the_budget():
    sizes = {f: (MODEL / f).stat().st_size for f in MODEL_FILES + ("frames.npz",)}
    total = sum(p.stat().st_size for p in MODEL.rglob("*") if p.is_file())
    assert total <= 40 * 2**20, f"models must stay within 40 MB, got {total / 2**20:.1f} MB"
    assert all(sizes.values())


def test_generate_from_phonemes(tts):
    s = tts.generate("", phonemes=HELLO, seed=3, mode="spec")
    n_ids = len(tts.frontend.vocab.encode(HELLO))
    assert s.codes.shape == (tts.num_frames(n_ids, "en"), 16)
    assert len(s.wav) == len(s.codes) * tts.codec.cfg.frame_hop
    assert np.sqrt(np.mean(s.wav**2)) > 1e-3, "silent output"
    assert s.depth_calls < 15 * len(s.codes), "speculation must save calls"
    assert 1.0 < s.tokens_per_call <= 15.0
    again = tts.generate("", phonemes=HELLO, seed=3, mode="spec")
    np.testing.assert_array_equal(s.codes, again.codes)  # seeded: reproducible


def test_auto_mode_follows_the_calibration(tts):
    s = tts.generate("", phonemes=HELLO, seed=3, decode_audio=False)
    assert s.mode == ("spec" if tts.speculation_pays else "ar")
    assert s.wav is None


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed")
def test_synth_cli_writes_a_wav(tmp_path, capsys):
    out = tmp_path / "hello.wav"
    assert main(["synth", "Hello world.", "-o", str(out), "--provider", "cpu", "-q"]) == 0
    wav, sr = read_wav(out)
    printed = capsys.readouterr().out
    assert "real-time factor" in printed and "tokens per call" in printed
    assert sr == 16000 and len(wav) % 1280 == 0 and len(wav) >= 1280 * 5
    assert np.sqrt(np.mean(wav.astype(np.float64) ** 2)) > 1e-3


def test_bench_json_keys(capsys):
    assert main(["bench", "--json", "--frames", "50", "--provider", "cpu"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert BENCH_KEYS <= set(res)
    assert res["ar_calls_per_frame"] == 15.0
    assert res["spec_calls_per_frame"] < 15.0
    assert res["tree_nodes"] >= 2 and res["speedup"] > 0


@pytest.mark.slow
def test_speculative_law_matches_autoregressive_on_the_shipped_model():
    hiddens, c0s = load_frames(MODEL)
    n = 3000
    idx = np.arange(n) % len(c0s)
    h, c = hiddens[idx], c0s[idx]

    def pvalues(dec, seed):
        ar = dec.decode_frames(h, c, cs.Generator(seed, stream=1), "ar")
        spec = dec.decode_frames(h, c, cs.Generator(seed, stream=2), "spec")
        return per_position_pvalues(ar[:, 1:], spec[:, 1:], dec.V)

    good = DepthDecoder.from_dir(MODEL, provider="cpu", threads=1)
    p = pvalues(good, 21)
    assert good.stats.accepted_per_round > 0.05, "speculation must actually be exercised"
    assert p.min() > 1e-4, f"per-position p-values {p}"

    # verifies against head(z + b) with b of the size of z itself: a plausible bug
    shift = np.random.default_rng(5).standard_normal(good.offsets.shape).astype(np.float32)
    broken = OffsetShiftedVerifier(
        MODEL / "depth.onnx",
        tree=good.tree,
        offsets=good.offsets + shift,
        provider="cpu",
        threads=1,
    )
    assert pvalues(broken, 22).min() < 1e-4, "the broken verifier must be caught"


def test_bad_input(tts, tmp_path):
    with pytest.raises(ValueError, match="language"):
        tts.generate("", phonemes=HELLO, language="fr")
    with pytest.raises(ValueError, match="speaker"):
        tts.generate("", phonemes=HELLO, speaker="nobody")
    with pytest.raises(ValueError, match="mode"):
        tts.generate("", phonemes=HELLO, mode="fast")
    with pytest.raises(ValueError, match="rate"):
        tts.generate("", phonemes=HELLO, rate=0.0)
    with pytest.raises(ValueError, match="max_frames"):
        tts.generate("", phonemes=HELLO * 20, max_frames=10)
    with pytest.raises(FileNotFoundError, match="model_dir"):
        ReferenceTTS(tmp_path)
    with pytest.raises(ValueError, match="frames"):
        from codecspec.tts.bench import bench_depth_loop

        bench_depth_loop(MODEL, frames=1)
    if shutil.which("espeak-ng"):
        with pytest.raises(ValueError, match="text"):
            tts.generate("   ")
