"""`codecspec quality` and `codecspec bench --quality`: words recognised / WER of a model's
speech on the held-out evaluation sentences, per decoding mode, with bootstrap CIs.

Modes: "ar" (every family); the RVQ reference v1: "spec" (depth speculation, exact); v2:
LOOPS[/ACCEPT] with LOOPS in depth, temporal, both and ACCEPT in exact (default), ssd, pcg,
e.g. "temporal", "both/pcg", "temporal/ssd". "espeak-ng" as the model scores espeak-ng's own
rendering (the voice the corpus is made of), the ceiling a model can reach.
"""

from __future__ import annotations

import json
import sys
from typing import Callable, Optional

__all__ = ["ESPEAK", "cmd_quality", "mode_kwargs", "model_synthesizer", "quality_reports"]

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
    which refuses bare phonemes), go through the model's own frontend."""
    aligned = bool(getattr(tts, "aligned", False))
    phonemes = {} if aligned else {s["text"]: s.get("phonemes") for s in sentences}

    def synthesize(text: str, seed: int):
        ph = phonemes.get(text)
        kw = dict(generate_kwargs, seed=seed, language="en")
        s = tts.generate("", phonemes=ph, **kw) if ph else tts.generate(text, **kw)
        return s.wav, s.sample_rate

    return synthesize


def quality_reports(
    model=None,
    modes=("ar",),
    *,
    sentences=None,
    seeds=(0,),
    recognizer=None,
    threads: Optional[int] = None,
    provider: str = "auto",
    params=None,
    beta: float = 0.3,
    theta: Optional[float] = None,
    progress: bool = True,
) -> dict:
    """{mode: report} for a model name or folder (or "espeak-ng"), every mode on the same
    sentences and seeds. The recognizer is loaded first: a missing [quality] extra fails
    before any synthesis."""
    from codecspec.tts.intelligibility import (
        Recognizer,
        espeak_synthesizer,
        evaluate,
        resolve_sentences,
    )

    rows = resolve_sentences(sentences)
    rec = recognizer or Recognizer(threads=threads)
    if model == ESPEAK:
        synth = espeak_synthesizer()
        rep = evaluate(synth, rows, [0], recognizer=rec, progress=progress, desc=ESPEAK)
        return {ESPEAK: rep}
    from codecspec.tts.registry import load_model, model_family

    family = model_family(model)
    tts = load_model(model, provider=provider, threads=threads, params=params)
    kwargs = {m: mode_kwargs(family, m, tts, beta, theta) for m in modes}  # check all first
    out = {}
    for m, kw in kwargs.items():
        synth = model_synthesizer(tts, rows, **kw)
        out[m] = evaluate(
            synth, rows, seeds, recognizer=rec, progress=progress, desc=f"{family} {m}"
        )
        out[m]["model_family"], out[m]["mode"] = family, m
    return out


def run_quality(args, model, modes, prefix: str = "") -> dict:
    from codecspec.tts.commands import params_from_args
    from codecspec.tts.intelligibility import Recognizer

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


def cmd_quality(args) -> int:
    from codecspec.tts.intelligibility import report_table

    reports = run_quality(args, args.model, args.modes)
    if args.output:
        from pathlib import Path

        Path(args.output).write_text(json.dumps(reports, indent=1))
    if args.json:
        print(json.dumps(reports))
        return 0
    name = args.model or "default model"
    rec = next(iter(reports.values()))
    print(
        f"intelligibility of {name}: {rec['sentences']} sentences x seeds {rec['seeds']} "
        f"({rec['reference_words']} reference words per mode); {rec['recognizer']}"
    )
    print(report_table(reports))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: codecspec quality")
