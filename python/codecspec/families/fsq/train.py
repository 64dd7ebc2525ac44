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

__all__ = [
    "to_tensors",
    "evaluate",
    "train_fsq",
    "frames_per_phoneme_token",
    "VoiceReferences",
    "warm_start",
]

LOSS_KEYS = ("fact", "stop", "ar")


def frames_per_phoneme_token(ds: TTSDataset) -> float:
    """Frames per phoneme token (bos/eos included) over a split: the pace unit."""
    frames = sum(u.frames for u in ds)
    tokens = sum(len(u.phonemes) for u in ds)
    return frames / tokens


class VoiceReferences:
    """The reference clips a voice-prefix model reads while it trains: for each utterance
    of a split, another utterance of the same voice (the manifest's `variant`) from `pool`
    (default: the split itself; the held-out split reads the training clips) spoken at a
    pitch within `pitch_window` of its own (espeak-ng's -p: pitch is part of a voice; the
    nearest pitches when none is that close), cropped to at most `frames` frames at a
    random start. A fraction `null_prob` of the rows gets the null prefix instead, so the
    model also learns to speak without a reference."""

    def __init__(self, ds: TTSDataset, frames=48, pitch_window=8, null_prob=0.15, pool=None):
        pool = ds if pool is None else pool
        self.codes = [u.codes for u in pool]
        self.index = {u.id: i for i, u in enumerate(ds)}
        self.frames, self.null_prob = int(frames), float(null_prob)
        voices = np.array([u.speaker for u in pool])
        pitches = np.array([_pitch(r) for r in pool.rows])
        self.choices = []
        for i, (u, row) in enumerate(zip(ds, ds.rows)):
            same = np.flatnonzero(voices == u.speaker)
            same = same[same != i] if pool is ds else same
            if not len(same):
                raise ValueError(f"ds: the voice of {u.id} has no other clip to read")
            gap = np.abs(pitches[same] - _pitch(row))
            near = same[gap <= pitch_window]
            self.choices.append(near if len(near) else same[np.argsort(gap, kind="stable")[:8]])

    def draw(self, ids, rng: np.random.Generator, null=None) -> dict:
        """Tensors `ref` [B, T, C], `ref_lengths` [B], `use_null` [B] for the rows `ids`
        (`null`: force every row's choice; None: draw with `null_prob`)."""
        crops = []
        for uid in ids:
            c = self.codes[int(rng.choice(self.choices[self.index[uid]]))]
            start = int(rng.integers(0, max(1, len(c) - self.frames + 1)))
            crops.append(c[start : start + self.frames])
        lengths = np.array([len(c) for c in crops], np.int64)
        ref = np.zeros((len(crops), int(lengths.max()), crops[0].shape[1]), np.int64)
        for k, c in enumerate(crops):
            ref[k, : len(c)] = c
        use_null = rng.random(len(crops)) < self.null_prob if null is None else [null] * len(ids)
        return {
            "ref": torch.from_numpy(ref),
            "ref_lengths": torch.from_numpy(lengths),
            "use_null": torch.from_numpy(np.asarray(use_null, bool)),
        }


def _pitch(row: dict) -> float:
    return float(row.get("pitch", 50))


def warm_start(model: FSQTrainModel, path: Path) -> list:
    """Load a checkpoint without a voice prefix into a voice-prefix model: every shared
    parameter as it was, the speaker tables' rows averaged into the one row the voice
    model keeps. Returns the names the checkpoint did not have (the prefix's)."""
    state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    for name in ("temporal.speaker.weight", "temporal.frame_speaker.weight"):
        state[name] = state[name].mean(0, keepdim=True)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise ValueError(f"path: {path} has parameters this model lacks: {unexpected}")
    return missing


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
    init: Optional[Path] = None,
) -> tuple[FSQTrainModel, TrainLog]:
    """Train for `minutes` of wall clock in all (or `max_steps` steps); resumes from `ckpt`.
    `init`: a checkpoint to start from when there is none to resume (`warm_start`). A
    voice-prefix model reads reference clips of the same voice (`VoiceReferences`)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = FSQTrainModel(cfg)
    opt = _optimizer(model, lr)
    log, state = _start(model, opt, ckpt, init, progress)
    refs = VoiceReferences(train_set) if cfg.voice_queries else None
    rng = np.random.default_rng([seed, state["step"]])  # a resumed run draws afresh
    val = _val_batches(val_set, train_set if refs else None, val_batches, max_frames)
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
            batch = to_tensors(b)
            if refs is not None:
                batch |= refs.draw(b.ids, rng)
            out = model.losses(batch, ar_frames, gen)
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
                log.record_val(state["step"], *evaluate(model, val))
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
    log.record_val(state["step"], *evaluate(model, val))
    if ckpt is not None:
        _save(Path(ckpt), model, opt, state, log)
    model.eval()
    return model, log


def _start(model, opt, ckpt, init, progress) -> tuple[TrainLog, dict]:
    """(log, state) of a fresh run (from `init` when given: `warm_start`) or of the run
    `ckpt` holds, loaded into `model` and `opt`."""
    log, state = TrainLog(), {"step": 0, "seconds": 0.0, "epoch": 0}
    if ckpt is None or not Path(ckpt).is_file():
        if init is not None:
            _say(progress, f"warm start from {init}; new: {warm_start(model, Path(init))}")
        return log, state
    ck = torch.load(ckpt, map_location="cpu", weights_only=False)
    model.load_state_dict(ck["state_dict"])
    opt.load_state_dict(ck["optimizer"])
    state = {k: ck[k] for k in state}
    _say(progress, f"resumed at step {state['step']}, {state['seconds'] / 60:.1f} min done")
    return TrainLog(**ck["curves"]), state


def _val_batches(val_set, voices_from, n: int, max_frames: int) -> list:
    """The first `n` held-out batches as tensors; a voice-prefix model's (`voices_from`: the
    training split) each with a training clip of its voice, always (never the null prefix)."""
    refs = None if voices_from is None else VoiceReferences(val_set, pool=voices_from)
    rng = np.random.default_rng(1)
    return [
        to_tensors(b) | (refs.draw(b.ids, rng, null=False) if refs else {})
        for _, b in zip(range(n), val_set.batches(16, seed=1, max_frames=max_frames))
    ]


def _say(on: bool, msg: str) -> None:
    if on:
        sys.stderr.write(f"train fsq: {msg}\n")
        sys.stderr.flush()
