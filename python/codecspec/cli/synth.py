"""`codecspec synth`: its options (a family's own: the registry's `cli_options`); the
command itself is `codecspec.tts.commands.cmd_synth` (a Qwen3-TTS folder's: the family's
"synth" hook)."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecspec.cli import options


def chunk_frames_arg(value: str) -> int:
    """argparse type of --chunk-frames: an integer >= 1 (frames per streamed chunk)."""
    return options.threads_arg(value)


def _input_and_output(p: argparse.ArgumentParser) -> None:
    options.text_input(p)
    p.add_argument(
        "--text-stdin",
        action="store_true",
        help="read the text from standard input, verbatim; with --stream and a Qwen3-TTS "
        "folder as it arrives (an LLM's output piped in): speech starts after the first "
        "words, and the codes are the whole text's in the streaming-text layout",
    )
    p.add_argument("--phonemes", default=None, help="espeak-ng IPA instead of text")
    p.add_argument(
        "--max-frames",
        type=int,
        default=None,
        help="longest utterance in frames (default 1000; fsq: 2x the text's length)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--stream",
        action="store_true",
        help="write the WAV chunk by chunk as frames are made, print time to first audio; "
        "--text-file is spoken sentence by sentence; Qwen3-TTS with --text-stdin: the text "
        "is read as it arrives",
    )
    p.add_argument(
        "--chunk-frames",
        type=chunk_frames_arg,
        default=8,
        help="--stream: frames per audio chunk (default 8 = 0.64 s)",
    )
    p.add_argument("-o", "--output", type=Path, default=None, help="WAV (default out.wav)")
    p.add_argument(
        "--codes-out",
        type=Path,
        default=None,
        help="also write the codes (int64 .npy [frames, codebooks]); with a Qwen3-TTS "
        "folder and no -o, only the codes",
    )


def _voice_and_decoding(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mode",
        choices=["auto", "ar", "spec", "pcg"],
        default="auto",
        help="depth loop: auto (default) = spec where calibration found it pays, else ar "
        "(same output law); pcg = group-level acceptance (v2)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--language",
        default=None,
        help="en, de, es or it (default en); Qwen3-TTS: a language its config names, e.g. "
        "english (default auto)",
    )
    p.add_argument(
        "--speaker",
        default=None,
        help="espeak-ng voice variant, e.g. f3 or m1; Qwen3-TTS CustomVoice: a speaker name",
    )
    p.add_argument("--rate", type=float, default=1.0, help="speaking rate (default 1.0)")


def register(sub: argparse._SubParsersAction) -> None:
    from codecspec.tts.commands import cmd_synth

    p = sub.add_parser(
        "synth", help="text to speech with a shipped model or a Qwen3-TTS checkpoint folder"
    )
    _input_and_output(p)
    options.cache_dir(p)
    _voice_and_decoding(p)
    options.weights(p)
    options.provider(p)
    options.threads(p, help=options.CORES)
    p.add_argument("--model", default=None, help=options.MODEL_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    options.sampling(p)
    options.family_options("synth", p)
    p.set_defaults(func=cmd_synth)
