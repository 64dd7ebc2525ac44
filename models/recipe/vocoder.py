"""Vocoder old vs new on held-out speech: log-spectral distance and ms per audio second.

Decodes each held-out utterance's codes with the v1 vocoder (`griffin_lim_reference`) and the
current one (`griffin_lim`), interleaved, and writes the figures into the model's report.json
under "vocoder" and into the "Vocoder" section of its MODEL_CARD.md.

python models/recipe/vocoder.py --corpus ~/.cache/codecspec/corpus
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from codecspec.codec.audio import read_wav
from codecspec.codec.codec import Codec
from codecspec.codec.features import griffin_lim, griffin_lim_reference, log_spectral_distance

sys.path.insert(0, str(Path(__file__).resolve().parent))
from card import DEFAULT_MODEL, vocoder_section  # noqa: E402


def held_out(corpus: Path, count: int) -> list:
    rows = [json.loads(line) for line in (corpus / "manifest.jsonl").open()]
    test = [r for r in rows if r["split"] == "test"]
    if not test:
        raise SystemExit(f"--corpus: {corpus} has no held-out utterances")
    return test[:: max(1, len(test) // count)][:count]


def measure(model: Path, corpus: Path, count: int) -> dict:
    codec = Codec.load(model / "codec.npz")
    c = codec.cfg
    args = (c.n_fft, c.stft_hop, c.win_length)
    lsd = {"v1": [], "new": []}
    ms = {"v1": [], "new": []}
    seconds = 0.0
    for i, r in enumerate(held_out(corpus, count)):
        wav, _ = read_wav(corpus / r["path"])
        feats = codec.decode_features(codec.encode(wav))
        mag = codec.features_to_magnitude(feats)
        n = len(feats) * c.frame_hop
        seconds += n / c.sample_rate
        order = (("v1", griffin_lim_reference), ("new", griffin_lim))
        for name, vocoder in order if i % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            y = vocoder(mag, *args, n)
            ms[name].append(1e3 * (time.perf_counter() - t0) / (n / c.sample_rate))
            lsd[name].append(log_spectral_distance(wav, y))
    diff = np.array(lsd["new"]) - np.array(lsd["v1"])
    return {
        "utterances": len(lsd["v1"]),
        "audio_seconds": round(seconds, 2),
        "iterations": 32,
        "momentum": {"v1": 0.99, "new": 0.9},
        "lsd_db": {k: float(np.mean(v)) for k, v in lsd.items()},
        "lsd_db_diff_max": float(diff.max()),
        "lsd_better_count": int((diff < 0).sum()),
        "ms_per_audio_second": {k: float(np.median(v)) for k, v in ms.items()},
        "speedup": float(np.median(ms["v1"]) / np.median(ms["new"])),
    }


def patch_card(card: Path, section: str) -> None:
    """Replaces (or inserts before "## Training") the card's "## Vocoder" section."""
    text = card.read_text()
    start = text.find("## Vocoder\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + text[end + 1 :]
    else:
        at = text.find("## Training\n")
        text = text[:at] + section + "\n" + text[at:]
    card.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus")
    ap.add_argument("--count", type=int, default=24, help="held-out utterances")
    args = ap.parse_args(argv)
    model, corpus = Path(args.model), Path(args.corpus).expanduser()
    res = measure(model, corpus, args.count)
    rep_path = model / "report.json"
    rep = json.loads(rep_path.read_text())
    rep["vocoder"] = res
    rep_path.write_text(json.dumps(rep))  # compact, as ship.py writes it
    patch_card(model / "MODEL_CARD.md", vocoder_section(res))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
