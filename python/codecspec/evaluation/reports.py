"""Words recognised / WER of a model's speech on the held-out evaluation sentences, per
decoding mode, with bootstrap CIs: the reports behind `codecspec quality` and
`codecspec bench --quality` (their commands: `codecspec.cli.quality`).

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

from typing import Optional

__all__ = [
    "ESPEAK",
    "mode_kwargs",
    "model_synthesizer",
    "set_reports",
]

ESPEAK = "espeak-ng"


def mode_kwargs(family: str, mode: str, tts=None, beta: float = 0.3, theta=None) -> dict:
    """generate() keywords of a quality mode for the model family called `family`
    (`Family.quality_mode`: {"mode": m} for a mode it decodes, v2's `LOOPS[/ACCEPT]`);
    ValueError naming `modes` for any other."""
    from codecspec.pipeline import registry

    return registry.by_name(family).load("engine").quality_mode(mode, tts, beta, theta)


def model_synthesizer(tts, sentences: list, phonemes_ok: bool = True, **generate_kwargs):
    """`synthesize(text, seed) -> (wav, sample_rate)` through a loaded model. Texts of
    `sentences` are spoken from their stored espeak-ng phonemes (no espeak-ng needed); other
    texts, and every text of a model that takes no bare phonemes (`phonemes_ok` False:
    `Family.speaks_phonemes`), go through the model's own frontend. `synthesize.clips`
    collects (frames, whether the max-length guard ended it) per call, for the report."""
    phonemes = {s["text"]: s.get("phonemes") for s in sentences} if phonemes_ok else {}

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


def _check_floor_seeds(floor_seeds) -> None:
    if isinstance(floor_seeds, bool) or not isinstance(floor_seeds, int) or floor_seeds < 1:
        raise ValueError(f"floor_seeds: expected an int >= 1, got {floor_seeds!r}")


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
    load: Optional[dict] = None,
) -> dict:
    """{set: {row: report}} for a model name, folder or "espeak-ng", loaded once (`load`: more
    constructor keywords, e.g. v2's `depth`), on every set of `sets` ({name: sentences}):
    `modes` and the floors among them (on the first `floor_seeds` seeds), in the order given."""
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
    _check_floor_seeds(floor_seeds)
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
    from codecspec.pipeline.registry import family_of, load_model

    family = family_of(model, detect=False).name
    tts = load_model(model, provider=provider, threads=threads, params=params, **(load or {}))
    phonemes_ok = family_of(model, detect=False).load("engine").speaks_phonemes(tts)
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
                synth = model_synthesizer(tts, rows, phonemes_ok, **kwargs[m])
                reports[m] = evaluate(synth, rows, seeds, desc=f"{label}{family} {m}", **common)
                reports[m]["model_family"], reports[m]["mode"] = family, m
            _add_lengths(reports[m], synth.clips)
            if name is not None:
                reports[m]["set"] = name
    return out
