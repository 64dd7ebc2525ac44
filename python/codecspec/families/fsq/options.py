"""The FSQ family's own `codecspec` flags (the registry's `cli_options`): its bench's
utterances and batch. `codecspec --help` imports this module: argparse only."""

from __future__ import annotations

import argparse


def add_options(command: str, p: argparse.ArgumentParser) -> None:
    """This family's flags for `codecspec COMMAND` (bench only)."""
    if command == "bench":
        p.add_argument("--utterances", type=int, default=8, help="fsq: bench.json utterances")
        p.add_argument("--batch", type=int, default=1, help="fsq: also run this many as a batch")
