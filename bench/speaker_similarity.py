"""Does a model sound like the voice it is asked for? Speaker similarity (the GE2E encoder of
`codecspec.evaluation.speaker_similarity`) of each model's speech for each of its speakers to
espeak-ng's own voice of that speaker, against the other speakers' espeak-ng voices, and the
same two figures for espeak-ng itself (a second text in the same voice: the ceiling).

    python bench/speaker_similarity.py --models v3 fsq-aligned --texts 8 --out F.json

The references speak other texts than the clips they are compared with (the encoder should
hear the voice, not the words). A speaker is "kept" in a pair when its own reference scores
above every other speaker's. Texts: the first of the project's everyday evaluation sentences
(measured, not chosen on). Greedy / the model's own law, seed 0, one thread.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from codecspec.evaluation.intelligibility import load_sentences
from codecspec.evaluation.speaker_similarity import SpeakerEncoder
from codecspec.frontend import espeak
from codecspec.pipeline.registry import load_model

REFERENCE_TEXTS = [
    "A quiet harbour waits for the boats at dawn.",
    "Seven silver spoons were lost in the kitchen drawer.",
]


def voice_of(tts, speaker: str) -> str:
    return tts.espeak_voice("en", speaker)


def references(enc, tts) -> dict:
    """speaker -> [embeddings of espeak-ng's voice on the reference texts]."""
    out = {}
    for s in tts.frontend.speakers.names:
        clips = [espeak.render(t, voice_of(tts, s)) for t in REFERENCE_TEXTS]
        out[s] = [enc.embed(r.audio, r.sample_rate) for r in clips]
    return out


def score(enc, emb, refs: dict, speaker: str) -> dict:
    own = max(enc.similarity(emb, r) for r in refs[speaker])
    other = max(enc.similarity(emb, r) for s, rs in refs.items() if s != speaker for r in rs)
    return {"own": own, "other": other, "kept": own > other}


def measure(enc, name: str, texts: list, threads: int) -> dict:
    tts = load_model(name, threads=threads)
    refs = references(enc, tts)
    rows = []
    for s in tts.frontend.speakers.names:
        for text in texts:
            model = tts.generate(text, speaker=s, seed=0)
            ref = espeak.render(text, voice_of(tts, s))
            for source, wav, sr in (
                ("model", model.wav, model.sample_rate),
                ("espeak-ng", ref.audio, ref.sample_rate),
            ):
                rows.append(
                    {
                        "speaker": s,
                        "text": text,
                        "source": source,
                        **score(enc, enc.embed(wav, sr), refs, s),
                    }
                )
    return {"model": name, "rows": rows, "summary": summarise(rows)}


def summarise(rows: list) -> dict:
    out = {}
    for source in ("model", "espeak-ng"):
        sel = [r for r in rows if r["source"] == source]
        own = np.array([r["own"] for r in sel])
        other = np.array([r["other"] for r in sel])
        out[source] = {
            "clips": len(sel),
            "own_mean": round(float(own.mean()), 4),
            "other_mean": round(float(other.mean()), 4),
            "margin_mean": round(float((own - other).mean()), 4),
            "kept": round(float(np.mean([r["kept"] for r in sel])), 4),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["v3", "fsq-aligned"])
    ap.add_argument("--texts", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    enc = SpeakerEncoder()
    texts = [row["text"] for row in load_sentences(a.texts)]
    t0 = time.time()
    report = {
        "machine": platform.processor() or platform.machine(),
        "texts": a.texts,
        "reference_texts": REFERENCE_TEXTS,
        "models": [],
    }
    for name in a.models:
        r = measure(enc, name, texts, a.threads)
        report["models"].append(r)
        for source, s in r["summary"].items():
            print(
                f"{name:12s} {source:9s} own {s['own_mean']:.3f} other {s['other_mean']:.3f} "
                f"margin {s['margin_mean']:+.3f} kept {100 * s['kept']:.0f}% of {s['clips']}",
                flush=True,
            )
    report["seconds"] = round(time.time() - t0, 1)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
