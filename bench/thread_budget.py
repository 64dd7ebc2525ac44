"""The shared thread pool vs one pool per session, on the whole pipeline.

    python bench/thread_budget.py [--rounds 3] [--frames 300] [--texts 8] [--threads 2]

Runs `codecspec bench --json` in fresh processes, alternating CODECSPEC_THREAD_POOL=shared
and =session (the pool is fixed per process, so the two modes cannot share one), and prints
the medians over rounds of: the depth loop alone, the depth loop inside synthesis, their
ratio, the pipeline's ms per frame and real-time factor (AR and speculative).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

KEYS = (
    "ar_ms_per_frame",
    "pipeline_depth_ms_per_frame",
    "depth_in_pipeline_ratio",
    "pipeline_ar_ms_per_frame",
    "pipeline_spec_ms_per_frame",
    "pipeline_ar_rtf",
    "pipeline_spec_rtf",
    "vocoder_ms_per_audio_second",
    "speedup",
    "efficiency",
)


def run(mode: str, args) -> dict:
    # the reference family: these keys are its bench's (the default model is now v3)
    cmd = [sys.executable, "-m", "codecspec.cli", "bench", "--json", "--provider", "cpu"]
    cmd += ["--model", "reference"]
    cmd += ["--frames", str(args.frames), "--texts", str(args.texts)]
    cmd += ["--threads", str(args.threads)]
    env = dict(os.environ, CODECSPEC_THREAD_POOL=mode)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--texts", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the raw runs to this file")
    args = ap.parse_args(argv)
    runs: dict = {"shared": [], "session": []}
    for r in range(args.rounds):
        for mode in ("shared", "session") if r % 2 == 0 else ("session", "shared"):
            runs[mode].append(run(mode, args))
            print(f"round {r + 1}/{args.rounds} {mode} done", file=sys.stderr)
    print("| figure | shared pool | one pool per session |")
    print("|---|---:|---:|")
    for k in KEYS:
        med = {m: float(np.median([x[k] for x in v])) for m, v in runs.items()}
        print(f"| `{k}` | {med['shared']:.3f} | {med['session']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
