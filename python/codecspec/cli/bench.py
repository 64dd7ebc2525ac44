"""`codecspec bench`: its options (a family's own: the registry's `cli_options`), and the
choice between the family's own bench (`codecspec.tts.commands.cmd_bench`, the registry's
"bench" hook) and, with --streams, the serving engine's scaling bench
(`codecspec.serve.commands.cmd_bench_streams`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecspec.cli import options
from codecspec.cli.quality import quality_options


def run(args) -> int:
    """The scaling bench with --streams, else the family's own."""
    if args.streams:
        from codecspec.serve.commands import cmd_bench_streams

        return cmd_bench_streams(args)
    from codecspec.tts.commands import cmd_bench

    return cmd_bench(args)


def _scaling(p: argparse.ArgumentParser) -> None:
    """`codecspec bench --streams 1,4,16,64`: the in-process scaling bench of the engine."""
    p.add_argument(
        "--streams",
        type=options.positive_ints,
        default=None,
        help="scaling bench at these stream counts",
    )
    p.add_argument(
        "--stream-mode",
        default="both",
        help="both (ar and spec, default) or a comma list of ar, spec, auto (the model's "
        "calibrated choice per loop: v2/v3 speculate on the temporal loop only)",
    )
    p.add_argument("--plot", type=Path, default=None, help="PNG of the scaling bench")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="AR vs speculative depth loop of the reference model")
    options.cache_dir(p, help="Qwen3-TTS: graph cache (see synth)")
    options.weights(p)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    options.provider(p)
    options.threads(p, help=options.CORES)
    p.add_argument("--model", default=None, help=options.MODEL_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--texts", type=int, default=None, help="held-out sentences for the pipeline (default 8)"
    )
    p.add_argument(
        "--no-pipeline", action="store_true", help="only the depth loop, not text -> waveform"
    )
    p.add_argument(
        "--quality",
        action="store_true",
        help="also score intelligibility (words recognised, WER; needs codecspec[quality]) "
        "of AR and the speculative mode on the held-out evaluation sentences",
    )
    quality_options(p, prefix="quality-")
    options.sampling(p)
    _scaling(p)
    options.family_options("bench", p)
    p.set_defaults(func=run)
