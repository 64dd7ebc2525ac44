"""Streaming synthesis (docs/streaming.md): the chunk vocoder, `ReferenceTTS.stream` /
`FSQTTS.stream` over the one loop's frames (its own bookkeeping: tests/pipeline/
test_one_loop.py), the incremental WAV writer and `synth --stream`.

Tolerances (Griffin-Lim starts from a seeded random phase, so two renderings of the same
codes never agree sample by sample, not even two whole-utterance ones with different seeds):
- log-spectral distance (`log_spectral_distance`) between the streamed and the whole
  rendering <= 1.15 x the distance between two whole renderings with different seeds
  (measured 1.01-1.08 x on four sentences, chunks of 4 and 8 frames);
- at the seams (8 STFT columns centred on every chunk boundary) the log-mel distance to the
  codec's own target spectrum exceeds the whole rendering's at the same columns by <= 0.6 dB
  (measured 0.13-0.33 dB; hard cuts without context/cross-fade: 1.3-1.8 dB, checked > 1 dB
  so the measure is known to see seams);
- with a frame-local decoder (no phase retrieval) the streamed signal equals the whole one
  to float32 rounding (relative error < 1e-6): the seam arithmetic itself is exact.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

import codecspec
from codecspec.codec.audio import WavWriter, read_wav, write_wav
from codecspec.codec.features import log_spectral_distance, stft
from codecspec.codec.streaming import ChunkVocoder, chunk_seed, stream_decode
from codecspec.families.reference.model import MODEL_FILES, ReferenceTTS, default_model_dir
from codecspec.frontend.text import split_sentences

HAVE_MODEL = all((default_model_dir() / f).is_file() for f in MODEL_FILES)
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason="no shipped reference model")
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="no espeak-ng")
HELLO = "hˈɛloʊ wˈɜːld"
LONG = "ðə kwˈɪk bɹˈaʊn fˈɑːks dʒˈʌmps ˌoʊvɚ ðə lˈeɪzi dˈɑːɡ nˌɪɹ ðə ɹˈɪvɚ bˈæŋk"
HOP = 1280


# ----------------------------------------------------------------------------- chunk vocoder
def _local(codes, seed):
    """A frame-local 'codec' (no phase retrieval): frame t -> hop samples set by its codes."""
    c = np.asarray(codes, np.float64)
    n = np.arange(HOP) / HOP
    return np.concatenate([np.sin(2 * np.pi * (r[0] + 1) * n + r[1]) for r in c]).astype(np.float32)


@pytest.mark.parametrize("frames", [1, 2, 7, 8, 9, 17, 33])
@pytest.mark.parametrize("chunk", [1, 3, 8])
def test_chunk_seams_are_exact_for_a_frame_local_decoder(frames, chunk):
    codes = np.random.default_rng(frames).integers(0, 5, (frames, 2))
    whole = _local(codes, 0)
    v = ChunkVocoder(_local, chunk_frames=chunk, context_frames=2, crossfade=0.5)
    parts = [c for f in codes for c in v.push(f)] + v.finish()
    y = np.concatenate(parts)
    assert y.dtype == np.float32 and len(y) == len(whole) == frames * HOP
    assert np.linalg.norm(y - whole) <= 1e-6 * np.linalg.norm(whole)
    assert v.decode_calls == len(parts) == -(-frames // chunk)  # one chunk per block


def test_chunk_vocoder_arguments_are_checked():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="chunk_frames"):
            ChunkVocoder(_local, chunk_frames=bad)
    with pytest.raises(ValueError, match="crossfade"):
        ChunkVocoder(_local, context_frames=0, crossfade=0.25)
    with pytest.raises(ValueError, match="context_frames"):
        ChunkVocoder(_local, context_frames=-1)
    with pytest.raises(ValueError, match="decoder"):
        ChunkVocoder(42)
    v = ChunkVocoder(lambda c, s: np.zeros(len(c) * HOP + 1, np.float32), chunk_frames=1)
    with pytest.raises(ValueError, match="decoder"):
        v.push(np.zeros((4, 2), np.int64))
    v = ChunkVocoder(_local)
    v.finish()
    with pytest.raises(ValueError, match="frames"):
        v.push(np.zeros(2, np.int64))


@pytest.fixture(scope="module")
def long_codes():
    if not HAVE_MODEL:
        pytest.skip("no shipped reference model")
    return _tts().generate("", phonemes=LONG, mode="ar", seed=1, decode_audio=False).codes


def _colmel_error(codec, codes, y) -> np.ndarray:
    """Per STFT column: RMS over mel bands of the dB error against the codec's target."""
    c = codec.cfg
    target = np.exp(codec.decode_features(codes).reshape(-1, c.n_mels).astype(np.float64))
    mag = np.abs(stft(y, c.n_fft, c.stft_hop, c.win_length, len(codes) * c.subframes))
    got = mag @ codec._fb.T + c.log_offset
    return np.sqrt(np.mean((20 * np.log10(got / target)) ** 2, axis=1))


