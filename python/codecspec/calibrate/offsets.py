"""Learned position offsets b_1..b_K for depth speculation, trained with the heads frozen.

For the node holding c_l (hidden z_l = z[:, l + 1]) and lookahead j (1 <= j <= K, l + j <= G-2):

    draft logits  = heads[l + j] @ (z_l + b_j)        target c_{l+1+j}

trained by cross-entropy with Adam (lr 1e-3, batch 32 frames, betas 0.9/0.999). Only the K*H
offset values move; the verify path never sees them, so decoding stays lossless whatever they
are. Zero offsets are plain head reuse.

Because the heads are frozen the logits split into heads[h] @ z_l (fixed, computed once per
example) plus heads[h] @ b_j (one [V] vector per (head, lookahead) pair), and the gradient
Σ_n heads[h]^T (softmax - onehot)_n collapses to one mat-vec per pair after summing residuals
over the batch: a training step costs O(pairs * V * H + batch * pairs * V), not
O(batch * pairs * V * H).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from codecspec.decode.offsets_file import config_hash, heads_hash, load_offsets
from codecspec.progress import bar

log = logging.getLogger("codecspec.calibrate")

__all__ = [
    "Adam",
    "OffsetDrafter",
    "TrainHistory",
    "config_hash",
    "cross_entropy",
    "draft_logits",
    "evaluate_offsets",
    "heads_hash",
    "load_offsets",
    "lookahead_pairs",
    "offset_loss_and_grad",
    "offsets_path_for",
    "save_offsets",
    "split_frames",
    "train_offsets",
]

OFFSETS_FORMAT = "codecspec.offsets"
OFFSETS_VERSION = 1


# ---------------------------------------------------------------------- building blocks
def lookahead_pairs(num_codebooks: int, K: int) -> np.ndarray:
    """int64 [P, 3] rows (l, j, h = l + j): every trainable (node level, lookahead) pair."""
    G = int(num_codebooks)
    rows = [(lv, j, lv + j) for j in range(1, K + 1) for lv in range(0, G - 1) if lv + j <= G - 2]
    return np.asarray(rows, np.int64).reshape(-1, 3)


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy over rows and its gradient w.r.t. the logits.

    logits [..., V] (float), targets [...] int. Returns (loss, dlogits) with
    dlogits = (softmax - onehot) / number of rows.
    """
    logits = np.asarray(logits)
    V = logits.shape[-1]
    flat = logits.reshape(-1, V).astype(np.float64)
    t = np.asarray(targets).reshape(-1)
    if t.shape[0] != flat.shape[0]:
        raise ValueError(f"targets: expected {flat.shape[0]} rows, got {t.shape[0]}")
    m = flat.max(axis=1, keepdims=True)
    e = np.exp(flat - m)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(flat.shape[0])
    loss = float(np.mean(np.log(s[:, 0]) + m[:, 0] - flat[rows, t]))
    grad = e / s
    grad[rows, t] -= 1.0
    grad /= flat.shape[0]
    return loss, grad.reshape(logits.shape).astype(logits.dtype, copy=False)


class Adam:
    """Adam (Kingma & Ba) with bias correction, updating numpy arrays in place."""

    def __init__(self, params: list, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        if not lr > 0:
            raise ValueError(f"lr: must be > 0, got {lr}")
        b1, b2 = betas
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"betas: must be in [0, 1), got {betas}")
        self.params = params
        self.lr, self.b1, self.b2, self.eps = float(lr), float(b1), float(b2), float(eps)
        # Moments in the parameters' own dtype: float64 state for ~90M Medusa parameters
        # would cost 1.4 GB for no measurable gain.
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads: list) -> None:
        self.t += 1
        c1 = 1.0 - self.b1**self.t
        c2 = 1.0 - self.b2**self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            g = np.asarray(g, p.dtype)
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * np.square(g)
            p -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)


