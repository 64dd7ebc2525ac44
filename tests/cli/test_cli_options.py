"""Every `codecspec` subcommand keeps its options across the CLI's reorganisation (issue 30
item 5: one CLI package, shared options defined once).

tests/data/cli_options.json is a snapshot of each subcommand's arguments taken from the
single-module CLI (python/codecspec/cli.py) before it became a package: option strings (or
the positional's name), where the value goes, its default, type, choices, count and whether
it is required. The parser built now must give the same record for every subcommand, so
moving an option into a shared helper cannot drop, add or change one. After a deliberate
change to an option, rewrite the snapshot with `python tests/cli/test_cli_options.py` and
review its diff."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: tests/ on the path, as conftest puts it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from paths import DATA  # noqa: E402

SNAPSHOT = DATA / "cli_options.json"


def _argument(a: argparse.Action) -> dict:
    return {
        "dest": a.dest,
        "action": type(a).__name__,
        "default": repr(a.default),
        "type": None if a.type is None else getattr(a.type, "__name__", repr(a.type)),
        "choices": None if a.choices is None else [str(c) for c in a.choices],
        "nargs": a.nargs,
        "required": a.required,
    }


def subcommand_options(parser: argparse.ArgumentParser) -> dict:
    """{subcommand: {option strings joined by ", " (a positional: its dest): record}}."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, p in sorted(sub.choices.items()):
        out[name] = {", ".join(a.option_strings) or a.dest: _argument(a) for a in p._actions}
    return out


def current() -> dict:
    from codecspec.cli import build_parser

    return subcommand_options(build_parser())


def test_every_subcommand_keeps_its_options():
    want = json.loads(SNAPSHOT.read_text())
    got = current()
    assert sorted(got) == sorted(want), "subcommands added or removed"
    for name in want:
        assert got[name] == want[name], f"codecspec {name}: options differ from the snapshot"


def test_the_comparison_catches_a_changed_option():
    from codecspec.cli import build_parser

    parser = build_parser()
    before = subcommand_options(parser)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["synth"].add_argument("--extra", default=1)
    after = subcommand_options(parser)
    assert after["synth"] != before["synth"] and after["bench"] == before["bench"]


if __name__ == "__main__":  # rewrite the snapshot from the parser as it is now
    SNAPSHOT.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n")
    sys.exit(0)
