"""Training loop of the reference (v1) codec-LM TTS ([train] extra: needs PyTorch).

`train_tts` runs AdamW on the encoded corpus for a wall-clock budget (the recipe's is 55 min on
two cores), with a learning rate that warms up and then follows a cosine over the budget
(`codecspec.train.common.lr_schedule`), and records train / held-out curves for the model card.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

import numpy as np
import torch

from codecspec.codec.codec import Codec
from codecspec.families.reference.torch_model import TTSModel
from codecspec.graphs.config import DepthDecoderConfig
from codecspec.train.common import TrainLog, adamw, lr_schedule
from codecspec.train.dataset import Batch, TTSDataset
from codecspec.train.networks import TemporalConfig

__all__ = ["to_tensors", "train_tts", "frame_latents", "evaluate"]


def frame_latents(codec: Codec, codes: np.ndarray, scale: float) -> np.ndarray:
    """The temporal model's frame input: sum of the RVQ code vectors, divided by `scale`."""
    books = codec._books
    out = np.zeros(codes.shape[:-1] + (books.shape[2],), np.float32)
    for lvl in range(codes.shape[-1]):
        out += books[lvl][codes[..., lvl]]
    return out / scale


def to_tensors(b: Batch, codec: Codec, scale: float) -> dict:
    codes = b.codes.astype(np.int64)
    return {
        "phonemes": torch.from_numpy(b.phonemes.astype(np.int64)),
        "phoneme_lengths": torch.from_numpy(b.phoneme_lengths.astype(np.int64)),
        "language": torch.from_numpy(b.language.astype(np.int64)),
        "speaker": torch.from_numpy(b.speaker.astype(np.int64)),
        "latents": torch.from_numpy(frame_latents(codec, codes, scale)),
        "frame_lengths": torch.from_numpy(b.frame_lengths.astype(np.int64)),
        "frame_mask": torch.from_numpy(b.frame_mask),
        "codes": torch.from_numpy(codes),
    }


def _report(step, epoch, elapsed, budget, out, log) -> None:
    val = log.val[-1] if log.val else {}
    sys.stderr.write(
        f"train tts: step {step} epoch {epoch} {elapsed / 60:.1f}/{budget / 60:.0f} min "
        f"c0 {float(out['c0']):.3f} draft {float(out['draft_c0']):.3f} "
        f"depth {float(out['depth']):.3f} | held-out {val}\n"
    )
    sys.stderr.flush()


@torch.no_grad()
def evaluate(model: TTSModel, batches: list, gen_seed: int = 0) -> tuple[dict, list]:
    model.eval()
    gen = torch.Generator().manual_seed(gen_seed)
    sums: dict = {}
    levels = None
    for b in batches:
        out = model.losses(b, depth_frames=0, gen=gen)
        for k in ("c0", "draft_c0", "depth"):
            sums[k] = sums.get(k, 0.0) + float(out[k])
        lv = out["depth_levels"].numpy()
        levels = lv if levels is None else levels + lv
    model.train()
    n = max(len(batches), 1)
    return {k: v / n for k, v in sums.items()}, (levels / n).tolist()


def _start(model: TTSModel, resume: Optional[dict], train_set: TTSDataset, codec: Codec) -> float:
    """The latent scale (frame latents are divided by it to unit std): the checkpoint's, whose
    weights are loaded into `model`, or measured on the first 200 training utterances."""
    if resume is not None:
        model.load_state_dict(resume["state_dict"])
        return float(resume["latent_scale"])
    sample = np.concatenate([u.codes for u in list(train_set)[:200]]).astype(np.int64)
    return float(frame_latents(codec, sample, 1.0).std())


def _step(model, opt, b: Batch, frac: float, codec, scale, depth_frames, gen, lr) -> dict:
    """One optimiser step on batch `b` at schedule position `frac`; returns the losses."""
    for g in opt.param_groups:
        g["lr"] = lr_schedule(frac, 0.04, lr)
    out = model.losses(to_tensors(b, codec, scale), depth_frames, gen)
    loss = out["c0"] + out["draft_c0"] + out["depth"]
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return out


def train_tts(
    train_set: TTSDataset,
    val_set: TTSDataset,
    codec: Codec,
    tcfg: TemporalConfig,
    dcfg: DepthDecoderConfig,
    *,
    minutes: float = 55.0,
    max_frames: int = 1536,
    depth_frames: int = 384,
    lr: float = 1.5e-3,
    seed: int = 0,
    eval_every: int = 50,
    val_batches: int = 6,
    max_steps: Optional[int] = None,
    resume: Optional[dict] = None,
    progress: bool = True,
) -> tuple[TTSModel, TrainLog, float]:
    """Train for `minutes` of wall clock (or `max_steps`); returns model, curves, latent scale.

    `resume`: a checkpoint dict (state_dict, latent_scale, curves) to continue from, with a
    fresh warm-up and cosine over the new budget (a warm restart); curves continue its steps.
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = TTSModel(tcfg, dcfg)
    scale = _start(model, resume, train_set, codec)
    opt = adamw(model, lr)
    val = [
        to_tensors(b, codec, scale)
        for _, b in zip(range(val_batches), val_set.batches(16, seed=1, max_frames=max_frames))
    ]
    log = TrainLog(**resume["curves"]) if resume and resume.get("curves") else TrainLog()
    first = log.steps[-1] if log.steps else 0
    budget = minutes * 60.0
    t0 = time.monotonic() - (log.seconds[-1] if log.seconds else 0.0)
    t_phase = time.monotonic()
    step, epoch = first, 0
    last_report = -1e9
    done = False
    while not done:
        for b in train_set.batches(32, seed=seed + epoch, max_frames=max_frames):
            elapsed = time.monotonic() - t0
            phase = time.monotonic() - t_phase
            frac = (step - first) / max_steps if max_steps else phase / budget
            if frac >= 1.0:
                done = True
                break
            out = _step(model, opt, b, frac, codec, scale, depth_frames, gen, lr)
            step += 1
            log.steps.append(step)
            log.seconds.append(round(elapsed, 2))
            log.train.append({k: round(out[k].item(), 4) for k in ("c0", "draft_c0", "depth")})
            if step % eval_every == 0:
                log.record_val(step, *evaluate(model, val))
            if progress and elapsed - last_report > 15.0:
                last_report = elapsed
                _report(step, epoch, elapsed, budget, out, log)
        epoch += 1
    log.record_val(step, *evaluate(model, val))
    model.eval()
    return model, log, scale
