"""End-to-end Python API example: build a depth graph, calibrate it, decode frames both ways.

    python examples/depth_speculation.py [--frames 200] [--workdir DIR]

Uses a small synthetic depth model (random weights whose codes drift smoothly across RVQ
levels); swap `build()` for `codecspec.graphs.load_qwen3_tts_checkpoint(...)` to run a real
Qwen3-TTS code predictor.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import codecspec as cs
from codecspec.calibrate.data import drift_weights
from codecspec.calibrate.device import calibrate
from codecspec.decode import DepthDecoder
from codecspec.fidelity import per_position_pvalues
from codecspec.graphs import build_depth_graph, save_model, small_depth
from codecspec.runtime.depth_graph import heads_sidecar


def build(workdir: Path) -> Path:
    config = small_depth()
    weights = drift_weights(config, seed=0, sharpness=30.0, drift=0.6)
    path = workdir / "depth.onnx"
    save_model(build_depth_graph(config, weights, heads="hidden"), path)
    np.save(heads_sidecar(path), weights["heads"])  # heads="hidden": heads run on the host
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--workdir")
    args = ap.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="codecspec-"))
    path = build(workdir)

    params = cs.SamplingParams(temperature=0.9, top_k=50)
    calib = calibrate(path, workdir / "calib", frames=192, budgets=(2, 4, 8), params=params)
    print(calib.summary())

    dec = DepthDecoder(path, tree=calib.tree, offsets=calib.offsets, params=params, provider="auto")
    rng = np.random.default_rng(0)
    hiddens = rng.standard_normal((args.frames, dec.config.input_width)).astype(np.float32)
    c0s = rng.integers(0, dec.config.c0_vocab_size, args.frames)
    codes = {}
    for mode in ("ar", "spec"):
        dec.stats.reset()
        t0 = time.perf_counter()
        codes[mode] = dec.decode_frames(hiddens, c0s, cs.Generator(7).fork(len(mode)), mode)
        ms = (time.perf_counter() - t0) * 1e3 / args.frames
        print(
            f"{mode:>4}: {ms:6.2f} ms/frame, {dec.stats.calls_per_frame:5.2f} calls/frame, "
            f"{dec.stats.tokens_per_call:4.2f} codes/call"
        )
    p = per_position_pvalues(codes["ar"][:, 1:], codes["spec"][:, 1:], dec.config.codebook_size)
    print(f"smallest per-position p-value (AR vs speculative code histograms): {p.min():.3g}")


if __name__ == "__main__":
    main()
