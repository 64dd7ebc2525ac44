"""Speech quality without an ASR: distance of synthesised speech to a reference rendering.

`dtw_log_mel_distance(ref, est, cfg)` compares two waveforms of the same text (e.g. espeak-ng's
rendering and a model's) on the codec's own log-mel front end (10 ms sub-frames, 80 bands):
dynamic time warping aligns them (the model's timing is its own), and the distance is the mean
over the reference's active sub-frames of the RMS over bands of the dB difference along the
path. Silence (more than `floor_db` below the loudest sub-frame) is left out, as in the codec
recipes, so trailing silence cannot dilute the figure.
"""

from __future__ import annotations

import numpy as np

from codecspec.codec.codec import CodecConfig, frame_features

__all__ = ["log_mel", "dtw_path", "dtw_log_mel_distance", "mean_ci"]

DB = 20.0 / np.log(10.0)  # natural-log magnitude ratio -> dB


def log_mel(wav, cfg: CodecConfig) -> np.ndarray:
    """float32 [sub-frames, n_mels]: natural-log mel magnitudes of `wav`."""
    return frame_features(wav, cfg).reshape(-1, cfg.n_mels)


def dtw_path(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """int [n, 2]: the DTW path (steps (1,1), (1,0), (0,1); squared Euclidean cost) between
    rows of a [Ta, D] and b [Tb, D], from (0, 0) to (Ta-1, Tb-1)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a64.ndim != 2 or b64.ndim != 2 or a64.shape[1] != b64.shape[1] or not len(a64) * len(b64):
        raise ValueError(f"a, b: expected non-empty [T, D] arrays, got {a64.shape}, {b64.shape}")
    cost = (a64**2).sum(1)[:, None] + (b64**2).sum(1)[None, :] - 2.0 * a64 @ b64.T
    ta, tb = cost.shape
    acc = np.empty((ta, tb))
    acc[0] = np.cumsum(cost[0])
    for i in range(1, ta):
        # acc[i, j] = c[j] + min(acc[i-1, j-1], acc[i-1, j], acc[i, j-1]): the last term makes
        # a row a min-plus scan, which subtracting the row's cumulative cost turns into a
        # running minimum
        c = cost[i]
        up = acc[i - 1].copy()
        up[1:] = np.minimum(up[1:], acc[i - 1, :-1])
        s = np.cumsum(c)
        acc[i] = np.minimum.accumulate(up + c - s) + s
    i, j, path = ta - 1, tb - 1, [(ta - 1, tb - 1)]
    while i > 0 or j > 0:
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        else:
            k = int(np.argmin([acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]]))
            i, j = (i - 1, j - 1) if k == 0 else (i - 1, j) if k == 1 else (i, j - 1)
        path.append((i, j))
    return np.array(path[::-1])


def dtw_log_mel_distance(ref, est, cfg: CodecConfig, floor_db: float = 60.0) -> float:
    """dB: mean over the reference's active sub-frames of the band-RMS dB difference to the
    estimate's sub-frames matched by DTW (each reference sub-frame's matches averaged)."""
    r, e = log_mel(ref, cfg).astype(np.float64), log_mel(est, cfg).astype(np.float64)
    path = dtw_path(r, e)
    d = np.sqrt(np.mean((DB * (r[path[:, 0]] - e[path[:, 1]])) ** 2, axis=1))
    per_ref = np.bincount(path[:, 0], weights=d, minlength=len(r)) / np.bincount(
        path[:, 0], minlength=len(r)
    )
    energy = 10.0 * np.log10(np.exp(2.0 * r).sum(axis=1))
    active = energy > energy.max() - floor_db
    return float(per_ref[active].mean())


def mean_ci(x, z: float = 1.96) -> tuple[float, float]:
    """(mean, half-width of the normal-approximation 95% confidence interval)."""
    x = np.asarray(x, np.float64)
    if x.size < 2:
        return float(x.mean()) if x.size else float("nan"), float("nan")
    return float(x.mean()), float(z * x.std(ddof=1) / np.sqrt(x.size))


def swap_distortion(codec, codes, groups: dict, fraction: float, seed: int = 0) -> float:
    """dB added by the within-group swap stress test of the PCG paper: replace `fraction` of
    the codes of each level in `groups` ({level: cs.AcousticGroups}) by a random other member
    of their group (what a group-level accepted draft may change) and measure the band-RMS
    log-mel difference between the swapped and the original decoded spectra, mean over active
    sub-frames. `codec`: a CodecV2 (`decode_features`, `spectral`)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction: expected a number in [0, 1], got {fraction!r}")
    codes = np.asarray(codes, np.int64)
    rng = np.random.default_rng(seed)
    swapped = codes.copy()
    for k, grp in groups.items():
        for i in np.flatnonzero(rng.random(len(codes)) < fraction):
            m = grp.members(int(codes[i, k]))
            m = m[m != codes[i, k]]
            if len(m):
                swapped[i, k] = m[rng.integers(len(m))]
    n_mels = codec.spectral.n_mels
    a = codec.decode_features(codes).reshape(-1, n_mels).astype(np.float64)
    b = codec.decode_features(swapped).reshape(-1, n_mels).astype(np.float64)
    d = np.sqrt(np.mean((DB * (a - b)) ** 2, axis=1))
    energy = 10.0 * np.log10(np.exp(2.0 * a).sum(axis=1))
    return float(d[energy > energy.max() - 60.0].mean())
