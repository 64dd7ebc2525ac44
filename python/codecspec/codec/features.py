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
    "mel_pinv",
    "griffin_lim",
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


def mel_pinv(fb: np.ndarray, ridge: float = 1e-3) -> np.ndarray:
    """Ridge-regularised pseudo-inverse [n_bins, n_mels] mapping mel magnitudes to linear ones.

    Minimum-norm least squares spreads each mel value smoothly over its triangle; the ridge
    keeps the narrow low-frequency filters from amplifying quantisation noise."""
    g = fb @ fb.T
    g = g + ridge * np.trace(g) / g.shape[0] * np.eye(g.shape[0])
    return fb.T @ np.linalg.inv(g)


def griffin_lim(
    mag: np.ndarray,
    n_fft: int,
    hop: int,
    win_length: int,
    length: int,
    n_iter: int = 32,
    momentum: float = 0.99,
    seed: int = 0,
) -> np.ndarray:
    """Fast Griffin-Lim (Perraudin et al. 2013): phase retrieval for an STFT magnitude.

    The momentum term reaches in ~32 iterations the consistency plain Griffin-Lim needs ~100+
    for; the initial phase is drawn from a seeded generator so decoding is deterministic."""
    rng = np.random.default_rng(seed)
    angles = np.exp(2j * np.pi * rng.random(mag.shape))
    prev = np.zeros_like(angles)
    x = istft(mag * angles, n_fft, hop, win_length, length)
    for _ in range(n_iter):
        proj = stft(x, n_fft, hop, win_length, mag.shape[0])
        acc = proj + momentum * (proj - prev)
        prev = proj
        angles = acc / np.maximum(np.abs(acc), 1e-12)
        x = istft(mag * angles, n_fft, hop, win_length, length)
    return x


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
