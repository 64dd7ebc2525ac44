"""What exact verification costs per code-predictor call: the fused attention
(GroupQueryAttention, attention="call") against attention="placed" (a verify call scores each
tree node bit for bit as the AR call scores its position), both built from one Qwen3-TTS
checkpoint's code predictor at one precision, timed interleaved on this CPU: the AR step call
and a chain-3 tree call (four positions), medians over `--calls`. Prints the CPU's SIMD flags.

    codecspec random-checkpoint qwen3-0.6b /tmp/q06
    python bench/qwen3_attention_cost.py --model /tmp/q06 --weights int8,int4 --threads 2
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

import codecspec as cs
from codecspec.graphs.row_probe import cpu_simd_flags

MODES = ("call", "placed")


def decoders(model: str, weights: str, threads: int) -> dict:
    """{attention: DepthDecoder with its AR step and chain-3 tree calls bound}."""
    from codecspec.decode.depth import DepthDecoder
    from codecspec.families.qwen3_tts.predictor_import import load_qwen3_tts_checkpoint
    from codecspec.graphs import build_depth_graph
    from codecspec.graphs.quantize import quantize_weights

    config, w = load_qwen3_tts_checkpoint(model)
    out = {}
    for attention in MODES:
        g = build_depth_graph(config, w, heads="grouped", attention=attention)
        g = g if weights == "fp32" else quantize_weights(g, weights)
        dec = DepthDecoder(g.SerializeToString(), provider="cpu", threads=threads)
        dec.set_tree(cs.DraftTree.chain(3))
        dec._step_call.heads[0] = 1
        dec._tree_call.heads[: dec._tree_call.q] = np.arange(1, dec._tree_call.q + 1)
        out[attention] = dec
    return out


def interleaved(decs: dict, calls: int) -> dict:
    """Median ms of every (attention, call) pair, the four timed in turn, 30 warm-up rounds."""
    times = collections.defaultdict(list)
    for i in range(calls + 30):
        for attention, dec in decs.items():
            for name, call in (("ar", dec._step_call), ("tree", dec._tree_call)):
                t0 = time.perf_counter()
                call.run()
                if i >= 30:
                    times[(attention, name)].append(time.perf_counter() - t0)
    return {k: 1e3 * float(np.median(v)) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a Qwen3-TTS checkpoint folder")
    ap.add_argument("--weights", default="int8,int4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=370)
    args = ap.parse_args()
    print(f"CPU: {' '.join(cpu_simd_flags())} · {args.threads} threads · {args.calls} calls")
    print("| weights | AR call, call → placed | 4-row call, call → placed | tree ÷ AR, placed |")
    print("|---|---:|---:|---:|")
    for weights in args.weights.split(","):
        ms = interleaved(decoders(args.model, weights, args.threads), args.calls)
        print(
            f"| {weights} | {ms['call', 'ar']:.2f} → {ms['placed', 'ar']:.2f} ms | "
            f"{ms['call', 'tree']:.2f} → {ms['placed', 'tree']:.2f} ms | "
            f"{ms['placed', 'tree'] / ms['placed', 'ar']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
