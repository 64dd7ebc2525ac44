"""Where the words go: a breakdown of a `codecspec quality` report, without re-running it.

    codecspec quality --model v3 --modes ar temporal --floors --set all --seeds 3 -o q.json
    python bench/quality_breakdown.py q.json --set sus --out docs/quality_v3_sus_breakdown.md

From the report's per-clip counts and transcripts, per row (decoding mode or floor) of one
set:

* words: substitutions, deletions and insertions per reference word (what "words
  recognised" leaves out is S + D; WER adds I), and the clips at the max-length guard
  (runaways) with the share of clips whose length is within ±15% of espeak-ng's own;
* phonemes by class (stops, affricates, fricatives, nasals, liquids, glides, vowels,
  diphthongs): the share of the reference phonemes of that class the phoneme recognizer found,
  from the minimum-edit alignment of its output with espeak-ng's phonemes of the sentence
  (`codecspec.evaluation.phoneme_recognition.align`), and beside it the same share relative to the
  espeak-ng row's (1.0 = as well as espeak-ng itself);
* SUS only: words recognised per SUS template.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import codecspec  # noqa: F401
except ImportError:  # a checkout whose package is not installed
    sys.path.insert(0, str(ROOT / "python"))

from codecspec.evaluation.intelligibility import load_sentences  # noqa: E402
from codecspec.evaluation.phoneme_recognition import (  # noqa: E402
    CLASS_OF,
    CLASSES,
    align,
    reference_phonemes,
)

TOLERANCE = 0.15  # the stop target: within ±15% of espeak-ng's length


def word_table(rows: dict) -> str:
    lines = [
        "| row | words | S % | D % | I % | words recognised % | runaways | length within ±15% "
        "of espeak-ng |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    espeak_frames = {}
    if "espeak" in rows:
        espeak_frames = {c["sentence_id"]: c.get("frames") for c in rows["espeak"]["per_clip"]}
    for name, r in rows.items():
        clips = r["per_clip"]
        n = sum(c["ref_words"] for c in clips)
        s = sum(c["substitutions"] for c in clips)
        d = sum(c["deletions"] for c in clips)
        i = sum(c["insertions"] for c in clips)
        near = [
            abs(c["frames"] / espeak_frames[c["sentence_id"]] - 1.0) <= TOLERANCE
            for c in clips
            if c.get("frames") and espeak_frames.get(c["sentence_id"])
        ]
        within = f"{100 * sum(near) / len(near):.0f}%" if near else "—"
        run = f"{r.get('runaways', 0)}/{len(clips)}"
        lines.append(
            f"| {name} | {n} | {100 * s / n:.1f} | {100 * d / n:.1f} | {100 * i / n:.1f} "
            f"| {100 * (1 - (s + d) / n):.1f} | {run} | {within} |"
        )
    return "\n".join(lines)


def class_shares(report: dict, refs: dict) -> dict:
    """{class: (phonemes of the class found, reference phonemes of the class)} of one row."""
    out = {c: [0, 0] for c in CLASSES}
    for clip in report["per_clip"]:
        heard = clip.get("phoneme_transcript", "").split()
        for r, h in align(refs[clip["sentence_id"]], heard):
            if r is None or r not in CLASS_OF:
                continue
            out[CLASS_OF[r]][1] += 1
            out[CLASS_OF[r]][0] += int(r == h)
    return {c: tuple(v) for c, v in out.items()}


def class_table(rows: dict, refs: dict) -> str:
    shares = {name: class_shares(r, refs) for name, r in rows.items() if "phonemes" in r}
    if not shares:
        return "(no phoneme figures in this report: it was run with --no-phonemes)"
    base = shares.get("espeak")
    head = "| class (reference phonemes) | " + " | ".join(shares) + " |"
    lines = [head, "|---|" + "---:|" * len(shares)]
    ids = {c["sentence_id"] for r in rows.values() for c in r["per_clip"]}
    for c in CLASSES:
        total = sum(CLASS_OF.get(p) == c for i in ids for p in refs[i])  # per seed
        cells = []
        for name, sh in shares.items():
            hit, n = sh[c]
            rate = hit / n if n else float("nan")
            cell = f"{100 * rate:.0f}%"
            if base is not None and name != "espeak" and base[c][0]:
                cell += f" ({rate / (base[c][0] / base[c][1]):.2f})"
            cells.append(cell)
        lines.append(f"| {c} ({total}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def template_table(rows: dict, sentences: list) -> str:
    template = {s["id"]: s["template"] for s in sentences}
    kinds = list(dict.fromkeys(template.values()))
    lines = ["| row | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    for name, r in rows.items():
        cells = []
        for k in kinds:
            clips = [c for c in r["per_clip"] if template[c["sentence_id"]] == k]
            n = sum(c["ref_words"] for c in clips)
            sd = sum(c["substitutions"] + c["deletions"] for c in clips)
            cells.append(f"{100 * (1 - sd / n):.1f}" if n else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", help="a codecspec quality -o JSON ({set: {row: report}})")
    ap.add_argument("--set", default="sus", help="which set of the report (default sus)")
    ap.add_argument("--out", default=None, help="also write the tables here (markdown)")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.report).read_text())
    if args.set in data:
        rows = data[args.set]
    elif all("per_clip" in r for r in data.values()):  # a one-set report: {row: report}
        rows = data
    else:
        ap.error(f"--set: {args.set!r} is not in {args.report} ({', '.join(data)})")
    sentences = load_sentences(set=args.set)
    refs = {s["id"]: reference_phonemes(s) for s in sentences}
    parts = [
        f"### Words on the {args.set} set: substitutions, deletions, insertions, runaways",
        word_table(rows),
        f"### Phonemes recognised by class on the {args.set} set "
        "(in brackets: relative to espeak-ng's own)",
        class_table(rows, refs),
    ]
    if all("template" in s for s in sentences):
        parts += ["### Words recognised % per SUS template", template_table(rows, sentences)]
    text = "\n\n".join(parts) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
