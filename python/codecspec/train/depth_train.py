"""Train a depth decoder alone on frozen temporal hidden states ([train] extra).

The v2 recipe trains its per-position depth decoder jointly with the temporal LM. To compare
depth decoders fairly (`SharedDepthModel` vs `DepthModel`), both are trained here on the same
teacher-forced (h_t, real codes) pairs, for the same number of steps of the same batch size,
with the same schedule, and scored by held-out cross-entropy per level.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

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
    teacher: Optional[torch.nn.Module] = None,
    distill: float = 0.0,
    state: Optional[Path] = None,
    save_every: int = 200,
) -> dict:
    """Adam with linear warm-up and cosine decay to 5% over `steps` steps of `batch` random
    frames. Returns {"steps", "seconds", "train_loss" (per step), "val" ([step, mean CE])}.

    teacher, distill: the loss is (1 - distill) x CE on the real codes + distill x
    KL(teacher || model) per level, the teacher (a trained decoder of the same levels) run on
    the same teacher-forced inputs: a smaller decoder learns from its full distributions, not
    one sampled code per level. state: a file the run is saved to every `save_every` steps
    and resumed from (same steps, batch and seed), so a long run survives being stopped."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps: expected a positive int, got {steps!r}")
    if not 0.0 <= distill <= 1.0 or (distill > 0 and teacher is None):
        raise ValueError(f"distill: expected 0..1 (above 0 only with a teacher), got {distill}")
    c = model.c
    h, cd = _check(hiddens, codes, c.num_codebooks, c.input_width)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, curve = [], []
    run_key = {"steps": steps, "batch": batch, "seed": seed, "lr": lr, "distill": distill}
    start, spent = _resume(state, run_key, model, opt, gen, losses, curve)
    model.train()
    if teacher is not None:
        teacher.eval()
    it = range(start, steps)
    if progress:
        from codecspec.progress import bar

        desc = f"train {type(model).__name__}" + (f" from step {start}" if start else "")
        it = bar(it, desc=desc)
    t0 = time.monotonic() - spent
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
        loss = _loss(model, teacher, distill, h[pick], cd[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if val is not None and eval_every and (s + 1) % eval_every == 0:
            curve.append([s + 1, float(heldout_cross_entropy(model, *val).mean())])
        if state is not None and ((s + 1) % save_every == 0 or s + 1 == steps):
            _save(state, run_key, s + 1, time.monotonic() - t0, model, opt, gen, losses, curve)
    model.eval()
    return {
        "steps": steps,
        "batch": batch,
        "seconds": round(time.monotonic() - t0, 1),
        "train_loss": losses,
        "val": curve,
    }


def _loss(model, teacher, distill: float, h: torch.Tensor, cd: torch.Tensor) -> torch.Tensor:
    """The mean training loss of one batch: CE on the real codes, mixed with the KL from the
    teacher's distributions where `distill` > 0."""
    if teacher is None or distill == 0.0:
        return depth_loss(model, h, cd).mean()
    logits = model(h, cd)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), cd[:, 1:].reshape(-1))
    with torch.no_grad():
        target = teacher(h, cd).log_softmax(-1)
    kl = (target.exp() * (target - logits.log_softmax(-1))).sum(-1).mean()
    return (1.0 - distill) * ce + distill * kl


def _save(path: Path, key: dict, step: int, seconds: float, model, opt, gen, losses, curve):
    tmp = path.with_suffix(".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "key": key, "step": step, "seconds": seconds, "model": model.state_dict(),
            "opt": opt.state_dict(), "gen": gen.get_state(), "losses": losses, "curve": curve,
        },
        tmp,
    )  # fmt: skip
    tmp.replace(path)  # a stop mid-write leaves the previous state whole


def _resume(path, key: dict, model, opt, gen, losses: list, curve: list) -> tuple[int, float]:
    """(first step, seconds already spent) of a run saved at `path` with the same `key`;
    (0, 0.0) when there is none. A state of another run is an error, not silently reused."""
    if path is None or not Path(path).is_file():
        return 0, 0.0
    st = torch.load(path, map_location="cpu", weights_only=False)
    if st["key"] != key:
        raise ValueError(f"state: {path} is a run of {st['key']}, not {key}; move it away")
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    gen.set_state(st["gen"])
    losses.extend(st["losses"])
    curve.extend(st["curve"])
    return int(st["step"]), float(st["seconds"])