@pytest.mark.parametrize("chunk", [4, 8])
def test_streamed_rendering_matches_the_whole_within_tolerance(long_codes, chunk):
    codec, codes = _tts().codec, long_codes
    whole, other = codec.decode(codes, seed=1), codec.decode(codes, seed=2)
    y = stream_decode(codec, codes, chunk_frames=chunk, seed=1)
    assert len(y) == len(whole)
    base = log_spectral_distance(whole, other)
    assert log_spectral_distance(whole, y) <= 1.15 * base
    seams = [c for s in range(chunk, len(codes), chunk) for c in range(8 * s - 4, 8 * s + 4)]
    ref = _colmel_error(codec, codes, whole)[seams].mean()
    assert _colmel_error(codec, codes, y)[seams].mean() - ref <= 0.6
    cut = stream_decode(codec, codes, chunk_frames=chunk, seed=1, context_frames=0, crossfade=0)
    assert _colmel_error(codec, codes, cut)[seams].mean() - ref > 1.0  # the measure sees seams


def test_streamed_rendering_is_deterministic_for_a_seed(long_codes):
    codec = _tts().codec
    codes = long_codes[:20]
    a = stream_decode(codec, codes, chunk_frames=5, seed=7)
    v = ChunkVocoder(codec, chunk_frames=5, seed=7)
    b = np.concatenate([c for f in codes for c in v.push(f)] + v.finish())
    np.testing.assert_array_equal(a, b)  # frame by frame == all at once
    assert not np.array_equal(a, stream_decode(codec, codes, chunk_frames=5, seed=8))
    assert chunk_seed(7, 0) != chunk_seed(7, 1) and chunk_seed(7, 1) == chunk_seed(7, 1)


def _tone(f0: float, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    x = sum(np.sin(2 * np.pi * f0 * h * t) / h for h in range(1, 20))
    floor = np.random.default_rng(1).normal(0.0, 3e-3, t.size)
    return (0.1 * (0.5 + 0.4 * np.sin(3 * np.pi * t)) * x + floor).astype(np.float32)


def test_chunk_vocoder_serves_codec_v2():  # the forthcoming family's codec, same interface
    from codecspec.codec import CodecConfig, frame_features
    from codecspec.codec.streaming import codec_sample_rate
    from codecspec.families.v2.codec import CodecV2, V2Config

    feats = np.concatenate(
        [frame_features(_tone(f0, 1.2), CodecConfig()) for f0 in range(100, 260, 16)]
    )
    codec = CodecV2.fit(feats, V2Config.blocks(grid=(4, 4), n_levels=4), iters=3)
    codes = codec.encode(np.concatenate([_tone(f0, 0.8) for f0 in (120, 180, 150)]))
    whole, other = codec.decode(codes, seed=1), codec.decode(codes, seed=2)
    y = stream_decode(codec, codes, chunk_frames=4, seed=1)
    assert len(y) == len(whole) and codec_sample_rate(codec) == 16000
    assert log_spectral_distance(whole, y) <= 1.15 * log_spectral_distance(whole, other)


# ----------------------------------------------------------------------------- model API
_TTS = {}


def _tts() -> ReferenceTTS:
    if "rvq" not in _TTS:
        _TTS["rvq"] = ReferenceTTS(provider="cpu", threads=1)
    return _TTS["rvq"]


@needs_model
def test_stream_yields_generate_codes_and_audio():
    tts = _tts()
    g = tts.generate("", phonemes=LONG, mode="ar", seed=3)
    st = tts.stream("", phonemes=LONG, mode="ar", seed=3, chunk_frames=8)
    chunks = list(st)
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    np.testing.assert_array_equal(st.codes, g.codes)
    y = np.concatenate(chunks)
    assert len(y) == len(g.wav) and st.samples == len(y) and st.chunks == len(chunks)
    other = tts.codec.decode(g.codes, seed=4)
    assert log_spectral_distance(g.wav, y) <= 1.15 * log_spectral_distance(g.wav, other)
    assert 0 < st.time_to_first_audio < st.total_seconds and st.stopped and st.mode == "ar"
    assert st.frames == len(g.codes) and st.sentences == 1
    again = np.concatenate(list(tts.stream("", phonemes=LONG, mode="ar", seed=3)))
    np.testing.assert_array_equal(again, y)


@needs_model
def test_stream_checks_its_arguments_at_the_call():
    tts = _tts()
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="chunk_frames"):
            tts.stream("", phonemes=HELLO, chunk_frames=bad)
    with pytest.raises(ValueError, match="phonemes"):
        tts.stream("Hi.", phonemes=HELLO, split_sentences=True)
    with pytest.raises(ValueError, match="text"):
        tts.stream("  ", split_sentences=True)
    with pytest.raises(ValueError, match="language"):
        tts.stream("", phonemes=HELLO, language="xx")
    with pytest.raises(ValueError, match="max_frames"):  # the guard, before any frame
        tts.stream("", phonemes=LONG, max_frames=3)


