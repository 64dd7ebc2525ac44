"""`fsq.py compare`: which GroupFSQ codec keeps the words. Every candidate is fitted on the
corpus's training frames, then judged the way a listener would: held-out corpus utterances
(their own espeak-ng audio, every voice and pace of the corpus) encoded, decoded and
transcribed by Whisper, beside the same audio unprocessed and through the v1 codec (the
reference the FSQ codec must come within 5 points of). Feature-domain figures (unexplained
log-mel variance, mel distortion) and the bit rate sit beside the words. The choice is made on
the held-out corpus texts; `--sets` adds the evaluation sentences (espeak-ng in the corpus
voice) as a report only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from codecspec.codec.codec import Codec
from codecspec.families.fsq.codec import FSQCodec, FSQConfig

ESPEAK = "espeak-ng (no codec)"
V1 = "v1 RVQ 16 x 1024"


def log(msg: str) -> None:
    print(f"[fsq compare] {msg}", file=sys.stderr, flush=True)


def candidates(train: np.ndarray, spectral, bits: list, v1_path: Path, built=()) -> dict:
    """{name: codec or None (the audio itself)}: the audio, v1, the shipped FSQ layout and
    one allocation per bit budget, all on the same training frames (v1: its own fit)."""
    out = {ESPEAK: None, V1: Codec.load(v1_path)}
    out["FSQ 8 x [8, 7, 6, 6] (shipped layout)"] = FSQCodec.fit(train, FSQConfig(), spectral)
    for b in bits:
        c = FSQCodec.fit(train, spectral=spectral, bits=float(b))
        out[f"FSQ levels by variance, {b:g} bits"] = c
        log(f"{b:g} bits: {c.cfg.channels} channels, first group {c.cfg.group_levels[0]}")
    for path in built:  # codecs `fsq.py codec` wrote (fitted on every training frame)
        c = FSQCodec.load(path)
        out[f"FSQ {c.cfg.bits_per_frame:.0f} bits, {Path(path).parent.parent.name}"] = c
    return out


def bits_per_frame(codec) -> float:
    if codec is None:
        return float("nan")
    if isinstance(codec, FSQCodec):
        return codec.cfg.bits_per_frame
    return codec.cfg.n_codebooks * float(np.log2(codec.cfg.codebook_size))


def feature_row(codec, test: np.ndarray, mel_distortion, n_mels: int) -> dict:
    """Held-out frames: unexplained log-mel variance and mean mel distortion (dB)."""
    if codec is None:
        return {}
    f_hat = codec.decode_features(codec.encode_features(test))
    d, _ = mel_distortion(test, f_hat, n_mels)
    var = float(np.var(test.astype(np.float64), axis=0).sum())
    mse = float(np.sum(np.mean((test.astype(np.float64) - f_hat) ** 2, axis=0)))
    return {"unexplained": round(mse / var, 5), "mel_db": round(float(d.mean()), 3)}


def words(codec, clips: dict, seeds: list, recognizer, desc: str) -> dict:
    """Words recognised (and the report's CIs) of every clip through `codec`."""
    from codecspec.evaluation.intelligibility import evaluate

    def synthesize(text, seed):
        x, sr = clips[text]
        return (x if codec is None else codec.decode(codec.encode(x, sr), seed=seed)), sr

    rep = evaluate(synthesize, list(clips), seeds, recognizer=recognizer, desc=desc)
    lo, hi = rep["words_recognised_ci"]
    return {
        "words_recognised": round(100 * rep["words_recognised"], 2),
        "ci": [round(100 * lo, 2), round(100 * hi, 2)],
        "wer": round(100 * rep["wer"], 2),
        "per_clip": [c["transcript"] for c in rep["per_clip"]],
    }


def set_clips(name: str, voice=("en-us+f1", 170, 50), sample_rate: int = 16000) -> dict:
    """{text: (audio, rate)}: espeak-ng's rendering of an evaluation set in the corpus voice."""
    from codecspec.codec.audio import resample
    from codecspec.evaluation.intelligibility import load_sentences
    from codecspec.frontend.espeak import render

    out = {}
    for row in load_sentences(set=name):
        r = render(row["text"], *voice)
        out[row["text"]] = (
            resample(r.audio, r.sample_rate, sample_rate).astype(np.float32),
            sample_rate,
        )
    return out


def markdown(report: dict) -> str:
    sets = report["sets"]
    head = "| codec | bits / frame | kbit/s | unexplained | mel dB | " + " | ".join(
        f"words % {s} (95% CI)" for s in sets
    )
    lines = [head + " |", "|---" * (5 + len(sets)) + "|"]
    for name, row in report["codecs"].items():
        b = row["bits_per_frame"]
        cells = [name, f"{b:.1f}" if b == b else "—", f"{b * 12.5 / 1000:.2f}" if b == b else "—"]
        cells += (
            [f"{row['unexplained']:.4f}", f"{row['mel_db']:.2f}"] if "mel_db" in row else ["—", "—"]
        )
        for s in sets:
            w = row["words"][s]
            cells.append(f"{w['words_recognised']:.1f} ({w['ci'][0]:.1f}–{w['ci'][1]:.1f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def compare(args, rows, feats, corpus: Path, out: Path, mel_distortion) -> dict:
    """The comparison report; writes compare.json and compare.md into `out`."""
    from codecspec.codec import CodecConfig
    from codecspec.codec.audio import read_wav
    from codecspec.evaluation.intelligibility import Recognizer

    spectral = CodecConfig()
    is_train = np.array([r["split"] == "train" for r in rows])
    train = np.concatenate([f for f, t in zip(feats, is_train) if t])
    test = np.concatenate([f for f, t in zip(feats, is_train) if not t])
    codecs = candidates(train, spectral, args.bits, Path(args.v1_codec), args.codec)
    heldout = [r for r in rows if r["split"] == "test" and r["id"].endswith("r0")][: args.texts]
    clip_sets = {"held-out corpus": {r["text"]: read_wav(str(corpus / r["path"])) for r in heldout}}
    for s in args.sets:
        clip_sets[s] = set_clips(s)
    rec = Recognizer(threads=args.workers)
    seeds = list(range(args.seeds))
    report = {
        "sets": list(clip_sets),
        "texts": {k: len(v) for k, v in clip_sets.items()},
        "codecs": {},
    }
    for name, codec in codecs.items():
        row = {"bits_per_frame": bits_per_frame(codec)}
        row |= feature_row(codec, test, mel_distortion, spectral.n_mels)
        if isinstance(codec, FSQCodec):
            row["levels"] = codec.cfg.to_meta()["levels"]
        row["words"] = {
            s: words(codec, c, seeds, rec, f"{name} · {s}") for s, c in clip_sets.items()
        }
        report["codecs"][name] = row
        log(
            f"{name}: "
            + ", ".join(f"{s} {w['words_recognised']:.1f}%" for s, w in row["words"].items())
        )
    (out / "compare.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "compare.md").write_text(markdown(report))
    print(markdown(report))
    return report
