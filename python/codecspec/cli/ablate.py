"""`codecspec ablate`: drafter ablation, head reuse vs offsets vs Medusa heads."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from codecspec.cli import options
from codecspec.cli.demo import demo_model


def _reference_model():
    """The shipped reference model directory (None when this install lacks one). Asked of
    the registry: shared CLI code imports no family."""
    from codecspec.model_store import MissingModelError
    from codecspec.pipeline.registry import resolve_model_dir

    try:
        root = resolve_model_dir("reference")
    except MissingModelError:
        return None
    return root if (root / "depth.onnx").is_file() else None


def _ablation_source(model: Path):
    """(depth .onnx, inputs or None) from an .onnx path or a model directory.

    A directory holds depth.onnx and optionally frames.npz with the real (hiddens, c0s) the
    temporal model produced, which make a better corpus than synthetic inputs.
    """
    if not model.exists():
        raise FileNotFoundError(f"model: no such file or directory: {model}")
    if not model.is_dir():
        return model, None
    onnx_path = model / "depth.onnx"
    if not onnx_path.is_file():
        raise FileNotFoundError(f"model: no depth.onnx in {model}")
    if not (model / "frames.npz").is_file():
        return onnx_path, None
    from codecspec.pipeline.depth_bench import load_frames

    return onnx_path, load_frames(model)


def cmd_ablate(args) -> int:
    """Head reuse vs offsets vs Medusa heads: tokens per call at each budget, and parameters."""
    from codecspec.train.ablate import ablate

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(args.model) if args.model else _reference_model()
        if model is None:
            print(
                "no reference model shipped: using the demo's synthetic drift model",
                file=sys.stderr,
            )
            path, inputs = demo_model(Path(tmp), args.seed), None
        else:
            path, inputs = _ablation_source(model)
        print(f"ablating drafters on {path} ...", file=sys.stderr)
        epochs = {"epochs": args.epochs}
        result = ablate(
            path,
            args.out,
            inputs=inputs,
            frames=args.frames,
            budgets=args.budgets,
            params=options.fixed_params(args),
            seed=args.seed,
            provider=args.provider,
            threads=args.threads,
            train_kwargs=epochs,
            medusa_kwargs=epochs,
            progress=True,
        )
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    print(result.markdown())
    print()
    print(result.summary())
    files = ", ".join(Path(f).name for f in result.files.values())
    print(f"wrote {files} to {result.out_dir} ({time.monotonic() - t0:.1f}s)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ablate", help="drafter ablation: head reuse vs offsets vs Medusa heads")
    p.add_argument(
        "--model",
        help="depth graph (.onnx) or a directory with depth.onnx (and optionally frames.npz "
        "holding `hiddens`, `c0s`); default: the shipped reference model, else the demo's "
        "synthetic drift model",
    )
    p.add_argument("--frames", type=int, default=1024, help="frames (train + held-out)")
    p.add_argument("--budgets", type=int, nargs="+", default=[4, 8, 16, 32])
    p.add_argument("--out", default="ablation", help="output directory (default ./ablation)")
    p.add_argument("--epochs", type=int, default=20, help="training epochs of both drafters")
    options.provider(p, default="cpu")
    options.threads(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    options.sampling(p, model_defaults=False)
    p.set_defaults(func=cmd_ablate)
