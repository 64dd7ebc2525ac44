"""Medusa-style draft heads: the ablation baseline for learned offsets.

One separate linear head (weight [V, H] + bias [V]) per (node level l, lookahead j) pair,
initialised from the frozen head l + j (so training starts at plain head reuse) and trained with
the same Adam / cross-entropy as the offsets. For Qwen3-TTS (G=16, K=3, V=2048, H=1024) that is
42 heads, ~88M parameters, against 3072 for the offsets. Used offline only: acceptance and
tokens-per-call are measured from teacher-forced hidden states, no graph change needed.
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from codecspec.calibrate.offsets import (
    Adam,
    TrainHistory,
    _check,
    adam_loop,
    cross_entropy,
    lookahead_pairs,
    train_val_split,
)

log = logging.getLogger("codecspec.calibrate")

__all__ = ["MedusaHeads", "train_medusa"]


class MedusaHeads:
    """weights float32 [P, V, H], bias float32 [P, V] for the pairs of `lookahead_pairs(G, K)`."""

    name = "medusa"

    def __init__(self, weights: np.ndarray, bias: np.ndarray, num_codebooks: int, K: int):
        self.G, self.K = int(num_codebooks), int(K)
        self.pairs = lookahead_pairs(self.G, self.K)
        P = len(self.pairs)
        self.weights = np.ascontiguousarray(weights, np.float32)
        self.bias = np.ascontiguousarray(bias, np.float32)
        if self.weights.ndim != 3 or self.weights.shape[0] != P:
            raise ValueError(f"weights: expected [{P}, V, H], got {self.weights.shape}")
        if self.bias.shape != self.weights.shape[:2]:
            raise ValueError(f"bias: expected {self.weights.shape[:2]}, got {self.bias.shape}")
        self.index = {(int(lv), int(j)): p for p, (lv, j, _) in enumerate(self.pairs)}

    @classmethod
    def from_heads(cls, heads: np.ndarray, K: int) -> MedusaHeads:
        heads = np.asarray(heads, np.float32)
        pairs = lookahead_pairs(heads.shape[0] + 1, K)
        w = heads[pairs[:, 2]].copy()
        return cls(w, np.zeros(w.shape[:2], np.float32), heads.shape[0] + 1, K)

    @property
    def V(self) -> int:
        return int(self.weights.shape[1])

    @property
    def num_parameters(self) -> int:
        return int(self.weights.size + self.bias.size)

    def draft_logits(self, z_node: np.ndarray, level: int) -> np.ndarray:
        """[..., K, V] drafts from the node holding c_level (z_node [..., H]).

        Lookaheads past c_{G-1} have no head (nothing to predict); their rows are zeros
        (uniform), which the decoder never reads because the tree is cut at the frame end.
        """
        z = np.asarray(z_node, np.float32)
        out = np.zeros(z.shape[:-1] + (self.K, self.V), np.float32)
        for j in range(1, self.K + 1):
            p = self.index.get((int(level), j))
            if p is not None:
                out[..., j - 1, :] = z @ self.weights[p].T + self.bias[p]
        return out

    def save(self, path) -> None:
        with open(path, "wb") as f:
            np.savez(
                f, weights=self.weights, bias=self.bias, shape=np.array([self.G, self.K], np.int64)
            )

    @classmethod
    def load(cls, path) -> MedusaHeads:
        with np.load(path, allow_pickle=False) as f:
            G, K = (int(x) for x in f["shape"])
            return cls(f["weights"], f["bias"], G, K)


def _pair_data(z, codes, pairs, idx, p):
    lv, j, _ = pairs[p]
    return z[idx, lv + 1], codes[idx, lv + 1 + j]


def _metrics(m: MedusaHeads, z, codes, idx) -> dict:
    K = m.K
    ce, top1, top5, cnt = (np.zeros(K) for _ in range(4))
    for p, (_lv, j, _h) in enumerate(m.pairs):
        x, t = _pair_data(z, codes, m.pairs, idx, p)
        logits = (x @ m.weights[p].T + m.bias[p]).astype(np.float64)
        tl = logits[np.arange(len(t)), t]
        mx = logits.max(axis=1)
        lse = np.log(np.exp(logits - mx[:, None]).sum(axis=1)) + mx
        before = np.arange(m.V)[None, :] < t[:, None]
        rank = (logits > tl[:, None]).sum(1) + ((logits == tl[:, None]) & before).sum(1)
        ce[j - 1] += (lse - tl).sum()
        top1[j - 1] += (rank < 1).sum()
        top5[j - 1] += (rank < 5).sum()
        cnt[j - 1] += len(t)
    cnt = np.maximum(cnt, 1)
    return {
        "ce": (ce / cnt).tolist(),
        "top1": (top1 / cnt).tolist(),
        "top5": (top5 / cnt).tolist(),
        "mean_ce": float(ce.sum() / cnt.sum()),
    }


def train_medusa(
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
    val_fraction: float = 0.1,
    val_frames: Optional[np.ndarray] = None,
    eval_every: Optional[int] = None,
    seed: int = 0,
    keep_best: bool = False,
    progress: bool = True,
) -> tuple[MedusaHeads, TrainHistory]:
    """Train per-(level, lookahead) heads; same batches, optimiser and split as `train_offsets`.

    The loss is the mean CE over all (frame, pair) examples of the batch, as for the offsets,
    so the two loss curves are directly comparable. With `keep_best`, the heads end at the
    evaluation with the lowest held-out CE (early stopping: millions of parameters overfit a
    few thousand frames, so the held-out frames must then not be those later measured on).
    """
    z, codes, heads = _check(z, codes, heads, K)
    train_idx, val_idx = train_val_split(len(codes), val_frames, val_fraction, seed)
    m = MedusaHeads.from_heads(heads, K)
    P = len(m.pairs)
    opt = Adam([m.weights, m.bias], lr=lr, betas=betas)
    gw = np.zeros_like(m.weights)
    gb = np.zeros_like(m.bias)

    def step(batch):
        loss = 0.0
        for p in range(P):
            x, t = _pair_data(z, codes, m.pairs, batch, p)
            lp, d = cross_entropy(x @ m.weights[p].T + m.bias[p], t)
            # Each pair holds 1/P of the batch's examples: the mean over all is the mean of means.
            loss += lp / P
            gw[p] = (d.T @ x) / P
            gb[p] = d.sum(axis=0) / P
        opt.step([gw, gb])
        return loss

    best = {"ce": np.inf, "weights": None, "bias": None}

    def evaluate(idx):
        out = _metrics(m, z, codes, idx)
        if keep_best and out["mean_ce"] < best["ce"]:
            best.update(ce=out["mean_ce"], weights=m.weights.copy(), bias=m.bias.copy())
        return out

    hist = adam_loop(
        train_idx,
        val_idx,
        step,
        evaluate,
        baseline=evaluate,
        batch_size=batch_size,
        epochs=epochs,
        steps=steps,
        eval_every=eval_every,
        seed=seed,
        desc="train medusa",
        progress=progress,
    )
    if keep_best and best["weights"] is not None:
        m.weights[...] = best["weights"]
        m.bias[...] = best["bias"]
    log.info("medusa: %d heads, %d parameters, %.1fs", P, m.num_parameters, hist.seconds)
    return m, hist
