"""Constant-memory streaming synthesis: peak RSS and ms per frame against audio length.

    python bench/constant_memory.py            # 20, 80 and 320 s of audio -> docs/constant_memory.*
    python bench/constant_memory.py --model v3 --depth shared --name constant_memory_v3_shared

Each length runs in its own fresh process (peak RSS is a per-process high-water mark):
`codecspec synth --model v2 --stream --text-file <text> --json`, the text made of the bench's
English sentences repeated until espeak-ng's rendering would last the target, spoken sentence
by sentence into one continuous WAV. The JSON it prints gives peak RSS, frames, time to first
audio and the real-time factor; ms per frame is the whole run's wall time over its frames.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECONDS = (20, 80, 320)
SECONDS_PER_SENTENCE = 4.0  # espeak-ng's bench sentences last 3-6 s


def texts_for(seconds: float) -> str:
    sys.path.insert(0, str(ROOT / "python"))
    from codecspec.pipeline.depth_bench import load_bench_texts

    en = [t["text"] for t in load_bench_texts() if t["language"] == "en"]
    n = max(1, round(seconds / SECONDS_PER_SENTENCE))
    return " ".join(en[i % len(en)] for i in range(n))


def run_one(model: str, seconds: float, threads: int, tmp: Path, depth=None) -> dict:
    text = tmp / f"text_{seconds}.txt"
    text.write_text(texts_for(seconds), encoding="utf-8")
    cmd = [sys.executable, "-m", "codecspec.cli", "synth", "--model", model, "--stream"]
    cmd += ["--text-file", str(text), "--json", "-o", str(tmp / f"out_{seconds}.wav")]
    cmd += ["--threads", str(threads)] + ([] if depth is None else ["--depth", depth])
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    rep["target_seconds"] = seconds
    rep["wall_s"] = wall
    # the stream's own wall time (rtf x audio), not the interpreter's start-up
    rep["ms_per_frame"] = 1e3 * rep["rtf"] * rep["audio_seconds"] / max(rep["frames"], 1)
    return rep


def plot(rows: list, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    x = [r["audio_seconds"] for r in rows]
    ax[0].plot(x, [r["peak_rss_mb"] for r in rows], "o-")
    ax[0].set_xscale("log")
    ax[0].set_xlabel("audio seconds")
    ax[0].set_ylabel("peak RSS (MiB)")
    ax[1].plot(x, [r["ms_per_frame"] for r in rows], "o-")
    ax[1].set_xscale("log")
    ax[1].set_xlabel("audio seconds")
    ax[1].set_ylabel("ms per frame")
    for a in ax:
        a.grid(alpha=0.3)
    fig.suptitle(f"{title} streamed synthesis: memory and time per frame vs length")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", default=",".join(map(str, SECONDS)))
    ap.add_argument("--depth", choices=["positional", "shared"], default=None)
    ap.add_argument("--docs", default=str(ROOT / "docs"))
    ap.add_argument("--name", default="constant_memory", help="stem of the .json and .png")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in (float(x) for x in args.seconds.split(",")):
            rows.append(run_one(args.model, s, args.threads, Path(tmp), args.depth))
            r = rows[-1]
            print(
                f"{r['audio_seconds']:.1f} s audio: peak RSS {r['peak_rss_mb']:.1f} MiB, "
                f"{r['ms_per_frame']:.2f} ms/frame, "
                f"first audio {r['time_to_first_audio_ms']:.0f} ms",
                flush=True,
            )
    docs = Path(args.docs)
    keep = ("target_seconds", "audio_seconds", "frames", "peak_rss_mb", "ms_per_frame")
    keep += ("time_to_first_audio_ms", "rtf", "wall_s", "sentences")
    flags = f" --model {args.model}" + (f" --depth {args.depth}" if args.depth else "")
    res = {
        "command": "python bench/constant_memory.py" + (flags if args.model != "v2" else ""),
        "model": args.model,
        "depth": args.depth or "positional",
        "rows": [{k: r.get(k) for k in keep} for r in rows],
        "rss_growth_mb": rows[-1]["peak_rss_mb"] - rows[0]["peak_rss_mb"],
        "ms_per_frame_ratio": rows[-1]["ms_per_frame"] / rows[0]["ms_per_frame"],
    }
    (docs / f"{args.name}.json").write_text(json.dumps(res, indent=1))
    title = args.model + (f" ({args.depth} depth)" if args.depth else "")
    plot(rows, docs / f"{args.name}.png", title)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
