"""The example family's own `codecspec` flag: `synth --toy-tone`, added through its registry
entry's `cli_options` with no line of `codecspec.cli` naming it (the shared flags, --model,
--seed, the sampling ones, are the CLI's). argparse only: `codecspec --help` imports this."""

from __future__ import annotations

import argparse


def add_options(command: str, p: argparse.ArgumentParser) -> None:
    """This family's flags for `codecspec COMMAND` (synth only)."""
    if command == "synth":
        p.add_argument(
            "--toy-tone",
            type=float,
            default=1.0,
            help="example-toy: loudness of its tones (default 1.0)",
        )
