"""`codecspec calibrate --model DIR`: depth speculation calibrated on the user's checkpoint.

Free generation of the checkpoint itself on built-in texts gives the corpus (the talker's
hidden state and c0 of every frame, drawn with the checkpoint's own sampling defaults); then
the generic calibration (calibrate/device.py) trains the offsets b_j, measures the acceptance
a[d][r] and this device's latency profile, and picks the tree. Its report goes to
<graphs>/calibration/; offsets.npy and tree.json are copied beside the built graphs last
(the decoder reads them), and the decision (`codecspec.calibrate.decision`: decision.json,
per precision like the rest), which makes `synth --mode auto` speculate only where the
measured end-to-end depth loop was faster than AR on this device. A folder calibrated before
that format keeps its speculation.json, read the same way.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs

from .corpus import CALIBRATION_TEXTS, corpus_request
from .pipeline import Qwen3TTS
from .row_exact import probe_tree_rows

__all__ = [
    "collect_corpus",
    "calibrate_checkpoint",
    "calibrate_command",
    "shipped_qwen3_map",
    "speculate_here",
]


def collect_corpus(
    tts: Qwen3TTS, frames: int, seed: int = 0, max_frames: int = 400, ref_audio=None
):
    """(hiddens [N, H], c0s [N]) from free generation, N <= frames."""
    hiddens: list = []
    c0s: list = []
    i = 0
    while len(c0s) < frames and i < 4 * len(CALIBRATION_TEXTS):
        text, lang = CALIBRATION_TEXTS[i % len(CALIBRATION_TEXTS)]
        trace: list = []
        for _ in tts.iter_frames(
            text,
            seed=seed + i,
            max_frames=max_frames,
            trace=trace,
            **corpus_request(tts, text, lang, i, ref_audio),
        ):
            pass
        hiddens += [h for h, _ in trace]
        c0s += [c for _, c in trace]
        i += 1
    if not c0s:
        raise ValueError("model: free generation produced no frames to calibrate on")
    n = min(frames, len(c0s))
    return np.stack(hiddens[:n]).astype(np.float32), np.asarray(c0s[:n], np.int64)


def calibrate_checkpoint(
    model_dir,
    *,
    cache_dir=None,
    frames: int = 300,
    budgets=(1, 2, 4, 8, 12, 16),
    provider: str = "cpu",
    threads: Optional[int] = None,
    seed: int = 0,
    progress: bool = True,
    ref_audio=None,
    weights: Optional[str] = None,
    log=None,
):
    """Calibrates depth speculation at `weights`; with None or "auto" the precision is first
    chosen by measuring this device (precision.py, stored for `--weights auto`)."""
    from codecspec.calibrate.device import calibrate

    if weights in (None, "auto"):
        from .checkpoint import Qwen3Checkpoint
        from .graphs import build_or_load
        from .precision import calibrate_precision

        entry = build_or_load(Qwen3Checkpoint(model_dir), cache_dir=cache_dir, log=log)
        kw = dict(cache_dir=cache_dir, provider=provider, threads=threads, seed=seed, log=log)
        choice = calibrate_precision(entry, model_dir, ref_audio=ref_audio, **kw)
        weights = choice["chosen"]
        if log:
            log(f"precision: {weights} ({choice['reason']})")
    tts = Qwen3TTS.load(
        model_dir, cache_dir=cache_dir, provider=provider, threads=threads, weights=weights
    )
    hiddens, c0s = collect_corpus(tts, frames, seed, ref_audio=ref_audio)
    _, depth_params = tts.sampling()
    out = tts.entry / ("calibration" if tts.weights == "fp32" else f"calibration.{tts.weights}")
    result = calibrate(
        tts.depth.graph.path,
        out,
        frames=len(c0s),
        budgets=tuple(budgets),
        provider=provider,
        seed=seed,
        params=depth_params,
        threads=threads,
        inputs=(hiddens, c0s),
        save_beside_model=False,
        progress=progress,
    )
    entry: Path = tts.entry
    for name in ("offsets.npy", "tree.json"):
        dst = tts.calibration_file(name)
        shutil.copyfile(out / name, dst.with_name(f".{dst.name}.tmp"))
        dst.with_name(f".{dst.name}.tmp").replace(dst)
    # the calibrated tree's verify calls, scored against AR on frames of the corpus
    tts.depth.set_tree(cs.DraftTree.from_json(tts.calibration_file("tree.json").read_text()))
    rows = probe_tree_rows(tts.depth, hiddens, c0s)
    _write_decision(tts, result, rows)
    return result, entry


def speculate_here(speedup, rows: dict) -> tuple:
    """(speculate, why): speculate where the end-to-end depth loop beat AR on this device
    (`speedup` > 1) and a verify call scores positions as the AR call does to float
    rounding (`rows`: `row_exact.probe_tree_rows`); otherwise the AR law would move."""
    pays = bool((speedup or 0.0) > 1.0)
    shown = "not measured" if speedup is None else f"{speedup:.3f}x AR"
    if not rows["exact"]:
        return False, (
            f"a verify call's logits differ from the AR call's by up to "
            f"{rows['max_rel_diff']:.2g} of the row (more than float rounding) on this device: "
            f"speculation would move the law, decode AR (the depth loop ran at {shown})"
        )
    verdict = "speculate" if pays else "decode AR"
    return pays, f"the depth loop with the calibrated tree ran at {shown} end to end: {verdict}"


def _write_decision(tts: Qwen3TTS, result, rows: dict):
    """The decision beside the graphs, for this precision (`speculate_here`): the real depth
    loop timed end to end against AR on this device (a simulation leaves out this decoder's
    host work, which the end-to-end run includes), and the verify rows' agreement with AR."""
    from codecspec.calibrate.decision import DECISION_FILE, write_decision
    from codecspec.calibrate.profile import decision_device

    e2e = result.end_to_end or {}
    speedup = e2e.get("speedup")
    speculate, why = speculate_here(speedup, rows)
    measured = {
        "rule": "measured_speedup > 1 and tree_rows.exact",
        "weights": tts.weights,
        "measured_speedup": speedup,
        "ar_ms_per_frame": e2e.get("ar_ms_per_frame"),
        "spec_ms_per_frame": e2e.get("spec_ms_per_frame"),
        "tokens_per_call": result.best.simulated_tokens_per_call,
        "simulated_speedup": result.best.speedup_simulated,
        "tree_rows": rows,
    }
    return write_decision(
        tts.calibration_file(DECISION_FILE),
        speculate=speculate,
        why=f"{why} ({tts.weights})",
        measured=measured,
        device=decision_device(result.profile),
    )


