"""Scalar quantisation shared by the grid-structured codecs (the FSQ family's GroupFSQ codec,
`codecspec.families.fsq.codec`, and the v2 family's codec v2, `codecspec.families.v2.codec`):
Lloyd-Max value placement, and the v1 `Codec` reduced to its PCA + vocoder stages. Here, in
the shared codec package, so that neither family's codec borrows the other's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from codecspec.codec.codec import Codec, CodecConfig, write_table

__all__ = ["PCAGridCodec", "lloyd_max", "pca_codec"]


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


class PCAGridCodec:
    """What the grid-structured codecs share around their quantiser: the front end and the
    vocoder of `pca` (a `pca_codec`). A subclass gives `encode_features(features)` and
    `latent(codes)` (the PCA coordinates of codes, which it checks)."""

    pca: Codec

    @property
    def spectral(self) -> CodecConfig:
        """The front end (STFT, mel, PCA size); its codebook fields are the 1 x 1 of `pca`."""
        return self.pca.cfg

    @property
    def frame_rate(self) -> float:
        return self.pca.cfg.frame_rate

    @property
    def sample_rate(self) -> int:
        return self.pca.cfg.sample_rate

    def features(self, wav, sample_rate: int | None = None) -> np.ndarray:
        return self.pca.features(wav, sample_rate)

    def encode(self, wav, sample_rate: int | None = None) -> np.ndarray:
        """Codes [ceil(len(wav) / frame_hop), ...] of a waveform."""
        return self.encode_features(self.features(wav, sample_rate))

    def decode_features(self, codes) -> np.ndarray:
        return self.pca.unproject(self.latent(codes))

    def decode(self, codes, n_iter: int = 32, seed: int = 0) -> np.ndarray:
        """Waveform float32 [T * frame_hop] from codes [T, ...] (the v1 vocoder)."""
        z = self.latent(codes)
        if z.shape[0] == 0:
            return np.zeros(0, np.float32)
        return self.pca.features_to_wav(self.pca.unproject(z), n_iter=n_iter, seed=seed)

    def _save(self, path, fmt: str, meta: dict, **arrays) -> int:
        """The codec table: `meta` and the front end, the PCA, then `arrays`."""
        return write_table(
            path,
            fmt,
            dict(meta, spectral=dataclasses.asdict(self.spectral)),
            mean=self.pca.mean.astype(np.float32),
            components=self.pca.components.astype(np.float16),
            **arrays,
        )
