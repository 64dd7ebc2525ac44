"""The Qwen3-TTS family's own `codecspec` subcommands (the registry's `cli_commands`).

`codecspec random-checkpoint` writes a random-weight folder of the real shapes (speed
measurements without the published weights); `codecspec import-qwen3` builds the code
predictor's depth graph from a checkpoint folder. `codecspec --help` imports this module, so
it holds the parsers only; each command imports its code when it runs.
"""

from __future__ import annotations

import argparse

__all__ = ["add_commands"]


def _random_checkpoint(args) -> int:
    from .cli import random_checkpoint_command

    return random_checkpoint_command(args)


def _import_checkpoint(args) -> int:
    from codecspec.graphs import build_depth_graph, count_nodes, save_model
    from codecspec.runtime.depth_graph import write_heads_sidecar

    from .predictor_import import load_qwen3_tts_checkpoint

    config, weights = load_qwen3_tts_checkpoint(args.checkpoint)
    model = build_depth_graph(config, weights, variant=args.variant, heads=args.heads)
    save_model(model, args.output, external_data=args.external_data)
    if args.heads == "hidden":  # the host evaluates the LM heads: they go beside the graph
        side = write_heads_sidecar(args.output, weights["heads"])
        print(f"wrote {side} (LM heads for host-side evaluation)")
    print(f"wrote {args.output}: {count_nodes(model)} nodes from {args.checkpoint}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Adds `import-qwen3` and `random-checkpoint` to the `codecspec` subcommands."""
    p = sub.add_parser("import-qwen3", help="depth graph from a Qwen3-TTS checkpoint directory")
    p.add_argument("checkpoint")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--variant", choices=["cpu", "plain"], default="cpu")
    p.add_argument("--heads", choices=["graph", "hidden"], default="hidden")
    p.add_argument("--external-data", action="store_true")
    p.set_defaults(func=_import_checkpoint)
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
    p.set_defaults(func=_random_checkpoint)