def draft_logits(z_node: np.ndarray, heads: np.ndarray, offsets: np.ndarray, level: int):
    """Draft logits [..., K, V] of the node holding c_level: heads[min(l+j, G-2)] @ (z + b_j).

    Same formula as the graph's `draft_logits` output (including the clamp of the head index
    at the last head, whose rows past c_{G-1} are never used as drafts).
    """
    z = np.asarray(z_node, np.float32)
    offsets = np.asarray(offsets, np.float32)
    K = offsets.shape[0]
    last = heads.shape[0] - 1
    out = np.empty(z.shape[:-1] + (K, heads.shape[1]), np.float32)
    for j in range(1, K + 1):
        out[..., j - 1, :] = (z + offsets[j - 1]) @ heads[min(level + j, last)].T
    return out


@dataclass
class OffsetDrafter:
    """Drafts from the frozen heads plus offsets (zeros = plain head reuse)."""

    heads: np.ndarray
    offsets: np.ndarray
    name: str = "offsets"

    @property
    def K(self) -> int:
        return int(self.offsets.shape[0])

    @property
    def V(self) -> int:
        return int(self.heads.shape[1])

    @property
    def num_parameters(self) -> int:
        return int(self.offsets.size)

    def draft_logits(self, z_node: np.ndarray, level: int) -> np.ndarray:
        return draft_logits(z_node, self.heads, self.offsets, level)


def _check(z, codes, heads, K) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    z = np.asarray(z, np.float32)
    codes = np.asarray(codes)
    heads = np.asarray(heads, np.float32)
    if heads.ndim != 3:
        raise ValueError(f"heads: expected [G-1, V, H], got shape {heads.shape}")
    G = heads.shape[0] + 1
    H = heads.shape[2]
    if codes.ndim != 2 or codes.shape[1] != G or not np.issubdtype(codes.dtype, np.integer):
        raise ValueError(f"codes: expected integer [N, {G}], got {codes.dtype} {codes.shape}")
    if z.shape != (codes.shape[0], G, H):
        raise ValueError(f"z: expected shape ({codes.shape[0]}, {G}, {H}), got {z.shape}")
    if isinstance(K, bool) or int(K) < 1:
        raise ValueError(f"K: must be >= 1, got {K}")
    if np.any(codes[:, 1:] < 0) or np.any(codes[:, 1:] >= heads.shape[1]):
        raise ValueError(f"codes: c1.. must be in [0, {heads.shape[1]})")
    return z, codes, heads


