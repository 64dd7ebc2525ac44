"""Build-time and speed figures of the Qwen3-TTS path on a 0.6B-shaped checkpoint folder.

No real checkpoint could be downloaded here, so this writes a random-weight folder of the real
0.6B CustomVoice shapes with `codecspec random-checkpoint qwen3-0.6b`
(`codecspec.families.qwen3_tts.random_checkpoint`: official tensor names, bf16 talker 28 x 1024
with GQA 16/8 x 128, text table 151936 x 2048, code predictor 5 x 1024, a text tokenizer of the
real vocabulary size, the released speech decoder's shape) and measures: first load (graph
build), cached load, prefill, and ms per frame of talker + depth loop (AR and speculative).
Random weights never say eos, so frames run to --frames.

    python bench/qwen3_synthetic_06b.py [--dir /tmp/qwen3_06b] [--frames 24] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path


def write_checkpoint(d: Path, seed: int = 0) -> None:
    from codecspec.families.qwen3_tts.random_checkpoint import write_random_checkpoint

    write_random_checkpoint("qwen3-0.6b", d, seed=seed, progress=True)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="qwen3_06b_"))
    ck_dir, cache = root / "ckpt", root / "cache"
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    t0 = time.perf_counter()
    if not (ck_dir / "config.json").is_file():
        write_checkpoint(ck_dir)
    res = {"write_checkpoint_s": time.perf_counter() - t0}
    t0, c0 = time.perf_counter(), time.process_time()
    Qwen3TTS.load(ck_dir, cache_dir=cache, provider="cpu")
    res["first_load_s"] = time.perf_counter() - t0  # the build, unless --dir has a cache
    res["first_load_cpu_s"] = time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    tts = Qwen3TTS.load(ck_dir, cache_dir=cache, provider="cpu")
    res["cached_load_s"] = time.perf_counter() - t0
    # CPU seconds (all threads): what the wall figure would be on an idle machine, roughly
    res["cached_load_cpu_s"] = time.process_time() - c0
    text = "The quick brown fox jumps over the lazy dog."
    for mode in ("ar", "spec"):
        c0 = time.process_time()
        r = tts.generate_codes(
            text, speaker="aiden", language="english", mode=mode, max_frames=args.frames
        )
        s = r.seconds
        res[mode] = {
            "frames": r.frames,
            "prompt_positions": len(r.prompt),
            "prefill_ms": 1e3 * s["prefill"],
            "talker_ms_per_frame": 1e3 * s["talker"] / max(r.frames, 1),
            "depth_ms_per_frame": 1e3 * s["depth"] / max(r.frames, 1),
            "cpu_ms_per_frame": 1e3 * (time.process_time() - c0) / max(r.frames, 1),
        }
    print(json.dumps(res, indent=2))
    if not args.keep and args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return res


if __name__ == "__main__":
    main()
