"""`codecspec quality` and `codecspec bench --quality`: words recognised / WER of a model's
speech on the held-out evaluation sentences, per decoding mode, with bootstrap CIs.

Modes: "ar" (every family); the RVQ reference v1: "spec" (depth speculation, exact); v2:
LOOPS[/ACCEPT] with LOOPS in depth, temporal, both and ACCEPT in exact (default), ssd, pcg,
e.g. "temporal", "both/pcg", "temporal/ssd". "espeak-ng" as the model scores espeak-ng's own
rendering (the voice the corpus is made of), the ceiling a model can reach. The floor rows
"espeak", "codec" and "lookup" (`codecspec.evaluation.floors`) score, beside a model's modes and on
the same sentences, espeak-ng in the model's voice, its resynthesis through the model's codec
(the ceiling) and the aligned-lookup floor.

Every row is scored on one or more evaluation sets (`--set everyday sus hard` or `all`), by
words (Whisper) and, unless `--no-phonemes`, by phonemes
(`codecspec.evaluation.phoneme_recognition`).
"""

from __future__ import annotations

import json
import sys
from typing import Callable, Optional

__all__ = [
    "ESPEAK",
    "cmd_quality",
    "mode_kwargs",
    "model_synthesizer",
    "quality_reports",
    "set_reports",
]

ESPEAK = "espeak-ng"


def mode_kwargs(family: str, mode: str, tts=None, beta: float = 0.3, theta=None) -> dict:
    """generate() keywords of a quality mode for a model family: the family's own
    ("quality_mode" hook of the registry: a family with more modes than ar/spec, v2's
    `LOOPS[/ACCEPT]`), else {"mode": m} for a mode its engine adapter decodes; ValueError
    naming `modes` for any other."""
    from codecspec.pipeline import registry

    entry = registry.by_name(family)
    hook = entry.hook("quality_mode")
    if hook is not None:
        return hook(mode, tts, beta, theta)
    allowed = ("ar",) + tuple(m for m in entry.load("engine").modes if m != "ar")
    if mode not in allowed:
        raise ValueError(
            f"modes: {mode!r} is not a mode of the {family} family ({', '.join(allowed)})"
        )
    return {"mode": mode}


def model_synthesizer(tts, sentences: list, **generate_kwargs) -> Callable:
    """`synthesize(text, seed) -> (wav, sample_rate)` through a loaded model. Texts of
    `sentences` are spoken from their stored espeak-ng phonemes (no espeak-ng needed); other
    texts, and every text of a model that follows espeak-ng's phoneme timing (`aligned`,
    which refuses bare phonemes), go through the model's own frontend. `synthesize.clips`
    collects (frames, whether the max-length guard ended it) per call, for the report."""
    aligned = bool(getattr(tts, "aligned", False))
    phonemes = {} if aligned else {s["text"]: s.get("phonemes") for s in sentences}

    def synthesize(text: str, seed: int):
        ph = phonemes.get(text)
        kw = dict(generate_kwargs, seed=seed, language="en")
        s = tts.generate("", phonemes=ph, **kw) if ph else tts.generate(text, **kw)
        codes = getattr(s, "codes", None)
        synthesize.clips.append(
            (None if codes is None else len(codes), bool(getattr(s, "hit_max_frames", False)))
        )
        return s.wav, s.sample_rate

    synthesize.clips = []
    return synthesize


def _add_lengths(report: dict, clips: list) -> None:
    """Per clip its frames and whether the max-length guard ended it (a runaway), and the
    share of runaways, from a synthesizer's `clips` (one entry per clip, in report order)."""
    if len(clips) != len(report["per_clip"]):
        return
    for clip, (frames, runaway) in zip(report["per_clip"], clips):
        clip["frames"], clip["runaway"] = frames, runaway
    report["runaways"] = sum(r for _, r in clips)
    report["runaway_share"] = report["runaways"] / len(clips)


def quality_reports(model=None, modes=("ar",), *, sentences=None, **kw) -> dict:
    """{mode: report} for a model name or folder (or "espeak-ng"), every mode on the same
    sentences and seeds: `set_reports` on one set (its keywords: seeds, recognizer, threads,
    provider, params, beta, theta, progress, phonemes, floor_seeds, lookup_texts). Floor rows
    among `modes` run on the first `floor_seeds` seeds; the recognizer is loaded first, so a
    missing [quality] extra fails before any synthesis."""
    return set_reports(model, modes, {None: sentences}, **kw)[None]


