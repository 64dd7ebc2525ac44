"""`codecspec` command line: build graphs, import checkpoints, calibrate, ablate, run the demo."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _params(args) -> cs.SamplingParams:  # noqa: F821
    import codecspec as cs

    return cs.SamplingParams(args.temperature, args.top_k, args.top_p)


def _sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.9, help="0 = greedy (default 0.9)")
    p.add_argument("--top-k", type=int, default=50, help="0 = off (default 50)")
    p.add_argument("--top-p", type=float, default=1.0, help="1 = off (default 1.0)")


def small_config():
    """The demo's random-weight depth decoder: Qwen3-TTS layout at a size this CPU runs fast."""
    from codecspec.graphs.config import small_depth

    return small_depth()


def _save_heads(args, weights) -> None:
    """heads='hidden' graphs leave the LM heads to the host: store them beside the graph."""
    if args.heads == "hidden":
        from codecspec.runtime.depth_graph import heads_sidecar

        side = heads_sidecar(args.output)
        np.save(side, np.asarray(weights["heads"], np.float32))
        print(f"wrote {side} (LM heads for host-side evaluation)")


def cmd_build_graph(args) -> int:
    from codecspec.graphs import (
        DepthDecoderWeights,
        build_depth_graph,
        count_nodes,
        qwen3_tts_0_6b,
        save_model,
    )

    config = qwen3_tts_0_6b() if args.preset == "qwen3-0.6b" else small_config()
    weights = DepthDecoderWeights.random(config, seed=args.seed)
    model = build_depth_graph(config, weights, variant=args.variant, heads=args.heads)
    save_model(model, args.output)
    _save_heads(args, weights)
    print(
        f"wrote {args.output}: {count_nodes(model)} nodes, preset {args.preset}, "
        f"variant {args.variant}, random weights (seed {args.seed})"
    )
    return 0


def cmd_import_qwen3(args) -> int:
    from codecspec.graphs import build_depth_graph, count_nodes, save_model
    from codecspec.graphs.qwen3 import load_qwen3_tts_checkpoint

    config, weights = load_qwen3_tts_checkpoint(args.checkpoint)
    model = build_depth_graph(config, weights, variant=args.variant, heads=args.heads)
    save_model(model, args.output, external_data=args.external_data)
    _save_heads(args, weights)
    print(f"wrote {args.output}: {count_nodes(model)} nodes from {args.checkpoint}")
    return 0


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
        params=_params(args),
        offsets=args.offsets,
        threads=args.threads,
        medusa=args.medusa,
        heads=np.load(args.heads) if args.heads else None,
    )
    print(result.summary() if hasattr(result, "summary") else result)
    print(_where_on_the_map(result))
    return 0


def cmd_speedup_map(args) -> int:
    from codecspec.calibrate.speedup_map import DEFAULT_SHARPNESS, build_speedup_map, map_table

    doc = build_speedup_map(
        args.out,
        sharpness=args.sharpness or DEFAULT_SHARPNESS,
        frames=args.frames,
        calib_frames=args.calib_frames,
        provider=args.provider,
        threads=args.threads,
        seed=args.seed,
        progress=not args.json,
    )
    if args.json:
        print(json.dumps(doc))
    else:
        print(map_table(doc))
        print(f"wrote {args.out}/speedup_map.json, .md, .png ({doc['seconds']:.0f} s)")
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


def _demo_model(workdir: Path, seed: int) -> Path:
    """A small synthetic depth model whose codes drift smoothly across RVQ levels, so that
    head reuse and offsets have something to predict (random weights alone give drafts no
    better than chance). It stands in until the reference TTS model is shipped."""
    from codecspec.calibrate.data import drift_weights
    from codecspec.graphs import build_depth_graph, save_model
    from codecspec.runtime.depth_graph import heads_sidecar

    config = small_config()
    weights = drift_weights(config, seed=seed, sharpness=30.0, drift=0.6)
    path = workdir / "depth.onnx"
    save_model(build_depth_graph(config, weights, heads="hidden"), path)
    np.save(heads_sidecar(path), np.asarray(weights["heads"], np.float32))
    return path


