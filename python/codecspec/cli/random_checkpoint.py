"""`codecspec random-checkpoint`: a random-weight Qwen3-TTS folder of the real shapes."""

from __future__ import annotations

import argparse


def cmd_random_checkpoint(args) -> int:
    """The Qwen3-TTS family writes it (the registry's "random_checkpoint" hook): shared CLI
    code names no family module."""
    from codecspec.pipeline import registry

    return registry.by_name("qwen3-tts").hook("random_checkpoint")(args)


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
