"""Spectral front end of the codec: STFT, mel filterbank, log-mel frames, Griffin-Lim.

Framing convention (shared by analysis and synthesis): a signal of n samples is zero-padded to
T * frame_hop samples, T = ceil(n / frame_hop); STFT columns are centred at i * stft_hop for
i = 0 .. T * subframes - 1 (zero padding of n_fft // 2 on both sides), so codec frame t owns
sub-frames t * subframes .. (t + 1) * subframes - 1 and decodes to exactly frame_hop samples.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "hann",
    "stft",
    "istft",
    "mel_filterbank",
    "slaney_mel_filterbank",
    "mel_pinv",
    "griffin_lim",
    "griffin_lim_reference",
    "log_spectral_distance",
]


def hann(n: int) -> np.ndarray:
    # periodic Hann: overlap-adds to a constant at hops of n/2, n/4, ...
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n) / n)).astype(np.float64)


def _window(n_fft: int, win_length: int) -> np.ndarray:
    w = np.zeros(n_fft)
    off = (n_fft - win_length) // 2
    w[off : off + win_length] = hann(win_length)
    return w


def stft(x: np.ndarray, n_fft: int, hop: int, win_length: int, n_frames: int) -> np.ndarray:
    """Complex STFT [n_frames, n_fft // 2 + 1], column i centred at sample i * hop."""
    win = _window(n_fft, win_length)
    need = (n_frames - 1) * hop + n_fft
    xp = np.zeros(need, dtype=np.float64)
    seg = np.asarray(x, dtype=np.float64)[: max(0, need - n_fft // 2)]
    xp[n_fft // 2 : n_fft // 2 + seg.size] = seg
    idx = np.arange(n_frames)[:, None] * hop + np.arange(n_fft)[None, :]
    return np.fft.rfft(xp[idx] * win, axis=1)


def istft(spec: np.ndarray, n_fft: int, hop: int, win_length: int, length: int) -> np.ndarray:
    """Least-squares inverse of ``stft`` (weighted overlap-add), trimmed to ``length``."""
    win = _window(n_fft, win_length)
    frames = np.fft.irfft(spec, n=n_fft, axis=1) * win
    n_frames = spec.shape[0]
    total = (n_frames - 1) * hop + n_fft
    out = np.zeros(total)
    norm = np.zeros(total)
    # overlap-add in n_fft // hop interleaved groups, each a plain reshape-add with no collisions
    step = -(-n_fft // hop)
    w2 = win * win
    for g in range(step):
        sel = frames[g::step]
        if sel.size == 0:
            continue
        starts = (np.arange(g, n_frames, step) * hop)[:, None] + np.arange(n_fft)[None, :]
        out[starts.ravel()] += sel.ravel()
        norm[starts.ravel()] += np.tile(w2, sel.shape[0])
    out = out / np.maximum(norm, 1e-8)
    return out[n_fft // 2 : n_fft // 2 + length]


def _hz_to_mel(f):
    return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def _mel_to_hz(m):
    return 700.0 * (10.0 ** (np.asarray(m, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float):
    """Triangular HTK-mel filters [n_mels, n_fft // 2 + 1] with unit peak.

    Triangles are evaluated at the exact bin frequencies, so every filter is non-zero as long
    as its half-width exceeds the bin spacing (checked: a dead filter would make the log-mel
    feature a constant and the pseudo-inverse ill-posed)."""
    freqs = np.arange(n_fft // 2 + 1) * sample_rate / n_fft
    edges = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None, :] - lo) / (mid - lo)
    down = (hi - freqs[None, :]) / (hi - mid)
    fb = np.clip(np.minimum(up, down), 0.0, None)
    if np.any(fb.sum(axis=1) <= 0):
        raise ValueError(
            f"n_mels={n_mels} is too many for n_fft={n_fft}: some mel filters cover no FFT bin"
        )
    return fb


def _slaney_hz_to_mel(f):
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, np.float64)
    lin = f / (200.0 / 3)
    log = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log, lin)


def _slaney_mel_to_hz(m):
    m = np.asarray(m, np.float64)
    lin = m * (200.0 / 3)
    log = 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0))
    return np.where(m >= 15.0, log, lin)


def slaney_mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float):
    """librosa.filters.mel(sr=, n_fft=, n_mels=, fmin=, fmax=) at its defaults (Slaney's mel
    scale, norm="slaney"), float32 [n_mels, n_fft // 2 + 1]: the front end of models trained
    with librosa (Qwen3-TTS's speaker encoder, the speaker-similarity encoder)."""
    fft_f = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = _slaney_mel_to_hz(
        np.linspace(_slaney_hz_to_mel(fmin), _slaney_hz_to_mel(fmax), n_mels + 2)
    )
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_f[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    w = np.maximum(0, np.minimum(lower, upper))
    w *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return w.astype(np.float32)


def mel_pinv(fb: np.ndarray, ridge: float = 1e-3) -> np.ndarray:
    """Ridge-regularised pseudo-inverse [n_bins, n_mels] mapping mel magnitudes to linear ones.

    Minimum-norm least squares spreads each mel value smoothly over its triangle; the ridge
    keeps the narrow low-frequency filters from amplifying quantisation noise."""
    g = fb @ fb.T
    g = g + ridge * np.trace(g) / g.shape[0] * np.eye(g.shape[0])
    return fb.T @ np.linalg.inv(g)


class _Resynthesis:
    """STFT and weighted overlap-add for one signal length, in float32, with everything that
    does not depend on the spectrum (window, frame view, 1 / sum of squared windows) computed
    once: Griffin-Lim runs the pair 32 times on the same shapes.

    Numerically the same transform as `stft` / `istft` (float64) up to float32 rounding."""

    def __init__(self, n_fft: int, hop: int, win_length: int, n_frames: int, length: int):
        self.n_fft, self.hop, self.n_frames, self.length = n_fft, hop, n_frames, length
        self.win = _window(n_fft, win_length).astype(np.float32)
        self.total = (n_frames - 1) * hop + n_fft
        # A frame spans `span` hops; padded to span * hop samples, frame i's j-th hop-sized
        # block lands on output block i + j, so overlap-add is `span` strided slice-adds.
        self.span = -(-n_fft // hop)
        w2 = np.zeros(self.span * hop, np.float64)
        w2[:n_fft] = self.win.astype(np.float64) ** 2
        norm = np.zeros((n_frames + self.span, hop))
        for j, block in enumerate(w2.reshape(self.span, hop)):
            norm[j : j + n_frames] += block
        self.inv_norm = (1.0 / np.maximum(norm.reshape(-1)[: self.total], 1e-8)).astype(np.float32)
        self._padded = np.zeros(self.total, np.float32)
        self._blocks = np.zeros((n_frames, self.span * hop), np.float32)

    def stft(self, x: np.ndarray) -> np.ndarray:
        xp, half = self._padded, self.n_fft // 2
        seg = x[: max(0, self.total - half)]
        xp[half : half + seg.size] = seg
        frames = np.lib.stride_tricks.sliding_window_view(xp, self.n_fft)[:: self.hop]
        return np.fft.rfft(frames[: self.n_frames] * self.win, axis=1)

    def istft(self, spec: np.ndarray) -> np.ndarray:
        n_fft, hop, span = self.n_fft, self.hop, self.span
        blocks = self._blocks
        blocks[:, :n_fft] = np.fft.irfft(spec, n=n_fft, axis=1)
        blocks[:, :n_fft] *= self.win
        out = np.zeros((self.n_frames + span, hop), np.float32)
        for j in range(span):
            out[j : j + self.n_frames] += blocks[:, j * hop : (j + 1) * hop]
        out = out.reshape(-1)[: self.total] * self.inv_norm
        return out[n_fft // 2 : n_fft // 2 + self.length]


def _fast_griffin_lim(mag, forward, inverse, n_iter, momentum, seed, dtype) -> np.ndarray:
    """The fast Griffin-Lim iteration on any STFT pair: x -> spectrum (`forward`) and
    spectrum -> x (`inverse`), in the complex `dtype`."""
    _check_gl(n_iter, momentum)
    rng = np.random.default_rng(seed)
    angles = np.exp(2j * np.pi * rng.random(mag.shape)).astype(dtype)
    prev = np.zeros_like(angles)
    x = inverse(mag * angles)
    for _ in range(n_iter):
        proj = forward(x)
        acc = proj + momentum * (proj - prev)
        prev = proj
        acc *= mag / np.maximum(np.abs(acc), 1e-12)
        x = inverse(acc)
    return x


def griffin_lim(
    mag: np.ndarray,
    n_fft: int,
    hop: int,
    win_length: int,
    length: int,
    n_iter: int = 32,
    momentum: float = 0.9,
    seed: int = 0,
) -> np.ndarray:
    """Fast Griffin-Lim (Perraudin et al. 2013): phase retrieval for an STFT magnitude.

    The momentum term reaches in ~32 iterations the consistency plain Griffin-Lim needs ~100+
    for; the initial phase is drawn from a seeded generator so decoding is deterministic.
    Runs in float32 on a precomputed overlap-add plan (`_Resynthesis`), about 2-2.5x faster
    than `griffin_lim_reference`. Momentum 0.9 (v1 used 0.99) gives a lower log-spectral
    distance on every one of 24 held-out utterances at 32 iterations (models/recipe/vocoder.py);
    coherent initial phases (zero, bin-centre linear, phase-gradient integration) converged to
    a worse distance than a random start on this codec's spectra."""
    mag = np.asarray(mag, dtype=np.float32)
    plan = _Resynthesis(n_fft, hop, win_length, mag.shape[0], length)
    x = _fast_griffin_lim(mag, plan.stft, plan.istft, n_iter, momentum, seed, np.complex64)
    return x.astype(np.float64)


def _check_gl(n_iter, momentum) -> None:
    if isinstance(n_iter, bool) or not isinstance(n_iter, (int, np.integer)) or n_iter < 0:
        raise ValueError(f"n_iter: expected an integer >= 0, got {n_iter!r}")
    if not (isinstance(momentum, (int, float)) and 0.0 <= momentum < 2.0):
        raise ValueError(f"momentum: expected a number in [0, 2), got {momentum!r}")


def griffin_lim_reference(mag, n_fft, hop, win_length, length, n_iter=32, momentum=0.99, seed=0):
    """The v1 vocoder: the same iteration on the float64 `stft` / `istft` pair, with v1's
    momentum 0.99. Kept as the reference `griffin_lim` is tested and measured against."""
    mag = np.asarray(mag, dtype=np.float64)

    def forward(x):
        return stft(x, n_fft, hop, win_length, mag.shape[0])

    def inverse(spec):
        return istft(spec, n_fft, hop, win_length, length)

    return _fast_griffin_lim(mag, forward, inverse, n_iter, momentum, seed, np.complex128)


def log_spectral_distance(
    ref: np.ndarray,
    est: np.ndarray,
    n_fft: int = 1024,
    hop: int = 160,
    win_length: int = 640,
    floor_db: float = 60.0,
) -> float:
    """Log-spectral distance in dB between two waveforms, averaged over active frames.

    Per frame: RMS over frequency of the difference of 10*log10 power spectra, each clamped to
    at most ``floor_db`` below the reference's peak (so digital silence does not count as an
    infinite error). Frames whose reference energy is more than ``floor_db`` below the loudest
    frame are left out, so the silence that both signals share does not flatter the figure."""
    n = min(ref.size, est.size)
    frames = n // hop + 1
    pr = np.abs(stft(ref[:n], n_fft, hop, win_length, frames)) ** 2
    pe = np.abs(stft(est[:n], n_fft, hop, win_length, frames)) ** 2
    top = 10.0 * np.log10(pr.max() + 1e-20)
    lr = np.maximum(10.0 * np.log10(pr + 1e-20), top - floor_db)
    le = np.maximum(10.0 * np.log10(pe + 1e-20), top - floor_db)
    energy = 10.0 * np.log10(pr.sum(axis=1) + 1e-20)
    active = energy > energy.max() - floor_db
    d = np.sqrt(np.mean((lr - le) ** 2, axis=1))
    return float(d[active].mean())
