"""GroupFSQ codec for the FSQ model family: PCA of stacked log-mel, one scalar quantiser per
channel, channels packed into groups (default 8 groups x levels [8, 7, 6, 6] = 32 channels,
8 packed codes in [0, 2016) per 80 ms frame).

The spectral front end, the PCA and the vocoder are the v1 codec's own (`Codec`): the PCA
stage is fitted and run by a `Codec` with a single one-entry codebook, so the FSQ codec adds
only what is new, the quantiser. Channel c quantises PCA component c (coarse to fine, as the
RVQ levels of v1 are) with a fixed, ordered set of values learned by Lloyd-Max on the
training frames: neighbouring indices are neighbouring values, which is the grid structure
FSQ codes have (docs/fsq_model.md). Channels are independent scalars, so a model may predict
them with independent heads; `fsq_pack` turns each group's channels into one mixed-radix code
(`codecspec.fsq_pack`, the Rust core's).

Every group may share one set of levels (the GEPARD layout) or have its own: a quantiser of
PCA components keeps far more of the signal for its bits when the levels follow the
components' variances (`allocate_levels`, reverse water-filling: many levels for the first
components, two for the last ones it keeps), which is what `FSQCodec.fit(..., bits=B)` does.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import numpy as np

import codecspec as cs
from codecspec.codec.codec import Codec, CodecConfig, open_table
from codecspec.codec.scalar import PCAGridCodec, lloyd_max, pca_codec

__all__ = ["FSQConfig", "FSQCodec", "allocate_levels", "check_levels", "config_from_meta"]

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
    """Group structure: `groups` groups of channels. `levels` is one group's levels, shared
    by every group (channel c has levels[c % len(levels)]), or one tuple per group (all of
    one width), when the levels follow the channels' variances."""

    groups: int = 8
    levels: tuple = (8, 7, 6, 6)

    def __post_init__(self):
        if isinstance(self.groups, bool) or not isinstance(self.groups, int) or self.groups < 1:
            raise ValueError(f"groups: expected a positive integer, got {self.groups!r}")
        lv = tuple(self.levels) if isinstance(self.levels, (list, tuple)) else self.levels
        if lv and all(isinstance(g, (list, tuple)) for g in lv):
            per_group = tuple(check_levels(g) for g in lv)
            if len(per_group) != self.groups:
                raise ValueError(
                    f"levels: {len(per_group)} groups of levels for {self.groups} groups"
                )
            if len({len(g) for g in per_group}) != 1:
                raise ValueError("levels: every group must have the same number of channels")
            object.__setattr__(self, "levels", per_group)
        else:
            object.__setattr__(self, "levels", check_levels(lv))

    @property
    def shared(self) -> bool:
        """True when every group has the same levels."""
        return isinstance(self.levels[0], int)

    @property
    def group_levels(self) -> tuple:
        """One tuple of levels per group."""
        return (self.levels,) * self.groups if self.shared else self.levels

    @property
    def width(self) -> int:
        """Channels per group."""
        return len(self.group_levels[0])

    @property
    def channels(self) -> int:
        return self.groups * self.width

    @property
    def channel_levels(self) -> tuple:
        return sum(self.group_levels, ())

    @property
    def packed_ranges(self) -> tuple:
        return tuple(math.prod(g) for g in self.group_levels)

    @property
    def packed_range(self) -> int:
        """The widest group's range (every group's, when they share their levels)."""
        return max(self.packed_ranges)

    @property
    def bits_per_frame(self) -> float:
        return float(sum(math.log2(r) for r in self.packed_ranges))

    def to_meta(self) -> dict:
        """model.json / codec fields: groups, levels, packed_range (one int, or one per group)."""
        levels = list(self.levels) if self.shared else [list(g) for g in self.levels]
        ranges = self.packed_range if self.shared else list(self.packed_ranges)
        return dict(groups=self.groups, levels=levels, packed_range=ranges)


def config_from_meta(meta: dict) -> FSQConfig:
    """The FSQConfig that `FSQConfig.to_meta` wrote, its packed ranges checked."""
    cfg = FSQConfig(groups=int(meta["groups"]), levels=meta["levels"])
    want = cfg.to_meta()["packed_range"]
    if want != meta["packed_range"]:
        raise ValueError(
            f"levels: {meta['levels']} multiply to {want}, but the packed code range is "
            f"{meta['packed_range']}"
        )
    return cfg


