"""Scalar quantisation shared by the grid-structured codecs (the FSQ family's GroupFSQ codec,
`codecspec.families.fsq.codec`, and the v2 family's codec v2, `codecspec.families.v2.codec`):
Lloyd-Max value placement, and the v1 `Codec` reduced to its PCA + vocoder stages. Here, in
the shared codec package, so that neither family's codec borrows the other's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from codecspec.codec.codec import Codec, CodecConfig

__all__ = ["lloyd_max", "pca_codec"]


def lloyd_max(x: np.ndarray, n: int, iters: int = 30) -> np.ndarray:
    """`n` sorted reconstruction values minimising the squared error of a scalar quantiser of
    the samples `x` (Lloyd's algorithm in 1-D, started from the cell-centre quantiles)."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    v = np.quantile(x, (np.arange(n) + 0.5) / n)
    for _ in range(iters):
        cells = np.searchsorted(0.5 * (v[1:] + v[:-1]), x)
        sums = np.bincount(cells, weights=x, minlength=n)
        counts = np.bincount(cells, minlength=n)
        # an empty cell keeps its value: it stays ordered between its neighbours
        v = np.where(counts > 0, sums / np.maximum(counts, 1), v)
    return np.sort(v)


def pca_codec(spectral: CodecConfig, mean, components) -> Codec:
    """A v1 `Codec` that is exactly PCA + vocoder: one codebook with one zero entry."""
    cfg = dataclasses.replace(spectral, n_codebooks=1, codebook_size=1)
    return Codec(cfg, mean, components, np.zeros((1, 1, cfg.pca_dim), np.float16))