class _Examples:
    """All (frame, pair) examples with the frozen part heads[h] @ z_l precomputed.

    The cache holds [N, P, V] float32; past `cache_bytes` the frozen logits are recomputed
    per batch instead (same numbers, more FLOPs).
    """

    def __init__(self, z, codes, heads, K, cache_bytes: int = 1 << 30):
        self.z, self.codes, self.heads = z, codes, heads
        G = heads.shape[0] + 1
        self.pairs = lookahead_pairs(G, K)
        self.K = int(K)
        P = len(self.pairs)
        if P == 0:
            raise ValueError(f"K={K} leaves no lookahead pair for {G} codebooks")
        self.levels, self.js, self.hs = self.pairs.T
        self.targets = codes[:, self.levels + 1 + self.js]  # [N, P]
        self.by_head = {int(h): np.flatnonzero(self.hs == h) for h in np.unique(self.hs)}
        N, V = codes.shape[0], heads.shape[1]
        self._cache = None
        if N * P * V * 4 <= cache_bytes:
            self._cache = self._frozen(np.arange(N))

    def _frozen(self, idx: np.ndarray) -> np.ndarray:
        n, V = len(idx), self.heads.shape[1]
        out = np.empty((n, len(self.pairs), V), np.float32)
        zb = self.z[idx]
        for h, ps in self.by_head.items():
            # One 2-D GEMM per head: numpy would loop a 3-D operand over its batch axis.
            x = zb[:, self.levels[ps] + 1].reshape(-1, zb.shape[-1])
            out[:, ps] = (x @ self.heads[h].T).reshape(n, len(ps), V)
        return out

    def frozen(self, idx: np.ndarray) -> np.ndarray:
        return self._cache[idx] if self._cache is not None else self._frozen(idx)

    def shift(self, offsets: np.ndarray) -> np.ndarray:
        """[P, V]: heads[h_p] @ b_{j_p}."""
        u = np.empty((len(self.pairs), self.heads.shape[1]), self.heads.dtype)
        for h, ps in self.by_head.items():
            # einsum, not BLAS: with k <= K rows, threaded GEMM on a busy machine was measured
            # 10-30x slower than numpy's single-threaded loop.
            b = offsets[self.js[ps] - 1].astype(self.heads.dtype)
            u[ps] = np.einsum("vh,kh->kv", self.heads[h], b)
        return u

    def shift_grad(self, rsum: np.ndarray) -> np.ndarray:
        """d/d offsets of Σ_p rsum[p] . (heads[h_p] @ b_{j_p}) -> [K, H]."""
        g = np.zeros((self.K, self.heads.shape[2]), np.float64)
        for h, ps in self.by_head.items():
            # In the heads' dtype: converting a [V, H] head to float64 every step costs more
            # than the product itself.
            r = rsum[ps].astype(self.heads.dtype)
            np.add.at(g, self.js[ps] - 1, np.einsum("kv,vh->kh", r, self.heads[h]))
        return g

    def loss_grad(self, offsets: np.ndarray, idx: np.ndarray) -> tuple[float, np.ndarray]:
        logits = self.frozen(idx) + self.shift(offsets)[None]
        loss, d = cross_entropy(logits, self.targets[idx])
        return loss, self.shift_grad(d.sum(axis=0, dtype=np.float64))

    def metrics(self, offsets: np.ndarray, idx: np.ndarray, chunk: int = 64) -> dict:
        """Per lookahead j: mean CE, top-1 and top-5 accuracy over frames idx."""
        K = self.K
        ce = np.zeros(K)
        top1 = np.zeros(K)
        top5 = np.zeros(K)
        cnt = np.zeros(K)
        u = self.shift(offsets)
        for s in range(0, len(idx), chunk):
            b = idx[s : s + chunk]
            logits = (self.frozen(b) + u[None]).astype(np.float64)  # [B, P, V]
            t = self.targets[b]
            tl = np.take_along_axis(logits, t[..., None], axis=-1)
            m = logits.max(axis=-1, keepdims=True)
            lse = np.log(np.exp(logits - m).sum(axis=-1)) + m[..., 0]
            nll = lse - tl[..., 0]
            # Rank as cs.topk orders ties: lower index first.
            V = logits.shape[-1]
            before = np.arange(V)[None, None, :] < t[..., None]
            rank = (logits > tl).sum(-1) + ((logits == tl) & before).sum(-1)
            for j in range(1, K + 1):
                sel = self.js == j
                ce[j - 1] += nll[:, sel].sum()
                top1[j - 1] += (rank[:, sel] < 1).sum()
                top5[j - 1] += (rank[:, sel] < 5).sum()
                cnt[j - 1] += nll[:, sel].size
        cnt = np.maximum(cnt, 1)
        return {
            "ce": (ce / cnt).tolist(),
            "top1": (top1 / cnt).tolist(),
            "top5": (top5 / cnt).tolist(),
            "mean_ce": float(ce.sum() / cnt.sum()),
        }


def offset_loss_and_grad(offsets, z, codes, heads, frames=None) -> tuple[float, np.ndarray]:
    """Mean draft cross-entropy over all (frame, pair) examples and its gradient [K, H]."""
    offsets = np.asarray(offsets, np.float64)
    z, codes, heads = _check(z, codes, heads, offsets.shape[0])
    ex = _Examples(z, codes, heads, offsets.shape[0], cache_bytes=0)
    idx = np.arange(len(codes)) if frames is None else np.asarray(frames)
    # float64 throughout so finite differences can check the gradient tightly.
    ex.heads = heads.astype(np.float64)
    ex.z = z.astype(np.float64)
    logits = np.empty((len(idx), len(ex.pairs), heads.shape[1]), np.float64)
    for h, ps in ex.by_head.items():
        zl = ex.z[idx][:, ex.levels[ps] + 1] + offsets[ex.js[ps] - 1][None]
        logits[:, ps] = zl @ ex.heads[h].T
    loss, d = cross_entropy(logits, ex.targets[idx])
    return loss, ex.shift_grad(d.sum(axis=0))


