"""The v2 family's own `codecspec` flags (the registry's `cli_options`): which loops
speculate and how drafts are accepted, and which depth decoder runs. `codecspec --help`
imports this module: argparse only."""

from __future__ import annotations

import argparse


def speculation(p: argparse.ArgumentParser) -> None:
    """--loops / --accept / --beta / --theta / --draft-len (synth and bench)."""
    p.add_argument(
        "--loops",
        choices=["depth", "temporal", "both"],
        default=None,
        help="v2: which loops speculate (default: the depth loop by calibration, temporal AR)",
    )
    p.add_argument(
        "--accept",
        choices=["exact", "ssd", "pcg"],
        default="exact",
        help="v2: acceptance rule (exact = the AR law; ssd = lossy tolerance; pcg = group law)",
    )
    p.add_argument("--beta", type=float, default=0.3, help="ssd tolerance in [0, 1]")
    p.add_argument("--theta", type=float, default=None, help="pcg group cosine in (-1, 1]")
    p.add_argument("--draft-len", type=int, default=3, help="v2: c0 drafts per temporal round")


def depth(p: argparse.ArgumentParser) -> None:
    """--depth: which of a v2 folder's depth decoders runs (synth, bench and quality)."""
    p.add_argument(
        "--depth",
        choices=["positional", "shared"],
        default=None,
        help="v2: which depth decoder of the folder runs (default positional; shared = "
        "depth_shared.npz, one set of weights for every level)",
    )


def _quality(p: argparse.ArgumentParser) -> None:
    """The tolerances of the LOOPS/ACCEPT quality modes (families/v2/quality.py)."""
    p.add_argument("--beta", type=float, default=0.3, help="v2 ssd tolerance")
    p.add_argument("--theta", type=float, default=None, help="v2 pcg cosine (default: model's)")


def add_options(command: str, p: argparse.ArgumentParser) -> None:
    """This family's flags for `codecspec COMMAND` (none for the other subcommands)."""
    if command in ("synth", "bench"):
        speculation(p)
        depth(p)
    elif command == "quality":
        _quality(p)
        depth(p)