@needs_model
@needs_espeak
def test_sentence_stream_is_the_sentences_one_after_another():
    tts = _tts()
    text = "Hello there. How are you?"
    st = tts.stream(text, mode="ar", seed=2, split_sentences=True, chunk_frames=4)
    y = np.concatenate(list(st))
    parts = [
        tts.generate(t, mode="ar", seed=2 + i, decode_audio=False).codes
        for i, t in enumerate(split_sentences(text))
    ]
    assert st.sentences == 2
    np.testing.assert_array_equal(st.codes, np.concatenate(parts))
    assert len(y) == len(st.codes) * HOP


def test_split_sentences():
    assert split_sentences('Hi there. How are you?  "Fine." Yes!\nok') == [
        "Hi there.",
        "How are you?",
        '"Fine."',
        "Yes!",
        "ok",
    ]
    assert split_sentences("no end") == ["no end"] and split_sentences(" \n") == []


FSQ_DIR = Path(codecspec.__file__).parent / "models" / "fsq"


@pytest.mark.skipif(not (FSQ_DIR / "model.json").is_file(), reason="no shipped fsq model")
def test_fsq_stream_shares_the_implementation():
    from codecspec.families.fsq.model import FSQTTS

    tts = FSQTTS(provider="cpu", threads=1)
    g = tts.generate("", phonemes=LONG, seed=2)
    st = tts.stream("", phonemes=LONG, seed=2, chunk_frames=5)
    y = np.concatenate(list(st))
    np.testing.assert_array_equal(st.codes, g.codes)
    assert len(y) == len(g.wav) and st.mode == "fsq" and st.stopped == g.stopped
    other = tts.codec.decode(g.codes, seed=3)
    assert log_spectral_distance(g.wav, y) <= 1.15 * log_spectral_distance(g.wav, other)
    with pytest.raises(ValueError, match="chunk_frames"):
        tts.stream("", phonemes=LONG, chunk_frames=0)
    for bad in (0, -2, True):  # the guard is checked at the call, before any frame
        with pytest.raises(ValueError, match="max_frames"):
            tts.stream("", phonemes=LONG, max_frames=bad)
    short = tts.stream("", phonemes=LONG, seed=2, max_frames=4)  # ended by the guard
    assert len(np.concatenate(list(short))) > 0 and short.frames == 4 and not short.stopped
    np.testing.assert_array_equal(short.codes, g.codes[:4])


# ----------------------------------------------------------------------------- WAV writer
def test_wav_writer_writes_what_write_wav_writes(tmp_path):
    x = (0.4 * np.random.default_rng(0).standard_normal(5000)).astype(np.float32)
    write_wav(tmp_path / "a.wav", x, 16000)
    with WavWriter(tmp_path / "b.wav", 16000) as w:
        for part in np.array_split(x, 7):
            w.write(part)
        w.write(np.zeros(0, np.float32))
    assert (tmp_path / "a.wav").read_bytes() == (tmp_path / "b.wav").read_bytes()
    with pytest.raises(ValueError, match="sample_rate"):
        WavWriter(tmp_path / "c.wav", 0)


@needs_model
@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_interrupted_stream_leaves_a_valid_shorter_wav(tmp_path, exc):
    tts, path, written = _tts(), tmp_path / "cut.wav", []
    with pytest.raises(exc):
        with WavWriter(path, 16000) as w:
            for chunk in tts.stream("", phonemes=LONG, mode="ar", seed=1, chunk_frames=4):
                w.write(chunk)
                written.append(chunk)
                if len(written) == 2:
                    raise exc("stop")
    with wave.open(str(path), "rb") as r:
        assert r.getnchannels() == 1 and r.getsampwidth() == 2 and r.getframerate() == 16000
        assert r.getnframes() == sum(len(c) for c in written) > 0
    y, _ = read_wav(path)
    np.testing.assert_allclose(y, np.concatenate(written), atol=2 / 32767)


