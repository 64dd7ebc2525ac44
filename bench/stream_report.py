"""Streaming synthesis figures for docs/streaming.md: seam quality and time to first audio.

    python bench/stream_report.py seams [--texts 8] [--model fsq]  # chunks vs whole utterance
    python bench/stream_report.py ttfa [--repeats 3]       # synth vs synth --stream (CLI)

`seams`: for the held-out sentences of pipeline/bench_texts.json (shipped reference model, AR,
seed = index), the log-spectral distance between the streamed and the whole rendering over
the distance between two whole renderings with different seeds (Griffin-Lim's own spread),
and the log-mel error against the codec's target spectrum in the 8 STFT columns around each
chunk boundary, minus the whole rendering's error in the same columns ("seam excess"), for
the chunk scheme and for hard cuts (no context, no cross-fade).

`ttfa`: `codecspec synth --json` and `synth --stream --json` in fresh processes, alternating,
on one sentence and on a five-sentence --text-file; medians of time_to_first_audio_ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from codecspec.codec.features import log_spectral_distance, stft
from codecspec.codec.streaming import stream_decode

TEXTS = Path(__file__).resolve().parents[1] / "python/codecspec/pipeline/bench_texts.json"
PARAGRAPH = (
    "The library keeps the output law of the model while it cuts the number of calls. "
    "A small draft proposes the next codes, and one call of the target checks them all. "
    "Streaming plays the first words while the rest is still being made. "
    "Each sentence is spoken in turn, so a long text never waits for its end. "
    "This is the last sentence of the test."
)


def _colmel_error(codec, codes, y):
    spectral = getattr(codec, "pca", codec)  # FSQ / v2 codecs keep the v1 front end in .pca
    c, fb = spectral.cfg, spectral._fb
    target = np.exp(codec.decode_features(codes).reshape(-1, c.n_mels).astype(np.float64))
    mag = np.abs(stft(y, c.n_fft, c.stft_hop, c.win_length, len(codes) * c.subframes))
    return np.sqrt(np.mean((20 * np.log10((mag @ fb.T + c.log_offset) / target)) ** 2, 1))


def seams(n_texts: int, model: str = "reference", chunks=(4, 8)) -> dict:
    from codecspec.pipeline.registry import load_model

    tts = load_model(model, provider="cpu", threads=1)
    codec = tts.codec
    mode = {} if model == "fsq" else {"mode": "ar"}
    rows = {n: {"lsd_ratio": [], "seam_excess_db": [], "hard_cut_excess_db": []} for n in chunks}
    frames, spread = [], []
    for i, t in enumerate(json.loads(TEXTS.read_text())["texts"][:n_texts]):
        codes = tts.generate("", phonemes=t["phonemes"], seed=i, decode_audio=False, **mode)
        codes = codes.codes
        whole = codec.decode(codes, seed=i)
        base = log_spectral_distance(whole, codec.decode(codes, seed=i + 1000))
        frames.append(len(codes))
        spread.append(base)
        ref = _colmel_error(codec, codes, whole)
        for n in chunks:
            cols = [c for s in range(n, len(codes), n) for c in range(8 * s - 4, 8 * s + 4)]
            y = stream_decode(codec, codes, chunk_frames=n, seed=i)
            cut = stream_decode(codec, codes, chunk_frames=n, seed=i, context_frames=0, crossfade=0)
            r = rows[n]
            r["lsd_ratio"].append(log_spectral_distance(whole, y) / base)
            r["seam_excess_db"].append(
                float(_colmel_error(codec, codes, y)[cols].mean() - ref[cols].mean())
            )
            r["hard_cut_excess_db"].append(
                float(_colmel_error(codec, codes, cut)[cols].mean() - ref[cols].mean())
            )
    print(
        f"{model}: {len(frames)} sentences of {min(frames)}-{max(frames)} frames; "
        f"LSD(whole, whole') {min(spread):.2f}-{max(spread):.2f} dB"
    )
    print(
        "| chunk frames | LSD(stream, whole) / LSD(whole, whole') | seam excess dB | hard cut dB |"
    )
    print("|---|---|---|---|")
    for n, r in rows.items():
        f = {k: (min(v), statistics.mean(v), max(v)) for k, v in r.items()}
        print(
            f"| {n} | {f['lsd_ratio'][1]:.3f} ({f['lsd_ratio'][0]:.3f}-{f['lsd_ratio'][2]:.3f}) "
            f"| {f['seam_excess_db'][1]:+.2f} ({f['seam_excess_db'][0]:+.2f} to "
            f"{f['seam_excess_db'][2]:+.2f}) | {f['hard_cut_excess_db'][1]:+.2f} "
            f"({f['hard_cut_excess_db'][0]:+.2f} to {f['hard_cut_excess_db'][2]:+.2f}) |"
        )
    return {str(n): r for n, r in rows.items()}


def _synth(args: list) -> dict:
    cmd = [sys.executable, "-m", "codecspec.cli", "synth", *args, "--json", "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def ttfa(repeats: int, threads: int, model: str) -> dict:
    tmp = Path(tempfile.mkdtemp())
    (tmp / "para.txt").write_text(PARAGRAPH, encoding="utf-8")
    one = "The library keeps the output law of the model while it cuts the number of calls."
    common = ["--threads", str(threads), "--model", model, "-o", str(tmp / "o.wav")]
    cases = {
        "sentence, whole": [one],
        "sentence, --stream": [one, "--stream"],
        "sentence, --stream --chunk-frames 4": [one, "--stream", "--chunk-frames", "4"],
        "5 sentences, whole (--text-file)": ["--text-file", str(tmp / "para.txt")],
        "5 sentences, --stream (--text-file)": ["--text-file", str(tmp / "para.txt"), "--stream"],
    }
    res = {k: [] for k in cases}
    for _ in range(repeats):
        for k, a in cases.items():
            res[k].append(_synth(a + common))
    print(f"model {model}, --threads {threads}, {repeats} runs each (median)")
    print("| case | audio s | time to first audio ms | RTF | peak RSS MiB |")
    print("|---|---|---|---|---|")
    out = {}
    for k, runs in res.items():
        med = {
            f: statistics.median(r[f] for r in runs)
            for f in ("audio_seconds", "time_to_first_audio_ms", "rtf", "peak_rss_mb")
        }
        out[k] = med
        print(
            f"| {k} | {med['audio_seconds']:.2f} | {med['time_to_first_audio_ms']:.0f} | "
            f"{med['rtf']:.2f} | {med['peak_rss_mb']:.0f} |"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("seams")
    p.add_argument("--texts", type=int, default=8)
    p.add_argument("--model", default="reference")
    p = sub.add_parser("ttfa")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default="reference")
    a = ap.parse_args()
    if a.what == "seams":
        seams(a.texts, a.model)
    else:
        ttfa(a.repeats, a.threads, a.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
