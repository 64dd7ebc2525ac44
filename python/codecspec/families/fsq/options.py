"""The FSQ family's own `codecspec` flags (the registry's `cli_options`): its bench's
utterances and batch, and a voice-prefix folder's reference clips. `codecspec --help`
imports this module: argparse only."""

from __future__ import annotations

import argparse


def add_options(command: str, p: argparse.ArgumentParser) -> None:
    """This family's flags for `codecspec COMMAND` (bench, synth, serve)."""
    if command == "bench":
        p.add_argument("--utterances", type=int, default=8, help="fsq: bench.json utterances")
        p.add_argument("--batch", type=int, default=1, help="fsq: also run this many as a batch")
    if command in ("synth", "serve"):
        p.add_argument(
            "--ref-audio",
            default=None,
            help="FSQ voice-prefix folder (fsq-voices): speak in the voice of this clip (WAV, "
            "FLAC, MP3, ...; any rate), read once by the folder's Q-Former",
        )
    if command == "serve":
        p.add_argument(
            "--voices-dir",
            default=None,
            help="FSQ voice-prefix folder: a folder of clips, NAME.wav each; a request's "
            "`voice` picks one by NAME",
        )
