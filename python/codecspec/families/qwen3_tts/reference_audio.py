"""Reference recordings for voice cloning, read as people have them.

A clip may be a file in any format and layout people record or download (WAV of any sample
width, FLAC, MP3, OGG, M4A, ...; any sample rate; mono or several channels) or samples with
their rate. It becomes what the official wrapper hands its speaker encoder and speech
tokenizer: mono by averaging the channels, float32, resampled to 24 kHz by soxr at the quality
`librosa.resample` uses by default (soxr "HQ", which `qwen_tts` calls), with librosa's output
length (ceil(n * 24000 / rate)).

PCM WAV is read by the standard library; other formats are decoded by PyAV (the audio library
the server already uses to encode responses). Every failure is a ValueError naming
`ref_audio`: a missing, unreadable or empty file, NaN / inf samples, a clip that is silent or
shorter than the speaker encoder's analysis window.
"""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np

__all__ = ["SAMPLE_RATE", "MIN_SAMPLES", "SILENCE", "read_reference", "to_model_rate"]

SAMPLE_RATE = 24000  # the speaker encoder's and the 12 Hz tokenizer's rate
MIN_SAMPLES = 1024  # one analysis window of the speaker encoder (n_fft) at 24 kHz
SILENCE = 1e-4  # peak below -80 dBFS: nothing a speaker encoder can hear a voice in
_EXTRA = "pip install 'codecspec[qwen3]'"


def read_reference(ref_audio) -> np.ndarray:
    """float32 mono 24 kHz samples of `ref_audio`: a path, or (samples, sample_rate) with
    samples [n] or [n, channels]."""
    if isinstance(ref_audio, tuple) and len(ref_audio) == 2:
        wav, rate = _from_samples(*ref_audio)
    elif isinstance(ref_audio, (str, Path)):
        wav, rate = _from_file(Path(ref_audio).expanduser())
    else:
        raise ValueError(
            "ref_audio: expected a file path or (samples, sample_rate), got "
            f"{type(ref_audio).__name__}"
        )
    return _checked(to_model_rate(wav, rate))


def to_model_rate(wav: np.ndarray, rate: int) -> np.ndarray:
    """`wav` at 24 kHz, as `librosa.resample(wav, orig_sr=rate, target_sr=24000)` gives it."""
    if rate == SAMPLE_RATE:
        return wav
    try:
        import soxr
    except ImportError:
        raise ValueError(
            f"ref_audio: {rate} Hz audio is resampled to {SAMPLE_RATE} Hz with soxr: {_EXTRA}"
        ) from None
    out = soxr.resample(wav, rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
    n = math.ceil(wav.size * SAMPLE_RATE / rate)  # librosa's fix_length: pad or trim to this
    return np.pad(out, (0, max(n - out.size, 0)))[:n]


def _from_samples(samples, rate):
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or rate <= 0:
        raise ValueError(f"ref_audio: the sample rate must be a positive int, got {rate!r}")
    wav = np.asarray(samples, dtype=np.float32)
    if wav.ndim == 2:  # [samples, channels]
        wav = wav.mean(axis=1)
    if wav.ndim != 1:
        raise ValueError(f"ref_audio: expected samples [n] or [n, channels], got {wav.shape}")
    return _finite(wav), int(rate)


def _from_file(path: Path):
    if not path.is_file():
        raise ValueError(f"ref_audio: no such file: {path}")
    try:
        from codecspec.codec.audio import read_wav

        wav, rate = read_wav(path)
    except (wave.Error, EOFError, ValueError):  # not PCM WAV: another format
        wav, rate = _decode(path)
    return _finite(wav), rate


def _decode(path: Path):
    """(mono float32, rate) of a compressed or non-PCM file through PyAV."""
    try:
        import av
    except ImportError:
        raise ValueError(
            f"ref_audio: {path.name} is not PCM WAV; other formats need PyAV: {_EXTRA}"
        ) from None
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise ValueError(f"ref_audio: {path} holds no audio stream")
            stream = container.streams.audio[0]
            planar = av.AudioResampler(format="fltp")  # [channels, n] float32 per frame
            blocks = [
                out.to_ndarray()
                for frame in container.decode(stream)
                for out in planar.resample(frame)
            ]
            rate = stream.codec_context.sample_rate
    except av.FFmpegError as e:
        raise ValueError(f"ref_audio: {path} is not a readable audio file ({e})") from None
    if not blocks:
        raise ValueError(f"ref_audio: {path} holds no samples")
    return np.concatenate(blocks, axis=1).mean(axis=0).astype(np.float32), int(rate)


def _finite(wav: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(wav)):
        raise ValueError("ref_audio: contains NaN or inf")
    return wav


def _checked(wav: np.ndarray) -> np.ndarray:
    if wav.size < MIN_SAMPLES:
        raise ValueError(
            f"ref_audio: {wav.size} samples at {SAMPLE_RATE} Hz is empty or too short "
            f"(>= {MIN_SAMPLES}, {MIN_SAMPLES / SAMPLE_RATE * 1000:.0f} ms)"
        )
    if float(np.max(np.abs(wav))) < SILENCE:
        raise ValueError("ref_audio: the clip is silent (peak below -80 dBFS)")
    return np.ascontiguousarray(wav, dtype=np.float32)
