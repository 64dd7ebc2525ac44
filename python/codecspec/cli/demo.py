"""`codecspec demo`: AR vs speculative depth decoding on a small synthetic model."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from codecspec.cli import options


def demo_model(workdir: Path, seed: int) -> Path:
    """A small synthetic depth model whose codes drift smoothly across RVQ levels, so that
    head reuse and offsets have something to predict (random weights alone give drafts no
    better than chance). It stands in until the reference TTS model is shipped."""
    from codecspec.calibrate.data import drift_weights
    from codecspec.graphs import build_depth_graph, save_model, small_depth
    from codecspec.runtime.depth_graph import heads_sidecar

    config = small_depth()
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
        params=options.fixed_params(args),
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
            path = demo_model(Path(tmp), args.seed)
            tree, offsets = _demo_calibration(path, args)
        dec = DepthDecoder(
            path,
            tree=tree,
            offsets=offsets,
            params=options.fixed_params(args),
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


def register(sub: argparse._SubParsersAction) -> None:
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
    options.provider(p)
    options.threads(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    options.sampling(p, model_defaults=False)
    p.set_defaults(func=cmd_demo)