def evaluate_offsets(offsets, z, codes, heads, frames=None) -> dict:
    """Per-lookahead CE / top-1 / top-5 of the drafts with `offsets` on frames (default all)."""
    offsets = np.asarray(offsets, np.float32)
    z, codes, heads = _check(z, codes, heads, offsets.shape[0])
    ex = _Examples(z, codes, heads, offsets.shape[0], cache_bytes=0)
    idx = np.arange(len(codes)) if frames is None else np.asarray(frames)
    return ex.metrics(offsets, idx)


def split_frames(n: int, val_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) frame indices; at least one frame in each when n >= 2."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction: must be in [0, 1), got {val_fraction}")
    perm = np.random.default_rng(seed).permutation(n)
    nv = int(round(n * val_fraction))
    if val_fraction > 0 and n >= 2:
        nv = min(max(nv, 1), n - 1)
    return np.sort(perm[nv:]), np.sort(perm[:nv])


# ---------------------------------------------------------------------- training
@dataclass
class TrainHistory:
    """Loss curve and held-out metrics of one training run."""

    steps: list = field(default_factory=list)  # step index of each train_loss entry
    train_loss: list = field(default_factory=list)  # minibatch CE
    eval_steps: list = field(default_factory=list)
    val: list = field(default_factory=list)  # metrics dicts (see evaluate_offsets)
    baseline: Optional[dict] = None  # held-out metrics of zero offsets (head reuse)
    num_train: int = 0
    num_val: int = 0
    seconds: float = 0.0

    @property
    def final(self) -> Optional[dict]:
        return self.val[-1] if self.val else None

    def to_dict(self) -> dict:
        return asdict(self)


def train_val_split(n: int, val_frames, val_fraction: float, seed: int):
    """(train, held-out) frame indices: `val_frames` if given, else a `val_fraction` split."""
    if val_frames is not None:
        val_idx = np.unique(np.asarray(val_frames, np.int64))
        train_idx = np.setdiff1d(np.arange(n), val_idx)
    else:
        train_idx, val_idx = split_frames(n, val_fraction, seed)
    if len(train_idx) == 0:
        raise ValueError("no training frames left after the held-out split")
    return train_idx, val_idx


