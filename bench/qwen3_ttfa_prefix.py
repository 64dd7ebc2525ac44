"""What the talker's prompt-prefix cache does to the time to first audio on this CPU.

A streamed request of a Qwen3-TTS folder (the bench's first calibration text, its default
voice, greedy), timed to its first audio chunk three ways, interleaved over rounds: the whole
prompt as one prefill call (as before the cache), the prompt's fixed rows as their own call
with their K/V already cached (a repeated voice), and the same with the cache emptied before
the run (a voice's first request). Prints the medians (the first round is a warm-up) and the
CPU's flags.

    python bench/qwen3_ttfa_prefix.py --model /tmp/q06 --weights fp32 [--rounds 6]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from codecspec.graphs.row_probe import cpu_simd_flags

WAYS = ("one call", "cached prefix", "cold prefix")


def first_audio(tts, way: str, seed: int, kw: dict) -> float:
    from codecspec.families.qwen3_tts import talker as T
    from codecspec.families.qwen3_tts.corpus import CALIBRATION_TEXTS

    split = T.Talker.prefill
    if way == "one call":  # the prefill before the cache: every row in one call

        def one_call(self, embeds, capacity, fixed=0):
            return split(self, embeds, capacity, 0)

        T.Talker.prefill = one_call
    if way == "cold prefix":
        tts.talker.prefixes = T.PrefixCache()
    try:
        t0 = time.perf_counter()
        chunks = tts.stream(CALIBRATION_TEXTS[0][0], seed=seed, temperature=0, max_frames=8, **kw)
        next(chunks)
        seconds = time.perf_counter() - t0
        chunks.close()
    finally:
        T.Talker.prefill = split
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a Qwen3-TTS checkpoint folder")
    ap.add_argument("--weights", default="fp32", choices=("fp32", "int8", "int4"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    from codecspec.families.qwen3_tts.corpus import CALIBRATION_TEXTS, corpus_request
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    tts = Qwen3TTS.load(args.model, threads=args.threads, weights=args.weights)
    tts.speech_decoder()
    text, lang = CALIBRATION_TEXTS[0]
    kw = corpus_request(tts, text, lang, 0, None)
    times: dict = {w: [] for w in WAYS}
    for r in range(args.rounds):
        for way in WAYS:
            times[way].append(first_audio(tts, way, r, kw))
    print(f"{args.weights}, {args.threads} threads, CPU flags: {' '.join(cpu_simd_flags())}")
    for way in WAYS:
        runs = " ".join(f"{t:.2f}" for t in times[way])
        print(f"  {way:14s} median {np.median(times[way][1:]):.3f} s   runs: {runs}")


if __name__ == "__main__":
    main()
