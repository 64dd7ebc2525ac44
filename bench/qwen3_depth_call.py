"""Where a Qwen3-TTS code-predictor call's time goes, per weight precision, on this CPU.

For each precision: the AR call (one position) and a chain-3 tree call (four positions with
their draft heads) of the built depth graph timed alone, interleaved, medians (q_N / q_1 is
what speculation must beat); the same AR call inside the real pipeline (`iter_frames`,
greedy, the talker between frames), per call index within a frame; and, with --profile,
onnxruntime's per-operator time of the AR call. The bound beside each figure is the call's
weight bytes ÷ the streaming bandwidth measured in the same run. Prints the CPU's SIMD flags.

    codecspec random-checkpoint qwen3-0.6b /tmp/q06
    python bench/qwen3_depth_call.py --model /tmp/q06 [--weights fp32,int8,int4] [--profile]
"""

from __future__ import annotations

import argparse
import collections
import json
import time

import numpy as np

import codecspec as cs
from codecspec.graphs.row_probe import cpu_simd_flags
from codecspec.perf import stream_bandwidth

TEXT = "The quick brown fox jumps over the lazy dog."


def alone(dec, calls: int) -> dict:
    """Median ms of the AR step call and the chain-3 tree call, interleaved."""
    dec.set_tree(cs.DraftTree.chain(3))
    step, tree = dec._step_call, dec._tree_call
    step.heads[0] = 1
    tree.heads[: tree.q] = np.arange(1, tree.q + 1)
    times = collections.defaultdict(list)
    for i in range(calls + 5):
        for name, call in (("ar", step), ("tree", tree)):
            t0 = time.perf_counter()
            call.run()
            if i >= 5:
                times[name].append(1e3 * (time.perf_counter() - t0))
    ar, tr = float(np.median(times["ar"])), float(np.median(times["tree"]))
    return {"ar_ms": ar, "tree_ms": tr, "tree_q": tree.q, "q_ratio": tr / ar}


def in_pipeline(tts, frames: int) -> dict:
    """Median ms per AR call inside the pipeline, overall and per call index of a frame."""
    dec, times = tts.depth, []
    run = dec._run

    def timed(call):
        t0 = time.perf_counter()
        run(call)
        times.append(1e3 * (time.perf_counter() - t0))

    dec._run = timed
    try:
        for _ in range(2):  # the first utterance warms up
            times.clear()
            for _ in tts.iter_frames(
                TEXT, speaker=tts.speakers[0], temperature=0, max_frames=frames, seed=0
            ):
                pass
    finally:
        dec._run = run
    per = np.asarray(times).reshape(-1, dec.G - 1)
    return {"ms": float(np.median(per)), "per_index": np.median(per, 0).round(2).tolist()}


def profile(dec, calls: int) -> dict:
    """onnxruntime's per-operator µs per AR call (a session of its own, profiling on)."""
    import onnxruntime as ort

    from codecspec.runtime import custom_ops
    from codecspec.runtime.session import session_options

    so = session_options()
    custom_ops.register(so)  # the built graph's attention is codecspec's own operator
    so.enable_profiling = True
    so.profile_file_prefix = "/tmp/codecspec_depth_call"
    sess = ort.InferenceSession(str(dec.graph.path), so, providers=["CPUExecutionProvider"])
    saved = dec.graph.session
    dec.graph.session = sess
    try:
        dec._bind_fixed_calls()
        for _ in range(calls):
            dec._step_call.run()
    finally:
        dec.graph.session = saved
        dec._bind_fixed_calls()
    events = json.load(open(sess.end_profiling()))
    ops: dict = collections.defaultdict(float)
    run_us = 0.0
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            ops[e["args"]["op_name"]] += e["dur"] / calls
        elif e.get("cat") == "Session" and e["name"] == "model_run":
            run_us += e["dur"] / calls
    top = dict(sorted(ops.items(), key=lambda kv: -kv[1])[:8])
    return {"run_us": run_us, "kernels_us": sum(ops.values()), "top_ops_us": top}


def main() -> None:
    from codecspec.families.qwen3_tts.bench import depth_bytes
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--weights", default="fp32,int8,int4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    out = {"cpu_simd": cpu_simd_flags(), "threads": args.threads, "weights": {}}
    for w in args.weights.split(","):
        tts = Qwen3TTS.load(args.model, threads=args.threads, weights=w)
        bw = stream_bandwidth(threads=args.threads)
        row = {"bandwidth_gbps": bw / 1e9}
        row.update(in_pipeline=in_pipeline(tts, args.frames), alone=alone(tts.depth, args.calls))
        sizes = depth_bytes(tts)  # an AR call reads the transformer and one of the 15 heads
        call_bytes = sizes["transformer"] + sizes["head"]
        row["ar_call_mb"] = call_bytes / 1e6
        row["ar_bound_ms"] = 1e3 * call_bytes / bw
        if args.profile:
            row["profile"] = profile(tts.depth, args.calls)
        out["weights"][w] = row
        a, p = row["alone"], row["in_pipeline"]
        print(
            f"{w}: AR call {a['ar_ms']:.2f} ms alone, {p['ms']:.2f} ms in the pipeline "
            f"(bound {row['ar_bound_ms']:.2f} ms = {row['ar_call_mb']:.1f} MB at "
            f"{bw / 1e9:.1f} GB/s); tree call (q={a['tree_q']}) {a['tree_ms']:.2f} ms = "
            f"{a['q_ratio']:.2f}x an AR call"
        )
        print(f"    in the pipeline, per call index: {p['per_index']}")
        if args.profile:
            pr = row["profile"]
            print(
                f"    profile: run {pr['run_us']:.0f} us, kernels {pr['kernels_us']:.0f} us; "
                + ", ".join(f"{k} {v:.0f}" for k, v in pr["top_ops_us"].items())
            )
        del tts
    print("CPU:", " ".join(out["cpu_simd"]), f"· {args.threads} threads")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
