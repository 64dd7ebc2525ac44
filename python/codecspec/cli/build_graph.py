"""`codecspec build-graph`: a random-weight depth graph (.onnx)."""

from __future__ import annotations

import argparse


def save_heads(args, weights) -> None:
    """heads='hidden' graphs leave the LM heads to the host: store them beside the graph."""
    if args.heads == "hidden":
        from codecspec.runtime.depth_graph import write_heads_sidecar

        side = write_heads_sidecar(args.output, weights["heads"])
        print(f"wrote {side} (LM heads for host-side evaluation)")


def cmd_build_graph(args) -> int:
    from codecspec.graphs import (
        DepthDecoderWeights,
        build_depth_graph,
        count_nodes,
        qwen3_tts_0_6b,
        save_model,
        small_depth,
    )

    config = qwen3_tts_0_6b() if args.preset == "qwen3-0.6b" else small_depth()
    weights = DepthDecoderWeights.random(config, seed=args.seed)
    model = build_depth_graph(config, weights, variant=args.variant, heads=args.heads)
    save_model(model, args.output)
    save_heads(args, weights)
    print(
        f"wrote {args.output}: {count_nodes(model)} nodes, preset {args.preset}, "
        f"variant {args.variant}, random weights (seed {args.seed})"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
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