def test_wav_writer_update_header_is_readable_before_close(tmp_path):
    w = WavWriter(tmp_path / "live.wav", 8000, update_header=True)
    w.write(np.full(300, 0.5, np.float32))
    with wave.open(str(tmp_path / "live.wav"), "rb") as r:
        assert r.getnframes() == 300
    w.close()
    w.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        w.write(np.zeros(3, np.float32))


# ----------------------------------------------------------------------------- CLI
def _env():
    here = str(Path(codecspec.__file__).resolve().parents[1])
    return dict(os.environ, PYTHONPATH=here + os.pathsep + os.environ.get("PYTHONPATH", ""))


@needs_model
def test_synth_stream_cli_writes_a_valid_wav_and_prints_time_to_first_audio(tmp_path):
    out = tmp_path / "s.wav"
    cmd = [
        sys.executable,
        "-m",
        "codecspec.cli",
        "synth",
        "--model",
        "reference",
        "",
        "--phonemes",
        LONG,
        "--stream",
    ]
    cmd += ["-o", str(out), "--mode", "ar", "--threads", "1", "--chunk-frames", "4"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(), check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r"time to first audio: (\d+) ms", r.stdout)
    assert m and int(m.group(1)) > 0, r.stdout
    frames = int(re.search(r"frames: (\d+) in", r.stdout).group(1))
    with wave.open(str(out), "rb") as w:
        assert w.getnframes() == frames * HOP and w.getframerate() == 16000


@needs_model
@needs_espeak
def test_synth_stream_text_file_is_spoken_sentence_by_sentence(tmp_path, capsys):
    from codecspec.cli import main

    f, out = tmp_path / "long.txt", tmp_path / "long.wav"
    f.write_text("Hello world.\nThis is a test,\nwrapped over lines. Goodbye!\n", encoding="utf-8")
    argv = [
        "synth",
        "--model",
        "reference",
        "--text-file",
        str(f),
        "--stream",
        "-o",
        str(out),
        "--mode",
        "ar",
    ]
    assert main(argv + ["--json", "--chunk-frames", "4"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["sentences"] == 3 and res["stopped"] and not res["interrupted"]
    with wave.open(str(out), "rb") as w:
        assert w.getnframes() == res["frames"] * HOP


@needs_model
def test_synth_json_reports_time_to_first_audio(tmp_path, capsys):
    from codecspec.cli import main

    for extra in ([], ["--stream"]):
        out = tmp_path / f"j{len(extra)}.wav"
        argv = [
            "synth",
            "--model",
            "reference",
            "",
            "--phonemes",
            HELLO,
            "-o",
            str(out),
            "--mode",
            "ar",
            "--json",
        ]
        assert main(argv + extra) == 0
        res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert res["time_to_first_audio_ms"] > 0 and res["peak_rss_mb"] > 10
        assert read_wav(out)[0].size == res["frames"] * HOP
        assert res.get("stream", False) == bool(extra)


@needs_model
def test_synth_stream_interrupted_keeps_a_valid_wav(tmp_path, capsys, monkeypatch):
    from codecspec.cli import main
    from codecspec.pipeline.stream import AudioStream

    real = AudioStream.__next__

    def interrupting(self):
        if self.chunks == 2:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(AudioStream, "__next__", interrupting)
    out = tmp_path / "cut.wav"
    argv = [
        "synth",
        "--model",
        "reference",
        "",
        "--phonemes",
        LONG,
        "--stream",
        "-o",
        str(out),
        "--chunk-frames",
        "4",
    ]
    assert main(argv + ["--mode", "ar", "--json"]) == 130
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["interrupted"] and res["chunks"] == 2
    with wave.open(str(out), "rb") as w:
        assert w.getnframes() == round(res["audio_seconds"] * 16000) > 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["Hi", "--chunk-frames", "0"], "--chunk-frames"),
        (["Hi", "--chunk-frames", "x"], "--chunk-frames"),
    ],
)
def test_synth_stream_bad_chunk_size_is_refused(capsys, argv, message):
    from codecspec.cli import main

    with pytest.raises(SystemExit) as e:
        main(["synth", "--model", "reference", "--stream", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--text-file", "{tmp}/empty.txt"], "--text-file: .* is empty"),
        (["--text-file", "{tmp}/latin1.txt"], "--text-file: .* is not UTF-8"),
        (["Hi", "-o", "/proc/no/such.wav"], "--output: cannot write"),
        (["Hi", "-o", "{tmp}"], "--output: .* is a directory"),
    ],
)
def test_synth_stream_bad_inputs_fail_before_synthesis(tmp_path, capsys, argv, message):
    from codecspec.cli import main

    (tmp_path / "empty.txt").write_text(" \n\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["synth", "--model", "reference", "--stream", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err
