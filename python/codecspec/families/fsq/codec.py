"""GroupFSQ codec for the FSQ model family: PCA of stacked log-mel, one scalar quantiser per
channel, channels packed into groups (default 8 groups x levels [8, 7, 6, 6] = 32 channels,
8 packed codes in [0, 2016) per 80 ms frame).

The spectral front end, the PCA and the vocoder are the v1 codec's own (`Codec`): the PCA
stage is fitted and run by a `Codec` with a single one-entry codebook, so the FSQ codec adds
only what is new, the quantiser. Channel c quantises PCA component c (coarse to fine, as the
RVQ levels of v1 are) with a fixed, ordered set of `levels[c % len(levels)]` values learned
by Lloyd-Max on the training frames: neighbouring indices are neighbouring values, which is
the grid structure FSQ codes have (docs/fsq_model.md). Channels are independent scalars, so
a model may predict them with independent heads; `fsq_pack` turns each group's channels
into one mixed-radix code (`codecspec.fsq_pack`, the Rust core's).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import numpy as np

import codecspec as cs
from codecspec.codec.codec import Codec, CodecConfig, open_table, write_table
from codecspec.codec.scalar import lloyd_max, pca_codec

__all__ = ["FSQConfig", "FSQCodec", "check_levels"]

FORMAT = "codecspec.fsqcodec/1"


def check_levels(levels, packed_range=None) -> tuple:
    """Levels of one group as a tuple of ints >= 2; with `packed_range`, their product must
    equal it (the range of a packed group code). Raises ValueError naming `levels`."""
    try:
        lv = tuple(int(v) for v in levels)
    except (TypeError, ValueError):
        raise ValueError(f"levels: expected a sequence of integers, got {levels!r}") from None
    if not lv or any(v < 2 for v in lv) or any(v != float(x) for v, x in zip(lv, levels)):
        raise ValueError(f"levels: expected integers >= 2, got {list(levels)!r}")
    prod = math.prod(lv)
    if prod >= 2**31:
        raise ValueError(f"levels: product {prod} does not fit a packed int32 code")
    if packed_range is not None and prod != int(packed_range):
        raise ValueError(
            f"levels: {list(lv)} multiply to {prod}, but the packed code range is {packed_range}"
        )
    return lv


@dataclass(frozen=True)
class FSQConfig:
    """Group structure: `groups` groups of len(levels) channels, channel c has
    levels[c % len(levels)] values."""

    groups: int = 8
    levels: tuple = (8, 7, 6, 6)

    def __post_init__(self):
        if isinstance(self.groups, bool) or not isinstance(self.groups, int) or self.groups < 1:
            raise ValueError(f"groups: expected a positive integer, got {self.groups!r}")
        object.__setattr__(self, "levels", check_levels(self.levels))

    @property
    def channels(self) -> int:
        return self.groups * len(self.levels)

    @property
    def channel_levels(self) -> tuple:
        return self.levels * self.groups

    @property
    def packed_range(self) -> int:
        return math.prod(self.levels)

    @property
    def bits_per_frame(self) -> float:
        return self.groups * math.log2(self.packed_range)


class FSQCodec:
    """``encode(wav) -> int [T, channels]``, ``pack``/``unpack`` to/from int [T, groups],
    ``decode(channels) -> float32 waveform`` (the v1 vocoder). ``channels`` may carry only the
    first k groups (k * len(levels) columns): the other PCA components decode as their mean."""

    def __init__(self, cfg: FSQConfig, spectral: CodecConfig, mean, components, values):
        if spectral.pca_dim != cfg.channels:
            raise ValueError(f"spectral: pca_dim {spectral.pca_dim} != {cfg.channels} FSQ channels")
        self.cfg = cfg
        self.pca = pca_codec(spectral, mean, components)
        self.values = np.asarray(values, dtype=np.float32)  # [channels, max level], padded
        lv = np.array(cfg.channel_levels)
        if self.values.shape != (cfg.channels, lv.max()):
            raise ValueError(f"values must have shape {(cfg.channels, lv.max())}")
        self._levels = lv
        # decision thresholds; padding beyond a channel's levels is +inf so it is never chosen
        mids = 0.5 * (self.values[:, 1:] + self.values[:, :-1])
        pad = np.arange(lv.max() - 1)[None, :] >= (lv[:, None] - 1)
        self._thresholds = np.where(pad, np.inf, mids).astype(np.float32)

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

    @property
    def bits_per_second(self) -> float:
        return self.cfg.bits_per_frame * self.frame_rate

    # ---- training ---------------------------------------------------------------------------
    @classmethod
    def fit(cls, features, cfg: FSQConfig | None = None, spectral=None, iters: int = 30):
        """PCA (the v1 codec's own fit) to cfg.channels components, then Lloyd-Max per channel."""
        cfg = cfg or FSQConfig()
        spectral = dataclasses.replace(spectral or CodecConfig(), pca_dim=cfg.channels)
        pca = Codec.fit(
            features, dataclasses.replace(spectral, n_codebooks=1, codebook_size=1), iters=1
        )
        z = pca.project(features)
        lv = cfg.channel_levels
        values = np.full((cfg.channels, max(lv)), np.nan, np.float32)
        for c, n in enumerate(lv):
            v = lloyd_max(z[:, c], n, iters)
            values[c, :n] = v
            values[c, n:] = v[-1]
        return cls(cfg, spectral, pca.mean, pca.components, values)

    # ---- analysis / synthesis ---------------------------------------------------------------
    def features(self, wav, sample_rate: int | None = None) -> np.ndarray:
        return self.pca.features(wav, sample_rate)

    def encode_features(self, features) -> np.ndarray:
        """Channel indices int16 [T, channels] of log-mel frames [T, feature_dim]."""
        z = self.pca.project(features)
        out = np.empty(z.shape, np.int16)
        for c in range(self.cfg.channels):
            out[:, c] = np.searchsorted(self._thresholds[c], z[:, c], side="right")
        return out

    def encode(self, wav, sample_rate: int | None = None) -> np.ndarray:
        return self.encode_features(self.features(wav, sample_rate))

    def check_channels(self, channels, name: str = "channels") -> np.ndarray:
        c = np.asarray(channels)
        per = len(self.cfg.levels)
        if c.ndim != 2 or c.shape[1] % per or not 0 < c.shape[1] <= self.cfg.channels:
            raise ValueError(
                f"{name}: expected shape [T, k * {per}] with k <= {self.cfg.groups} groups, "
                f"got {c.shape}"
            )
        if c.dtype.kind not in "iu":
            raise ValueError(f"{name}: expected integers, got dtype {c.dtype}")
        lv = self._levels[: c.shape[1]]
        if c.size and (c.min() < 0 or np.any(c >= lv)):
            raise ValueError(f"{name}: entries must lie in [0, levels) per channel")
        return c

    def latent(self, channels) -> np.ndarray:
        """PCA coordinates float32 [T, channels] of channel indices (missing groups: 0)."""
        c = self.check_channels(channels)
        z = np.zeros((c.shape[0], self.cfg.channels), np.float32)
        k = np.arange(c.shape[1])
        z[:, k] = self.values[k[None, :], c]
        return z

    def decode_features(self, channels) -> np.ndarray:
        return self.pca.unproject(self.latent(channels))

    def decode(self, channels, n_iter: int = 32, seed: int = 0) -> np.ndarray:
        """Waveform float32 [T * frame_hop] from channel indices [T, k * len(levels)]."""
        c = self.check_channels(channels)
        if c.shape[0] == 0:
            return np.zeros(0, np.float32)
        return self.pca.features_to_wav(self.decode_features(c), n_iter=n_iter, seed=seed)

    # ---- packing (the Rust core's mixed radix, first level most significant) ---------------
    def pack(self, channels) -> np.ndarray:
        """int64 [T, groups] packed group codes in [0, packed_range) from [T, channels]."""
        c = self.check_channels(channels)
        per = len(self.cfg.levels)
        return cs.fsq_pack(c.reshape(c.shape[0], -1, per).astype(np.int64), self.cfg.levels)

    def unpack(self, packed) -> np.ndarray:
        """int64 [T, channels] from packed group codes [T, groups]."""
        p = np.asarray(packed)
        if p.ndim != 2:
            raise ValueError(f"packed: expected shape [T, groups], got {p.shape}")
        return cs.fsq_unpack(p, self.cfg.levels).reshape(p.shape[0], -1)

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path) -> int:
        meta = dict(
            groups=self.cfg.groups,
            levels=list(self.cfg.levels),
            packed_range=self.cfg.packed_range,
            spectral=dataclasses.asdict(self.spectral),
        )
        return write_table(
            path,
            FORMAT,
            meta,
            mean=self.pca.mean.astype(np.float32),
            components=self.pca.components.astype(np.float16),
            values=self.values.astype(np.float32),
        )

    @classmethod
    def load(cls, path) -> FSQCodec:
        with open_table(path, FORMAT) as z:
            meta = json.loads(str(z["config"]))
            levels = check_levels(meta["levels"], meta["packed_range"])
            cfg = FSQConfig(groups=int(meta["groups"]), levels=levels)
            spectral = CodecConfig(**meta["spectral"])
            return cls(cfg, spectral, z["mean"], z["components"], z["values"])