def adam_loop(
    train_idx,
    val_idx,
    step,
    evaluate,
    *,
    baseline=None,
    batch_size=32,
    epochs=20,
    steps=None,
    eval_every=None,
    seed=0,
    desc="train",
    progress=True,
) -> TrainHistory:
    """Shuffled mini-batches of frames: `step(batch) -> loss` updates the parameters,
    `evaluate(val_idx) -> metrics` runs every `eval_every` steps (default once per epoch) and
    at the end; `baseline(val_idx)` is evaluated once before training."""
    import time

    t0 = time.monotonic()
    B = max(1, min(int(batch_size), len(train_idx)))
    per_epoch = -(-len(train_idx) // B)
    total = int(steps) if steps is not None else int(epochs) * per_epoch
    every = int(eval_every) if eval_every else per_epoch
    hist = TrainHistory(num_train=len(train_idx), num_val=len(val_idx))
    if len(val_idx) and baseline is not None:
        hist.baseline = baseline(val_idx)
    rng = np.random.default_rng(seed + 1)
    order = np.empty(0, np.int64)
    it = bar(range(total), desc, total, show=progress)
    for i in it:
        if len(order) < B:
            order = np.concatenate([order, rng.permutation(train_idx)])
        batch, order = order[:B], order[B:]
        hist.steps.append(i + 1)
        hist.train_loss.append(step(batch))
        if len(val_idx) and ((i + 1) % every == 0 or i + 1 == total):
            hist.eval_steps.append(i + 1)
            hist.val.append(evaluate(val_idx))
    hist.seconds = time.monotonic() - t0
    return hist


def train_offsets(
    z,
    codes,
    heads,
    K: int,
    *,
    epochs: int = 20,
    steps: Optional[int] = None,
    batch_size: int = 32,
    lr: float = 1e-3,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    val_fraction: float = 0.1,
    val_frames: Optional[np.ndarray] = None,
    eval_every: Optional[int] = None,
    init: Optional[np.ndarray] = None,
    seed: int = 0,
    progress: bool = True,
) -> tuple[np.ndarray, TrainHistory]:
    """Train offsets [K, H] (float32) on teacher-forced hidden states; heads stay frozen.

    z [N, G, H] from `teacher_forced_hidden`, codes [N, G], heads [G-1, V, H]. A batch is
    `batch_size` frames, each contributing all its (level, lookahead) examples. `steps`
    overrides `epochs`. Held-out frames (`val_frames`, else a `val_fraction` split) are never
    trained on; their per-lookahead CE / top-1 / top-5 are logged every `eval_every` steps
    (default: once per epoch) and at the end, with zero offsets as the baseline.
    """
    z, codes, heads = _check(z, codes, heads, K)
    K = int(K)
    N, _, H = z.shape
    train_idx, val_idx = train_val_split(N, val_frames, val_fraction, seed)
    ex = _Examples(z, codes, heads, K)
    offsets = np.zeros((K, H), np.float32) if init is None else np.array(init, np.float32)
    if offsets.shape != (K, H):
        raise ValueError(f"init: expected shape ({K}, {H}), got {offsets.shape}")
    opt = Adam([offsets], lr=lr, betas=betas, eps=eps)

    def step(batch):
        loss, grad = ex.loss_grad(offsets, batch)
        opt.step([grad])
        return loss

    hist = adam_loop(
        train_idx,
        val_idx,
        step,
        lambda idx: ex.metrics(offsets, idx),
        baseline=lambda idx: ex.metrics(np.zeros((K, H), np.float32), idx),
        batch_size=batch_size,
        epochs=epochs,
        steps=steps,
        eval_every=eval_every,
        seed=seed,
        desc="train offsets",
        progress=progress,
    )
    if hist.final is not None and hist.baseline is not None:
        log.info(
            "offsets: held-out CE %.4f -> %.4f, top-1 %s -> %s",
            hist.baseline["mean_ce"],
            hist.final["mean_ce"],
            _fmt(hist.baseline["top1"]),
            _fmt(hist.final["top1"]),
        )
    return offsets, hist


def _fmt(xs) -> str:
    return "[" + ", ".join(f"{x:.3f}" for x in xs) + "]"


# ---------------------------------------------------------------------- persistence
def offsets_path_for(model_path: Union[str, os.PathLike]) -> Path:
    """Where offsets live beside a model: `model.onnx` -> `model.offsets.npz`."""
    p = Path(model_path)
    return p.with_name(p.stem + ".offsets.npz")


def save_offsets(path, offsets: np.ndarray, meta: Optional[dict] = None) -> Path:
    """Write offsets [K, H] and JSON metadata to an uncompressed .npz.

    Metadata always gets `format`, `version`, `K`, `hidden_size` and `date` (UTC, ISO 8601);
    callers add `config_hash`, `heads_hash`, `train_loss`, held-out metrics, etc.
    """
    offsets = np.ascontiguousarray(offsets, np.float32)
    if offsets.ndim != 2 or not np.all(np.isfinite(offsets)):
        raise ValueError(f"offsets: expected finite [K, H], got shape {offsets.shape}")
    m: dict[str, Any] = dict(meta or {})
    m.update(
        format=OFFSETS_FORMAT,
        version=OFFSETS_VERSION,
        K=int(offsets.shape[0]),
        hidden_size=int(offsets.shape[1]),
    )
    m.setdefault("date", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    path = Path(path)
    with open(path, "wb") as f:  # a file object stops numpy from appending ".npz"
        np.savez(f, offsets=offsets, meta=np.frombuffer(json.dumps(m).encode(), np.uint8))
    return path
