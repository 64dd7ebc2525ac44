"""A family's own `codecspec` flags come from the family (issue 30 item 5): the registry
entry's `cli_options` adds them after the shared ones (`codecspec.cli.options.family_options`).

The example family (tests/example_family/) adds `synth --toy-tone` with no line of
`codecspec.cli` naming it; a flag two families define alike is one flag, defined unlike it is
an error naming both; building the parser (`codecspec --help`) imports no family's model,
engine or ONNX Runtime."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from example_family import ENTRY

from codecspec.cli import build_parser, options
from codecspec.pipeline import registry
from codecspec.pipeline.registry import Entry

CLASH = """
def alike(command, p):  # the example family's flag, another help line: one flag
    p.add_argument("--toy-tone", type=float, default=1.0, help="clash-alike: the same flag")

def unlike(command, p):  # the example family's flag as an integer: two flags in one name
    p.add_argument("--toy-tone", type=int, default=1)

def shared_unlike(command, p):  # the shared --cache-dir with a default of its own
    p.add_argument("--cache-dir", default="here")

def shared_alike(command, p):
    p.add_argument("--cache-dir", default=None)
"""


@pytest.fixture
def example():
    registry.register(ENTRY)  # the family's one registry line
    yield ENTRY
    registry.unregister(ENTRY.name)


@pytest.fixture
def clash(tmp_path, monkeypatch):
    """Registers a family whose `cli_options` is one of CLASH's functions; unregisters it."""
    (tmp_path / "clash_options.py").write_text(CLASH)
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def add(function: str) -> Entry:
        names.append(f"clash-{function}")
        return registry.register(Entry(names[-1], cli_options=f"clash_options:{function}"))

    yield add
    for name in names:
        registry.unregister(name)


def synth_parser() -> argparse.ArgumentParser:
    """What `codecspec synth` has before the families' flags: the shared --cache-dir."""
    p = argparse.ArgumentParser()
    options.cache_dir(p)
    return p


def test_a_family_adds_its_own_flag(example):
    args = build_parser().parse_args(["synth", "hello", "--toy-tone", "0.5"])
    assert args.toy_tone == 0.5 and args.text == "hello"
    assert build_parser().parse_args(["synth", "hello"]).toy_tone == 1.0
    with pytest.raises(SystemExit):  # only synth: the family added nothing to bench
        build_parser().parse_args(["bench", "--toy-tone", "0.5"])


def test_without_the_family_there_is_no_flag(capsys):
    assert ENTRY.name not in [e.name for e in registry.families()]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["synth", "hello", "--toy-tone", "0.5"])
    assert "unrecognized arguments: --toy-tone" in capsys.readouterr().err


def test_two_families_defining_a_flag_alike_share_it(example, clash):
    clash("alike")
    p = synth_parser()
    options.family_options("synth", p)
    tone = [a for a in p._actions if "--toy-tone" in a.option_strings]
    assert len(tone) == 1 and tone[0].help.startswith("example-toy:")  # the first family's
    assert p.parse_args(["--toy-tone", "2"]).toy_tone == 2.0


def test_two_families_defining_a_flag_unlike_is_an_error_naming_both(example, clash):
    clash("unlike")
    with pytest.raises(ValueError, match="^--toy-tone: the clash-unlike family defines it unlike"):
        options.family_options("synth", synth_parser())
    with pytest.raises(ValueError, match="unlike the example-toy family"):
        build_parser()


def test_a_family_may_not_redefine_a_shared_flag(clash):
    clash("shared_alike")
    options.family_options("synth", synth_parser())  # alike: the shared flag, not added again
    clash("shared_unlike")
    with pytest.raises(ValueError, match="^--cache-dir: the clash-shared_unlike family .* shared"):
        options.family_options("synth", synth_parser())


def test_the_built_in_families_flags_keep_their_names_and_defaults():
    args = build_parser().parse_args(["synth", "hi"])
    qwen3 = (args.ref_audio, args.ref_text, args.instruct, args.streaming_text)
    assert qwen3 == (None, None, None, None)  # layout None: the official default per mode
    on, off = (
        build_parser().parse_args(["synth", "hi", f])
        for f in ("--streaming-text", "--no-streaming-text")
    )
    assert (on.streaming_text, off.streaming_text) == (True, False)
    v2 = (args.loops, args.accept, args.beta, args.theta, args.draft_len, args.depth)
    assert v2 == (None, "exact", 0.3, None, 3, None)
    b = build_parser().parse_args(["bench"])
    fsq_and_qwen3 = (b.utterances, b.batch, b.acceptance, b.draft_depth, b.ref_audio)
    assert fsq_and_qwen3 == (8, 1, None, "auto", None)
    serve = build_parser().parse_args(["serve", "--voices-dir", "v"])
    assert (serve.voices_dir, serve.ref_audio) == ("v", None)
    quality = build_parser().parse_args(["quality"])
    assert (quality.beta, quality.theta) == (0.3, None)


def test_building_the_parser_loads_no_family_code_and_no_onnxruntime():
    code = (
        "import sys\n"
        "from codecspec.cli import build_parser\n"
        "build_parser()\n"
        "fam = [m for m in sys.modules if m.startswith('codecspec.families.')]\n"
        "light = ('.options', '.commands')  # the families' parsers: argparse only\n"
        "print(sorted(m for m in fam if not m.endswith(light) and m.count('.') > 2))\n"
        "print([m for m in sys.modules if m.startswith(('onnxruntime', 'torch'))])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.split("\n")[:2] == ["[]", "[]"]


@pytest.mark.parametrize(
    "model, argv, refused",
    [
        ("fsq", ["--loops", "both"], "--loops: only for v2 / v3 model folders"),
        ("fsq", ["--accept", "pcg"], "--accept: only for v2 / v3 model folders"),
        (None, ["--ref-audio", "a.wav"], "--ref-audio: only for Qwen3-TTS checkpoint folders"),
        # --no-streaming-text is a choice too (False, not the default None)
        ("v3", ["--no-streaming-text"], "--streaming-text: only for Qwen3-TTS checkpoint"),
    ],
)
def test_another_familys_flag_is_refused_not_ignored(model, argv, refused, capsys):
    """synth refuses a flag only other families read, naming it, before any model loads."""
    from codecspec.cli import main

    model_arg = [] if model is None else ["--model", model]
    assert main(["synth", "hello", "-o", "/nonexistent/x.wav", *model_arg, *argv]) == 2
    assert refused in capsys.readouterr().err


def test_a_familys_own_flags_are_not_refused():
    args = build_parser().parse_args(["synth", "hi", "--loops", "both", "--accept", "pcg"])
    options.refuse_other_families_flags(args, "synth", registry.by_name("v2"))
