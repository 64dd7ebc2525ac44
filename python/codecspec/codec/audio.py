"""Waveform I/O and rational-ratio resampling, numpy + the stdlib ``wave`` module only."""

from __future__ import annotations

import math
import os
import struct
import wave
from pathlib import Path

import numpy as np

__all__ = ["read_wav", "write_wav", "WavWriter", "resample", "as_mono_float"]


def as_mono_float(wav, name: str = "wav") -> np.ndarray:
    """Validate a 1-D finite waveform and return it as contiguous float32."""
    a = np.asarray(wav)
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a numeric array, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (mono samples), got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} must not be empty")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite samples")
    return a


def read_wav(path) -> tuple[np.ndarray, int]:
    """Read a PCM WAV file; returns (float32 mono samples in [-1, 1), sample rate).

    Several channels are averaged to mono. 8-, 16-, 24- and 32-bit integer PCM are accepted.
    """
    with wave.open(str(path), "rb") as w:
        n_ch, width, sr, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
        raw = w.readframes(n)
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        x = v.astype(np.float32) / float(1 << 23)
    elif width == 4:
        x = (np.frombuffer(raw, "<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    else:
        raise ValueError(f"path: unsupported sample width {width} bytes in {path}")
    if n_ch > 1:
        x = x.reshape(-1, n_ch).mean(axis=1)
    return np.ascontiguousarray(x, dtype=np.float32), int(sr)


def write_wav(path, wav, sample_rate: int) -> None:
    """Write mono 16-bit PCM. Samples are clipped to [-1, 1] and rounded half to even, so the
    bytes depend only on the float values (no dithering)."""
    x = as_mono_float(wav)
    if not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive integer, got {sample_rate!r}")
    pcm = _pcm16(x)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())


def check_output(path) -> None:
    """Fails before synthesis, not after it, when the WAV cannot be written to `path`."""
    import tempfile

    p = Path(path)
    if p.is_dir():
        raise ValueError(f"--output: {p} is a directory")
    parent = p.parent
    while not parent.exists():  # write_wav creates missing folders: probe the first that exists
        parent = parent.parent
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"--output: {p} is not writable")
    try:  # os.access says yes to root everywhere, even on /proc: create a file to be sure
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as e:
        raise ValueError(f"--output: cannot write into {parent} ({e.strerror})") from None


def _pcm16(x: np.ndarray) -> np.ndarray:
    return np.rint(np.clip(x, -1.0, 1.0) * 32767.0).astype("<i2")


class WavWriter:
    """Mono 16-bit PCM WAV written incrementally (the bytes `write_wav` writes for the same
    samples): the header goes first with placeholder sizes, `write` appends samples, and
    `close` fixes the RIFF and data sizes. Used as a context manager (or with try/finally),
    an interrupted stream (exception, KeyboardInterrupt) leaves a valid, shorter WAV.
    `update_header=True` also fixes the sizes after every `write`, so even a killed process
    leaves a readable file (its last chunk at worst missing)."""

    def __init__(self, path, sample_rate: int, update_header: bool = False):
        if not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
            raise ValueError(f"sample_rate must be a positive integer, got {sample_rate!r}")
        self.path, self.sample_rate = Path(path), int(sample_rate)
        self.update_header = bool(update_header)
        self.frames = 0  # samples written
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "wb")
        try:
            self._f.write(self._header(0))
        except BaseException:
            self._f.close()
            raise

    def _header(self, n: int) -> bytes:
        data = 2 * n
        return (
            b"RIFF"
            + struct.pack("<I", 36 + data)
            + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, self.sample_rate, 2 * self.sample_rate, 2, 16)
            + b"data"
            + struct.pack("<I", data)
        )

    @property
    def closed(self) -> bool:
        return self._f.closed

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate

    def write(self, wav) -> None:
        """Append samples (float, clipped to [-1, 1] and rounded as `write_wav` does)."""
        if self._f.closed:
            raise ValueError(f"path: {self.path} is closed")
        a = np.asarray(wav)
        if a.size == 0:
            return
        x = as_mono_float(a)
        if (self.frames + x.size) * 2 + 36 > 0xFFFFFFFF:
            raise ValueError("wav: a WAV file holds at most 4 GiB of samples")
        self._f.write(_pcm16(x).tobytes())
        self.frames += x.size
        if self.update_header:
            self._patch()

    def _patch(self) -> None:
        pos = self._f.tell()
        self._f.seek(0)
        self._f.write(self._header(self.frames))
        self._f.seek(pos)
        self._f.flush()

    def close(self) -> None:
        """Fix the header's sizes and close (idempotent)."""
        if self._f.closed:
            return
        try:
            self._patch()
        finally:
            self._f.close()

    def __enter__(self) -> WavWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _kaiser(t: np.ndarray, beta: float) -> np.ndarray:
    # t in [-1, 1]; zero outside so the kernel has compact support.
    inside = np.abs(t) <= 1.0
    arg = np.sqrt(np.clip(1.0 - t * t, 0.0, None))
    return np.where(inside, np.i0(beta * arg) / np.i0(beta), 0.0)


