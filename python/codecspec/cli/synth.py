"""`codecspec synth`: its options; the command itself is `codecspec.tts.commands.cmd_synth`
(a Qwen3-TTS folder's: the family's "synth" hook)."""

from __future__ import annotations

import argparse
from pathlib import Path

from codecspec.cli import options


def chunk_frames_arg(value: str) -> int:
    """argparse type of --chunk-frames: an integer >= 1 (frames per streamed chunk)."""
    return options.threads_arg(value)


def speculation(p: argparse.ArgumentParser) -> None:
    """The v2 family's speculation options (synth and bench)."""
    p.add_argument(
        "--loops",
        choices=["depth", "temporal", "both"],
        default=None,
        help="v2: which loops speculate (default: the depth loop by calibration, temporal AR)",
    )
    p.add_argument(
        "--accept",
        choices=["exact", "ssd", "pcg"],
        default="exact",
        help="v2: acceptance rule (exact = the AR law; ssd = lossy tolerance; pcg = group law)",
    )
    p.add_argument("--beta", type=float, default=0.3, help="ssd tolerance in [0, 1]")
    p.add_argument("--theta", type=float, default=None, help="pcg group cosine in (-1, 1]")
    p.add_argument("--draft-len", type=int, default=3, help="v2: c0 drafts per temporal round")


def depth(p: argparse.ArgumentParser) -> None:
    """--depth: which of a v2 folder's depth decoders runs (synth and bench)."""
    p.add_argument(
        "--depth",
        choices=["positional", "shared"],
        default=None,
        help="v2: which depth decoder of the folder runs (default positional; shared = "
        "depth_shared.npz, one set of weights for every level)",
    )


def _input_and_output(p: argparse.ArgumentParser) -> None:
    options.text_input(p)
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
        "--text-file is spoken sentence by sentence",
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


def _qwen3_voice(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--instruct", default=None, help="Qwen3-TTS: voice/style instruction (VoiceDesign, 1.7B)"
    )
    p.add_argument(
        "--ref-audio",
        default=None,
        help="Qwen3-TTS Base: a clip of the voice to clone (WAV, FLAC, MP3, ...; any rate and "
        "channel count); x-vector-only mode unless --ref-text is given",
    )
    p.add_argument(
        "--ref-text",
        default=None,
        help="Qwen3-TTS Base: what --ref-audio says; clones in context (the clip's speech codes "
        "and transcript in the prompt), as the official generate_voice_clone does by default",
    )
    p.add_argument(
        "--streaming-text",
        action="store_true",
        help="Qwen3-TTS: the official streaming-text prompt (text fed one token per frame)",
    )
    options.cache_dir(p)


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
    _qwen3_voice(p)
    _voice_and_decoding(p)
    options.weights(p)
    options.provider(p)
    options.threads(p, help=options.CORES)
    p.add_argument("--model", default=None, help=options.MODEL_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    options.sampling(p)
    speculation(p)
    depth(p)
    p.set_defaults(func=cmd_synth)