def _demo_calibration(path: Path, args):
    from codecspec.calibrate.device import calibrate

    out = path.parent / "calib"
    print(
        f"calibrating {path.name}: offsets, acceptance, latency profile, tree ...", file=sys.stderr
    )
    res = calibrate(
        path,
        out,
        frames=args.calib_frames,
        budgets=(2, 4, 8, 16),
        provider=args.provider,
        seed=args.seed,
        params=_params(args),
        threads=args.threads,
        plots=False,
        end_to_end_frames=8,
        overhead_frames=8,
        progress=not args.json,
    )
    return res.tree, res.offsets


def _load_offsets(path):
    if not path:
        return None
    from codecspec.calibrate.offsets import load_offsets

    return load_offsets(path)[0]


def cmd_demo(args) -> int:
    """AR vs speculative depth decoding, in one run, on the same inputs."""
    import codecspec as cs
    from codecspec.decode import DepthDecoder

    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            path = Path(args.model)
            tree = cs.DraftTree.from_json(Path(args.tree).read_text()) if args.tree else None
            offsets = _load_offsets(args.offsets)
        else:
            path = _demo_model(Path(tmp), args.seed)
            tree, offsets = _demo_calibration(path, args)
        dec = DepthDecoder(
            path,
            tree=tree,
            offsets=offsets,
            params=_params(args),
            provider=args.provider,
            threads=args.threads,
        )
        result = _compare_modes(dec, args)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v:.4g}" if isinstance(v, float) else f"{k:>22}: {v}")
    return 0


def _compare_modes(dec, args) -> dict:
    import codecspec as cs
    from codecspec.fidelity import per_position_pvalues

    rng = np.random.default_rng(args.seed)
    c = dec.config
    hiddens = rng.standard_normal((args.frames, c.input_width)).astype(np.float32)
    c0s = rng.integers(0, c.c0_vocab_size, args.frames)
    result, codes = {}, {}
    for mode in ("ar", "spec"):
        dec.stats.reset()
        g = cs.Generator(args.seed, stream=1 if mode == "ar" else 2)
        t0 = time.perf_counter()
        codes[mode] = dec.decode_frames(hiddens, c0s, g, mode, progress=not args.json)
        result[f"{mode}_ms_per_frame"] = (time.perf_counter() - t0) * 1e3 / args.frames
        result[f"{mode}_calls_per_frame"] = dec.stats.calls_per_frame
        if mode == "spec":
            result["tokens_per_call"] = dec.stats.tokens_per_call
    result["speedup"] = result["ar_ms_per_frame"] / result["spec_ms_per_frame"]
    p = per_position_pvalues(codes["ar"][:, 1:], codes["spec"][:, 1:], c.codebook_size)
    result["fidelity_min_p"] = float(p.min())
    result["tree_nodes"] = dec.tree.num_nodes
    result["provider"] = dec.graph.provider
    return result


def _reference_model():
    """The shipped reference model directory (None when this install lacks one)."""
    from codecspec.tts.model import default_model_dir

    root = default_model_dir()
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
    from codecspec.tts.bench import load_frames

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
            path, inputs = _demo_model(Path(tmp), args.seed), None
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
            params=_params(args),
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