def _kernel(offsets: np.ndarray, fc: float, half_width: int, beta: float) -> np.ndarray:
    """Windowed-sinc low-pass evaluated at input-sample offsets (any shape).

    fc is the cut-off in cycles per input sample; the gain 2*fc keeps DC at unity."""
    return 2.0 * fc * np.sinc(2.0 * fc * offsets) * _kaiser(offsets / half_width, beta)


def resample(
    x,
    sr_in: int,
    sr_out: int,
    zero_crossings: int = 24,
    rolloff: float = 0.95,
    beta: float = 9.0,
    chunk: int = 1 << 16,
) -> np.ndarray:
    """Band-limited resampling by the exact rational ratio sr_out / sr_in.

    Output sample j sits at input time j * sr_in / sr_out; it is a Kaiser-windowed sinc
    interpolation of the input with the cut-off at ``rolloff`` times the lower Nyquist frequency
    (anti-aliasing when decimating). The kernel is tabulated once per polyphase phase when the
    reduced up-factor is small (the usual audio rates), and evaluated per output otherwise.
    Output length is ceil(len(x) * sr_out / sr_in); the signal is zero outside its support.
    """
    for name, v in (("sr_in", sr_in), ("sr_out", sr_out)):
        if not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not 0.0 < rolloff <= 1.0:
        raise ValueError(f"rolloff must be in (0, 1], got {rolloff!r}")
    if zero_crossings < 1:
        raise ValueError(f"zero_crossings must be >= 1, got {zero_crossings!r}")
    x = as_mono_float(x, "x").astype(np.float64)
    if sr_in == sr_out:
        return x.astype(np.float32)
    g = math.gcd(int(sr_in), int(sr_out))
    up, down = int(sr_out) // g, int(sr_in) // g
    fc = 0.5 * min(1.0, up / down) * rolloff
    # half-width in input samples that spans `zero_crossings` zeros of the sinc at cut-off fc
    half = int(math.ceil(zero_crossings / (2.0 * fc)))
    taps = np.arange(-half + 1, half + 1)
    n_out = -(-x.size * up // down)
    xp = np.concatenate([np.zeros(half), x, np.zeros(half + 1)])
    table = None
    if up <= 4096:
        phases = np.arange(up) / up
        table = _kernel(taps[None, :] - phases[:, None], fc, half, beta)
    y = np.empty(n_out, dtype=np.float64)
    for s in range(0, n_out, chunk):
        j = np.arange(s, min(n_out, s + chunk), dtype=np.int64)
        pos = j * down
        base, ph = pos // up, pos % up
        idx = base[:, None] + taps[None, :] + half
        if table is not None:
            h = table[ph]
        else:
            h = _kernel(taps[None, :] - (ph / up)[:, None], fc, half, beta)
        y[s : s + j.size] = np.einsum("ij,ij->i", xp[idx], h)
    return y.astype(np.float32)
