"""`codecspec loadtest`: its options; the command itself is
`codecspec.serve.commands.cmd_loadtest`."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from codecspec.cli.options import positive_ints
    from codecspec.serve.commands import cmd_loadtest

    p = sub.add_parser("loadtest", help="concurrent clients against a running speech server")
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument(
        "--clients", type=positive_ints, default=[64], help="e.g. 1,4,16,64 (default 64)"
    )
    p.add_argument("--requests", type=int, default=3, help="requests per client (default 3)")
    p.add_argument("--mode", default="auto", choices=["auto", "ar", "spec"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_loadtest)
