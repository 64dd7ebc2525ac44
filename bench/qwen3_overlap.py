"""What running the 12 Hz speech decoder beside the talker and code predictor buys on this CPU.

One streamed utterance of a Qwen3-TTS folder, greedy, a fixed number of frames, chunks of 1,
2, 4, 4, ... frames as `Qwen3TTS.stream` makes them, two ways, interleaved over rounds:
sequential (each chunk decoded in the loop, as `stream` does) and overlapped (a worker
thread decodes chunk t while the loop makes the frames of chunk t+1; onnxruntime releases
the GIL, and every session shares the process's thread pool). Prints the median wall time
of the whole utterance and the time to the first audio of each, and the CPU's flags.

    python bench/qwen3_overlap.py --model /tmp/q06 --weights int8 [--frames 40 --rounds 3]
"""

from __future__ import annotations

import argparse
import queue
import threading
import time

import numpy as np

from codecspec.graphs.row_probe import cpu_simd_flags

TEXT = "The quick brown fox jumps over the lazy dog."


def _chunks(frames):
    """Blocks of codes of 1, 2, 4, 4, ... frames, as the streamed chunks."""
    from codecspec.families.qwen3_tts.decoder import chunk_sizes
    from codecspec.families.qwen3_tts.pipeline import STREAM_CHUNK_FRAMES

    sizes, pending = chunk_sizes(1, STREAM_CHUNK_FRAMES), []
    want = next(sizes)
    for f in frames:
        pending.append(f)
        if len(pending) == want:
            yield np.stack(pending)
            pending, want = [], next(sizes)
    if pending:
        yield np.stack(pending)


def sequential(tts, kw) -> tuple:
    t0, first = time.perf_counter(), None
    stream = tts.speech_decoder().open_stream()
    for block in _chunks(tts.iter_frames(TEXT, **kw)):
        stream.feed(block)
        first = first or time.perf_counter() - t0
    return time.perf_counter() - t0, first


def overlapped(tts, kw) -> tuple:
    t0, blocks, firsts = time.perf_counter(), queue.Queue(), []
    stream = tts.speech_decoder().open_stream()

    def decode():
        while (block := blocks.get()) is not None:
            stream.feed(block)
            firsts.append(time.perf_counter() - t0)

    worker = threading.Thread(target=decode)
    worker.start()
    try:
        for block in _chunks(tts.iter_frames(TEXT, **kw)):
            blocks.put(block)
    finally:
        blocks.put(None)
        worker.join()
    return time.perf_counter() - t0, firsts[0]


def main() -> None:
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--weights", default="int8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tts = Qwen3TTS.load(args.model, threads=args.threads, weights=args.weights)
    kw = dict(speaker=tts.speakers[0], temperature=0, max_frames=args.frames, seed=0)
    ways = {"sequential": sequential, "overlapped": overlapped}
    times: dict = {name: [] for name in ways}
    for r in range(args.rounds + 1):
        for name, way in ways.items():
            t = way(tts, kw)
            if r:  # round 0 warms up
                times[name].append(t)
    for name, t in times.items():
        a = np.asarray(t)
        print(
            f"{name:>10}: whole {np.median(a[:, 0]):.2f} s for {args.frames} frames, "
            f"first audio {np.median(a[:, 1]):.2f} s"
        )
    ratio = np.median(np.asarray(times["sequential"])[:, 0]) / np.median(
        np.asarray(times["overlapped"])[:, 0]
    )
    print(f"overlap buys {ratio:.2f}x · weights {args.weights} · {args.threads} threads")
    print("CPU:", " ".join(cpu_simd_flags()))


if __name__ == "__main__":
    main()
