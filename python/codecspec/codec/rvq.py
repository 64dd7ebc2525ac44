"""k-means and residual vector quantisation, numpy only, deterministic given a seed."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["kmeans", "nearest", "rvq_fit", "rvq_encode", "rvq_decode"]

_CHUNK = 8192


def _check_data(x, name: str = "x") -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array [N, D], got shape {a.shape}")
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be numeric, got dtype {a.dtype}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def nearest(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the nearest centroid for every row, and the squared distance to it.

    Chunked so that the [chunk, K] distance matrix stays small whatever N is; argmin breaks
    ties towards the lowest index, so encoding is reproducible."""
    c = np.asarray(centroids, dtype=np.float32)
    c2 = np.einsum("kd,kd->k", c, c)
    idx = np.empty(x.shape[0], dtype=np.int64)
    dist = np.empty(x.shape[0], dtype=np.float64)
    for s in range(0, x.shape[0], _CHUNK):
        xb = x[s : s + _CHUNK]
        d = c2[None, :] - 2.0 * (xb @ c.T)
        j = np.argmin(d, axis=1)
        idx[s : s + xb.shape[0]] = j
        x2 = np.einsum("nd,nd->n", xb, xb).astype(np.float64)
        dist[s : s + xb.shape[0]] = np.maximum(x2 + d[np.arange(xb.shape[0]), j], 0.0)
    return idx, dist


def _kmeanspp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    n = x.shape[0]
    centers = np.empty((k, x.shape[1]), dtype=np.float32)
    centers[0] = x[rng.integers(n)]
    d = np.einsum("nd,nd->n", x - centers[0], x - centers[0]).astype(np.float64)
    for i in range(1, k):
        total = d.sum()
        if total <= 0:
            # fewer distinct points than k: the rest duplicate drawn points; Lloyd keeps them
            # consistent and encoding never prefers them (argmin takes the first index)
            centers[i:] = x[rng.integers(n, size=k - i)]
            break
        j = int(np.searchsorted(np.cumsum(d), rng.random() * total, side="right"))
        centers[i] = x[min(j, n - 1)]
        diff = x - centers[i]
        d = np.minimum(d, np.einsum("nd,nd->n", diff, diff))
    return centers


def kmeans(
    x,
    k: int,
    iters: int = 10,
    seed: int = 0,
    init_sample: int = 32768,
) -> np.ndarray:
    """k-means++ initialisation followed by ``iters`` Lloyd iterations; returns [k, D] float32.

    The ++ seeding runs on a seeded subsample of at most ``init_sample`` rows (it is inherently
    sequential in k), the Lloyd steps on all rows. Empty clusters are re-seeded with the points
    currently worst served, so every code stays in use."""
    x = _check_data(x)
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if not isinstance(iters, (int, np.integer)) or iters < 0:
        raise ValueError(f"iters must be a non-negative integer, got {iters!r}")
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    sub = x if n <= init_sample else x[np.sort(rng.choice(n, size=init_sample, replace=False))]
    c = _kmeanspp(sub, int(k), rng)
    for _ in range(iters):
        lab, dist = nearest(x, c)
        counts = np.bincount(lab, minlength=k)
        order = np.argsort(lab, kind="stable")
        used = np.flatnonzero(counts)
        starts = np.concatenate([[0], np.cumsum(counts[used])[:-1]])
        sums = np.add.reduceat(x[order].astype(np.float64), starts, axis=0)
        c = c.copy()
        c[used] = (sums / counts[used, None]).astype(np.float32)
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            worst = np.argsort(-dist, kind="stable")[: empty.size]
            c[empty] = x[worst]
    return c


def rvq_fit(
    x,
    n_levels: int,
    k: int,
    iters: int = 10,
    seed: int = 0,
    init_sample: int = 32768,
    dtype=np.float16,
    progress: Callable[[int, float], None] | None = None,
) -> np.ndarray:
    """Train residual VQ codebooks [n_levels, k, D] greedily, level by level.

    Each level is rounded to the storage ``dtype`` before its residual is passed on, so the
    levels after it are trained on exactly the residual the shipped (float16) tables leave.
    ``progress(level, mse_after_level)`` is called after each level."""
    x = _check_data(x)
    if not isinstance(n_levels, (int, np.integer)) or n_levels < 1:
        raise ValueError(f"n_levels must be a positive integer, got {n_levels!r}")
    res = x.copy()
    books = np.empty((n_levels, k, x.shape[1]), dtype=dtype)
    for lvl in range(n_levels):
        c = kmeans(res, k, iters=iters, seed=seed * 1000 + lvl, init_sample=init_sample)
        books[lvl] = c.astype(dtype)
        cq = books[lvl].astype(np.float32)
        lab, _ = nearest(res, cq)
        res -= cq[lab]
        if progress is not None:
            progress(lvl, float(np.mean(res.astype(np.float64) ** 2)))
    return books


def rvq_encode(x, codebooks: np.ndarray, n_levels: int | None = None) -> np.ndarray:
    """Greedy residual encoding: codes [N, n_levels] int32."""
    x = _check_data(x)
    books = np.asarray(codebooks)
    if books.ndim != 3 or books.shape[2] != x.shape[1]:
        raise ValueError(
            f"codebooks must have shape [L, K, {x.shape[1]}] to match x, got {books.shape}"
        )
    n_levels = books.shape[0] if n_levels is None else n_levels
    if not 1 <= n_levels <= books.shape[0]:
        raise ValueError(f"n_levels must be in [1, {books.shape[0]}], got {n_levels!r}")
    res = x.copy()
    codes = np.empty((x.shape[0], n_levels), dtype=np.int32)
    for lvl in range(n_levels):
        cq = np.asarray(books[lvl], dtype=np.float32)  # no copy when already float32
        lab, _ = nearest(res, cq)
        codes[:, lvl] = lab
        res -= cq[lab]
    return codes


def rvq_decode(codes, codebooks: np.ndarray) -> np.ndarray:
    """Sum of the selected code vectors over the levels present in ``codes`` [N, l], l <= L."""
    books = np.asarray(codebooks)
    c = np.asarray(codes)
    if c.ndim != 2:
        raise ValueError(f"codes must be 2-D [N, levels], got shape {c.shape}")
    if c.dtype.kind not in "iu":
        raise ValueError(f"codes must be an integer array, got dtype {c.dtype}")
    if not 1 <= c.shape[1] <= books.shape[0]:
        raise ValueError(f"codes must have 1..{books.shape[0]} columns, got {c.shape[1]}")
    if c.size and (c.min() < 0 or c.max() >= books.shape[1]):
        raise ValueError(
            f"codes must lie in [0, {books.shape[1]}), got range [{c.min()}, {c.max()}]"
        )
    out = np.zeros((c.shape[0], books.shape[2]), dtype=np.float32)
    for lvl in range(c.shape[1]):
        out += np.asarray(books[lvl][c[:, lvl]], dtype=np.float32)
    return out
