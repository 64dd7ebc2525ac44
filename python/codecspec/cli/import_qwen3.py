"""`codecspec import-qwen3`: the depth graph of a Qwen3-TTS checkpoint folder."""

from __future__ import annotations

import argparse

from codecspec.cli.build_graph import save_heads


def cmd_import_qwen3(args) -> int:
    """The Qwen3-TTS family reads its checkpoint (the registry's "import_checkpoint" hook,
    `(folder) -> (DepthDecoderConfig, DepthDecoderWeights)`): shared CLI code names no
    family module; the graph is the shared builder's."""
    from codecspec.graphs import build_depth_graph, count_nodes, save_model
    from codecspec.pipeline import registry

    read = registry.by_name("qwen3-tts").hook("import_checkpoint")
    config, weights = read(args.checkpoint)
    model = build_depth_graph(config, weights, variant=args.variant, heads=args.heads)
    save_model(model, args.output, external_data=args.external_data)
    save_heads(args, weights)
    print(f"wrote {args.output}: {count_nodes(model)} nodes from {args.checkpoint}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import-qwen3", help="depth graph from a Qwen3-TTS checkpoint directory")
    p.add_argument("checkpoint")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--variant", choices=["cpu", "plain"], default="cpu")
    p.add_argument("--heads", choices=["graph", "hidden"], default="hidden")
    p.add_argument("--external-data", action="store_true")
    p.set_defaults(func=cmd_import_qwen3)
