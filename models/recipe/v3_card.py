"""MODEL_CARD.md of reference model v3, led by what a recognizer finds in its speech.

    python models/recipe/v3_card.py [--model python/codecspec/models/v3] \
        [--quality docs/speed_quality_rounds.json] [--words docs/quality_v3_rounds.json]

Reads the folder's report.json (written by `v3.py ship`), the speed-quality table of
`bench/speed_quality.py` (words recognised per decoding mode, speed-up, tokens per call; its
.md and .png beside the JSON) and, when given, a multi-seed `codecspec quality --json` run
(AR and exact temporal speculation), which then leads the card; a later run of the three
evaluation sets on the folder (`--sets-current`) leads it with its everyday rows instead.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import fmean  # the per-level cross-entropies, averaged

ROOT = Path(__file__).resolve().parents[2]
FIRST_RUN_MINUTES = 70  # the first weights' run on 4 h (git 2fadbef); later runs report theirs
TARGET_WORDS = 0.55  # words recognised, AR: what the default model is asked to say


def _pct(x) -> str:
    return f"{100 * x:.1f}%"


def _words(r: dict) -> str:
    lo, hi = r["words_recognised_ci"]
    return f"{_pct(r['words_recognised'])} (95% CI {_pct(lo)}–{_pct(hi)})"


def _quality(q: dict, qpath: Path, words: dict | None) -> list:
    ar = words["ar"] if words else q["modes"]["AR"]
    seeds = len(ar["seeds"]) if words else len(q["seeds"])
    lo, hi = ar["words_recognised_ci"]
    lead = (
        f"Whisper base recognises **{_pct(ar['words_recognised'])} of the words** of v3's speech "
        f"(AR, 95% CI {_pct(lo)}–{_pct(hi)}; {q['sentences']} held-out evaluation sentences x "
        f"{seeds} seed(s), `docs/quality.md`)"
    )
    if words:
        lead += f"; with exact temporal speculation {_words(words['temporal'])}, the same law"
    lines = [
        "## Does it say the text?",
        "",
        lead + ". Against 81.1% for espeak-ng's own rendering of the same sentences, 7.5% for "
        "espeak-ng cut into shuffled 80 ms blocks (chance), and 2.7% / 6.4% for the v2 / v1 "
        "models this one replaces.",
        "",
        "Per decoding mode, one interleaved run (`" + q.get("command", "") + "`):",
        "",
    ]
    table = qpath.with_suffix(".md").read_text().strip().splitlines()
    png = f"../../../../docs/{qpath.with_suffix('.png').name}"
    return lines + table + ["", f"![speed vs words]({png})", ""]


SET_ROWS = (
    ("ar", "v3 AR"),
    ("temporal", "v3 exact temporal speculation"),
    ("codec", "espeak-ng through the v1 codec (ceiling)"),
    ("lookup", "aligned lookup (floor)"),
)


def _sets(sets: dict, current: dict | None = None, current_name: str = "") -> list:
    """Words and phonemes recognised per evaluation set (`codecspec quality --set all
    --floors`): the everyday sentences flatter; the SUS and hard sets do not. `current`: a
    later run of the model rows alone (the runtime changed, the floors did not), whose rows
    replace the model's and whose runaways are listed."""
    lines = [
        "## Words on sentences the recognizer cannot guess",
        "",
        "`codecspec quality --model v3 --modes ar temporal --floors --set all --seeds 3` "
        "(`docs/quality_v3_sets.json`):",
        "",
        "| row | " + " | ".join(sets) + " |",
        "|---|" + "---|" * len(sets),
    ]
    for key, name in SET_ROWS:
        cells = []
        for set_name, rows in sets.items():
            r = (current or {}).get(set_name, {}).get(key) or rows[key]
            ph = r.get("phonemes", {}).get("recognised")
            cells.append(_pct(r["words_recognised"]) + (f" ({_pct(ph)} ph.)" if ph else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Words recognised (phonemes recognised by hama in brackets).", ""]
    return lines + (_current_runtime(current, current_name) if current else [])


def _current_runtime(current: dict, name: str) -> list:
    """Where the model rows come from when a later run replaced them, with its runaways."""
    runs = [
        f"{set_name} {r['runaways']}/{r['clips']}"
        for set_name, rows in current.items()
        for mode, r in rows.items()
        if mode == "ar"
    ]
    return [
        "The v3 rows are a later run of this folder alone, on the runtime since 2026-12-06 "
        "(frames past the phoneme track's end read espeak-ng's closing pause; before, the "
        "last value, which can lie inside the last spoken sound: the model went on saying "
        "it): `codecspec quality --model v3 --modes ar temporal --set all --seeds 3` "
        f"(`docs/{name}`); the floors are the first run's. Utterances at the max-length "
        "guard, AR: " + ", ".join(runs) + ". The speed-quality table above (its runaway "
        "column included) predates that change and the depth passes on mixed text.",
        "",
    ]


def _training(t: dict) -> str:
    """The training paragraph; a warm start names what it started from."""
    a = t["train_args"]
    start = ""
    if a.get("init_from"):
        start = (
            f"Warm-started from the first shipped v3 weights (`{a['init_from']}` before "
            "2026-12-04, in git at 2fadbef: 1,435 steps, 70 min on one thread, 4 h corpus) and "
            "trained on the 12 h timed corpus for "
        )
    return (
        f"{start}{t['step']} steps, {t['seconds'] / 60:.1f} min of training time "
        f"(lr {a['lr']}, draft: {t['draft_choice']}); parameters: "
        + ", ".join(f"{k} {v:,}" for k, v in t["parameters"].items())
        + f". Held-out at the end (nats): {t['curves']['val'][-1]}."
        + _depth_passes(t.get("depth_passes", []))
        + _stop_refit(t.get("stop_refit"))
    )


def _depth_passes(passes: list) -> str:
    """The depth decoder trained on alone afterwards (`v3.py depth --from-folder`, one
    report per pass), with the held-out cross-entropy each pass moved (each pass judges on
    the held-out frames its seed picks, so the passes are listed, not chained)."""
    if not passes:
        return ""
    each = "; ".join(
        f"{p['steps']:,} steps of {p['batch']} at lr {p['lr']} over {p['train_frames']:,} "
        f"frames, {p['seconds'] / 60:.0f} min: "
        f"{fmean(p['ce_before']):.3f} -> {fmean(p['ce_after']):.3f} nats"
        for p in passes
    )
    return (
        f" Then the depth decoder alone was trained further on frozen teacher-forced frames "
        f"in {len(passes)} passes, of the 24 h timed corpus and then of the 12 h corpus of "
        f"mixed text (`v3.py depth --from-folder`; held-out depth cross-entropy per pass, "
        f"each on its own held-out frames: {each}); the temporal LM and draft are unchanged "
        "by it."
    )


def _stop_refit(r: dict | None) -> str:
    """The stop head fitted again after training (`v3.py stop`), with its held-out effect."""
    if not r:
        return ""
    b, a = r["held_out_before"], r["held_out_after"]
    kind = f"one SiLU layer of {r['hidden']} units" if r["hidden"] else "linear, refit"
    head = (
        f" The stop head was last fitted again alone on frozen h_t ({kind}; `v3.py stop`, "
        f"{r['utterances']} teacher-forced training utterances"
    )
    if "teacher_forced" in b:  # since --free: judged teacher-forced and free-running too
        return head + _stop_free(r, b, a)
    return head + (
        f" each followed by {r['frames_past_end']} frames past its track's end): on "
        f"{r['held_out_utterances']} held-out utterances the chance "
        f"of running past all of those frames fell from {100 * b['run_past_end']:.2f}% to "
        f"{100 * a['run_past_end']:.2f}% (worst utterance {100 * b['run_past_end_worst']:.0f}%"
        f" to {100 * a['run_past_end_worst']:.1f}%), of stopping more than 5 frames early "
        f"{100 * b['stop_5_frames_early']:.2f}% to {100 * a['stop_5_frames_early']:.2f}%."
    )


def _stop_free(r: dict, b: dict, a: dict) -> str:
    """A refit on free-running utterances too (`stop --free`), judged both ways."""

    def both(key: str, x: dict) -> str:
        tf, fr = x["teacher_forced"][key], x["free_running"][key]
        return f"{100 * tf:.1f}% / {100 * fr:.1f}%"

    rows = (
        ("reaching its last frame", "reach_last_frame"),
        ("stopping more than 5 frames early", "stop_5_frames_early"),
        ("stopping at its last frame", "stop_at_last_frame"),
    )
    moved = ", ".join(f"{name} {both(k, b)} -> {both(k, a)}" for name, k in rows)
    return (
        f" and {r['free_running']} the model spoke itself from the first frame, each followed "
        f"by {r['frames_past_end']} frames past its track's end): on "
        f"{r['held_out_utterances']} held-out utterances, teacher-forced / free-running, "
        f"{moved}."
    )


def _hours_line(t: dict, q: dict | None, words: dict | None) -> str:
    """The limitation that is the training budget, with the words it buys."""
    later = t["seconds"] + sum(p["seconds"] for p in t.get("depth_passes", []))
    minutes = FIRST_RUN_MINUTES + later / 60
    ar = (words or {}).get("ar") or (q or {}).get("modes", {}).get("AR")
    said = f"It says {_pct(ar['words_recognised'])} of the words" if ar else "Its words"
    target = f"the target is {TARGET_WORDS:.0%}"
    if ar and ar["words_recognised"] >= TARGET_WORDS:
        # the point estimate meets it; the interval says how surely
        lo = _pct(ar["words_recognised_ci"][0])
        target = f"the target, {TARGET_WORDS:.0%}, is met (95% CI from {lo})"
    return (
        f"- About {minutes / 60:.1f} hours of CPU training in all (one hour on 4 h of "
        "speech, then the rest on 12 h, 24 h and 12 h of mixed text; "
        "`docs/reference_model_v3.md`); the held-out "
        f"losses were still falling slowly when each run ended. {said} of the evaluation "
        f"sentences against 67.5% for its codec's resynthesis of espeak-ng; {target}."
    )


def _ablation(model: Path) -> list:
    """The depth-loop ablation the ship step ran (head reuse vs offsets vs Medusa heads)."""
    md = model / "ablation" / "ablation.md"
    if not md.is_file():
        return []
    head = "Depth-loop drafters at equal tree budgets (`v3.py ship`, `codecspec.train.ablate`): "
    return [head + md.read_text().strip(), ""]


def _shared_depth(model: Path) -> list:
    """Seed 002's shared depth decoder beside the per-position one, from its report and the
    two decoders' listen runs on the same held-out texts (`docs/v3_listen_v3n/`)."""
    path = model / "shared_depth_report.json"
    if not path.is_file():
        return []
    rep = json.loads(path.read_text())
    sh, po = rep["decoders"]["shared"], rep["decoders"]["positional"]
    lines = [
        "## Seed 002's shared depth decoder (`depth_shared.npz`)",
        "",
        f"- One set of weights for every RVQ level, tied to the codec's own codebooks "
        f"(`docs/shared_depth.md`): {sh['parameters']:,} parameters "
        f"({rep['ratios']['parameters_shared_over_positional']:.3f} of the per-position "
        f"decoder's), held-out CE {sh['heldout_ce_mean']:.3f} against "
        f"{po['heldout_ce_mean']:.3f}, AR depth loop {sh['ar_ms_per_frame']:.1f} against "
        f"{po['ar_ms_per_frame']:.1f} ms per frame; its drafts give {sh['tokens_per_call']:.2f} "
        f"tokens per call ({sh['speedup']:.2f}x), so calibration keeps it AR.",
    ]
    listen = ROOT / "docs" / "v3_listen_v3n"
    runs = {k: listen / f"{k}.json" for k in ("shared_codebook", "positional")}
    if all(f.is_file() for f in runs.values()):
        w = {k: json.loads(f.read_text()) for k, f in runs.items()}
        lines.append(
            f"- Words recognised on {w['positional']['sentences']} held-out corpus texts x "
            f"{len(w['positional']['seeds'])} seeds: {_words(w['shared_codebook'])} against "
            f"{_words(w['positional'])} for the per-position decoder (`v3.py listen --depth "
            "shared`, `docs/v3_listen_v3n/`). Run it: `codecspec synth TEXT --depth shared`."
        )
    return lines + [""]


def card(
    model: Path,
    q: dict | None,
    qpath: Path = None,
    words: dict | None = None,
    sets=None,
    current=None,
    current_name: str = "",
) -> str:
    rep = json.loads((model / "report.json").read_text())
    meta = json.loads((model / "model.json").read_text())
    sizes = rep["sizes"]
    total = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    t = rep["train"]
    acc, stop = rep["acceptance"], rep["stop_head"]
    shared = model / "depth_shared.npz"
    lines = [
        "# Reference model v3: a two-stage codec LM told which phoneme each frame speaks",
        "",
        "The v2 architecture (temporal LM over c0 with a ring-buffer cache, one-layer draft LM, "
        "Qwen3-TTS-layout depth decoder over 16 RVQ levels, Bernoulli stop head) conditioned "
        "frame by frame on espeak-ng's own phoneme timing, speaking through the v1 codec. "
        "Design and rebuild: `docs/reference_model_v3.md`; recipe `models/recipe/v3.py`.",
        "",
    ]
    none = ["(No speed-quality table yet: run bench/speed_quality.py.)", ""]
    lines += _quality(q, qpath, words) if q else none
    lines += _sets(sets, current, current_name) if sets else []
    lines += [
        "## Speculation on this model",
        "",
        f"- Temporal loop: exact acceptance of the draft LM's c0 (Σ min(p, q), free generation) "
        f"{acc['temporal_exact']:.3f}; at θ {acc['theta']} group acceptance "
        f"{acc['temporal_group']:.3f}.",
        "- Depth loop: top-1 acceptance of the offset drafts per depth "
        + ", ".join(f"{a:.3f}" for a in acc["depth_exact"])
        + f" (group level at θ {acc['theta']}: "
        + ", ".join(f"{a:.3f}" for a in acc["depth_group"])
        + f"); calibrated tree {rep['bench'].get('tree_nodes')} nodes, depth-loop speed-up "
        f"{rep['bench']['speedup']:.2f}x at {rep['bench']['tokens_per_call']:.2f} tokens per "
        "call (`codecspec bench`).",
        f"- Stop head on {stop['texts']} held-out texts: {stop['stopped']} stopped by the head, "
        f"{stop['hit_guard']} by the max-length guard; mean length error "
        f"{100 * stop['length_error_mean']:+.1f}% against espeak-ng's rendering.",
        "",
    ]
    lines += _ablation(model)
    lines += _shared_depth(model)
    lines += [
        "## Training",
        "",
        _training(t),
        "",
        "## Files",
        "",
        ", ".join(f"`{k}` {v / 1e6:.2f} MB" for k, v in sizes.items())
        + f", `{meta['codec_file']}` (the v1 codec)"
        + (
            f", `depth_shared.npz` {shared.stat().st_size / 1e6:.2f} MB (the shared depth decoder)"
            if shared.is_file()
            else ""
        )
        + f"; the folder: {total / 1e6:.1f} MB.",
        "",
        "## Limitations",
        "",
        "- English only, four espeak-ng voice variants (f1, f2, m1, m3); the prosody is "
        "espeak-ng's (its timing is an input), the timbre the v1 codec's Griffin-Lim vocoder.",
        "- Needs espeak-ng's library at synthesis: the phoneme track comes from it (the "
        "`espeakng-loader` wheel's 1.52, a dependency of codecspec; the corpus was timed with "
        "Debian's 1.51, and 1.52's stress marks are stripped, so the tracks agree: "
        "`docs/quality.md`); IPA input (`phonemes=`) is refused.",
        _hours_line(t, q, words),
        "- Sampling default T 0.6 / top-k 20 for c0 and the depth levels alike (`model.json`; "
        "a greedy or cooler depth stage did not beat it on held-out corpus texts, with the "
        "12 h depth decoder or the 24 h one, `docs/quality.md`); the recipe writes it into "
        "every v3 folder it exports or ships, so a probe judges a checkpoint as it will run.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "python" / "codecspec" / "models" / "v3"))
    ap.add_argument("--quality", default=str(ROOT / "docs" / "speed_quality_rounds.json"))
    ap.add_argument("--words", default=str(ROOT / "docs" / "quality_v3_rounds.json"))
    ap.add_argument("--sets", default=str(ROOT / "docs" / "quality_v3_sets.json"))
    ap.add_argument(
        "--sets-current",
        default=str(ROOT / "docs" / "quality_v3_sets_mixed.json"),
        help="a later run of the model rows alone (the current runtime)",
    )
    args = ap.parse_args(argv)
    model = Path(args.model)
    qp, wp = Path(args.quality), Path(args.words)
    q = json.loads(qp.read_text()) if qp.is_file() else None
    words = json.loads(wp.read_text()) if wp.is_file() else None
    sets = json.loads(Path(args.sets).read_text()) if Path(args.sets).is_file() else None
    cur = Path(args.sets_current)
    current = json.loads(cur.read_text()) if cur.is_file() else None
    if current and "everyday" in current:  # the lead figure: the folder on today's runtime
        words = current["everyday"]
    text = card(model, q, qp, words, sets, current, cur.name)
    (model / "MODEL_CARD.md").write_text(text)
    print(model / "MODEL_CARD.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
