"""A Qwen3-TTS folder in the serving engine vs its single-stream loop: frames per second of n
concurrent served streams (one engine, `submit_many`) against the same n utterances made one
after another by `Qwen3TTS.generate_codes`, medians over --repeats. The served streams run
one frame loop each (not batched), so this measures what the engine adds or saves around
that loop; it also times `Qwen3TTS.replica()` (a slot's runtime over the shared graphs).

    python bench/qwen3_serve_streams.py --model tests/data/qwen3_tiny/custom_equal \
        [--streams 1,2,4,8] [--repeats 3] [--speaker aiden] [--language english]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np

from codecspec.families.qwen3_tts.pipeline import Qwen3TTS
from codecspec.serve.engine import Engine, SpeechRequest

TEXT = "Hello world. This is a test."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a Qwen3-TTS checkpoint folder")
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--speaker", default=None)
    ap.add_argument("--language", default="english")
    ap.add_argument("--max-frames", type=int, default=480)
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()
    counts = [int(x) for x in args.streams.split(",")]
    cache = args.cache_dir or tempfile.mkdtemp(prefix="qwen3-serve-bench-")
    engine = Engine(
        args.model,
        max_streams=max(counts),
        threads=1,
        cache_dir=cache,
        max_frames=args.max_frames,
    )
    single = Qwen3TTS.load(args.model, cache_dir=cache, threads=1)
    t = time.perf_counter()
    single.replica()
    rows = {"replica_ms": round(1e3 * (time.perf_counter() - t), 2), "streams": []}
    try:
        for n in counts:
            rows["streams"].append(_row(engine, single, n, args))
    finally:
        engine.shutdown()
    print(json.dumps(rows))


def _row(engine, single, n, args) -> dict:
    reqs = [
        SpeechRequest(TEXT, voice=args.speaker, language=args.language, seed=k, temperature=0)
        for k in range(n)
    ]
    served, alone, frames = [], [], 0
    for _ in range(args.repeats):
        t = time.perf_counter()
        frames = sum(len(list(h)) for h in engine.submit_many(reqs))
        served.append(frames / (time.perf_counter() - t))
        t = time.perf_counter()
        for k in range(n):
            single.generate_codes(
                TEXT,
                speaker=args.speaker,
                language=args.language,
                seed=k,
                temperature=0,
                max_frames=min(args.max_frames, single.ck.generation.max_new_tokens - 1),
            )
        alone.append(frames / (time.perf_counter() - t))
    return {
        "streams": n,
        "frames": frames,
        "served_frames_per_s": round(float(np.median(served)), 1),
        "sequential_frames_per_s": round(float(np.median(alone)), 1),
    }


if __name__ == "__main__":
    main()
