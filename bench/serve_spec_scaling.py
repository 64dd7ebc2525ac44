"""Speculation inside the engine's batch: aggregate real time of n streams, AR against the
model's calibrated speculation (`auto`), medians over interleaved repeats in one process.

    python bench/serve_spec_scaling.py --model v2 [--streams 1,4,16] [--repeats 5] [--json F]

One engine (admit "max", one ONNX Runtime thread per session) decodes n streams submitted
together (`codecspec.serve.bench.engine_scaling`, frames only, no vocoder); AR and auto
alternate within every repeat, so both see the same machine. Prints per n the median
aggregate real time of each mode, their ratio (median of the per-repeat ratios) and the
per-stream RTF p95.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from codecspec.serve.bench import engine_scaling
from codecspec.serve.engine import Engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="v2")
    ap.add_argument("--streams", default="1,4,16")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None, help="write every row and the summary here")
    args = ap.parse_args()
    ns = [int(x) for x in args.streams.split(",")]
    engine = Engine(args.model, max_streams=max(ns), threads=1)
    rows = []
    try:
        for r in range(args.repeats):
            for mode in ("ar", "auto"):
                for row in engine_scaling(engine, ns, mode, seed=100 * r, progress=False):
                    rows.append(dict(row, repeat=r))
    finally:
        engine.shutdown()
    summary = []
    for n in ns:
        agg = {
            m: [x["aggregate_realtime"] for x in rows if x["n"] == n and x["mode"] == m]
            for m in ("ar", "auto")
        }
        p95 = {
            m: [x["per_stream_rtf_p95"] for x in rows if x["n"] == n and x["mode"] == m]
            for m in ("ar", "auto")
        }
        ratios = np.array(agg["auto"]) / np.array(agg["ar"])
        s = {
            "n": n,
            "ar": float(np.median(agg["ar"])),
            "auto": float(np.median(agg["auto"])),
            "ratio": float(np.median(ratios)),
            "ratio_min": float(ratios.min()),
            "ratio_max": float(ratios.max()),
            "rtf_p95_ar": float(np.median(p95["ar"])),
            "rtf_p95_auto": float(np.median(p95["auto"])),
        }
        summary.append(s)
        print(
            f"{args.model} n={n:>3}: aggregate real time AR {s['ar']:.2f}x, auto {s['auto']:.2f}x,"
            f" ratio {s['ratio']:.2f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f}); per-stream "
            f"RTF p95 {s['rtf_p95_ar']:.2f} / {s['rtf_p95_auto']:.2f}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"model": args.model, "repeats": args.repeats, "summary": summary, "rows": rows},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
