"""Training pieces the phoneme-input families share ([train] extra: needs PyTorch): the
reference depth decoder's configuration, the depth part of the losses, the optimiser, the
learning-rate schedule and the curves a training run records. The families' own loops are in
their packages (`codecspec.families.<name>.train`); shared training code here imports none of
them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codecspec.graphs.config import DepthDecoderConfig, small_depth
from codecspec.train.networks import depth_loss

__all__ = ["reference_depth_config", "TrainLog", "depth_losses", "lr_schedule", "adamw"]


def reference_depth_config(codebook_size: int = 1024, **overrides) -> DepthDecoderConfig:
    """The shipped depth decoder: `small_depth` with intermediate 512, `codebook_size` codes
    (c0 included) and 4 draft offsets, fed the temporal hidden state directly."""
    base = dict(
        intermediate_size=512,
        codebook_size=codebook_size,
        c0_vocab_size=codebook_size,
        num_draft_offsets=4,
        max_positions=32,
    )
    base.update(overrides)
    return small_depth(**base)


@dataclass
class TrainLog:
    steps: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    train: list = field(default_factory=list)  # dicts of the three losses
    val_steps: list = field(default_factory=list)
    val: list = field(default_factory=list)
    val_levels: list = field(default_factory=list)  # per-level depth CE on held-out frames

    def record_val(self, step: int, losses: dict, levels) -> None:
        """Held-out losses and per-level CE at `step`, rounded to 4 places."""
        self.val_steps.append(step)
        self.val.append({k: round(x, 4) for k, x in losses.items()})
        self.val_levels.append([round(x, 4) for x in levels])

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def save(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_dict()))


def depth_losses(depth, h, codes, frames: int, gen: torch.Generator) -> dict:
    """The depth decoder's mean cross-entropy ("depth") and its per-level means
    ("depth_levels", detached) on `frames` random rows of h [N, D] / codes [N, G] (0: all);
    the depth decoder dominates a training step's cost."""
    if frames and frames < len(h):
        pick = torch.randperm(len(h), generator=gen)[:frames]
        h, codes = h[pick], codes[pick]
    per_level = depth_loss(depth, h, codes)
    return {"depth": per_level.mean(), "depth_levels": per_level.detach().mean(0)}


def lr_schedule(step_frac: float, warm_frac: float, peak: float) -> float:
    """The learning rate at `step_frac` of the budget: linear warm-up over `warm_frac`, then a
    cosine from `peak` down to 5% of it (the reference family's schedule; FSQ's too)."""
    if step_frac < warm_frac:
        return peak * step_frac / warm_frac
    t = (step_frac - warm_frac) / max(1e-9, 1.0 - warm_frac)
    return peak * (0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * min(t, 1.0))))


def adamw(model: torch.nn.Module, lr: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on norms, biases or other vectors)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.98),
    )
