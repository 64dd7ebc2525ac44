"""`codecspec calibrate`: acceptance, latency profile and draft tree for this device."""

from __future__ import annotations

import argparse

import numpy as np

from codecspec.cli import options


def cmd_calibrate(args) -> int:
    from codecspec.calibrate.device import calibrate
    from codecspec.calibrate.speedup_map import where_on_the_map
    from codecspec.pipeline import registry

    if args.model is not None and args.model_opt is not None:
        raise ValueError("--model: give the model once (positional or --model)")
    model = args.model if args.model is not None else args.model_opt
    if model is None:
        raise ValueError("model: give a depth graph (.onnx) or --model DIR (Qwen3-TTS)")
    args.model = model
    entry = registry.find(model)  # a family with its own calibration, else a depth graph
    family = None if entry is None else entry.load("engine")
    if family is not None and family.calibrate_command is not None:
        return family.calibrate_command(args)
    if args.output is None:
        raise ValueError("--output: required for a depth graph (-o DIR)")
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
    print(where_on_the_map(result))
    return 0


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
    options.family_options("calibrate", p)
    p.set_defaults(func=cmd_calibrate)
