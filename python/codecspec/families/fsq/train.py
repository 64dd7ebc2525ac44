"""Training loop of the FSQ model family ([train] extra: needs PyTorch).

AdamW with the v1 schedule (warm-up, cosine to 5%: `codecspec.train.common.lr_schedule`)
over a wall-clock budget;
loss = factorised channel NLL + stop BCE + AR-over-groups NLL (the AR head reads detached
h_t, so it never shapes the shipped model). A checkpoint (model, optimiser, step, clock,
curves) is written every `ckpt_every` seconds and at the end; `train_fsq` resumes from it, and
the budget and learning-rate schedule count the time already spent.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from codecspec.families.fsq.torch_model import FSQModelConfig, FSQTrainModel
from codecspec.train.common import TrainLog, lr_schedule
from codecspec.train.dataset import Batch, TTSDataset

__all__ = ["to_tensors", "evaluate", "train_fsq", "frames_per_phoneme_token"]

LOSS_KEYS = ("fact", "stop", "ar")


def frames_per_phoneme_token(ds: TTSDataset) -> float:
    """Frames per phoneme token (bos/eos included) over a split: the pace unit."""
    frames = sum(u.frames for u in ds)
    tokens = sum(len(u.phonemes) for u in ds)
    return frames / tokens


def to_tensors(b: Batch) -> dict:
    codes = torch.from_numpy(b.codes.astype(np.int64))
    stop = torch.zeros(codes.shape[:2])
    stop[torch.arange(len(b.frame_lengths)), torch.from_numpy(b.frame_lengths - 1)] = 1.0
    track = {} if b.progress is None else {"track": torch.from_numpy(b.progress)}
    return {
        "phonemes": torch.from_numpy(b.phonemes.astype(np.int64)),
        "phoneme_lengths": torch.from_numpy(b.phoneme_lengths.astype(np.int64)),
        "language": torch.from_numpy(b.language.astype(np.int64)),
        "speaker": torch.from_numpy(b.speaker.astype(np.int64)),
        "codes": codes,
        "frame_mask": torch.from_numpy(b.frame_mask),
        "stop": stop,
        **track,
    }


@torch.no_grad()
def evaluate(model: FSQTrainModel, batches: list) -> tuple[dict, list]:
    """Frame-weighted mean NLLs over `batches` and the per-channel NLL (nats); the model's
    train/eval mode is left as it was."""
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(0)
    sums, per_ch, n = dict.fromkeys(LOSS_KEYS, 0.0), 0.0, 0
    for b in batches:
        out = model.losses(b, 0, gen)
        w = int(b["frame_mask"].sum())
        for k in LOSS_KEYS:
            sums[k] += float(out[k]) * w
        per_ch = per_ch + out["channel_nll"].numpy() * w
        n += w
    model.train(was_training)
    return {k: v / max(n, 1) for k, v in sums.items()}, (per_ch / max(n, 1)).tolist()


def _optimizer(model: FSQTrainModel, lr: float) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.98))


def _save(path: Path, model, opt, state: dict, log: TrainLog) -> None:
    tmp = path.with_suffix(".tmp")
    ck = {
        "state_dict": model.state_dict(),
        "optimizer": opt.state_dict(),
        "config": model.cfg.to_dict(),
        "curves": log.to_dict(),
        **state,
    }
    torch.save(ck, tmp)
    tmp.replace(path)  # a kill mid-write never leaves a truncated checkpoint


def _record_val(model, val, log: TrainLog, step: int) -> None:
    v, per_ch = evaluate(model, val)
    log.val_steps.append(step)
    log.val.append({k: round(x, 4) for k, x in v.items()})
    log.val_levels.append([round(x, 4) for x in per_ch])


def train_fsq(
    train_set: TTSDataset,
    val_set: TTSDataset,
    cfg: FSQModelConfig,
    *,
    minutes: float = 30.0,
    max_steps: Optional[int] = None,
    max_frames: int = 1536,
    ar_frames: int = 512,
    lr: float = 1.5e-3,
    seed: int = 0,
    eval_every: int = 50,
    val_batches: int = 6,
    ckpt: Optional[Path] = None,
    ckpt_every: float = 180.0,
    progress: bool = True,
) -> tuple[FSQTrainModel, TrainLog]:
    """Train for `minutes` of wall clock in all (or `max_steps` steps); resumes from `ckpt`."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = FSQTrainModel(cfg)
    opt = _optimizer(model, lr)
    log, state = TrainLog(), {"step": 0, "seconds": 0.0, "epoch": 0}
    if ckpt is not None and Path(ckpt).is_file():
        ck = torch.load(ckpt, map_location="cpu", weights_only=False)
        model.load_state_dict(ck["state_dict"])
        opt.load_state_dict(ck["optimizer"])
        log = TrainLog(**ck["curves"])
        state = {k: ck[k] for k in state}
        _say(progress, f"resumed at step {state['step']}, {state['seconds'] / 60:.1f} min done")
    val = [
        to_tensors(b)
        for _, b in zip(range(val_batches), val_set.batches(16, seed=1, max_frames=max_frames))
    ]
    budget = minutes * 60.0
    t_start, last_ck, last_say = time.monotonic() - state["seconds"], time.monotonic(), -1e9
    done = False
    while not done:
        for b in train_set.batches(32, seed=seed + state["epoch"], max_frames=max_frames):
            elapsed = time.monotonic() - t_start
            frac = state["step"] / max_steps if max_steps else elapsed / budget
            if frac >= 1.0:
                done = True
                break
            for g in opt.param_groups:
                g["lr"] = lr_schedule(frac, 0.04, lr)
            out = model.losses(to_tensors(b), ar_frames, gen)
            loss = out["fact"] / cfg.channels + out["stop"] + out["ar"] / cfg.groups
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            state["step"] += 1
            state["seconds"] = round(elapsed, 2)
            log.steps.append(state["step"])
            log.seconds.append(state["seconds"])
            log.train.append({k: round(out[k].item(), 4) for k in LOSS_KEYS})
            if state["step"] % eval_every == 0:
                _record_val(model, val, log, state["step"])
            if progress and elapsed - last_say > 30.0:
                last_say = elapsed
                _say(
                    True,
                    f"step {state['step']} {elapsed / 60:.1f}/{budget / 60:.0f} min "
                    f"{log.train[-1]} | held-out {log.val[-1] if log.val else {}}",
                )
            if ckpt is not None and time.monotonic() - last_ck > ckpt_every:
                _save(Path(ckpt), model, opt, state, log)
                last_ck = time.monotonic()
        else:
            state["epoch"] += 1
    _record_val(model, val, log, state["step"])
    if ckpt is not None:
        _save(Path(ckpt), model, opt, state, log)
    model.eval()
    return model, log


def _say(on: bool, msg: str) -> None:
    if on:
        sys.stderr.write(f"train fsq: {msg}\n")
        sys.stderr.flush()
