"""`codecspec quality`: its options (also bench's --quality-* ones) and the command: every
row on every set of `--set`, the reports from `codecspec.evaluation.reports`."""

from __future__ import annotations

import argparse
import json

from codecspec.cli import options
from codecspec.evaluation.reports import ESPEAK, set_reports


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
        choices=["everyday", "sus", "hard", "short", "all"],
        metavar="SET",
        help="evaluation sets: everyday (30 everyday sentences, the default), sus (65 "
        "semantically unpredictable sentences), hard (25 with names, numbers, dates, "
        "abbreviations, rare words), short (44 one- and two-word inputs), or all; several "
        "are reported one table each",
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


def _report_keywords(args, model, prefix: str = "") -> dict:
    """`set_reports`' keywords from the quality options (bench's: prefixed `quality_`); the
    recognizer is loaded first, so a missing [quality] extra fails before any synthesis."""
    from codecspec.evaluation.intelligibility import Recognizer

    get = vars(args)
    asr = get[f"{prefix}asr_model"] or get[f"{prefix}recognizer"]
    return dict(
        recognizer=Recognizer(asr, threads=args.threads),
        seeds=list(range(args.seed, args.seed + get[f"{prefix}seeds"])),
        threads=args.threads,
        provider=args.provider,
        params=None if model == ESPEAK else options.params_from_args(args),
        beta=args.beta,
        theta=args.theta,
        progress=not args.json,
        load=options.depth_kwargs(args) if hasattr(args, "depth") else None,
    )


def run_quality(args, model, modes, prefix: str = "") -> dict:
    """{mode: report} of `model` on the sentences the (`prefix`ed) quality options ask for."""
    sentences = {None: vars(args)[f"{prefix}sentences"]}
    return set_reports(model, modes, sentences, **_report_keywords(args, model, prefix))[None]


def summary(reports: dict) -> dict:
    """The figures of {mode: report} without per-clip details (for bench's JSON and tables)."""
    keys = ("words_recognised", "words_recognised_ci", "wer", "wer_ci", "wer_capped", "clips")
    return {m: {k: r[k] for k in keys} for m, r in reports.items()}


def quality_rows(modes, floors: bool) -> list:
    """The rows of `codecspec quality`: `--modes`, after the floors where `--floors` asks
    for them (a floor named in both is one row)."""
    from codecspec.evaluation.floors import FLOORS

    modes = list(dict.fromkeys(modes))
    return [f for f in FLOORS if f not in modes] + modes if floors else modes


def cmd_quality(args) -> int:
    """Every row on every set of `--set`: {row: report} in the JSON for one set, {set: {row:
    report}} for several."""
    from codecspec.evaluation.intelligibility import load_sentences, report_table, sentence_sets
    from codecspec.pipeline import registry

    sets = sentence_sets(args.set)
    rows = quality_rows(args.modes, args.floors)
    entry = None if args.model == ESPEAK else registry.find(args.model)
    if entry is not None:
        options.refuse_other_families_flags(args, "quality", entry)
    kw = _report_keywords(args, args.model)
    phonemes = None
    if not args.no_phonemes:
        from codecspec.evaluation.phoneme_recognition import PhonemeRecognizer

        phonemes = PhonemeRecognizer()
    out = set_reports(
        args.model,
        rows,
        {name: load_sentences(set=name)[: args.sentences] for name in sets},
        phonemes=phonemes,
        floor_seeds=args.floor_seeds,
        lookup_texts=args.lookup_texts,
        **kw,
    )
    reports = out[sets[0]] if len(sets) == 1 else out
    if args.output:
        from pathlib import Path

        Path(args.output).write_text(json.dumps(reports, indent=1))
    if args.json:
        print(json.dumps(reports))
        return 0
    name = args.model or "default model"
    for set_name, table in out.items():
        first = next(iter(table.values()))
        phon = f"; {first['phoneme_recognizer']}" if "phoneme_recognizer" in first else ""
        # the floors may run on fewer seeds than the model's modes: name both
        seeds = {m: r["seeds"] for m, r in table.items()}
        most = max(seeds.values(), key=len)
        fewer = sorted(m for m, s in seeds.items() if s != most)
        note = f" ({', '.join(fewer)}: seeds {seeds[fewer[0]]})" if fewer else ""
        words = first["reference_words"] // len(first["seeds"])
        print(
            f"intelligibility of {name} on the {set_name} set: {first['sentences']} sentences "
            f"x seeds {most}{note} ({words} reference words per seed); "
            f"{first['recognizer']}{phon}"
        )
        print(report_table(table))
        print()
    return 0
