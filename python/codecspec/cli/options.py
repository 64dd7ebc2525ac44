"""The options several `codecspec` subcommands take, each defined once here.

A subcommand's module adds the ones it takes (`sampling(p)`, `threads(p)`, ...); where
subcommands differ in a default or a help line, the helper takes it as an argument, so the
flag, its type and its choices stay one definition. The flags only one family reads come
from that family (`family_options(command, p)`: the registry's `cli_options`), so no
module here defines a family's flag (tests/repository/test_layering.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

PROVIDERS = ["auto", "cpu", "cuda", "coreml"]
MODEL_HELP = (
    "model name (v3, v2, reference, fsq, fsq-aligned, fsq-voices) or folder (default: v3, the "
    "shipped reference v3); synth: also a Qwen3-TTS 12 Hz checkpoint folder"
)
CORES = "default: physical cores"


def threads_arg(value: str) -> int:
    """argparse type of --threads: an integer >= 1 (the process's shared pool size)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {n}")
    return n


def positive_ints(s: str) -> list[int]:
    """argparse type of a comma-separated list of integers >= 1 (`--streams 1,4,16`,
    `--clients`)."""
    try:
        out = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {s!r}")
    return out


def sampling(p: argparse.ArgumentParser, model_defaults: bool = True) -> None:
    """--temperature / --top-k / --top-p. model_defaults: unset means the model's own law
    (the TTS subcommands); else the depth graph tools' fixed 0.9 / 50 / 1.0."""
    if model_defaults:
        # each model carries its own law (v3 T 0.6 / top-k 20, the others 0.9 / 50)
        own = "default: the model's own (model.json's sampling; a Qwen3-TTS checkpoint's "
        own += "generation_config.json)"
        p.add_argument("--temperature", type=float, default=None, help=own)
        p.add_argument("--top-k", type=int, default=None, help=own)
        p.add_argument("--top-p", type=float, default=None, help=own)
        return
    p.add_argument("--temperature", type=float, default=0.9, help="0 = greedy (default 0.9)")
    p.add_argument("--top-k", type=int, default=50, help="0 = off (default 50)")
    p.add_argument("--top-p", type=float, default=1.0, help="1 = off (default 1.0)")


def threads(p: argparse.ArgumentParser, default=None, help=None) -> None:
    """--threads: the process's ONNX Runtime pool size."""
    p.add_argument("--threads", type=threads_arg, default=default, help=help)


def provider(p: argparse.ArgumentParser, default: str = "auto") -> None:
    """--provider: the ONNX Runtime execution provider."""
    p.add_argument("--provider", default=default, choices=PROVIDERS)


def weights(p: argparse.ArgumentParser) -> None:
    """--weights: a Qwen3-TTS folder's precision."""
    p.add_argument(
        "--weights",
        choices=["fp32", "int8", "int4", "auto"],
        default=None,
        help="Qwen3-TTS: talker and code predictor precision, weight-only quantised with "
        "onnxruntime's MatMulNBits (default fp32: the official model's codes; int8 / int4 are "
        "faster and lossy; auto: what `codecspec calibrate --model DIR` chose on this device, "
        "fp32 before it ran)",
    )


def cache_dir(p: argparse.ArgumentParser, help=None) -> None:
    """--cache-dir, where a Qwen3-TTS folder's graphs are built."""
    p.add_argument(
        "--cache-dir",
        default=None,
        help=help
        or "Qwen3-TTS: where built graphs are kept (default $CODECSPEC_CACHE_DIR or "
        "~/.cache/codecspec)",
    )


def text_input(p: argparse.ArgumentParser) -> None:
    """The text to speak: a positional, or --text-file."""
    p.add_argument("text", nargs="?", default=None, help="text to speak (or --text-file)")
    p.add_argument("--text-file", type=Path, default=None, help="read the text from a UTF-8 file")


def fixed_params(args):
    """SamplingParams of `sampling(p, model_defaults=False)`'s options."""
    import codecspec as cs

    return cs.SamplingParams(args.temperature, args.top_k, args.top_p)


def params_from_args(args):
    """The `params` of `load_model` from --temperature/--top-k/--top-p: a SamplingOverride
    of the flags given, which the model's loader resolves over its model.json (none given:
    the model's own laws, per stage where it has two). No file is read here; a value out of
    range is a ValueError naming it."""
    from codecspec.pipeline.family import SamplingOverride

    return SamplingOverride(args.temperature, args.top_k, args.top_p)


def depth_kwargs(args) -> dict:
    """{"depth": ...} when --depth is given (v2's: refused for the others, whose models have
    one depth decoder, by `refuse_other_families_flags`)."""
    return {} if args.depth is None else {"depth": args.depth}


def refuse_other_families_flags(args, command: str, entry) -> None:
    """A flag only other families add to `command` (`cli_options`), set for a model of
    `entry`'s family, is refused, not ignored: a ValueError naming it and who reads it."""
    from codecspec.pipeline.registry import families

    own = _family_flags(entry, command)
    for other in families():
        for dest, action in _family_flags(other, command).items():
            if dest not in own and getattr(args, dest, action.default) != action.default:
                where = other.title or f"{other.name} model"
                raise ValueError(f"{action.option_strings[0]}: only for {where} folders")


def _family_flags(entry, command: str) -> dict:
    """dest -> action of the flags `entry`'s `cli_options` add to `command`."""
    from codecspec.pipeline import registry

    if entry.cli_options is None:
        return {}
    p = argparse.ArgumentParser(add_help=False)
    registry.import_path(entry.cli_options)(command, p)
    return {a.dest: a for a in p._actions}


def family_options(command: str, p: argparse.ArgumentParser) -> None:
    """Every registered family's own flags for `codecspec COMMAND` (the registry's
    `cli_options`, in table order), added after the shared ones. A flag already on `p` (a
    shared one, or another family's) is not added again where both define it alike: two
    families may read one flag. Defined differently, it is a ValueError naming both."""
    from codecspec.pipeline import registry

    owners = {s: "the shared options" for s in p._option_string_actions}
    for entry in registry.families():
        if entry.cli_options is not None:
            add = registry.import_path(entry.cli_options)
            add(command, _FamilyParser(p, f"the {entry.name} family", owners))


# What two definitions of one flag must agree on to be one flag (help text aside).
_SAME = ("dest", "default", "type", "choices", "nargs", "const", "required")


class _FamilyParser:
    """The parser as a family's `cli_options` sees it: `add_argument` only, which adds a
    flag once (argparse itself would stop at the second with an error that names neither
    family)."""

    def __init__(self, parser: argparse.ArgumentParser, owner: str, owners: dict):
        self._parser, self._owner, self._owners = parser, owner, owners

    def add_argument(self, *flags, **kwargs):
        taken = [f for f in flags if f in self._parser._option_string_actions]
        if not taken:
            action = self._parser.add_argument(*flags, **kwargs)
            self._owners.update(dict.fromkeys(action.option_strings, self._owner))
            return action
        have = self._parser._option_string_actions[taken[0]]
        # The second definition, built on a scratch parser, compared with the first.
        want = argparse.ArgumentParser(add_help=False).add_argument(*flags, **kwargs)
        alike = type(have) is type(want) and set(have.option_strings) == set(want.option_strings)
        if alike and all(getattr(have, k) == getattr(want, k) for k in _SAME):
            return have
        raise ValueError(
            f"{taken[0]}: {self._owner} defines it unlike {self._owners[taken[0]]} "
            f"(one flag, one definition: give it another name or the same type and default)"
        )