def cmd_random_checkpoint(args) -> int:
    from codecspec.families.qwen3_tts.random_checkpoint import write_random_checkpoint

    t0 = time.monotonic()
    info = write_random_checkpoint(
        args.shape,
        args.out,
        seed=args.seed,
        model_type=args.model_type,
        force=args.force,
        progress=not args.json,
    )
    info["seconds"] = round(time.monotonic() - t0, 1)
    if args.json:
        print(json.dumps(info))
        return 0
    gb = (info["model_bytes"] + info["speech_tokenizer_bytes"]) / 1e9
    print(
        f"wrote {info['out']}: random-weight Qwen3-TTS {info['shape']} {info['model_type']}, "
        f"{info['parameters']:,} talker+predictor parameters, {gb:.3f} GB, "
        f"{len(info['files'])} files ({info['seconds']}s). For speed measurements only: "
        "it speaks noise."
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from codecspec.tts.commands import register, threads_arg

    ap = argparse.ArgumentParser(prog="codecspec", description=__doc__)
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="calibrate and compare AR vs speculative depth decoding")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--calib-frames", type=int, default=192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--model",
        help="depth graph (.onnx); default: a fresh synthetic small graph, calibrated on the spot",
    )
    p.add_argument("--tree", help="tree JSON from `codecspec calibrate`")
    p.add_argument("--offsets", help="offsets (.npz from calibrate, or .npy [K, H])")
    p.add_argument("--provider", default="auto", choices=["auto", "cpu", "cuda", "coreml"])
    p.add_argument("--threads", type=threads_arg, default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _sampling_args(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("build-graph", help="build a random-weight depth graph (.onnx)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--preset", choices=["small", "qwen3-0.6b"], default="small")
    p.add_argument("--variant", choices=["cpu", "plain"], default="cpu")
    p.add_argument(
        "--heads",
        choices=["graph", "hidden"],
        default="hidden",
        help="hidden (default): LM heads evaluated on the host, cheaper on CPUs",
    )
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_build_graph)

    p = sub.add_parser("import-qwen3", help="depth graph from a Qwen3-TTS checkpoint directory")
    p.add_argument("checkpoint")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--variant", choices=["cpu", "plain"], default="cpu")
    p.add_argument("--heads", choices=["graph", "hidden"], default="hidden")
    p.add_argument("--external-data", action="store_true")
    p.set_defaults(func=cmd_import_qwen3)

    p = sub.add_parser("calibrate", help="acceptance, latency profile and draft tree for a device")
    p.add_argument("model", nargs="?", default=None, help="depth graph (.onnx)")
    p.add_argument(
        "--model",
        dest="model_opt",
        default=None,
        help="a Qwen3-TTS checkpoint folder: calibrate on its own free generation and store "
        "the result beside its built graphs",
    )
    p.add_argument("--cache-dir", default=None, help="Qwen3-TTS: graph cache (see synth)")
    p.add_argument("--ref-audio", default=None, help="Qwen3-TTS Base: the voice (24 kHz WAV)")
    from codecspec.tts.commands import weights_option

    weights_option(p)
    p.add_argument("-o", "--output", default=None, help="output directory (depth graphs)")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--budgets", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32])
    p.add_argument("--offsets", help="trained offsets (default: train them)")
    p.add_argument(
        "--heads",
        help="LM heads .npy [G-1, V, H] for a heads='hidden' graph "
        "(default: the <model>.heads.npy sidecar)",
    )
    p.add_argument("--threads", type=threads_arg, default=None)
    p.add_argument("--medusa", action="store_true", help="also train the Medusa-heads ablation")
    p.add_argument("--provider", default="cpu", choices=["auto", "cpu", "cuda", "coreml"])
    p.add_argument("--seed", type=int, default=0)
    _sampling_args(p)
    p.set_defaults(func=cmd_calibrate)

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
    p.add_argument("--provider", default="cpu", choices=["auto", "cpu", "cuda", "coreml"])
    p.add_argument("--threads", type=threads_arg, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    _sampling_args(p)
    p.set_defaults(func=cmd_ablate)

    p = sub.add_parser(
        "speedup-map", help="measured vs ideal depth speculation speed-up vs acceptance, here"
    )
    p.add_argument("--out", default="speedup_map", help="output directory (default ./speedup_map)")
    p.add_argument(
        "--sharpness",
        type=float,
        nargs="+",
        default=None,
        help="drift-family head sharpness values (default: 9 points, a ~0.1-0.95)",
    )
    p.add_argument("--frames", type=int, default=160, help="AR+spec frames per point")
    p.add_argument("--calib-frames", type=int, default=256)
    p.add_argument("--provider", default="cpu", choices=["auto", "cpu", "cuda", "coreml"])
    p.add_argument("--threads", type=threads_arg, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    p.set_defaults(func=cmd_speedup_map)

    p = sub.add_parser(
        "random-checkpoint",
        help="write a random-weight Qwen3-TTS folder of the real shapes (speed measurements)",
    )
    p.add_argument("shape", choices=["qwen3-0.6b", "qwen3-1.7b", "tiny"])
    p.add_argument("out", help="output folder (must be absent or empty unless --force)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-type", default="custom_voice", choices=["custom_voice", "voice_design"])
    p.add_argument(
        "--force", action="store_true", help="replace an OUT that holds an earlier Qwen3-TTS folder"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_random_checkpoint)

    register(sub)
    from codecspec.serve.commands import register as register_serve

    register_serve(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s"
    )
    from codecspec.tts.intelligibility import RecognizerUnavailable
    from codecspec.tts.model import PhonemizerError

    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, PhonemizerError, RecognizerUnavailable) as e:
        print(f"codecspec {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
