"""Training loop of reference model v2 ([train] extra), resumable across machines.

`train_v2` runs AdamW for a wall-clock budget with warm-up and a cosine over the *whole*
budget, and writes a checkpoint (model, optimiser, step, curves, clock, data position) to
`ckpt_dir` every `save_every` seconds and at the end. Called again with the same `ckpt_dir`
it continues where the checkpoint left off, on the same schedule — on this machine or a fresh
one that has the corpus and the checkpoint file. A fresh run may instead start from a shipped
model folder's weights (`init_from`, `train_init`), the copy that survives a fresh machine.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from codecspec.families.v2.torch_model import V2Model, V2TemporalConfig, jittered_rate
from codecspec.graphs.config import DepthDecoderConfig
from codecspec.train.common import TrainLog, adamw, lr_schedule
from codecspec.train.dataset import Batch, TTSDataset

__all__ = ["to_tensors", "train_v2", "evaluate", "CKPT_NAME"]

CKPT_NAME = "ckpt.pt"
LOSS_KEYS = ("c0", "draft_c0", "draft_kl", "stop", "depth", "accept")
CE_DRAFT_KEYS = ("ce_draft_c0", "ce_accept")  # with V2TemporalConfig.ce_draft
# a warm start's held-out losses against its folder's run (nats): float16 storage of the
# weights moves them by a few thousandths; a weight read into the wrong place, by far more
INIT_TOL = 0.03


def to_tensors(b: Batch, rate_jitter: float = 0.0, rng=None) -> dict:
    codes = b.codes.astype(np.int64)
    phon = b.phoneme_lengths.astype(np.int64) - 2  # bos/eos are not phonemes
    rng = rng or np.random.default_rng(0)
    rate = jittered_rate(b.frame_lengths, phon, rate_jitter, rng)
    idx = np.arange(codes.shape[1])[None, :]
    extra = {} if b.progress is None else {"track": torch.from_numpy(b.progress)}
    return extra | {
        "phonemes": torch.from_numpy(b.phonemes.astype(np.int64)),
        "phoneme_lengths": torch.from_numpy(b.phoneme_lengths.astype(np.int64)),
        "language": torch.from_numpy(b.language.astype(np.int64)),
        "speaker": torch.from_numpy(b.speaker.astype(np.int64)),
        "frames_per_phoneme": torch.from_numpy(rate),
        "frame_mask": torch.from_numpy(b.frame_mask),
        "is_last": torch.from_numpy(idx == (b.frame_lengths[:, None] - 1)),
        "codes": torch.from_numpy(codes),
    }


def _keys(out: dict) -> tuple:
    return LOSS_KEYS + (CE_DRAFT_KEYS if "ce_draft_c0" in out else ())


@torch.no_grad()
def evaluate(model: V2Model, batches: list) -> tuple[dict, list]:
    model.eval()
    gen = torch.Generator().manual_seed(0)
    sums: dict = {}
    levels = None
    for b in batches:
        out = model.losses(b, depth_frames=0, gen=gen)
        for k in _keys(out):
            sums[k] = sums.get(k, 0.0) + float(out[k])
        lv = out["depth_levels"].numpy()
        levels = lv if levels is None else levels + lv
    model.train()
    n = max(len(batches), 1)
    return {k: round(v / n, 4) for k, v in sums.items()}, [round(float(x), 4) for x in levels / n]


def _save(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: an interrupted save never leaves a broken checkpoint


@dataclass
class _Progress:
    """Where training stands: what a checkpoint stores besides the weights and the optimiser."""

    log: TrainLog = field(default_factory=TrainLog)
    step: int = 0
    epoch: int = 0
    skip: int = 0  # batches of the current epoch already trained on
    spent: float = 0.0  # seconds of training so far (all sessions)


def _resume(path: Path, model, opt, tcfg, dcfg) -> _Progress:
    """The checkpoint at `path` loaded into model and optimiser (with torch's RNG state, so a
    resumed run draws what an uninterrupted one would); a fresh start when there is none."""
    if not path.is_file():
        return _Progress()
    ck = torch.load(path, map_location="cpu", weights_only=False)
    if ck["temporal_config"] != tcfg.to_dict() or ck["depth_config"] != dcfg.to_dict():
        raise ValueError(f"ckpt_dir: {path} holds a model of another configuration")
    model.load_state_dict(ck["state_dict"])
    opt.load_state_dict(ck["optimizer"])
    pr = _Progress(TrainLog(**ck["curves"]), ck["step"], ck["epoch"], ck["batch_in_epoch"])
    pr.spent = ck["seconds"]
    torch.set_rng_state(ck["torch_rng"])
    sys.stderr.write(f"train v2: resuming {path} at step {pr.step} ({pr.spent / 60:.1f} min)\n")
    return pr


def _held_out(val_set: TTSDataset, n: int, rate_jitter: float, max_frames: int) -> list:
    """The held-out batches every evaluation reads: the same ones in every run and resume."""
    batches = val_set.batches(16, seed=1, max_frames=max_frames)
    return [to_tensors(b, rate_jitter, np.random.default_rng(1)) for _, b in zip(range(n), batches)]


def _warm_start(
    model, folder, val: list, reexport, frontend, compare_heldout: bool = True
) -> _Progress:
    """A fresh run started from the weights of shipped model folder `folder` (fresh optimiser,
    step 0), checked before its first step, so that a warm start never silently trains
    something else: re-exported with `reexport` (the ship step's export), the model must give
    the folder's tensors bit for bit, and its held-out losses must be the folder's run's
    final ones within INIT_TOL nats (its report.json); `frontend` must be the folder's.
    `compare_heldout=False` is for a run on another corpus than the folder's: its held-out
    split holds other utterances, so its losses are reported, not compared (the re-export
    still proves the weights are the folder's)."""
    from codecspec.families.v2.train_init import (
        heldout_mismatches,
        load_folder_weights,
        reexport_mismatches,
        shipped_heldout,
    )

    rep = load_folder_weights(model, folder, frontend)
    if reexport is not None:
        bad = reexport_mismatches(model, folder, reexport)
        if bad:
            raise ValueError(f"init_from: re-export differs from {folder}: {bad[:5]}")
    pr = _Progress()
    pr.log.record_val(pr.step, *evaluate(model, val))  # step 0: where the folder's model stands
    ref = shipped_heldout(folder)
    bad = heldout_mismatches(pr.log.val[-1], ref, INIT_TOL) if compare_heldout else []
    now = {k: pr.log.val[-1][k] for k in ("c0", "depth")}
    was = {k: ref.get(k) for k in now} if ref else "not in the folder (no report.json)"
    sys.stderr.write(
        f"train v2: warm start from {folder}: {len(rep['loaded'])} tensors "
        f"(not in the folder: {len(rep['absent'])}), re-export "
        f"{'identical' if reexport is not None else 'not checked'}; held-out {now}, "
        f"the folder's run {was}\n"
    )
    if bad:
        raise ValueError(f"init_from: held-out losses differ from the folder's run: {bad}")
    return pr


def _train_step(
    model, opt, pr: _Progress, b, frac, *, lr, warmup, rate_jitter, rng, depth_frames, gen, distill
):
    """One optimiser step on batch `b` at schedule position `frac`; its time counts towards the
    budget and its losses join the log. Returns the model's losses."""
    t_step = time.monotonic()
    for g in opt.param_groups:
        g["lr"] = lr_schedule(frac, warmup, lr)
    out = model.losses(to_tensors(b, rate_jitter, rng), depth_frames, gen, distill)
    loss = out["c0"] + out["draft"] + out["stop"] + out["draft_stop"] + out["depth"]
    loss = loss + out.get("ce_draft_c0", 0.0)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    pr.step += 1
    pr.spent += time.monotonic() - t_step
    pr.log.steps.append(pr.step)
    pr.log.seconds.append(round(pr.spent, 2))
    pr.log.train.append({k: round(float(out[k].detach()), 4) for k in _keys(out)})
    return out


def _report(pr: _Progress, out: dict, budget: float) -> None:
    sys.stderr.write(
        f"train v2: step {pr.step} epoch {pr.epoch} {pr.spent / 60:.1f}/{budget / 60:.0f} min "
        + " ".join(f"{k} {float(out[k].detach()):.3f}" for k in LOSS_KEYS)
        + f" | held-out {pr.log.val[-1] if pr.log.val else {}}\n"
    )
    sys.stderr.flush()


def _start(model, opt, path, cfgs, val, train_set, init_from, reexport, other_corpus) -> _Progress:
    """Where a run starts: its checkpoint at `path`, or with none yet the warm start from model
    folder `init_from` (`_warm_start`; `other_corpus`: the folder was trained on another
    corpus than `train_set`, so its held-out losses are not compared)."""
    if init_from is not None and not path.is_file():
        frontend = train_set.frontend
        return _warm_start(model, Path(init_from), val, reexport, frontend, not other_corpus)
    return _resume(path, model, opt, *cfgs)


def train_v2(
    train_set: TTSDataset,
    val_set: TTSDataset,
    tcfg: V2TemporalConfig,
    dcfg: DepthDecoderConfig,
    ckpt_dir,
    *,
    minutes: float = 60.0,
    max_steps: Optional[int] = None,
    batch_size: int = 32,
    max_frames: int = 1536,
    depth_frames: int = 384,
    lr: float = 1.5e-3,
    distill: float = 0.5,
    rate_jitter: float = 0.15,
    seed: int = 0,
    eval_every: int = 50,
    val_batches: int = 6,
    save_every: float = 120.0,
    progress: bool = True,
    warmup: float = 0.04,
    init_from=None,
    reexport=None,
    init_other_corpus: bool = False,
    freeze_depth: bool = False,
) -> tuple[V2Model, TrainLog]:
    """Train (or resume) for `minutes` of training or `max_steps` (`_start`, `_freeze_depth`)."""
    ckpt_dir = Path(ckpt_dir).expanduser()
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / CKPT_NAME
    torch.manual_seed(seed)
    model = V2Model(tcfg, dcfg)
    opt = adamw(model, lr)
    val = _held_out(val_set, val_batches, rate_jitter, max_frames)
    pr = _start(
        model, opt, path, (tcfg, dcfg), val, train_set, init_from, reexport, init_other_corpus
    )
    gen, rng = torch.Generator().manual_seed(seed + pr.step), np.random.default_rng(seed + pr.step)
    frozen = _freeze_depth(model, freeze_depth)
    train_args = dict(lr=lr, distill=distill, rate_jitter=rate_jitter, minutes=minutes, **frozen)
    train_args |= dict(warmup=warmup, init_from=init_from and str(init_from))

    def state(batch_in_epoch: int) -> dict:
        return _checkpoint(model, opt, pr, tcfg, dcfg, batch_in_epoch, seed, train_set, train_args)

    model.train()
    last_save = last_report = time.monotonic()
    done = False
    while not done:
        for i, b in enumerate(
            train_set.batches(batch_size, seed=seed + pr.epoch, max_frames=max_frames)
        ):
            if i < pr.skip:
                continue
            frac = pr.step / max_steps if max_steps else pr.spent / (minutes * 60.0)
            if frac >= 1.0:
                done = True
                pr.skip = i
                break
            out = _train_step(
                model, opt, pr, b, frac, lr=lr, warmup=warmup, rate_jitter=rate_jitter, rng=rng,
                depth_frames=depth_frames, gen=gen, distill=distill,
            )  # fmt: skip
            if pr.step % eval_every == 0:
                pr.log.record_val(pr.step, *evaluate(model, val))
            now = time.monotonic()
            if progress and now - last_report > 20.0:
                last_report = now
                _report(pr, out, minutes * 60.0)
            if now - last_save > save_every:
                _save(path, state(i + 1))
                last_save = now
        else:
            pr.epoch += 1
            pr.skip = 0
    pr.log.record_val(pr.step, *evaluate(model, val))
    _save(path, state(pr.skip))
    (ckpt_dir / "train.json").write_text(json.dumps(pr.log.to_dict()))
    model.eval()
    return model, pr.log


def _freeze_depth(model, freeze: bool) -> dict:
    """Keep the depth decoder's weights as they start (a warm start's depth decoder, trained
    further on its own, is kept): AdamW skips a parameter whose grad stays None. Its loss
    still reaches the temporal LM, so the hidden states it reads stay the kind it knows."""
    for p in model.depth.parameters() if freeze else ():
        p.requires_grad_(False)
    return {"freeze_depth": True} if freeze else {}


def _checkpoint(model, opt, pr: _Progress, tcfg, dcfg, batch_in_epoch, seed, train_set, train_args):
    """Everything a run needs to continue exactly where this one is (see the module doc)."""
    return {
        "state_dict": model.state_dict(),
        "optimizer": opt.state_dict(),
        "temporal_config": tcfg.to_dict(),
        "depth_config": dcfg.to_dict(),
        "curves": pr.log.to_dict(),
        "step": pr.step,
        "epoch": pr.epoch,
        "batch_in_epoch": batch_in_epoch,
        "seconds": pr.spent,
        "torch_rng": torch.get_rng_state(),
        "seed": seed,
        "frontend": train_set.frontend.to_dict(),
        "train_args": train_args,
    }
