"""Reference recordings read as people have them, for every family that takes a voice clip.

A clip is a file in any format and layout people record or download (WAV of any sample
width, FLAC, MP3, OGG, M4A, ...; any sample rate; mono or several channels) or samples with
their rate. `read_clip` gives mono float32 samples (channels averaged) and the rate; each
family resamples to its own rate. PCM WAV is read by the standard library; other formats
are decoded by PyAV (the audio library the server already uses to encode responses). Every
failure is a ValueError naming `ref_audio`: a missing, unreadable or empty file, a bad rate,
NaN / inf samples.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

__all__ = ["read_clip"]

_AV = "pip install 'codecspec[serve]' (PyAV)"


def read_clip(ref_audio) -> tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate) of `ref_audio`: a path, or (samples,
    sample_rate) with samples [n] or [n, channels]."""
    if isinstance(ref_audio, tuple) and len(ref_audio) == 2:
        return _from_samples(*ref_audio)
    if isinstance(ref_audio, (str, Path)):
        return _from_file(Path(ref_audio).expanduser())
    raise ValueError(
        f"ref_audio: expected a file path or (samples, sample_rate), got {type(ref_audio).__name__}"
    )


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
            f"ref_audio: {path.name} is not PCM WAV; other formats need {_AV}"
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
