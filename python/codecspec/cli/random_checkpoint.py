"""`codecspec random-checkpoint`: a random-weight Qwen3-TTS folder of the real shapes."""

from __future__ import annotations

import argparse
import json
import time


def cmd_random_checkpoint(args) -> int:
    from codecspec.families.qwen3_tts.random_checkpoint import write_random_checkpoint

    t0 = time.monotonic()
    info = write_random_checkpoint(
        args.shape,
        args.out,
        seed=args.seed,
        model_type=args.model_type,
        force=args.force,
        progress=not args.json,
    )
    info["seconds"] = round(time.monotonic() - t0, 1)
    if args.json:
        print(json.dumps(info))
        return 0
    gb = (info["model_bytes"] + info["speech_tokenizer_bytes"]) / 1e9
    print(
        f"wrote {info['out']}: random-weight Qwen3-TTS {info['shape']} {info['model_type']}, "
        f"{info['parameters']:,} talker+predictor parameters, {gb:.3f} GB, "
        f"{len(info['files'])} files ({info['seconds']}s). For speed measurements only: "
        "it speaks noise."
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "random-checkpoint",
        help="write a random-weight Qwen3-TTS folder of the real shapes (speed measurements)",
    )
    p.add_argument("shape", choices=["qwen3-0.6b", "qwen3-1.7b", "tiny"])
    p.add_argument("out", help="output folder (must be absent or empty unless --force)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-type", default="custom_voice", choices=["custom_voice", "voice_design"])
    p.add_argument(
        "--force", action="store_true", help="replace an OUT that holds an earlier Qwen3-TTS folder"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_random_checkpoint)
