"""The reference codec: stacked log-mel frames -> PCA -> 16-level residual VQ, and back.

Encoding is analysis-only (no learned encoder), decoding inverts each step and recovers phase
with Griffin-Lim. It is not meant to sound good; it gives the reference codec LM a real
16-codebook RVQ token stream at 12.5 frames/s whose levels carry decreasing information, which
is the structure depth speculation exploits.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import codecspec as cs
from codecspec.codec.audio import as_mono_float, resample
from codecspec.codec.features import griffin_lim, mel_filterbank, mel_pinv, stft
from codecspec.codec.rvq import rvq_decode, rvq_encode, rvq_fit

__all__ = ["CodecConfig", "Codec", "frame_features"]

FORMAT = "codecspec.codec/1"


def _pos_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


@dataclass(frozen=True)
class CodecConfig:
    sample_rate: int = 16000
    frame_hop: int = 1280  # 80 ms: 12.5 frames/s, the Qwen3-TTS 12 Hz frame
    stft_hop: int = 160  # 10 ms sub-frames; 75 % window overlap keeps Griffin-Lim usable
    win_length: int = 640
    n_fft: int = 1024
    n_mels: int = 80
    fmin: float = 0.0
    fmax: float = 8000.0
    log_offset: float = 1e-3  # ~ -100 dB below a full-scale sine's mel magnitude
    pca_dim: int = 128
    n_codebooks: int = 16
    codebook_size: int = 1024

    def __post_init__(self):
        for f in dataclasses.fields(self):
            if f.type in ("int", int):
                _pos_int(f.name, getattr(self, f.name))
        if self.frame_hop % self.stft_hop:
            raise ValueError(
                f"frame_hop ({self.frame_hop}) must be a multiple of stft_hop ({self.stft_hop})"
            )
        if not self.win_length <= self.n_fft:
            raise ValueError(f"win_length ({self.win_length}) must be <= n_fft ({self.n_fft})")
        if not 0.0 <= self.fmin < self.fmax <= self.sample_rate / 2:
            raise ValueError(
                f"fmin/fmax must satisfy 0 <= fmin < fmax <= sample_rate/2, got "
                f"{self.fmin}/{self.fmax}"
            )
        if not self.log_offset > 0:
            raise ValueError(f"log_offset must be > 0, got {self.log_offset!r}")
        if self.pca_dim > self.feature_dim:
            raise ValueError(
                f"pca_dim ({self.pca_dim}) must be <= feature_dim ({self.feature_dim})"
            )
        _melbank(self)  # fails early, naming n_mels, when some filter would cover no bin

    @property
    def subframes(self) -> int:
        return self.frame_hop // self.stft_hop

    @property
    def feature_dim(self) -> int:
        return self.subframes * self.n_mels

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.frame_hop

    def num_frames(self, num_samples: int) -> int:
        return -(-int(num_samples) // self.frame_hop)


def _melbank(cfg: CodecConfig) -> np.ndarray:
    return mel_filterbank(cfg.sample_rate, cfg.n_fft, cfg.n_mels, cfg.fmin, cfg.fmax)


def frame_features(wav, cfg: CodecConfig, fb: np.ndarray | None = None) -> np.ndarray:
    """Stacked log-mel features [T, subframes * n_mels] float32, T = ceil(len(wav) / frame_hop).

    Row t is the concatenation of the log-mel spectra of sub-frames t*S .. t*S + S - 1 (time
    major), i.e. reshape(T, S, n_mels) recovers the spectrogram."""
    x = as_mono_float(wav)
    t = cfg.num_frames(x.size)
    fb = _melbank(cfg) if fb is None else fb
    mag = np.abs(stft(x, cfg.n_fft, cfg.stft_hop, cfg.win_length, t * cfg.subframes))
    mel = mag @ fb.T
    return np.log(mel + cfg.log_offset).astype(np.float32).reshape(t, cfg.feature_dim)


class Codec:
    """PCA + residual VQ over stacked log-mel frames.

    ``encode(wav) -> int32 [T, n_codebooks]``; ``decode(codes) -> float32 waveform`` of
    T * frame_hop samples. ``codes`` may carry fewer columns than ``n_codebooks``: decoding then
    uses only the first levels (the coarse-to-fine property of RVQ)."""

    def __init__(self, cfg: CodecConfig, mean, components, codebooks):
        self.cfg = cfg
        self.mean = np.asarray(mean, dtype=np.float32)
        self.components = np.asarray(components)
        self.codebooks = np.asarray(codebooks)
        want_c = (cfg.feature_dim, cfg.pca_dim)
        want_b = (cfg.n_codebooks, cfg.codebook_size, cfg.pca_dim)
        if self.mean.shape != (cfg.feature_dim,):
            raise ValueError(f"mean must have shape ({cfg.feature_dim},), got {self.mean.shape}")
        if self.components.shape != want_c:
            raise ValueError(f"components must have shape {want_c}, got {self.components.shape}")
        if self.codebooks.shape != want_b:
            raise ValueError(f"codebooks must have shape {want_b}, got {self.codebooks.shape}")
        self._p = self.components.astype(np.float32)
        # float32 working copy: casting the float16 tables on every call dominated encoding
        self._books = self.codebooks.astype(np.float32)
        self._fb = _melbank(cfg)
        self._fb_pinv = mel_pinv(self._fb)
        # Decoding's two products run in the Rust core, not numpy's BLAS: OpenBLAS's workers
        # spin ~0.1 s after each call and take a small machine's cores from the next graph
        # calls, and its thread count is process-global (docs/performance.md).
        self._unproject = cs.Projection(self._p.T, self.mean)  # float32, as `z @ P.T + mean`
        self._to_linear = cs.Projection(self._fb_pinv.T)  # float64, as `mel @ pinv.T`

    # ---- training -------------------------------------------------------------------------
    @classmethod
    def fit(
        cls,
        features,
        cfg: CodecConfig | None = None,
        iters: int = 10,
        seed: int = 0,
        init_sample: int = 32768,
        progress: Callable[[int, float], None] | None = None,
    ) -> Codec:
        """Fit PCA and the RVQ codebooks on training frames [N, feature_dim]."""
        cfg = cfg or CodecConfig()
        f = np.asarray(features)
        if f.ndim != 2 or f.shape[1] != cfg.feature_dim:
            raise ValueError(
                f"features must have shape [N, {cfg.feature_dim}], got {getattr(f, 'shape', None)}"
            )
        if f.shape[0] < cfg.codebook_size:
            raise ValueError(
                f"features: need at least codebook_size={cfg.codebook_size} frames, "
                f"got {f.shape[0]}"
            )
        f = f.astype(np.float64)
        mean = f.mean(axis=0)
        cov = np.zeros((cfg.feature_dim, cfg.feature_dim))
        for s in range(0, f.shape[0], 65536):
            c = f[s : s + 65536] - mean
            cov += c.T @ c
        evals, evecs = np.linalg.eigh(cov / f.shape[0])
        order = np.argsort(evals)[::-1][: cfg.pca_dim]
        comps = evecs[:, order]
        # eigenvectors have an arbitrary sign; fix it so the same data gives the same tables
        flip = np.sign(comps[np.argmax(np.abs(comps), axis=0), np.arange(cfg.pca_dim)])
        comps = (comps * flip).astype(np.float16)
        z = ((f - mean).astype(np.float32)) @ comps.astype(np.float32)
        books = rvq_fit(
            z,
            cfg.n_codebooks,
            cfg.codebook_size,
            iters=iters,
            seed=seed,
            init_sample=init_sample,
            progress=progress,
        )
        return cls(cfg, mean.astype(np.float32), comps, books)

    # ---- analysis / synthesis -------------------------------------------------------------
    def features(self, wav, sample_rate: int | None = None) -> np.ndarray:
        x = as_mono_float(wav)
        if sample_rate is not None and sample_rate != self.cfg.sample_rate:
            x = resample(x, _pos_int("sample_rate", sample_rate), self.cfg.sample_rate)
        return frame_features(x, self.cfg, self._fb)

    def project(self, features) -> np.ndarray:
        f = np.asarray(features, dtype=np.float32)
        if f.ndim != 2 or f.shape[1] != self.cfg.feature_dim:
            raise ValueError(f"features must have shape [T, {self.cfg.feature_dim}], got {f.shape}")
        return (f - self.mean) @ self._p

    def unproject(self, z) -> np.ndarray:
        """Features [..., feature_dim] float32 of PCA coordinates z [..., pca_dim]."""
        z = np.asarray(z, dtype=np.float32)
        y = self._unproject.apply(z.reshape(-1, z.shape[-1]) if z.ndim else z)
        return y.reshape(*z.shape[:-1], self.cfg.feature_dim)

    def encode_features(self, features, n_levels: int | None = None) -> np.ndarray:
        return rvq_encode(self.project(features), self._books, n_levels)

    def encode(self, wav, sample_rate: int | None = None) -> np.ndarray:
        """Codes int32 [ceil(len(wav) / frame_hop), n_codebooks]; resamples if ``sample_rate``
        differs from the codec's."""
        return self.encode_features(self.features(wav, sample_rate))

    def check_codes(self, codes) -> np.ndarray:
        c = np.asarray(codes)
        if c.ndim != 2:
            raise ValueError(f"codes must be 2-D [T, levels], got shape {c.shape}")
        if c.dtype.kind not in "iu":
            raise ValueError(f"codes must be an integer array, got dtype {c.dtype}")
        return c

    def decode_features(self, codes) -> np.ndarray:
        """Log-mel features [T, feature_dim] from codes [T, l] (first l levels)."""
        return self.unproject(rvq_decode(self.check_codes(codes), self._books))

    def features_to_magnitude(self, features) -> np.ndarray:
        """Linear STFT magnitude [T * subframes, n_fft // 2 + 1] from stacked log-mel rows."""
        f = np.asarray(features, dtype=np.float64)
        if f.ndim != 2 or f.shape[1] != self.cfg.feature_dim:
            raise ValueError(f"features must have shape [T, {self.cfg.feature_dim}], got {f.shape}")
        mel = np.maximum(np.exp(f.reshape(-1, self.cfg.n_mels)) - self.cfg.log_offset, 0.0)
        return np.maximum(self._to_linear.apply(mel), 0.0)

    def features_to_wav(self, features, n_iter: int = 32, seed: int = 0) -> np.ndarray:
        mag = self.features_to_magnitude(features)
        n = np.asarray(features).shape[0] * self.cfg.frame_hop
        c = self.cfg
        wav = griffin_lim(mag, c.n_fft, c.stft_hop, c.win_length, n, n_iter=n_iter, seed=seed)
        return wav.astype(np.float32)

    def decode(self, codes, n_iter: int = 32, seed: int = 0) -> np.ndarray:
        """Waveform float32 [T * frame_hop] at ``cfg.sample_rate`` from codes [T, l]."""
        c = self.check_codes(codes)
        if c.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        return self.features_to_wav(self.decode_features(c), n_iter=n_iter, seed=seed)

    # ---- persistence ----------------------------------------------------------------------
    def save(self, path) -> int:
        """Write the tables as a compressed .npz (float16 PCA basis and codebooks, float32
        mean, config as JSON); returns the file size in bytes."""
        return write_table(
            path,
            FORMAT,
            dataclasses.asdict(self.cfg),
            mean=self.mean.astype(np.float32),
            components=self.components.astype(np.float16),
            codebooks=self.codebooks.astype(np.float16),
        )

    @classmethod
    def load(cls, path) -> Codec:
        with open_table(path, FORMAT) as z:
            cfg = CodecConfig(**json.loads(str(z["config"])))
            return cls(cfg, z["mean"], z["components"], z["codebooks"])

    @property
    def nbytes(self) -> int:
        return int(self.mean.nbytes + self.components.nbytes + self.codebooks.nbytes)

    # ---- what a codec LM runtime asks of any codec (codec v2 answers the same) -------------
    @property
    def n_levels(self) -> int:
        return self.cfg.n_codebooks

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    @property
    def frame_rate(self) -> float:
        return self.cfg.frame_rate

    @property
    def spectral(self) -> CodecConfig:
        """The log-mel front end (codec v2 names its own so)."""
        return self.cfg

    def embeddings(self, level: int) -> np.ndarray:
        """float32 [K, pca_dim]: level `level`'s codebook vectors at unit length (the space
        its similarity groups are drawn in)."""
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)):
            raise ValueError(f"level: expected an int, got {level!r}")
        if not 0 <= level < self.n_levels:
            raise ValueError(f"level: expected 0..{self.n_levels - 1}, got {level}")
        e = self._books[level]
        return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)

    def groups(self, level: int, threshold: float):
        """`cs.AcousticGroups` of level `level`'s codes at cosine >= `threshold` between
        their codebook vectors (PCG over this codec's code space)."""
        import codecspec as cs

        return cs.AcousticGroups.from_embeddings(self.embeddings(level), float(threshold))


def write_table(path, fmt: str, config: dict, **arrays) -> int:
    """A compressed .npz codec table: `format` = fmt, `config` as sorted JSON, `arrays`;
    creates the folder; returns the file size in bytes. `open_table` reads it back."""
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        format=np.array(fmt),
        config=np.array(json.dumps(config, sort_keys=True)),
        **arrays,
    )
    data = buf.getvalue()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data)
    return len(data)


def open_table(path, fmt: str):
    """The .npz at `path` (an open NpzFile) when its `format` entry is `fmt`; ValueError
    naming `path` otherwise (unreadable, a plain .npy, another format)."""
    try:
        z = np.load(str(path), allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"path: cannot read {path} as a codec table ({e})") from None
    if not hasattr(z, "files"):  # a plain .npy array
        raise ValueError(f"path: {path} is not a {fmt} codec table")
    if "format" not in z.files or str(z["format"]) != fmt:
        z.close()
        raise ValueError(f"path: {path} is not a {fmt} codec table")
    return z
