"""The Qwen3-TTS family's own `codecspec` flags (the registry's `cli_options`).

The shared ones a Qwen3-TTS folder also reads (--weights, --cache-dir, --model, ...) are the
CLI's (`codecspec.cli.options`). `codecspec --help` imports this module: argparse only.
"""

from __future__ import annotations

import argparse


def _decoder_precision(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--decoder-precision",
        choices=["fp32", "int8"],
        default=None,
        help="Qwen3-TTS: the 12 Hz speech decoder's precision (default fp32: the official "
        "audio; int8: its residual units' convolutions in int8 on the CPU, 1.6-2.4x faster "
        "here, the audio within the error measured and kept beside it at first use; codes "
        "unchanged)",
    )


def _synth(p: argparse.ArgumentParser) -> None:
    _decoder_precision(p)
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
    # the code predictor's own law, as the official methods' subtalker_* keywords: --temperature
    # / --top-k / --top-p are the talker's alone (the shared sampling flags)
    p.add_argument(
        "--subtalker-temperature",
        type=float,
        default=None,
        help="Qwen3-TTS: the code predictor's temperature (default: the checkpoint's "
        "generation_config.json; 0 greedy). --temperature sets the talker's only, as the "
        "official methods do, except --temperature 0, greedy for both",
    )
    p.add_argument(
        "--subtalker-top-k",
        type=int,
        default=None,
        help="Qwen3-TTS: the code predictor's top-k (default: generation_config.json)",
    )
    p.add_argument(
        "--subtalker-top-p",
        type=float,
        default=None,
        help="Qwen3-TTS: the code predictor's top-p (default: generation_config.json)",
    )
    # None unless given: the official default of the checkpoint's mode, resolved with the
    # request (text.official_streaming_text), so that no flag gives the official codes
    p.add_argument(
        "--streaming-text",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Qwen3-TTS prompt layout: --streaming-text feeds the text one token per frame, "
        "--no-streaming-text puts the whole text in the prompt. Default: the official "
        "method's for the checkpoint (streaming text for a Base voice clone, as "
        "generate_voice_clone; whole text for CustomVoice and VoiceDesign)",
    )


def _draft_depth(value: str):
    """--draft-depth: "auto" or a positive int (checked against the graph's K by the bench)."""
    if value == "auto":
        return value
    try:
        depth = int(value)
    except ValueError:
        depth = 0
    if depth < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a positive int, got {value!r}")
    return depth


def _bench(p: argparse.ArgumentParser) -> None:
    _decoder_precision(p)
    p.add_argument("--ref-audio", default=None, help="Qwen3-TTS Base: a clip of the voice")
    p.add_argument(
        "--acceptance",
        type=float,
        default=None,
        help="Qwen3-TTS: run the speculative depth loop at this top-1 draft acceptance "
        "(controlled drafts: timing of the real graphs without the real weights' drafts)",
    )
    p.add_argument(
        "--draft-depth",
        type=_draft_depth,
        default="auto",
        help="Qwen3-TTS with --acceptance: drafts per round, a chain of 1..K (default auto: "
        "the chain this device pays most for, from its measured verify-call costs)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=90.0,
        help="Qwen3-TTS: seconds the bench aims to take, loading included (default 90; 0: no "
        "limit, every stage runs --frames frames): the talker's first frames are timed, then "
        "each stage's frames and repeats are sized to fit, at least 8 frames each",
    )


def _calibrate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ref-audio", default=None, help="Qwen3-TTS Base: the voice (24 kHz WAV)")


def _serve(p: argparse.ArgumentParser) -> None:
    _decoder_precision(p)
    p.add_argument(
        "--ref-audio",
        default=None,
        help="Qwen3-TTS Base checkpoint: the voice to clone (WAV, FLAC, MP3, ...; any rate) "
        "for every stream",
    )
    p.add_argument(
        "--voices-dir",
        default=None,
        help="Qwen3-TTS Base checkpoint: a folder of voices, NAME.wav + NAME.txt (what the clip "
        "says) each, cloned in context; a request's `voice` picks one by NAME",
    )


_COMMANDS = {"synth": _synth, "bench": _bench, "calibrate": _calibrate, "serve": _serve}


def add_options(command: str, p: argparse.ArgumentParser) -> None:
    """This family's flags for `codecspec COMMAND` (none for the other subcommands)."""
    add = _COMMANDS.get(command)
    if add is not None:
        add(p)
