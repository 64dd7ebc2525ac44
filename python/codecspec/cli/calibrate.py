"""`codecspec calibrate`: acceptance, latency profile and draft tree for this device."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from codecspec.cli import options


def _calibrate_qwen3(args, model_dir) -> int:
    from codecspec.families.qwen3_tts.calibrate import calibrate_checkpoint

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
    from codecspec.families.qwen3_tts.precision import chosen_precision

    print(result.summary() if hasattr(result, "summary") else result)
    if args.weights in (None, "auto"):  # the precision was chosen first
        choice = chosen_precision(entry)
        args.weights = choice["chosen"]
        print(
            f"weights: {choice['chosen']} on this device ({choice['reason']}); "
            "`--weights auto` runs it, the default stays fp32 (the official codes)"
        )
    print(_qwen3_map_line(result, args))
    print(f"stored offsets.npy and tree.json beside the graphs in {entry}")
    return 0


def calibrate_qwen3_command(args) -> int:
    """`codecspec calibrate --model DIR` for a Qwen3-TTS checkpoint folder (the registry's
    "calibrate" hook of that family)."""
    return _calibrate_qwen3(args, args.model)


def cmd_calibrate(args) -> int:
    from codecspec.calibrate.device import calibrate
    from codecspec.pipeline import registry

    if args.model is not None and args.model_opt is not None:
        raise ValueError("--model: give the model once (positional or --model)")
    model = args.model if args.model is not None else args.model_opt
    if model is None:
        raise ValueError("model: give a depth graph (.onnx) or --model DIR (Qwen3-TTS)")
    entry = registry.find(model)  # a family with its own calibration, else a depth graph
    hook = entry.hook("calibrate") if entry is not None else None
    if hook is not None:
        args.model = model
        return hook(args)
    if args.output is None:
        raise ValueError("--output: required for a depth graph (-o DIR)")
    args.model = model
    result = calibrate(
        args.model,
        args.output,
        frames=args.frames,
        budgets=tuple(args.budgets),
        provider=args.provider,
        seed=args.seed,
        params=options.fixed_params(args),
        offsets=args.offsets,
        threads=args.threads,
        medusa=args.medusa,
        heads=np.load(args.heads) if args.heads else None,
    )
    print(result.summary() if hasattr(result, "summary") else result)
    print(_where_on_the_map(result))
    return 0


def _qwen3_map_line(result, args) -> str:
    """Where a Qwen3-TTS checkpoint's calibrated tokens per call falls on the speed-up map
    measured at its own shape and precision on the project's CPU (shipped for the 0.6B code
    predictor; `python bench/qwen3_real_shape.py` builds one for another shape or device)."""
    from codecspec.families.qwen3_tts.bench import shipped_qwen3_map
    from codecspec.families.qwen3_tts.pipeline import resolve_weights

    path = shipped_qwen3_map(result.config, resolve_weights(args.weights, args.provider))
    if path is None:
        return (
            "speed-up map: none shipped for this code predictor's shape and precision; "
            "build one with `python bench/qwen3_real_shape.py --model DIR`"
        )
    return _where_on_the_map(result, path)


def _where_on_the_map(result, path=None) -> str:
    """One line: the calibrated model's tokens per call placed on this device's speed-up map
    (`path`; default the shipped one, measured on the project's CPU)."""
    from codecspec.calibrate.speedup_map import locate, shipped_map_path

    path = shipped_map_path() if path is None else path
    if not path.is_file():
        return "speed-up map: none shipped; build one with `codecspec speedup-map`"
    doc = json.loads(path.read_text())
    tpc = result.best.simulated_tokens_per_call
    loc = locate(doc, tpc)
    where = "inside" if loc["inside"] else "outside (clamped to)"
    be = loc["break_even_tokens_per_call"]
    return (
        f"speed-up map ({doc.get('cpu_model', '?')}, {doc.get('threads', '?')} threads): "
        f"{tpc:.2f} tokens/call is {where} the measured range -> {loc['speedup']:.2f}x measured "
        f"there (ideal {loc['ideal_speedup']:.2f}x); speculation pays from "
        f"{'n/a' if be is None else f'{be:.2f}'} tokens/call on that device"
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="acceptance, latency profile and draft tree for a device")
    p.add_argument("model", nargs="?", default=None, help="depth graph (.onnx)")
    p.add_argument(
        "--model",
        dest="model_opt",
        default=None,
        help="a Qwen3-TTS checkpoint folder: calibrate on its own free generation and store "
        "the result beside its built graphs",
    )
    options.cache_dir(p, help="Qwen3-TTS: graph cache (see synth)")
    p.add_argument("--ref-audio", default=None, help="Qwen3-TTS Base: the voice (24 kHz WAV)")
    options.weights(p)
    p.add_argument("-o", "--output", default=None, help="output directory (depth graphs)")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32])
    p.add_argument("--offsets", help="trained offsets (default: train them)")
    p.add_argument(
        "--heads",
        help="LM heads .npy [G-1, V, H] for a heads='hidden' graph "
        "(default: the <model>.heads.npy sidecar)",
    )
    options.threads(p)
    p.add_argument("--medusa", action="store_true", help="also train the Medusa-heads ablation")
    options.provider(p, default="cpu")
    p.add_argument("--seed", type=int, default=0)
    options.sampling(p, model_defaults=False)
    p.set_defaults(func=cmd_calibrate)
