"""`codecspec serve`: its options; the command itself is `codecspec.serve.commands.cmd_serve`."""

from __future__ import annotations

import argparse

from codecspec.cli import options


def _engine(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-streams", type=int, default=16, help="streams per step (default 16)")
    p.add_argument("--max-queue", type=int, default=None, help="waiting requests (default: =)")
    options.provider(p, default="cpu")
    options.threads(
        p,
        default=1,
        help="the process's ONNX Runtime thread pool (default 1: the vocoder gets the rest)",
    )


def _model(p: argparse.ArgumentParser) -> None:
    from codecspec.serve.commands import model_arg

    p.add_argument(
        "--model",
        default=None,
        type=model_arg,
        help="the model to serve: v3 (the default), fsq, reference, v2, a model folder, or "
        "a Qwen3-TTS checkpoint folder (CustomVoice, VoiceDesign; Base with --ref-audio or "
        "--voices-dir)",
    )
    options.cache_dir(p)
    options.weights(p)


def _access(p: argparse.ArgumentParser) -> None:
    from codecspec.serve.commands import KEY_ENV

    p.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' (default: ${KEY_ENV}; none on loopback)",
    )
    p.add_argument("--metrics-open", action="store_true", help="serve /metrics without the key")
    p.add_argument(
        "--allow-no-key",
        action="store_true",
        help="allow a non-loopback --host without an API key (anyone who connects is served)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    from codecspec.serve.commands import cmd_serve

    p = sub.add_parser("serve", help="OpenAI-compatible speech server (continuous batching)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--drain-seconds", type=int, default=60, help="on SIGTERM, wait this long for streams"
    )
    p.add_argument(
        "--vocoder-iters", type=int, default=32, help="Griffin-Lim iterations per chunk (32)"
    )
    _model(p)
    p.add_argument(
        "--admit",
        default="realtime",
        choices=["realtime", "max"],
        help="realtime (default): admit only the streams the engine can decode faster than "
        "playback (measured), queue the rest; max: fill every slot",
    )
    _access(p)
    _engine(p)
    options.family_options("serve", p)
    p.set_defaults(func=cmd_serve)
