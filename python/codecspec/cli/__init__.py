"""`codecspec` command line: build graphs, import checkpoints, calibrate, ablate, run the demo."""

# One module per subcommand (cli/<name>.py: its parser, and its code or a call into the
# package that holds it); the options several share are defined once in cli/options.py.

from __future__ import annotations

import argparse
import logging
import sys

from codecspec.cli import (
    ablate,
    bench,
    build_graph,
    calibrate,
    demo,
    loadtest,
    quality,
    serve,
    speedup_map,
    synth,
)

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

# In the order `codecspec --help` lists them.
SUBCOMMANDS = (
    demo,
    build_graph,
    calibrate,
    ablate,
    speedup_map,
    synth,
    bench,
    quality,
    serve,
    loadtest,
)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="codecspec", description=__doc__)
    ap.add_argument("-v", "--verbose", action="store_true")
    sub = ap.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.register(sub)
    _family_commands(sub)
    return ap


def _family_commands(sub: argparse._SubParsersAction) -> None:
    """The subcommands a family brings (the registry's `cli_commands`), after the shared ones."""
    from codecspec.pipeline import registry

    for entry in registry.families():
        if entry.cli_commands is not None:
            registry.import_path(entry.cli_commands)(sub)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s"
    )
    from codecspec.evaluation.intelligibility import RecognizerUnavailable
    from codecspec.frontend.phonemes import PhonemizerError

    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, PhonemizerError, RecognizerUnavailable) as e:
        print(f"codecspec {args.command}: error: {e}", file=sys.stderr)
        return 2
