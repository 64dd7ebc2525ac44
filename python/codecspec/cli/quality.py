"""`codecspec quality`: its options (also bench's --quality-* ones); the command itself is
`codecspec.tts.quality_commands.cmd_quality`."""

from __future__ import annotations

import argparse

from codecspec.cli import options


def _seeds_arg(value: str) -> int:
    """argparse type of --sentences / --seeds: an integer >= 1 (the same rule as --threads)."""
    return options.threads_arg(value)


def quality_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """--sentences / --seeds / --recognizer (prefixed `quality-` under `bench`)."""
    p.add_argument(
        f"--{prefix}sentences",
        type=_seeds_arg,
        default=None,
        help="speak the first N sentences of each evaluation set (default all)",
    )
    p.add_argument(
        f"--{prefix}seeds", type=_seeds_arg, default=1, help="seeds per sentence (default 1)"
    )
    p.add_argument(
        f"--{prefix}recognizer",
        choices=["base", "tiny.en"],
        default="base",
        help="Whisper model from the [quality] extra's weight packages (default base)",
    )
    p.add_argument(
        f"--{prefix}asr-model",
        metavar="DIR",
        default=None,
        help="a faster-whisper (CTranslate2) model folder of your own, used instead of "
        f"--{prefix}recognizer's packaged weights",
    )


def register(sub: argparse._SubParsersAction) -> None:
    from codecspec.tts.quality_commands import cmd_quality

    p = sub.add_parser(
        "quality",
        help="words recognised / WER of a model's speech on held-out sentences (Whisper)",
    )
    p.add_argument(
        "--model", default=None, help=options.MODEL_HELP + "; espeak-ng = espeak-ng itself"
    )
    p.add_argument(
        "--modes",
        nargs="+",
        default=["ar"],
        help="rows (default ar): decoding modes (reference: ar spec; v2: ar or LOOPS[/ACCEPT], "
        "e.g. temporal both both/pcg temporal/ssd) and the floors espeak (espeak-ng in the "
        "model's voice), codec (its resynthesis by the model's codec: the ceiling), lookup "
        "(aligned phoneme context -> nearest codes)",
    )
    p.add_argument(
        "--floors", action="store_true", help="add the rows espeak codec lookup before --modes"
    )
    p.add_argument(
        "--set",
        nargs="+",
        default=["everyday"],
        choices=["everyday", "sus", "hard", "all"],
        metavar="SET",
        help="evaluation sets: everyday (30 everyday sentences, the default), sus (65 "
        "semantically unpredictable sentences), hard (25 with names, numbers, dates, "
        "abbreviations, rare words), or all; several are reported one table each",
    )
    p.add_argument(
        "--no-phonemes",
        action="store_true",
        help="words only: skip the phoneme recognizer (phonemes recognised, PER)",
    )
    p.add_argument(
        "--floor-seeds",
        type=_seeds_arg,
        default=1,
        help="seeds of the floor rows (default 1: espeak-ng and the lookup are deterministic, "
        "the codec's decoder differs only in phase)",
    )
    p.add_argument(
        "--lookup-texts",
        type=_seeds_arg,
        default=None,
        help="fortunes the lookup floor's table is built from (default 600)",
    )
    quality_options(p)
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    options.provider(p)
    options.threads(p, help=options.CORES)
    p.add_argument("-o", "--output", default=None, help="also write the full reports (JSON)")
    p.add_argument("--json", action="store_true", help="print the full reports as JSON")
    options.sampling(p)
    options.family_options("quality", p)
    p.set_defaults(func=cmd_quality)
