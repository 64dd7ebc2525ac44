"""Reference recordings for voice cloning, read as people have them.

A clip, read by `codecspec.codec.clips.read_clip` (any format and layout people record or
download, or samples with their rate), becomes what the official wrapper hands its speaker
encoder and speech tokenizer: mono by averaging the channels, float32, resampled to 24 kHz by
soxr at the quality `librosa.resample` uses by default (soxr "HQ", which `qwen_tts` calls),
with librosa's output length (ceil(n * 24000 / rate)). Every failure is a ValueError naming
`ref_audio`: read_clip's, and a clip that is silent or shorter than the speaker encoder's
analysis window.
"""

from __future__ import annotations

import math

import numpy as np

from codecspec.codec.clips import read_clip

__all__ = ["SAMPLE_RATE", "MIN_SAMPLES", "SILENCE", "read_reference", "to_model_rate"]

SAMPLE_RATE = 24000  # the speaker encoder's and the 12 Hz tokenizer's rate
MIN_SAMPLES = 1024  # one analysis window of the speaker encoder (n_fft) at 24 kHz
SILENCE = 1e-4  # peak below -80 dBFS: nothing a speaker encoder can hear a voice in
_EXTRA = "pip install 'codecspec[qwen3]'"


def read_reference(ref_audio) -> np.ndarray:
    """float32 mono 24 kHz samples of `ref_audio`: a path, or (samples, sample_rate) with
    samples [n] or [n, channels] (`codecspec.codec.clips.read_clip`)."""
    return _checked(to_model_rate(*read_clip(ref_audio)))


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


def _checked(wav: np.ndarray) -> np.ndarray:
    if wav.size < MIN_SAMPLES:
        raise ValueError(
            f"ref_audio: {wav.size} samples at {SAMPLE_RATE} Hz is empty or too short "
            f"(>= {MIN_SAMPLES}, {MIN_SAMPLES / SAMPLE_RATE * 1000:.0f} ms)"
        )
    if float(np.max(np.abs(wav))) < SILENCE:
        raise ValueError("ref_audio: the clip is silent (peak below -80 dBFS)")
    return np.ascontiguousarray(wav, dtype=np.float32)