def set_reports(
    model,
    modes,
    sets: dict,
    *,
    seeds=(0,),
    recognizer=None,
    threads: Optional[int] = None,
    provider: str = "auto",
    params=None,
    beta: float = 0.3,
    theta: Optional[float] = None,
    progress: bool = True,
    phonemes=None,
    floor_seeds: int = 1,
    lookup_texts: Optional[int] = None,
) -> dict:
    """{set: {row: report}}: `quality_reports` on every sentence set of `sets` ({name:
    sentences}, each as `resolve_sentences` takes them), the model loaded once. Rows are the
    model's `modes` and the floors among them, in the order given."""
    from codecspec.evaluation.floors import (
        FLOORS,
        LOOKUP_TEXTS,
        Reference,
        floor_synthesizer,
        model_lookup,
    )
    from codecspec.evaluation.intelligibility import (
        Recognizer,
        espeak_synthesizer,
        evaluate,
        resolve_sentences,
    )

    rows_of = {name: resolve_sentences(s) for name, s in sets.items()}
    modes = list(modes)
    if isinstance(floor_seeds, bool) or not isinstance(floor_seeds, int) or floor_seeds < 1:
        raise ValueError(f"floor_seeds: expected an int >= 1, got {floor_seeds!r}")
    if model == ESPEAK and any(m in FLOORS for m in modes):
        raise ValueError(
            f"modes: the rows {', '.join(FLOORS)} need a model (its voice and codec), "
            f"not --model {ESPEAK}"
        )
    rec = recognizer or Recognizer(threads=threads)
    common = dict(recognizer=rec, progress=progress, phonemes=phonemes)
    if model == ESPEAK:
        synth = espeak_synthesizer()
        return {
            name: {ESPEAK: evaluate(synth, rows, [0], desc=ESPEAK, **common)}
            for name, rows in rows_of.items()
        }
    from codecspec.pipeline.registry import load_model, model_family

    family = model_family(model)
    tts = load_model(model, provider=provider, threads=threads, params=params)
    # every mode checked before anything is synthesised
    kwargs = {m: mode_kwargs(family, m, tts, beta, theta) for m in modes if m not in FLOORS}
    # built before any synthesis (about 0.2 s a text, then cached on disk)
    lookup = model_lookup(tts, lookup_texts or LOOKUP_TEXTS) if "lookup" in modes else None
    reference = Reference(tts) if any(m in FLOORS for m in modes) else None
    out = {}
    for name, rows in rows_of.items():
        label = "" if name is None else f"{name}: "
        reports = out[name] = {}
        for m in modes:
            if m in FLOORS:
                synth = floor_synthesizer(m, tts, reference, lookup)
                reports[m] = evaluate(
                    synth, rows, list(seeds)[:floor_seeds], desc=f"{label}{m}", **common
                )
                reports[m]["mode"] = m
            else:
                synth = model_synthesizer(tts, rows, **kwargs[m])
                reports[m] = evaluate(synth, rows, seeds, desc=f"{label}{family} {m}", **common)
                reports[m]["model_family"], reports[m]["mode"] = family, m
            _add_lengths(reports[m], synth.clips)
            if name is not None:
                reports[m]["set"] = name
    return out


def run_quality(args, model, modes, prefix: str = "") -> dict:
    from codecspec.evaluation.intelligibility import Recognizer
    from codecspec.tts.commands import params_from_args

    get = vars(args)
    asr = get[f"{prefix}asr_model"]
    rec = Recognizer(asr or get[f"{prefix}recognizer"], threads=args.threads)
    return quality_reports(
        model,
        modes,
        sentences=get[f"{prefix}sentences"],
        seeds=list(range(args.seed, args.seed + get[f"{prefix}seeds"])),
        recognizer=rec,
        threads=args.threads,
        provider=args.provider,
        params=None if model == ESPEAK else params_from_args(args),
        beta=args.beta,
        theta=args.theta,
        progress=not args.json,
    )


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
    from codecspec.evaluation.intelligibility import (
        Recognizer,
        load_sentences,
        report_table,
        sentence_sets,
    )
    from codecspec.tts.commands import params_from_args

    sets = sentence_sets(args.set)
    rows = quality_rows(args.modes, args.floors)
    rec = Recognizer(args.asr_model or args.recognizer, threads=args.threads)
    phonemes = None
    if not args.no_phonemes:
        from codecspec.evaluation.phoneme_recognition import PhonemeRecognizer

        phonemes = PhonemeRecognizer()
    out = set_reports(
        args.model,
        rows,
        {name: load_sentences(set=name)[: args.sentences] for name in sets},
        seeds=list(range(args.seed, args.seed + args.seeds)),
        recognizer=rec,
        threads=args.threads,
        provider=args.provider,
        params=None if args.model == ESPEAK else params_from_args(args),
        beta=args.beta,
        theta=args.theta,
        progress=not args.json,
        phonemes=phonemes,
        floor_seeds=args.floor_seeds,
        lookup_texts=args.lookup_texts,
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: codecspec quality")
