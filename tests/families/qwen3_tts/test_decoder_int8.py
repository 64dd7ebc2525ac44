"""The int8 speech decoder (families.qwen3_tts.decoder_int8): opt-in, its error against
float32 measured at build and within bounds, the float32 default untouched, bad values refused.
The tiny random tokenizer of the parity fixtures; no torch."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from paths import DATA

from codecspec.families.qwen3_tts import decoder_int8
from codecspec.families.qwen3_tts.decoder import SpeechDecoder
from codecspec.families.qwen3_tts.decoder_int8 import calibration_codes, error_figures, int8_error

FOLDER = DATA / "qwen3_tiny_tokenizer" / "speech_tokenizer"
# The tiny tokenizer's int8 audio against float32 on codes it was not calibrated on (measured
# 2026-12-07: 45.2 dB SNR, 0.18 dB log-spectral distance; the published shape's random
# weights: 39.7 dB, 0.19 dB). Ranges cut to an eighth (the broken variant below): 3.6 dB.
MIN_SNR_DB, MAX_LSD_DB = 30.0, 1.0


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def fp32(cache):
    return SpeechDecoder.load(FOLDER, cache_dir=cache)


@pytest.fixture(scope="module")
def int8(cache):
    return SpeechDecoder.load(FOLDER, cache_dir=cache, precision="int8")


def _quantised_convs(path) -> int:
    model = onnx.load(str(path), load_external_data=False)
    return sum(n.op_type == "Conv" and n.input[1].endswith("_int8_wf") for n in model.graph.node)


def test_int8_is_its_own_graph_with_a_report(fp32, int8):
    assert int8.graph_path != fp32.graph_path and int8.graph_path.name.endswith(".int8.onnx")
    report = int8_error(int8.graph_path)
    assert report["convolutions"] == _quantised_convs(int8.graph_path) > 0
    assert report["snr_db"] >= MIN_SNR_DB
    assert report["log_spectral_distance_db"] <= MAX_LSD_DB


def test_int8_audio_within_the_bound_on_other_codes(fp32, int8):
    codes = calibration_codes(fp32, seed=77, frames=30)
    ref, out = fp32.decode(codes), int8.decode(codes)
    assert out.shape == ref.shape and np.isfinite(out).all()
    assert error_figures(ref, out)["snr_db"] >= MIN_SNR_DB
    assert not np.array_equal(ref, out)  # it is another graph, not float32 again


def test_int8_stream_equals_its_decode(int8):
    codes = calibration_codes(int8, seed=5, frames=13)
    whole = int8.decode(codes)
    streamed = np.concatenate(list(int8.stream([codes[:5], codes[5:]], chunk_frames=3)))
    np.testing.assert_allclose(streamed, whole, atol=1e-5)


def test_default_is_float32(fp32, cache):
    again = SpeechDecoder.load(FOLDER, cache_dir=cache, precision="fp32")
    assert again.graph_path == fp32.graph_path
    assert ".int8" not in fp32.graph_path.name


def test_int8_graph_is_reused(int8, cache, monkeypatch):
    before = int8.graph_path.stat().st_mtime_ns

    def no_calibration(*_a, **_k):
        raise AssertionError("calibrated again")

    monkeypatch.setattr(decoder_int8, "_calibrate", no_calibration)
    again = SpeechDecoder.load(FOLDER, cache_dir=cache, precision="int8")
    assert again.graph_path == int8.graph_path
    assert again.graph_path.stat().st_mtime_ns == before


def test_a_stale_report_rebuilds(int8, cache):
    report = int8.graph_path.with_suffix(".json")
    data = json.loads(report.read_text())
    report.write_text(json.dumps({**data, "version": -1}))
    again = SpeechDecoder.load(FOLDER, cache_dir=cache, precision="int8")
    assert int8_error(again.graph_path)["version"] == decoder_int8.DECODER_INT8_VERSION


def test_clipped_ranges_are_caught(fp32, tmp_path, monkeypatch):
    """The broken variant: activation ranges an eighth of the calibrated ones (every conv
    clips) must score under the bound the real build meets."""
    real = decoder_int8._calibrate

    def shrunk(*a, **k):
        return {n: (lo / 8, hi / 8) for n, (lo, hi) in real(*a, **k).items()}

    monkeypatch.setattr(decoder_int8, "_calibrate", shrunk)
    broken = SpeechDecoder.load(FOLDER, cache_dir=tmp_path, precision="int8")
    assert int8_error(broken.graph_path)["snr_db"] < MIN_SNR_DB


def test_error_figures_rank_a_degraded_input_worse():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(4000).astype(np.float32)
    small = error_figures(ref, ref + 0.01 * rng.standard_normal(4000))
    large = error_figures(ref, ref + 0.1 * rng.standard_normal(4000))
    assert small["snr_db"] > large["snr_db"] + 15


@pytest.mark.parametrize("bad", ["int4", "INT8", 8, ""])
def test_bad_precision_is_refused(bad, cache):
    with pytest.raises(ValueError, match="decoder_precision"):
        SpeechDecoder.load(FOLDER, cache_dir=cache, precision=bad)


def _synth(tmp_path, name: str, *extra) -> dict:
    from codecspec.cli import main

    out = tmp_path / f"{name}.wav"
    args = ["synth", "The quick brown fox.", "--model", str(DATA / "qwen3_tiny" / "custom_equal")]
    args += ["--speaker", "Vivian", "--temperature", "0", "--codes-out", str(tmp_path / name)]
    assert main([*args, "-o", str(out), "--json", *extra]) == 0
    return {"codes": np.load(tmp_path / f"{name}.npy"), "wav": out}


def test_cli_synth_int8_keeps_the_codes(tmp_path, monkeypatch, capsys):
    from codecspec.codec.audio import read_wav

    monkeypatch.setenv("CODECSPEC_CACHE", str(tmp_path / "cache"))
    a = _synth(tmp_path, "fp32")
    capsys.readouterr()
    b = _synth(tmp_path, "int8", "--decoder-precision", "int8")
    assert json.loads(capsys.readouterr().out)["decoder_precision"] == "int8"
    assert np.array_equal(a["codes"], b["codes"])
    (ra, _), (rb, _) = read_wav(a["wav"]), read_wav(b["wav"])
    # the same length, another decoder; no SNR here: this tiny checkpoint's own tokenizer
    # drives its output into the decoder's clamp (RMS 0.99996 of full scale, a square wave)
    assert ra.shape == rb.shape and np.isfinite(rb).all() and not np.array_equal(ra, rb)


def test_cli_refuses_it_for_other_families(capsys):
    from codecspec.cli import main

    assert main(["synth", "Hi.", "--model", "v3", "--decoder-precision", "int8"]) == 2
    err = capsys.readouterr().err
    assert "--decoder-precision" in err and "Qwen3-TTS" in err


def test_precision_is_told_and_the_batched_twin_is_not_used(fp32, int8):
    from codecspec.families.qwen3_tts.engine import decoder_batcher

    assert (fp32.precision, int8.precision) == ("fp32", "int8")
    assert decoder_batcher(int8, slots=4) is None  # the batched graph is float32's
