"""Reference clips for Qwen3-TTS voice cloning, as people have them: any format, rate and
channel count, read to 24 kHz mono the way the official wrapper reads them."""

import math
import wave

import numpy as np
import pytest

from codecspec.families.qwen3_tts.reference_audio import SAMPLE_RATE, read_reference

av = pytest.importorskip("av", reason="PyAV is part of the [qwen3] and [test] extras")


def _voice_like(rate: int, seconds: float = 1.0, f0: float = 220.0) -> np.ndarray:
    """A harmonic tone with a slow envelope: energy up to a few kHz, like voiced speech."""
    t = np.arange(int(rate * seconds)) / rate
    x = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 8))
    return (0.3 * x * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def _write_pcm(path, x: np.ndarray, rate: int) -> None:
    """x: [n] or [n, channels] in [-1, 1] as 16-bit PCM."""
    x = x[:, None] if x.ndim == 1 else x
    with wave.open(str(path), "wb") as w:
        w.setnchannels(x.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())


def _encode(path, x: np.ndarray, rate: int, codec: str, fmt: str) -> None:
    """A mono clip encoded by PyAV (FLAC, MP3, float WAV, ...)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(x[None].astype(np.float32), format="fltp", layout="mono")
        frame.sample_rate = rate
        for cast in av.AudioResampler(format=fmt, layout="mono", rate=rate).resample(frame):
            for packet in stream.encode(cast):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def _peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * rate / len(x))


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_any_rate_becomes_24k_with_librosas_length_and_the_same_pitch(tmp_path, rate):
    x = _voice_like(rate)
    _write_pcm(tmp_path / "clip.wav", x, rate)
    y = read_reference(tmp_path / "clip.wav")
    assert y.dtype == np.float32 and y.size == math.ceil(x.size * SAMPLE_RATE / rate)
    assert abs(_peak_hz(y, SAMPLE_RATE) - _peak_hz(x, rate)) < 2.0
    assert abs(np.sqrt(np.mean(y**2)) - np.sqrt(np.mean(x**2))) < 0.02  # level kept


def test_24k_audio_is_used_as_it_is(tmp_path):
    x = _voice_like(SAMPLE_RATE)
    np.testing.assert_array_equal(read_reference((x, SAMPLE_RATE)), x)


def test_channels_are_averaged(tmp_path):
    x = _voice_like(SAMPLE_RATE)
    stereo = np.stack([x, 0.5 * x], axis=1)
    _write_pcm(tmp_path / "stereo.wav", stereo, SAMPLE_RATE)
    np.testing.assert_allclose(read_reference(tmp_path / "stereo.wav"), 0.75 * x, atol=1e-4)
    np.testing.assert_allclose(read_reference((stereo, SAMPLE_RATE)), 0.75 * x, atol=1e-6)


@pytest.mark.parametrize(
    "name, codec, fmt, tol",
    [
        ("clip.flac", "flac", "s16", 1e-4),  # lossless: the 16-bit clip back
        ("clip_float.wav", "pcm_f32le", "flt", 1e-6),  # float WAV: not PCM for `wave`
        ("clip.mp3", "libmp3lame", "fltp", None),  # lossy: the same sound
    ],
)
def test_compressed_and_float_files_are_decoded(tmp_path, name, codec, fmt, tol):
    if codec not in av.codecs_available:
        pytest.fail(f"this PyAV build cannot encode {codec}")
    x = _voice_like(SAMPLE_RATE, seconds=2.0)
    _encode(tmp_path / name, x, SAMPLE_RATE, codec, fmt)
    y = read_reference(tmp_path / name)
    if tol is not None:
        np.testing.assert_allclose(y[: x.size], x, atol=tol)
        return
    lag = int(np.argmax(np.correlate(y[:4800], x[:2400], "valid")))  # the encoder's delay
    seg = y[lag : lag + x.size - 4800]
    assert np.corrcoef(seg, x[: seg.size])[0, 1] > 0.95


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda d: d / "missing.wav", "no such file"),
        (lambda d: (d / "junk.wav").write_bytes(b"RIFF nonsense") and d / "junk.wav", "readable"),
        (lambda d: _write_pcm(d / "empty.wav", np.zeros(0), 24000) or d / "empty.wav", "short"),
        (
            lambda d: (
                _write_pcm(d / "short.wav", _voice_like(24000, 0.02), 24000) or d / "short.wav"
            ),
            "short",
        ),
        (
            lambda d: _write_pcm(d / "quiet.wav", np.zeros(48000), 48000) or d / "quiet.wav",
            "silent",
        ),
        (lambda d: (np.array([0.1, np.nan] * 800, np.float32), 24000), "NaN"),
        (lambda d: (np.zeros((2, 3, 4), np.float32), 24000), "samples"),
        (lambda d: (np.ones(4800, np.float32), 0), "sample rate"),
        (lambda d: 42, "expected a file path"),
    ],
)
def test_unusable_clips_are_a_value_error_naming_ref_audio(tmp_path, make, needle):
    with pytest.raises(ValueError) as e:
        read_reference(make(tmp_path))
    assert str(e.value).startswith("ref_audio:") and needle in str(e.value)
