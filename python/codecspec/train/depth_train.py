"""Train a depth decoder alone on frozen temporal hidden states ([train] extra).

The v2 recipe trains its per-position depth decoder jointly with the temporal LM. To compare
depth decoders fairly (`SharedDepthModel` vs `DepthModel`), both are trained here on the same
teacher-forced (h_t, real codes) pairs, for the same number of steps of the same batch size,
with the same schedule, and scored by held-out cross-entropy per level.
"""

from __future__ import annotations

import math
import time
from typing import Optional

import numpy as np
import torch

from codecspec.train.networks import depth_loss

__all__ = ["train_depth", "heldout_cross_entropy", "count_parameters"]


def count_parameters(model: torch.nn.Module) -> int:
    """Trainable parameters, each counted once (tied tensors are one parameter)."""
    return int(sum(p.numel() for p in model.parameters()))


def _check(h, codes, G: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.as_tensor(np.asarray(h, np.float32))
    codes = torch.as_tensor(np.asarray(codes, np.int64))
    if h.ndim != 2 or h.shape[1] != width:
        raise ValueError(f"hiddens: expected [N, {width}], got {tuple(h.shape)}")
    if codes.shape != (len(h), G):
        raise ValueError(f"codes: expected [{len(h)}, {G}], got {tuple(codes.shape)}")
    return h, codes


@torch.no_grad()
def heldout_cross_entropy(model, hiddens, codes, chunk: int = 512) -> np.ndarray:
    """Mean cross-entropy (nats) per level c1..c_{G-1} [G-1] on teacher-forced frames."""
    c = model.c
    h, cd = _check(hiddens, codes, c.num_codebooks, c.input_width)
    was = model.training
    model.eval()
    tot = torch.zeros(c.num_codebooks - 1, dtype=torch.float64)
    for i in range(0, len(h), chunk):
        tot += depth_loss(model, h[i : i + chunk], cd[i : i + chunk]).double().sum(0)
    model.train(was)
    return (tot / max(len(h), 1)).numpy()


def train_depth(
    model,
    hiddens,
    codes,
    *,
    steps: int,
    batch: int = 256,
    lr: float = 1.5e-3,
    warmup: float = 0.05,
    seed: int = 0,
    val: Optional[tuple] = None,
    eval_every: int = 0,
    progress: bool = False,
) -> dict:
    """Adam with linear warm-up and cosine decay to 5% over `steps` steps of `batch` random
    frames. Returns {"steps", "seconds", "train_loss" (per step), "val" ([step, mean CE])}."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected a positive int, got {steps!r}")
    c = model.c
    h, cd = _check(hiddens, codes, c.num_codebooks, c.input_width)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses, curve = [], []
    it = range(steps)
    if progress:
        from codecspec.progress import bar

        it = bar(it, desc=f"train {type(model).__name__}")
    t0 = time.monotonic()
    for s in it:
        frac = s / steps
        if frac < warmup:
            f = (s + 1) / max(1, int(warmup * steps))
        else:
            t = (frac - warmup) / max(1e-9, 1.0 - warmup)
            f = 0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * t))
        for grp in opt.param_groups:
            grp["lr"] = lr * min(1.0, f)
        pick = torch.randint(0, len(h), (batch,), generator=gen)
        loss = depth_loss(model, h[pick], cd[pick]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if val is not None and eval_every and (s + 1) % eval_every == 0:
            curve.append([s + 1, float(heldout_cross_entropy(model, *val).mean())])
    model.eval()
    return {
        "steps": steps,
        "batch": batch,
        "seconds": round(time.monotonic() - t0, 1),
        "train_loss": losses,
        "val": curve,
    }
