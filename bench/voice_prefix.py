"""Does an FSQ voice-prefix model speak in the voice of a clip it never heard? Speaker
similarity (the GE2E encoder of `codecspec.evaluation.speaker_similarity`) of its speech to
the reference clip, with the clip's prefix against the null prefix, on voices held out of
its training.

    python bench/voice_prefix.py --model models/fsq-voices \\
        --voices f5 m8 Annie benjamin john steph Gene norbert --pairs 8 --out F.json

For every voice and pair: espeak-ng says a reference sentence in that voice at a pitch drawn
from the corpus's range (pitch is part of a voice); the model reads the clip once
(`VoiceBank.add`, as `--ref-audio` does) and says an evaluation sentence with

* `clone`: the clip's own prefix (what a user gets);
* `neutral`: the null prefix (no reference: the floor to beat);
* `other`: another held-out voice's clip (a wrong reference: the degraded input, which
  must score below `clone`, or the measure hears something else than the voice);
* `codec`: espeak-ng saying the sentence in the reference's voice and pitch, through the
  folder's FSQ codec (a perfect clone as this codec can render it: the model's ceiling);
* `espeak-ng`: the same clip without the codec (a perfect clone).

A pair is won when `clone` is more similar to the reference than `neutral` is. `--words`
also transcribes the clone and neutral clips (Whisper base): a voice that costs the words
is no voice. Sentences: the project's everyday evaluation set (measured, never chosen on);
`--corpus C`: C's held-out texts instead, for choices (with voices held out of both training
and the measured set). Greedy (the folder's law), seed 0, one thread.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from codecspec.codec.audio import resample
from codecspec.evaluation.intelligibility import load_sentences, word_errors
from codecspec.evaluation.speaker_similarity import SpeakerEncoder
from codecspec.frontend import espeak
from codecspec.pipeline.registry import load_model

REFERENCE_TEXTS = [
    "The old lighthouse keeper wrote a letter every winter morning.",
    "Bright kites drifted over the market while the children counted coins.",
    "Nobody expected the museum to open its doors before the storm.",
]
PITCH_RANGE = (25, 75)  # corpus.py's espeak-ng -p range
RATE = 170


def reference_clips(voices: list, pairs: int, seed: int) -> list:
    """[(voice, pair, pitch, reference render)], pitches drawn per (voice, pair)."""
    rng = np.random.default_rng(seed)
    out = []
    for v in voices:
        for i in range(pairs):
            pitch = int(rng.integers(PITCH_RANGE[0], PITCH_RANGE[1] + 1))
            text = REFERENCE_TEXTS[i % len(REFERENCE_TEXTS)]
            out.append((v, i, pitch, espeak.render(text, f"en-us+{v}", RATE, pitch, 0)))
    return out


def held_out_texts(corpus, n: int) -> list:
    """The first `n` texts of a corpus's held-out split (corpus.py's manifest)."""
    from codecspec.codec.data import load_manifest

    rows = load_manifest(Path(corpus).expanduser())
    return [r["text"] for r in rows if r["split"] == "test" and r["id"].endswith("r0")][:n]


def resynthesis(tts, r) -> np.ndarray:
    """espeak-ng's clip through the folder's FSQ codec (encode, decode; seed 0)."""
    x = resample(r.audio, r.sample_rate, tts.codec.sample_rate)
    return tts.codec.decode(tts.codec.encode_features(tts.codec.features(x)), seed=0)


def measure(tts, enc, refs: list, texts: list, recognizer=None) -> list:
    rows, names = [], [f"{v}#{i}" for v, i, *_ in refs]
    for name, (*_, r) in zip(names, refs):
        tts.voices.add(name, (r.audio, r.sample_rate))
    for k, (v, i, pitch, r) in enumerate(refs):
        text = texts[i % len(texts)]
        ref_emb = enc.embed(r.audio, r.sample_rate)
        other = next(n for n, (w, j, *_) in zip(names, refs) if w != v and j == i)
        row = {"voice": v, "pair": i, "pitch": pitch, "text": text, "other_voice": other}
        for cond, voice in (("clone", names[k]), ("neutral", "neutral"), ("other", other)):
            s = tts.generate(text, speaker=voice, seed=0)
            row[cond] = enc.similarity(enc.embed(s.wav, s.sample_rate), ref_emb)
            row[f"{cond}_stopped"] = bool(s.stopped)
            if recognizer is not None and cond != "other":
                heard = recognizer.transcribe(s.wav, s.sample_rate)
                row[f"{cond}_words"] = word_errors(text, heard).words_recognised
        e = espeak.render(text, f"en-us+{v}", RATE, pitch, 0)
        row["espeak-ng"] = enc.similarity(enc.embed(e.audio, e.sample_rate), ref_emb)
        resynth = enc.embed(resynthesis(tts, e), tts.codec.sample_rate)
        row["codec"] = enc.similarity(resynth, ref_emb)
        rows.append(row)
        print(
            f"{v:9s} pair {i} pitch {pitch:2d}: clone {row['clone']:.3f} neutral "
            f"{row['neutral']:.3f} other {row['other']:.3f} codec {row['codec']:.3f} "
            f"espeak-ng {row['espeak-ng']:.3f}",
            flush=True,
        )
    return rows


def summarise(rows: list, seed: int = 0) -> dict:
    """Means, the share of pairs where clone beats neutral (and other) with 95% bootstrap
    intervals over voices (pairs of a voice resampled together)."""
    voices = sorted({r["voice"] for r in rows})
    by_voice = {v: [r for r in rows if r["voice"] == v] for v in voices}
    rng = np.random.default_rng(seed)

    def share(sel, key):
        return float(np.mean([r["clone"] > r[key] for r in sel]))

    out = {
        "pairs": len(rows),
        "voices": voices,
        **{f"{c}_mean": round(float(np.mean([r[c] for r in rows])), 4) for c in CONDITIONS},
    }
    for key in ("neutral", "other"):
        boot = []
        for _ in range(2000):
            pick = rng.choice(len(voices), len(voices))
            boot.append(share([r for p in pick for r in by_voice[voices[p]]], key))
        out[f"clone_beats_{key}"] = round(share(rows, key), 4)
        ci = np.quantile(boot, [0.025, 0.975])
        out[f"clone_beats_{key}_ci"] = [round(float(q), 4) for q in ci]
    out["per_voice"] = {
        v: {c: round(float(np.mean([r[c] for r in sel])), 4) for c in CONDITIONS}
        for v, sel in by_voice.items()
    }
    out["stopped"] = round(float(np.mean([r["clone_stopped"] for r in rows])), 4)
    if "clone_words" in rows[0]:
        for c in ("clone", "neutral"):
            out[f"{c}_words"] = round(float(np.mean([r[f"{c}_words"] for r in rows])), 4)
    return out


CONDITIONS = ("clone", "neutral", "other", "codec", "espeak-ng")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="fsq-voices")
    ap.add_argument("--voices", nargs="+", required=True, help="espeak-ng variants")
    ap.add_argument("--pairs", type=int, default=8, help="reference clips per voice")
    ap.add_argument("--seed", type=int, default=0, help="the references' pitches")
    ap.add_argument("--words", action="store_true", help="also Whisper base's words")
    ap.add_argument(
        "--corpus",
        default=None,
        help="say this corpus's held-out texts instead of the evaluation sentences (for a "
        "choice between checkpoints: make it on validation voices and corpus texts)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if len(a.voices) < 2:
        ap.error("--voices: at least two (the `other` condition is another voice's clip)")
    enc = SpeakerEncoder()
    recognizer = None
    if a.words:
        from codecspec.evaluation.intelligibility import Recognizer

        recognizer = Recognizer(threads=a.threads)
    tts = load_model(a.model, threads=a.threads)
    if tts.voices is None:
        raise SystemExit(f"--model: {a.model} has no voice prefix (voice.onnx)")
    texts = held_out_texts(a.corpus, a.pairs) if a.corpus else None
    texts = texts or [row["text"] for row in load_sentences(a.pairs)]
    t0 = time.time()
    rows = measure(tts, enc, reference_clips(a.voices, a.pairs, a.seed), texts, recognizer)
    summary = summarise(rows)
    print(json.dumps({k: v for k, v in summary.items() if k != "per_voice"}, indent=1))
    report = {
        "machine": platform.processor() or platform.machine(),
        "model": str(a.model),
        "args": vars(a),
        "reference_texts": REFERENCE_TEXTS,
        "summary": summary,
        "rows": rows,
        "seconds": round(time.time() - t0, 1),
    }
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