def calibrate_command(args) -> int:
    """`codecspec calibrate --model DIR` for a Qwen3-TTS checkpoint folder
    (`Qwen3Family.calibrate_command`)."""
    from .graphs import chosen_precision

    model_dir = args.model
    result, entry = calibrate_checkpoint(
        model_dir,
        cache_dir=args.cache_dir,
        frames=args.frames,
        budgets=tuple(args.budgets),
        provider=args.provider,
        threads=args.threads,
        seed=args.seed,
        ref_audio=args.ref_audio,
        weights=args.weights,
        log=lambda m: print(m, file=sys.stderr),
    )
    print(result.summary() if hasattr(result, "summary") else result)
    if args.weights in (None, "auto"):  # the precision was chosen first
        choice = chosen_precision(entry)
        args.weights = choice["chosen"]
        print(
            f"weights: {choice['chosen']} on this device ({choice['reason']}); "
            "`--weights auto` runs it, the default stays fp32 (the official codes)"
        )
    print(_map_line(result, args))
    print(f"stored offsets.npy, tree.json and the decision beside the graphs in {entry}")
    return 0


def _map_line(result, args) -> str:
    """Where a Qwen3-TTS checkpoint's calibrated tokens per call falls on the speed-up map
    measured at its own shape and precision on the project's CPU (shipped for the 0.6B code
    predictor; `python bench/qwen3_real_shape.py` builds one for another shape or device)."""
    from codecspec.calibrate.speedup_map import where_on_the_map

    from .pipeline import resolve_weights

    path = shipped_qwen3_map(result.config, resolve_weights(args.weights, args.provider))
    if path is None:
        return (
            "speed-up map: none shipped for this code predictor's shape and precision; "
            "build one with `python bench/qwen3_real_shape.py --model DIR`"
        )
    return where_on_the_map(result, path)


def shipped_qwen3_map(config, weights: str):
    """The speed-up map shipped for this code predictor shape and precision (measured on the
    project's 2-core CPU by bench/qwen3_real_shape.py), or None."""
    import json

    path = Path(__file__).resolve().parents[2] / "models" / f"qwen3_speedup_map.{weights}.json"
    if not path.is_file():
        return None
    shape = json.loads(path.read_text()).get("shape", {})
    want = {
        "hidden": config.hidden_size,
        "layers": config.num_layers,
        "vocab": config.codebook_size,
        "groups": config.num_codebooks,
    }
    return path if shape == want else None
