"""Which weight precision a Qwen3-TTS checkpoint should run at on this device, measured.

`codecspec calibrate --model DIR` times the talker step and the code predictor's AR loop at
float32, int8 and int4 (onnxruntime's MatMulNBits, accuracy level 4) on this machine, the
precisions interleaved over rounds, and measures what each quantised model does to the
checkpoint's own laws (`quant_error.logit_error`: teacher-forced logits against float32, per
stage the mean KL divergence of the warped distributions and the top-1 agreement). The
choice is the fastest precision whose laws stay within the bounds (`MAX_KL`, `MIN_TOP1`);
float32 is always admissible. It is stored as `precision.json` beside the built graphs and
read by `--weights auto`.

The default stays float32 (the official model's codes); `auto` is asked for. A quantised
choice is another model, close to the checkpoint's law but not it: its greedy codes can
differ from the official ones (docs/qwen3_tts.md), which is why the bounds are part of the
record and `bench` prints the reason next to the choice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .corpus import CALIBRATION_TEXTS, corpus_request
from .graphs import CANDIDATES, PRECISION_FILE
from .pipeline import Qwen3TTS

__all__ = ["MAX_KL", "MIN_TOP1", "choose", "measure_precisions"]

# A quantised model is admissible when, at both stages, its sampling law stays this close to
# float32's (mean KL per code, nats) and its argmax agrees this often.
MAX_KL = 0.02
MIN_TOP1 = 0.98


def _speed(tts: Qwen3TTS, frames: int, seed: int, ref_audio) -> dict:
    """ms per frame of the talker step and the AR code-predictor loop, greedy."""
    text, lang = CALIBRATION_TEXTS[0]
    info: dict = {}
    n = 0
    for _ in tts.iter_frames(
        text,
        mode="ar",
        temperature=0,
        seed=seed,
        max_frames=frames,
        info=info,
        **corpus_request(tts, text, lang, 0, ref_audio),
    ):
        n += 1
    n = max(n, 1)
    s = info["seconds"]
    return {"talker_ms": 1e3 * s["talker"] / n, "depth_ms": 1e3 * s["depth"] / n, "frames": n}


def measure_precisions(
    model_dir,
    *,
    candidates=CANDIDATES,
    frames: int = 16,
    rounds: int = 3,
    cache_dir=None,
    provider: str = "cpu",
    threads: Optional[int] = None,
    seed: int = 0,
    ref_audio=None,
    log: Optional[Callable[[str], None]] = None,
) -> dict:
    """Per candidate precision: median ms per frame (talker, depth loop AR, both) over
    `rounds` interleaved rounds after one warm-up, and the logit error against float32."""
    from .quant_error import logit_error

    log = log or (lambda m: None)
    bad = [w for w in candidates if w not in CANDIDATES]
    if bad or not candidates:
        raise ValueError(f"candidates: expected some of {CANDIDATES}, got {list(candidates)}")
    kw = dict(cache_dir=cache_dir, provider=provider, threads=threads)
    models = {w: Qwen3TTS.load(model_dir, weights=w, log=log, **kw) for w in candidates}
    times: dict = {w: [] for w in candidates}
    for r in range(int(rounds) + 1):
        order = list(candidates[r % len(candidates) :]) + list(candidates[: r % len(candidates)])
        for w in order:
            t = _speed(models[w], frames, seed, ref_audio)
            if r:  # round 0 warms every session up
                times[w].append(t)
        log(f"precision timing: round {r}/{rounds}")
    out: dict = {}
    for w in candidates:
        talker = float(np.median([t["talker_ms"] for t in times[w]]))
        depth = float(np.median([t["depth_ms"] for t in times[w]]))
        out[w] = {"talker_ms": talker, "depth_ms": depth, "ms_per_frame": talker + depth}
    del models
    for w in candidates:
        if w != "fp32":
            log(f"precision fidelity: {w} against fp32")
            err = logit_error(model_dir, w, texts=2, max_frames=frames, ref_audio=ref_audio, **kw)
            out[w]["error"] = {stage: err[stage] for stage in ("talker", "depth")}
    return out


def admissible(entry: dict, max_kl: float = MAX_KL, min_top1: float = MIN_TOP1) -> bool:
    """Whether a measured precision keeps both stages' laws within the bounds (fp32: yes)."""
    err = entry.get("error")
    if err is None:
        return True
    return all(e["kl_mean"] <= max_kl and e["top1_agreement"] >= min_top1 for e in err.values())


def choose(measured: dict, max_kl: float = MAX_KL, min_top1: float = MIN_TOP1) -> dict:
    """{"chosen": precision, "reason": one line}: the fastest admissible precision."""
    ok = [w for w, m in measured.items() if admissible(m, max_kl, min_top1)]
    if not ok:
        raise ValueError("measured: no admissible precision (fp32 was not measured)")
    best = min(ok, key=lambda w: measured[w]["ms_per_frame"])
    ms = {w: measured[w]["ms_per_frame"] for w in measured}
    speeds = ", ".join(f"{w} {ms[w]:.1f}" for w in measured)
    refused = [w for w in measured if w not in ok]
    why = f"fastest of the admissible precisions (ms per frame, talker + AR depth: {speeds})"
    if refused:
        why += (
            f"; {', '.join(refused)} refused: KL > {max_kl} or top-1 agreement < {min_top1} "
            "against fp32 at a stage"
        )
    return {"chosen": best, "reason": why}


def calibrate_precision(tts_entry: Path, model_dir, **kw) -> dict:
    """Measures, chooses and stores `precision.json` in the built graphs' folder
    `tts_entry`; returns the stored record."""
    from codecspec.graphs.row_probe import cpu_simd_flags

    measured = measure_precisions(model_dir, **kw)
    record = {
        **choose(measured),
        "bounds": {"max_kl": MAX_KL, "min_top1": MIN_TOP1},
        "measured": measured,
        "cpu_simd": cpu_simd_flags(),
        "threads": kw.get("threads"),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    dst = Path(tts_entry) / PRECISION_FILE
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(dst)
    return record
