"""Served Qwen3-TTS streams with the talker steps batched (one graph call for every stream's
step, families/qwen3_tts/talker_rows.py) against the per-stream talker, in the same engine
and the same run: aggregate real time and per-stream RTF / time to first frame at n
concurrent streams (serve.bench.engine_scaling; codes only, no speech decoder), the two
talkers alternating per n so that a background load hits both alike. Prints the CPU and its
vector flags with the figures.

    python bench/qwen3_talker_rows.py --model ~/.cache/codecspec/qwen3/q06 --weights int4 \
        [--streams 1,2,4,8,16] [--threads 2] [--max-frames 60] [--mode ar]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re

import onnxruntime as ort

from codecspec.serve.bench import engine_scaling
from codecspec.serve.engine import Engine


def cpu() -> dict:
    """The CPU's name and the vector flags the kernels choose by (Linux /proc/cpuinfo)."""
    info = {"machine": platform.machine(), "cores": os.cpu_count(), "load": os.getloadavg()}
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return info
    name = re.search(r"model name\s*:\s*(.*)", text)
    flags = re.search(r"flags\s*:\s*(.*)", text)
    info["model"] = name.group(1) if name else "?"
    wanted = ("avx2", "fma", "avx512", "amx", "vnni")
    info["flags"] = sorted(
        {f for f in (flags.group(1).split() if flags else []) if f.startswith(wanted)}
    )
    return info


def talker_only(tts, ns, threads: int, repeats: int = 7) -> list:
    """The talker stage alone: B talkers (prompts of 20..40 rows) stepped one call each
    against one batched call, interleaved, medians and minima over `repeats` (a noisy
    machine moves both alike)."""
    import time

    import numpy as np

    from codecspec.families.qwen3_tts.engine import talker_rows
    from codecspec.families.qwen3_tts.talker import Talker

    graph, head = tts.talker.graph, tts.talker.head
    rng = np.random.default_rng(0)
    H, out = graph.config.hidden_size, []
    for b in ns:
        if b < 2:
            continue
        slots = talker_rows(tts.talker, b, "cpu", threads)
        talkers = [Talker(graph, head) for _ in range(b)]
        for k, t in enumerate(talkers):
            slots.attach(t, k)
            t.prefill(rng.standard_normal((20 + 20 * k // b, H), np.float32) * 0.05, 512)
        alone, together = [], []
        for _ in range(repeats):
            rows = rng.standard_normal((b, H), np.float32) * 0.05
            t0 = time.perf_counter()
            for t, r in zip(talkers, rows):
                t.step(r)
            t1 = time.perf_counter()
            slots.step(talkers, rows)
            together.append(time.perf_counter() - t1)
            alone.append(t1 - t0)
        row = {
            "n": b,
            "per_stream_ms": round(1e3 * float(np.median(alone)), 1),
            "batched_ms": round(1e3 * float(np.median(together)), 1),
            "per_stream_min_ms": round(1e3 * float(np.min(alone)), 1),
            "batched_min_ms": round(1e3 * float(np.min(together)), 1),
        }
        print(f"talker stage n={b}: {row}", flush=True)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a Qwen3-TTS checkpoint folder")
    ap.add_argument("--weights", default="int4", choices=("fp32", "int8", "int4"))
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-frames", type=int, default=60)
    ap.add_argument("--mode", default="ar", choices=("ar", "spec"))
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--talker-only", action="store_true", help="the talker stage alone")
    args = ap.parse_args()
    ns = [int(x) for x in args.streams.split(",")]
    print(json.dumps({"cpu": cpu(), "onnxruntime": ort.__version__}), flush=True)
    if args.talker_only:
        from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

        tts = Qwen3TTS.load(args.model, args.cache_dir, "cpu", args.threads, weights=args.weights)
        print(json.dumps({"talker": talker_only(tts, ns, args.threads)}))
        return
    engine = Engine(
        args.model,
        max_streams=max(ns),
        threads=args.threads,
        weights=args.weights,
        max_frames=args.max_frames,
        cache_dir=args.cache_dir,
    )
    batched = engine.family.talker_rows
    print(f"batched talker: {'yes' if batched is not None else 'no (rows differ here)'}")
    rows = []
    try:
        for n in ns:
            for label, rows_step in (("per-stream", None), ("batched", batched)):
                if label == "batched" and batched is None:
                    continue
                engine.family.talker_rows = rows_step  # the slots' caches stay where they are
                print(f"{args.weights} {label}:", end=" ", flush=True)
                (r,) = engine_scaling(engine, [n], args.mode, seed=n)
                r.update(talker=label, weights=args.weights, threads=args.threads)
                rows.append(r)
    finally:
        engine.family.talker_rows = batched
        engine.shutdown()
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