def allocate_levels(variances, bits: float, width: int = 4, max_levels: int = 64) -> FSQConfig:
    """Levels per channel for components of the given variances (descending, as PCA gives
    them) within `bits` per frame: reverse water-filling, greedily. A channel's squared error
    falls as variance / levels**2 (high-rate approximation), so each step adds a level where
    the error falls most per bit spent. Channels after the last one that earned 2 levels are
    dropped; the last group is filled with 2-level channels (a few bits past the budget at
    most, reported by `bits_per_frame`)."""
    var = np.asarray(variances, dtype=np.float64)
    if var.ndim != 1 or var.size < width or not np.all(np.isfinite(var)) or np.any(var < 0):
        raise ValueError(f"variances: expected >= {width} finite non-negative values")
    if not bits >= 1:
        raise ValueError(f"bits: expected >= 1, got {bits!r}")
    if not 2 <= max_levels <= 1024:
        raise ValueError(f"max_levels: expected an int in [2, 1024], got {max_levels!r}")
    n = np.ones(var.size, np.int64)
    spent = 0.0
    while True:
        cost = np.log2(n + 1) - np.log2(n)
        gain = var * (1.0 / n**2 - 1.0 / (n + 1) ** 2) / cost
        gain[n >= max_levels] = -1.0
        c = int(np.argmax(gain))
        if gain[c] <= 0 or spent + cost[c] > bits:
            break
        n[c] += 1
        spent += cost[c]
    used = int(np.nonzero(n > 1)[0].max()) + 1 if np.any(n > 1) else 1
    channels = min(-(-used // width) * width, var.size - var.size % width)
    levels = np.maximum(n[:channels], 2)
    groups = tuple(tuple(int(v) for v in g) for g in levels.reshape(-1, width))
    return FSQConfig(groups=len(groups), levels=groups)


def _pca_only(spectral: CodecConfig, dim: int) -> CodecConfig:
    """The v1 Codec config that fits PCA to `dim` components and a 1 x 1 codebook."""
    return dataclasses.replace(spectral, pca_dim=dim, n_codebooks=1, codebook_size=1)


class FSQCodec(PCAGridCodec):
    """``encode(wav) -> int [T, channels]``, ``pack``/``unpack`` to/from int [T, groups],
    ``decode(channels) -> float32 waveform`` (the v1 vocoder). ``channels`` may carry only the
    first k groups (k * width columns): the other PCA components decode as their mean."""

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
    def bits_per_second(self) -> float:
        return self.cfg.bits_per_frame * self.frame_rate

    # ---- training ---------------------------------------------------------------------------
    @classmethod
    def fit(cls, features, cfg: FSQConfig | None = None, spectral=None, iters: int = 30, bits=None):
        """PCA (the v1 codec's own fit) to cfg.channels components, then Lloyd-Max per channel.
        With `bits` (and no `cfg`), the levels follow the components' variances within that
        many bits per frame (`allocate_levels`, groups of 4 channels, at most 64 levels)."""
        if bits is not None and cfg is not None:
            raise ValueError("bits: give either cfg or bits, not both")
        spectral = spectral or CodecConfig()
        cfg = cfg or (None if bits is not None else FSQConfig())
        # one PCA: a wide one when the variances choose the channels, then its leading ones
        dim = spectral.feature_dim // 2 if cfg is None else cfg.channels
        pca = Codec.fit(features, _pca_only(spectral, dim), iters=1)
        z = pca.project(features)
        if cfg is None:
            cfg = allocate_levels(np.var(z, axis=0), bits)
        z = z[:, : cfg.channels]
        spectral = dataclasses.replace(spectral, pca_dim=cfg.channels)
        lv = cfg.channel_levels
        values = np.full((cfg.channels, max(lv)), np.nan, np.float32)
        for c, n in enumerate(lv):
            v = lloyd_max(z[:, c], n, iters)
            values[c, :n] = v
            values[c, n:] = v[-1]
        return cls(cfg, spectral, pca.mean, pca.components[:, : cfg.channels], values)

    # ---- analysis / synthesis ---------------------------------------------------------------
    def encode_features(self, features) -> np.ndarray:
        """Channel indices int16 [T, channels] of log-mel frames [T, feature_dim]."""
        z = self.pca.project(features)
        out = np.empty(z.shape, np.int16)
        for c in range(self.cfg.channels):
            out[:, c] = np.searchsorted(self._thresholds[c], z[:, c], side="right")
        return out

    def check_channels(self, channels, name: str = "channels") -> np.ndarray:
        c = np.asarray(channels)
        per = self.cfg.width
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

    # ---- packing (the Rust core's mixed radix, first level most significant) ---------------
    def pack(self, channels) -> np.ndarray:
        """int64 [T, groups] packed group codes (group g's in [0, packed_ranges[g])) from
        [T, channels]."""
        c = self.check_channels(channels).astype(np.int64)
        g = c.reshape(c.shape[0], -1, self.cfg.width)
        lv = self.cfg.group_levels
        return np.concatenate([cs.fsq_pack(g[:, k : k + 1], lv[k]) for k in range(g.shape[1])], 1)

    def unpack(self, packed) -> np.ndarray:
        """int64 [T, channels] from packed group codes [T, groups]."""
        p = np.asarray(packed)
        if p.ndim != 2 or p.shape[1] > self.cfg.groups:
            raise ValueError(
                f"packed: expected shape [T, <= {self.cfg.groups} groups], got {p.shape}"
            )
        lv = self.cfg.group_levels
        cols = [cs.fsq_unpack(p[:, k : k + 1], lv[k]) for k in range(p.shape[1])]
        return np.concatenate(cols, axis=1).reshape(p.shape[0], -1)

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path) -> int:
        return self._save(path, FORMAT, self.cfg.to_meta(), values=self.values.astype(np.float32))

    @classmethod
    def load(cls, path) -> FSQCodec:
        with open_table(path, FORMAT) as z:
            meta = json.loads(str(z["config"]))
            cfg = config_from_meta(meta)
            spectral = CodecConfig(**meta["spectral"])
            return cls(cfg, spectral, z["mean"], z["components"], z["values"])
