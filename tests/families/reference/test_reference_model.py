"""The shipped reference TTS: synth, bench and the speculative law on the real model."""

import json
import re
import shutil

import numpy as np
import pytest
from broken_variants import OffsetShiftedVerifier
from test_perf import check_record

import codecspec as cs
from codecspec.cli import main
from codecspec.codec.audio import read_wav
from codecspec.decode import DepthDecoder
from codecspec.families.reference.model import MODEL_FILES, ReferenceTTS, default_model_dir
from codecspec.fidelity import per_position_pvalues
from codecspec.pipeline.depth_bench import load_frames

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
    assert (
        main(
            [
                "synth",
                "--model",
                "reference",
                "Hello world.",
                "-o",
                str(out),
                "--provider",
                "cpu",
                "-q",
            ]
        )
        == 0
    )
    wav, sr = read_wav(out)
    printed = capsys.readouterr().out
    assert "real-time factor" in printed and "tokens per call" in printed
    assert sr == 16000 and len(wav) % 1280 == 0 and len(wav) >= 1280 * 5
    assert np.sqrt(np.mean(wav.astype(np.float64) ** 2)) > 1e-3


SYNTH_KEYS = {
    "audio_seconds",
    "frames",
    "mode",
    "tokens_per_call",
    "inner_calls_per_audio_second",
    "temporal_ms_per_frame",
    "depth_ms_per_frame",
    "vocoder_ms",
    "rtf",
    "peak_rss_mb",
    "output",
}
PIPELINE_KEYS = {
    "pipeline_ar_ms_per_frame",
    "pipeline_spec_ms_per_frame",
    "pipeline_depth_ms_per_frame",
    "pipeline_ar_rtf",
    "pipeline_rtf",
    "vocoder_ms_per_audio_second",
    "depth_in_pipeline_ratio",
}


def _synth_json(argv, capsys) -> dict:
    assert main(["synth", "--model", "reference", *argv, "--provider", "cpu", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, "--json prints exactly one line"
    return json.loads(out[0])


def test_synth_json_keys_and_values(tmp_path, capsys):
    wav_path = tmp_path / "hello.wav"
    res = _synth_json(["", "--phonemes", HELLO, "-o", str(wav_path), "--mode", "spec"], capsys)
    assert SYNTH_KEYS <= set(res)
    wav, sr = read_wav(wav_path)
    assert res["output"] == str(wav_path)
    assert res["audio_seconds"] == pytest.approx(len(wav) / sr)
    assert res["frames"] * 1280 == len(wav)
    assert res["mode"] == "spec" and 1.0 < res["tokens_per_call"] <= 15.0
    calls = res["inner_calls_per_audio_second"] * res["audio_seconds"]
    assert calls == pytest.approx(round(calls)) and calls < 15 * res["frames"]
    stage_s = (res["temporal_ms_per_frame"] + res["depth_ms_per_frame"]) * res["frames"] / 1e3
    total_s = stage_s + (res["vocoder_ms"] + res["frontend_ms"]) / 1e3
    assert res["rtf"] == pytest.approx(total_s / res["audio_seconds"], rel=1e-6)
    assert 10 < res["peak_rss_mb"] < 4096 and res["threads"] >= 1


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed")
def test_synth_text_file_is_read_whole(tmp_path, capsys):
    f = tmp_path / "long.txt"
    f.write_text("Hello world.\nThis is a test,\nwrapped over lines.\n", encoding="utf-8")
    res = _synth_json(
        ["--text-file", str(f), "-o", str(tmp_path / "a.wav"), "--mode", "ar"], capsys
    )
    one = _synth_json(["Hello world.", "-o", str(tmp_path / "b.wav"), "--mode", "ar"], capsys)
    assert res["frames"] > 2 * one["frames"], "every line of the file is spoken"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--text-file", "{tmp}/missing.txt"], "--text-file: no such file"),
        (["--text-file", "{tmp}/empty.txt"], "--text-file: .* is empty"),
        (["--text-file", "{tmp}/latin1.txt"], "--text-file: .* is not UTF-8"),
        (["Hi", "--text-file", "{tmp}/latin1.txt"], "not both"),
        ([], "text: give the text"),
        (["Hi", "-o", "{tmp}"], "--output: .* is a directory"),
        (["Hi", "-o", "/proc/no/such.wav"], "--output: cannot write"),
    ],
)
def test_synth_bad_arguments_fail_in_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "empty.txt").write_text(" \n\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["synth", "--model", "reference", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_thread_count_below_one_is_refused(capsys, value):
    with pytest.raises(SystemExit) as e:
        main(["synth", "--model", "reference", "Hi", "--threads", value])
    assert e.value.code == 2
    assert "--threads" in capsys.readouterr().err


def test_bench_json_keys(capsys):
    argv = [
        "bench",
        "--model",
        "reference",
        "--json",
        "--frames",
        "50",
        "--texts",
        "1",
        "--provider",
        "cpu",
    ]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    assert BENCH_KEYS <= set(res) and PIPELINE_KEYS <= set(res)
    assert res["pipeline_texts"] == 1 and res["pipeline_frames"] > 10
    assert res["pipeline_ar_ms_per_frame"] > res["pipeline_depth_ms_per_frame"] > 0
    assert res["pipeline_spec_tokens_per_call"] > 1.0 == res["pipeline_ar_tokens_per_call"]
    assert res["pipeline_ar_rtf"] > 0 and res["vocoder_ms_per_audio_second"] > 0
    # the bench record (codecspec.perf): RTF per mode, stages next to their bounds
    stages = ["frontend", "temporal step", "depth loop", "vocoder", "depth loop alone"]
    check_record(res, "reference", stages)
    assert res["pipeline_rtf"]["ar"] == pytest.approx(res["pipeline_ar_rtf"], rel=0.05)
    assert res["stages"][1].get("spec_is_ar") and not res["stages"][2].get("spec_is_ar")
    assert res["depth_speedup"] == res["speedup"]
    assert res["ar_calls_per_frame"] == 15.0
    assert res["spec_calls_per_frame"] < 15.0
    assert res["tree_nodes"] >= 2 and res["speedup"] > 0


@pytest.mark.slow
def test_speculative_law_matches_autoregressive_on_the_shipped_model():
    hiddens, c0s = load_frames(MODEL)

    def pvalues(dec, seed, n=3000):
        idx = np.arange(n) % len(c0s)
        h, c = hiddens[idx], c0s[idx]
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
    # 800 frames catch it far past the bound (min p ~1e-30 over seeds 22-24): the 3,000 the
    # right law needs would only double the test's time
    assert pvalues(broken, 22, n=800).min() < 1e-4, "the broken verifier must be caught"


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
    from codecspec.pipeline.depth_bench import bench_depth_loop, load_bench_texts

    with pytest.raises(ValueError, match="frames"):
        bench_depth_loop(MODEL, frames=1)
    for bad in (0, 99, True, "2"):
        with pytest.raises(ValueError, match="texts"):
            load_bench_texts(bad)
    if shutil.which("espeak-ng"):
        with pytest.raises(ValueError, match="text"):
            tts.generate("   ")
