"""Qwen3-TTS 12 Hz speech decoder at full size: graph build time, cached start, ms per second
of audio (whole decode and streamed), weight bytes. Random weights (numpy, seeded) written as a
speech_tokenizer folder with the official tensor names; no torch, no download.

    nice -n 10 python bench/qwen3_decoder_bench.py [--shape published|class-defaults]
        [--frames 25] [--threads 2] [--chunk-frames 4] [--json OUT]

Shapes: `published` is the decoder_config of the released Qwen3-TTS-Tokenizer-12Hz as several
public copies of its config.json give it (hidden 512, head_dim 64, intermediate 1024,
codebook_dim 512); `class-defaults` is Qwen3TTSTokenizerV2DecoderConfig's defaults (hidden
1024, intermediate 3072) with codebook_dim 512. Both: 16 quantizers x 2048, latent 1024,
8 layers, window 72, 16 heads, decoder_dim 1536, rates (8, 5, 4, 3) x (2, 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from codecspec.families.qwen3_tts.decoder import SpeechDecoder  # noqa: E402
from codecspec.families.qwen3_tts.decoder_graph import (  # noqa: E402
    PUBLISHED_DECODER_CONFIG,
    write_random_speech_tokenizer,
)

SHAPES = {
    "published": PUBLISHED_DECODER_CONFIG,
    "class-defaults": {
        **{k: v for k, v in PUBLISHED_DECODER_CONFIG.items() if k != "head_dim"},
        "hidden_size": 1024,
        "intermediate_size": 3072,
    },
}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def cpu_timed(fn):
    """(wall s, process CPU s): on a shared machine the CPU time is the steadier figure."""
    c, t = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="published")
    ap.add_argument("--frames", type=int, default=25, help="frames per measured decode")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk-frames", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="qwen3-dec-bench-") as tmp:
        folder, cache = Path(tmp) / "speech_tokenizer", Path(tmp) / "cache"
        weight_bytes = write_random_speech_tokenizer(folder, SHAPES[args.shape])
        dec, cold_s = timed(lambda: SpeechDecoder.load(folder, cache, threads=args.threads))
        graph_bytes = os.path.getsize(dec.graph_path)
        del dec
        dec, warm_s = timed(lambda: SpeechDecoder.load(folder, cache, threads=args.threads))
        rng = np.random.default_rng(1)
        codes = rng.integers(0, dec.codebook_size, (args.frames, dec.num_quantizers))
        audio_s = args.frames * dec.samples_per_frame / dec.sample_rate
        dec.decode(codes[:2])  # warm-up
        whole = [cpu_timed(lambda: dec.decode(codes)) for _ in range(args.repeats)]

        def streamed():
            t0 = time.perf_counter()
            first = None
            for _ in dec.stream(iter(codes[i : i + 1] for i in range(len(codes))),
                                chunk_frames=args.chunk_frames):  # fmt: skip
                first = first if first is not None else time.perf_counter() - t0
            return first

        runs = [timed(streamed) for _ in range(args.repeats)]
        stream_s = min(r[1] for r in runs)
        first_chunk_s = min(r[0] for r in runs)

    fig = {
        "shape": args.shape,
        "threads": args.threads,
        "weight_bytes": weight_bytes,
        "graph_bytes": graph_bytes,
        "first_load_s (hash + build + write + session)": round(cold_s, 2),
        "cached_load_s (hash + session)": round(warm_s, 2),
        "frames": args.frames,
        "decode_ms_per_audio_s": round(1000 * min(w for w, _ in whole) / audio_s, 1),
        "decode_cpu_ms_per_audio_s": round(1000 * min(c for _, c in whole) / audio_s, 1),
        "stream_ms_per_audio_s": round(1000 * stream_s / audio_s, 1),
        "stream_chunk_frames": args.chunk_frames,
        "stream_first_chunk_ms": round(1000 * first_chunk_s, 1),
    }
    fig["load_average_1min"] = round(os.getloadavg()[0], 1)
    print(json.dumps(fig, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
