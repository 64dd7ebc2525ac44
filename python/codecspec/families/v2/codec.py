"""Codec v2: 16 grid-structured levels over PCA components of stacked log-mel (issue 12).

v1's residual VQ levels are chaotic: a deep code flips under a pitch change of one espeak-ng
step and its codebook vectors have no neighbours (docs/codec_v2.md). Here
every level is a small grid: level k quantises a few PCA components (or the residual of
components an earlier level already quantised), each with its own ordered set of scalar values,
and its code is the mixed-radix number of the per-component indices (first component most
significant, the Rust core's `fsq_pack` order). Neighbouring indices are neighbouring values, so

* a small change of the signal moves a code to a grid neighbour, not to an unrelated cell;
* codes one grid step apart sound alike, so similarity groups are meaningful at every level.

The spectral front end, the PCA fit and the vocoder are the v1 codec's (`Codec`), exactly as
the FSQ family's codec uses them (`codecspec.codec.scalar.pca_codec`, shared): a v1 `Codec`
with one zero codebook entry is PCA plus Griffin-Lim. Scalar values per component are placed by
`bins`: ``"uniform"`` (equal steps over +-2.5 sigma, what the note measured), ``"quantile"``
(equal-mass cells) or ``"lloyd"`` (Lloyd-Max, minimum squared error).
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

__all__ = ["V2Config", "CodecV2", "BINS"]

FORMAT = "codecspec.codecv2/1"
BINS = ("uniform", "quantile", "lloyd")
MIN_CODES, MAX_CODES = 2, 4096
# arc embedding: a value of +-2.5 sigma maps to +-ARC radians, so the whole range of a component
# spans about pi and opposite ends of a grid are dissimilar (cosine near -1)
ARC = 0.5 * math.pi


def _spec(spec) -> tuple:
    """Normalise a level spec to ((components...), (bins...)) per level; ValueError naming
    `spec`."""
    try:
        out = tuple(
            (tuple(int(c) for c in comps), tuple(int(b) for b in bins)) for comps, bins in spec
        )
    except (TypeError, ValueError):
        raise ValueError(
            f"spec: expected a sequence of (components, bins) pairs, got {spec!r}"
        ) from None
    if not out:
        raise ValueError("spec: expected at least one level")
    seen = set()
    for k, (comps, bins) in enumerate(out):
        if not comps or len(comps) != len(bins):
            raise ValueError(f"spec: level {k} needs as many bin counts as components, got {comps}")
        if len(set(comps)) != len(comps) or min(comps) < 0:
            raise ValueError(f"spec: level {k} has repeated or negative components {comps}")
        if min(bins) < 2:
            raise ValueError(f"spec: level {k} bin counts must be >= 2, got {bins}")
        v = math.prod(bins)
        if not MIN_CODES <= v <= MAX_CODES:
            raise ValueError(f"spec: level {k} has {v} codes, outside [{MIN_CODES}, {MAX_CODES}]")
        seen.update(comps)
    if seen != set(range(len(seen))):
        raise ValueError("spec: the levels must cover components 0..n-1 with no gap")
    return out


@dataclass(frozen=True)
class V2Config:
    """Per level: which PCA components it quantises and how many values each gets. A component
    that an earlier level already covers is quantised again on its residual (a refinement)."""

    spec: tuple
    bins: str = "lloyd"

    def __post_init__(self):
        object.__setattr__(self, "spec", _spec(self.spec))
        if self.bins not in BINS:
            raise ValueError(f"bins: expected one of {BINS}, got {self.bins!r}")

    @classmethod
    def blocks(
        cls,
        grid=(8, 8, 4, 4),
        n_levels: int = 16,
        refine: int = 0,
        refine_grid=None,
        bins: str = "lloyd",
        interleave: bool = True,
    ) -> V2Config:
        """`n_levels - refine` levels over successive blocks of len(grid) components, and
        `refine` levels that re-quantise the residual of components 0, 1, ... in blocks of
        len(refine_grid) (default: `grid`). With `interleave` a refinement level follows the
        first level that completes its components (coarse to fine: refining the strongest
        components removes more error than a first pass over weak ones); otherwise the
        refinements come last."""
        grid = tuple(grid)
        refine_grid = tuple(refine_grid or grid)
        if isinstance(n_levels, bool) or not isinstance(n_levels, int) or n_levels < 1:
            raise ValueError(f"n_levels: expected a positive integer, got {n_levels!r}")
        if isinstance(refine, bool) or not isinstance(refine, int) or not 0 <= refine < n_levels:
            raise ValueError(f"refine: expected an integer in [0, n_levels), got {refine!r}")
        first, c = [], 0
        for _ in range(n_levels - refine):
            first.append((tuple(range(c, c + len(grid))), grid))
            c += len(grid)
        extra, r = [], 0
        for _ in range(refine):
            extra.append((tuple(range(r, r + len(refine_grid))), refine_grid))
            r += len(refine_grid)
        if r > c:
            raise ValueError(f"refine: {refine} levels refine {r} components, only {c} exist")
        if not interleave:
            return cls(tuple(first + extra), bins)
        spec = []
        for lv in first:
            spec.append(lv)
            done = max(lv[0]) + 1
            while extra and max(extra[0][0]) < done:
                spec.append(extra.pop(0))
        return cls(tuple(spec), bins)

    @property
    def n_levels(self) -> int:
        return len(self.spec)

    @property
    def pca_dim(self) -> int:
        return 1 + max(max(c) for c, _ in self.spec)

    @property
    def level_sizes(self) -> tuple:
        return tuple(math.prod(b) for _, b in self.spec)

    @property
    def bits_per_frame(self) -> float:
        return float(sum(math.log2(v) for v in self.level_sizes))

    def to_json(self) -> dict:
        return dict(spec=[[list(c), list(b)] for c, b in self.spec], bins=self.bins)


def _values(x: np.ndarray, n: int, bins: str, iters: int) -> np.ndarray:
    """`n` sorted reconstruction values of a scalar quantiser for the samples `x`."""
    if bins == "uniform":
        s = float(np.std(x)) or 1.0
        m = float(np.mean(x))
        return m + s * np.linspace(-2.5, 2.5, n)
    if bins == "quantile":
        # each cell holds 1/n of the training mass; its value is the cell's mean
        edges = np.quantile(x, np.arange(1, n) / n)
        cells = np.searchsorted(edges, x)
        sums = np.bincount(cells, weights=x, minlength=n)
        counts = np.bincount(cells, minlength=n)
        mid = np.quantile(x, (np.arange(n) + 0.5) / n)
        return np.sort(np.where(counts > 0, sums / np.maximum(counts, 1), mid))
    return lloyd_max(x, n, iters)


def _digits(codes: np.ndarray, bins: tuple) -> np.ndarray:
    """Mixed-radix digits int64 [..., len(bins)] of codes, first digit most significant."""
    c = np.asarray(codes, dtype=np.int64)
    out = np.empty(c.shape + (len(bins),), np.int64)
    for j in range(len(bins) - 1, -1, -1):
        out[..., j] = c % bins[j]
        c = c // bins[j]
    return out


def _pack(digits: np.ndarray, bins: tuple) -> np.ndarray:
    c = np.zeros(digits.shape[:-1], np.int64)
    for j, b in enumerate(bins):
        c = c * b + digits[..., j]
    return c


class CodecV2(PCAGridCodec):
    """``encode(wav) -> int32 [T, n_levels]`` (level k in [0, level_sizes[k])),
    ``decode(codes) -> float32 waveform`` with the v1 vocoder; ``codes`` may carry only the
    first l levels (coarse to fine). Per level: `code_vectors` (each code's latent
    contribution), `embeddings` (unit vectors whose cosine is acoustic closeness), `groups`
    (`cs.AcousticGroups` at a threshold), `neighbours` (grid neighbours)."""

    def __init__(self, cfg: V2Config, spectral: CodecConfig, mean, components, values, scales):
        if spectral.pca_dim != cfg.pca_dim:
            raise ValueError(f"spectral: pca_dim {spectral.pca_dim} != {cfg.pca_dim} in the spec")
        self.cfg = cfg
        self.pca = pca_codec(spectral, mean, components)
        slots = sum(len(c) for c, _ in cfg.spec)
        width = max(max(b) for _, b in cfg.spec)
        self.values = np.asarray(values, dtype=np.float32)
        self.scales = np.asarray(scales, dtype=np.float32)
        if self.values.shape != (slots, width):
            raise ValueError(f"values: expected shape {(slots, width)}, got {self.values.shape}")
        if self.scales.shape != (slots,) or not np.all(self.scales > 0):
            raise ValueError(f"scales: expected {slots} positive values")
        # slot s = one (level, component) pair, in level order
        self._slot0 = np.cumsum([0] + [len(c) for c, _ in cfg.spec])
        self._thr = []
        for s in range(slots):
            n = self._slot_bins(s)
            v = self.values[s, :n]
            self._thr.append(0.5 * (v[1:] + v[:-1]))

    def _slot_bins(self, s: int) -> int:
        k = int(np.searchsorted(self._slot0, s, side="right")) - 1
        return self.cfg.spec[k][1][s - self._slot0[k]]

    # ---- properties -------------------------------------------------------------------------
    @property
    def n_levels(self) -> int:
        return self.cfg.n_levels

    @property
    def level_sizes(self) -> tuple:
        return self.cfg.level_sizes

    # ---- training ---------------------------------------------------------------------------
    @classmethod
    def fit(cls, features, cfg: V2Config, spectral: CodecConfig | None = None, iters: int = 30):
        """PCA (the v1 codec's fit) to cfg.pca_dim components, then one scalar quantiser per
        (level, component), each fitted on what is left of that component after the earlier
        levels (so a refinement level fits the residual the shipped tables leave)."""
        if not isinstance(cfg, V2Config):
            raise ValueError(f"cfg: expected a V2Config, got {type(cfg).__name__}")
        if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
            raise ValueError(f"iters: expected a positive integer, got {iters!r}")
        spectral = dataclasses.replace(spectral or CodecConfig(), pca_dim=cfg.pca_dim)
        f = np.asarray(features)
        if f.ndim != 2 or f.shape[1] != spectral.feature_dim:
            raise ValueError(f"features: expected shape [N, {spectral.feature_dim}], got {f.shape}")
        if f.shape[0] < max(cfg.level_sizes):
            raise ValueError(
                f"features: need at least {max(cfg.level_sizes)} frames (the largest level), "
                f"got {f.shape[0]}"
            )
        pca = Codec.fit(f, dataclasses.replace(spectral, n_codebooks=1, codebook_size=1), iters=1)
        z = pca.project(f).astype(np.float64)
        recon = np.zeros_like(z)
        width = max(max(b) for _, b in cfg.spec)
        values, scales = [], []
        for comps, bins in cfg.spec:
            for c, n in zip(comps, bins):
                r = z[:, c] - recon[:, c]
                v = _values(r, n, cfg.bins, iters).astype(np.float32)
                idx = np.searchsorted(0.5 * (v[1:] + v[:-1]), r.astype(np.float32))
                recon[:, c] += v[idx]
                values.append(np.concatenate([v, np.full(width - n, v[-1], np.float32)]))
                scales.append(max(float(np.std(r)), 1e-6))
        return cls(cfg, spectral, pca.mean, pca.components, np.stack(values), np.array(scales))

    # ---- analysis / synthesis ---------------------------------------------------------------
    def encode_latent(self, z, first_level: int = 0, start=None) -> np.ndarray:
        """Codes int32 [T, n_levels - first_level] of PCA coordinates z [T, pca_dim], the
        levels before `first_level` taken as already reconstructed to `start` (default 0)."""
        z = np.asarray(z, dtype=np.float32)
        if z.ndim != 2 or z.shape[1] != self.cfg.pca_dim:
            raise ValueError(f"z: expected shape [T, {self.cfg.pca_dim}], got {z.shape}")
        recon = np.zeros_like(z) if start is None else np.array(start, dtype=np.float32)
        if recon.shape != z.shape:
            raise ValueError(f"start: expected shape {z.shape}, got {recon.shape}")
        out = np.empty((z.shape[0], self.n_levels - first_level), np.int32)
        for k in range(first_level, self.n_levels):
            comps, bins = self.cfg.spec[k]
            digits = np.empty((z.shape[0], len(comps)), np.int64)
            for j, c in enumerate(comps):
                s = self._slot0[k] + j
                r = z[:, c] - recon[:, c]
                d = np.searchsorted(self._thr[s], r)
                digits[:, j] = d
                recon[:, c] += self.values[s, d]
            out[:, k - first_level] = _pack(digits, bins)
        return out

    def encode_features(self, features) -> np.ndarray:
        return self.encode_latent(self.pca.project(features))

    def check_codes(self, codes, name: str = "codes") -> np.ndarray:
        c = np.asarray(codes)
        if c.ndim != 2 or not 0 < c.shape[1] <= self.n_levels:
            raise ValueError(
                f"{name}: expected shape [T, l] with 1 <= l <= {self.n_levels}, got {c.shape}"
            )
        if c.dtype.kind not in "iu":
            raise ValueError(f"{name}: expected integers, got dtype {c.dtype}")
        sizes = np.array(self.level_sizes[: c.shape[1]])
        if c.size and (c.min() < 0 or np.any(c >= sizes)):
            raise ValueError(f"{name}: level k's codes must lie in [0, level_sizes[k])")
        return c

    def latent(self, codes) -> np.ndarray:
        """PCA coordinates float32 [T, pca_dim] of codes [T, l] (missing levels add 0)."""
        c = self.check_codes(codes)
        z = np.zeros((c.shape[0], self.cfg.pca_dim), np.float32)
        for k in range(c.shape[1]):
            z += self.code_vectors(k)[c[:, k]]
        return z

    # ---- per-level structure ----------------------------------------------------------------
    def _level(self, level) -> int:
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)):
            raise ValueError(f"level: expected an integer, got {level!r}")
        if not 0 <= level < self.n_levels:
            raise ValueError(f"level: expected 0 <= level < {self.n_levels}, got {level}")
        return int(level)

    def digits(self, level, codes) -> np.ndarray:
        """Per-component grid indices int64 [..., components of the level] of codes."""
        k = self._level(level)
        c = np.asarray(codes)
        if c.dtype.kind not in "iu" or (c.size and (c.min() < 0 or c.max() >= self.level_sizes[k])):
            raise ValueError(f"codes: expected integers in [0, {self.level_sizes[k]})")
        return _digits(c, self.cfg.spec[k][1])

    def code_vectors(self, level) -> np.ndarray:
        """float32 [level_sizes[level], pca_dim]: what each code adds to the latent."""
        k = self._level(level)
        comps, bins = self.cfg.spec[k]
        d = _digits(np.arange(math.prod(bins)), bins)
        out = np.zeros((d.shape[0], self.cfg.pca_dim), np.float32)
        for j, c in enumerate(comps):
            out[:, c] = self.values[self._slot0[k] + j, d[:, j]]
        return out

    def embeddings(self, level) -> np.ndarray:
        """Unit vectors float32 [V, 2 * components] for similarity groups: component j's value v
        becomes the arc point (cos a, sin a), a = ARC * v / (2.5 sigma_j), weighted by
        sigma_j. The cosine of two codes is then sum_j w_j cos(a_j - a'_j) with w ~ sigma_j^2,
        about 1 - 0.2 * (their squared latent distance) / (the level's variance): near codes
        are similar, and raw vectors' cosine (meaningless for a grid centred on 0) is avoided."""
        k = self._level(level)
        comps, bins = self.cfg.spec[k]
        d = _digits(np.arange(math.prod(bins)), bins)
        s = self.scales[self._slot0[k] : self._slot0[k] + len(comps)].astype(np.float64)
        parts = []
        for j in range(len(comps)):
            a = ARC * self.values[self._slot0[k] + j, d[:, j]].astype(np.float64) / (2.5 * s[j])
            parts += [s[j] * np.cos(a), s[j] * np.sin(a)]
        e = np.stack(parts, axis=1)
        return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32)

    def groups(self, level, threshold: float) -> cs.AcousticGroups:
        """`cs.AcousticGroups` over the level's `embeddings` at cosine >= `threshold`."""
        return cs.AcousticGroups.from_embeddings(self.embeddings(level), float(threshold))

    def neighbours(self, level) -> np.ndarray:
        """int32 [V, max_degree]: the codes one grid step away (every component index within
        1, not all equal), padded with -1."""
        k = self._level(level)
        bins = self.cfg.spec[k][1]
        d = _digits(np.arange(math.prod(bins)), bins)
        steps = np.stack(np.meshgrid(*[[-1, 0, 1]] * len(bins), indexing="ij"), -1)
        steps = steps.reshape(-1, len(bins))
        steps = steps[np.any(steps != 0, axis=1)]
        cand = d[:, None, :] + steps[None, :, :]
        ok = np.all((cand >= 0) & (cand < np.array(bins)), axis=2)
        codes = np.where(ok, _pack(np.clip(cand, 0, np.array(bins) - 1), bins), -1)
        order = np.argsort(~ok, axis=1, kind="stable")  # valid first, in step order
        codes = np.take_along_axis(codes, order, axis=1)
        return codes[:, : int(ok.sum(axis=1).max())].astype(np.int32)

    def within_one_step(self, level, a, b) -> np.ndarray:
        """bool: codes a and b of the level differ by at most one grid step per component."""
        return np.all(np.abs(self.digits(level, a) - self.digits(level, b)) <= 1, axis=-1)

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path) -> int:
        arrays = dict(values=self.values.astype(np.float32), scales=self.scales.astype(np.float32))
        return self._save(path, FORMAT, dict(v2=self.cfg.to_json()), **arrays)

    @classmethod
    def load(cls, path) -> CodecV2:
        with open_table(path, FORMAT) as z:
            meta = json.loads(str(z["config"]))
            cfg = V2Config(spec=meta["v2"]["spec"], bins=meta["v2"]["bins"])
            spectral = CodecConfig(**meta["spectral"])
            return cls(cfg, spectral, z["mean"], z["components"], z["values"], z["scales"])


def stability(codec, codes_a, codes_b) -> dict:
    """Per level: fraction of identical codes and (for a `CodecV2`) within one grid step between
    two code arrays [T, L] of aligned frames (e.g. a clip and its re-render)."""
    a, b = np.asarray(codes_a), np.asarray(codes_b)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"codes_b: expected the shape of codes_a {a.shape}, got {b.shape}")
    same = (a == b).mean(axis=0).tolist() if a.shape[0] else [float("nan")] * a.shape[1]
    out = dict(identical=same)
    if isinstance(codec, CodecV2):
        out["within_one"] = [
            float(codec.within_one_step(k, a[:, k], b[:, k]).mean()) for k in range(a.shape[1])
        ]
    return out


def mean_group_size(groups: cs.AcousticGroups) -> float:
    """Mean number of members per group (1.0 = every group a singleton)."""
    return float(groups.nnz / groups.num_groups)
