"""Served Qwen3-TTS streams with the talker steps batched (one graph call for every stream's
step, families/qwen3_tts/talker_rows.py) against the per-stream talker, in the same engine
and the same run: aggregate real time and per-stream RTF / time to first frame at n
concurrent streams (serve.bench.engine_scaling; codes only, no speech decoder), the two
talkers alternating per n so that a background load hits both alike. Prints the CPU and its
vector flags with the figures.

    python bench/qwen3_talker_rows.py --model ~/.cache/codecspec/qwen3/q06 --weights int4 \
        [--streams 1,2,4,8,16] [--threads 2] [--max-frames 60] [--mode ar]

With --audio the streams' audio is made too (the 12 Hz speech decoder, each stream's chunks
fed as the app feeds them, one consumer thread per stream), and the two sides are the
speech decoder per stream against the streams' chunks decoded together
(families/qwen3_tts/decoder_batch.py), the talker batched in both; TTFA is then the first
audio chunk. --decoder-only times the decoder stage alone: n streams' chunks of
--chunk-frames frames fed one stream after another against one batched `feed_many`.
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


def decoder_only(args, ns, repeats: int = 7) -> list:
    """The speech decoder alone: n streams' next chunks (random codes) fed one after another
    against one `feed_many`, interleaved, medians and minima over `repeats`."""
    import time
    from pathlib import Path

    import numpy as np

    from codecspec.families.qwen3_tts.decoder import SpeechDecoder
    from codecspec.families.qwen3_tts.decoder_batch import BatchedDecoder

    folder = Path(args.model) / "speech_tokenizer"
    dec = SpeechDecoder.load(folder, args.cache_dir, threads=args.threads)
    batched = BatchedDecoder.load(dec)
    rng = np.random.default_rng(0)
    out = []
    for b in ns:
        lone = [dec.open_stream() for _ in range(b)]
        together = [dec.open_stream() for _ in range(b)]
        alone_s, batched_s = [], []
        for r in range(repeats + 1):  # the first round warms both
            shape = (args.chunk_frames, dec.num_quantizers)
            codes = [rng.integers(0, dec.codebook_size, shape) for _ in lone]
            t0 = time.perf_counter()
            for s, c in zip(lone, codes):
                s.feed(c)
            t1 = time.perf_counter()
            batched.feed_many(together, codes)
            if r:
                alone_s.append(t1 - t0)
                batched_s.append(time.perf_counter() - t1)
        row = {"n": b, "chunk_frames": args.chunk_frames}
        for k, v in (("per_stream", alone_s), ("batched", batched_s)):
            row[f"{k}_ms"] = round(1e3 * float(np.median(v)), 1)
            row[f"{k}_min_ms"] = round(1e3 * float(np.min(v)), 1)
        print(f"decoder stage n={b}: {row}", flush=True)
        out.append(row)
    return out


def consume(engine, handle) -> tuple:
    """(audio samples, first audio time, last audio time) of a served stream whose chunks
    are fed to its decoder as the app feeds them."""
    import time

    import numpy as np

    from codecspec.serve.app import chunk_frames

    dec = engine.family.chunk_decoder(0, 0)
    frames, sent, samples, first = [], 0, 0, None
    try:
        for f in handle:
            frames.append(f)
            if len(frames) - sent >= chunk_frames(sent, engine.family.first_chunk_frames):
                samples += len(dec.feed(np.stack(frames[sent:])))
                sent, first = len(frames), first or time.perf_counter()
        if len(frames) > sent:
            samples += len(dec.feed(np.stack(frames[sent:])))
        return samples, first or time.perf_counter(), time.perf_counter()
    finally:
        getattr(dec, "close", lambda: None)()


def audio_scaling(engine, n: int, mode: str, seed: int) -> dict:
    """`engine_scaling`'s figures with each stream's audio made by a consumer thread."""
    import threading
    import time

    from codecspec.serve.bench import TEXTS, summarize
    from codecspec.serve.engine import SpeechRequest

    reqs = [SpeechRequest(TEXTS[i % len(TEXTS)], mode=mode, seed=seed + i) for i in range(n)]
    t0 = time.perf_counter()
    handles = engine.submit_many(reqs)
    got: list = [None] * n

    def run(k: int) -> None:
        got[k] = consume(engine, handles[k])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = engine.family.sample_rate
    row = summarize(
        n,
        [g[0] / rate for g in got],
        [g[2] - h.submitted for g, h in zip(got, handles)],
        [g[1] - h.submitted for g, h in zip(got, handles)],
        max(g[2] for g in got) - t0,
    )
    row.update(mode=mode, frames=sum(h.count for h in handles))
    print(
        f"n={n}: aggregate {row['aggregate_realtime']:.2f}x real time, per-stream RTF p50 "
        f"{row['per_stream_rtf_p50']:.2f}, TTFA p50 {row['ttfa_ms_p50']:.0f} ms",
        flush=True,
    )
    return row


def with_audio(engine, ns, args) -> list:
    """Per n: the speech decoder per stream, then batched (the talker batched in both)."""
    # off by default; float32 only (an int8 decoder's streams are timed per stream)
    int8 = args.decoder_precision == "int8"
    batcher = None if int8 else engine.family.batch_decoder()
    print(f"batched decoder: {'yes' if batcher is not None else 'no (one slot, or no cache)'}")
    print("warm-up:", end=" ", flush=True)
    audio_scaling(engine, 1, args.mode, seed=0)  # the decoder's first calls
    rows = []
    try:
        for n in ns:
            for label, b in (("per-stream", None), ("batched", batcher)):
                if label == "batched" and b is None:
                    continue
                engine.family.decoder_batch = b
                print(f"{args.weights} decoder {label}:", end=" ", flush=True)
                r = audio_scaling(engine, n, args.mode, seed=n)
                r.update(decoder=label, weights=args.weights, threads=args.threads)
                r.update(decoder_precision=args.decoder_precision or "fp32")
                rows.append(r)
    finally:
        engine.family.decoder_batch = None
    return rows


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
    ap.add_argument("--audio", action="store_true", help="with audio: decoder per stream/batched")
    ap.add_argument("--decoder-only", action="store_true", help="the speech decoder alone")
    ap.add_argument("--chunk-frames", type=int, default=10, help="--decoder-only's chunk")
    ap.add_argument("--decoder-precision", default=None, choices=("fp32", "int8"))
    args = ap.parse_args()
    ns = [int(x) for x in args.streams.split(",")]
    print(json.dumps({"cpu": cpu(), "onnxruntime": ort.__version__}), flush=True)
    if args.decoder_only:
        print(json.dumps({"decoder": decoder_only(args, ns)}))
        return
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
        decoder_precision=args.decoder_precision,
    )
    if args.audio:
        try:
            print(json.dumps({"rows": with_audio(engine, ns, args)}))
        finally:
            engine.shutdown()
        return
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
