"""A broken model folder is one line from every command that loads a model, naming the file
and what is wrong with it (issue 51): serve used to end in a 35-49-line traceback and
"Application startup failed", and a truncated config.json read as "neither a model name nor
a model folder"."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from codecspec.cli import main
from codecspec.pipeline.registry import ModelLoadError, family_of

REPO = Path(__file__).resolve().parents[2]
QWEN3 = REPO / "tests" / "data" / "qwen3_tiny" / "custom_equal"
REFERENCE = REPO / "models" / "reference"


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.unlink()  # a link to the shipped file becomes a file of its own
    path.write_bytes(data[: len(data) // 2])


def _reference_with(tmp_path: Path, broken: str) -> Path:
    """models/reference linked file by file, `broken` a truncated copy (no 38 MB copy)."""
    d = tmp_path / f"reference_{broken.replace('.', '_')}"
    d.mkdir()
    for f in REFERENCE.iterdir():
        (d / f.name).symlink_to(f)
    _truncate(d / broken)
    return d


def _qwen3_with(tmp_path: Path, broken: str) -> Path:
    d = tmp_path / f"qwen3_{broken.replace('.', '_')}"
    shutil.copytree(QWEN3, d)
    _truncate(d / broken)
    return d


COMMANDS = {
    "synth": ["synth", "Hello.", "-o", "{tmp}/o.wav", "--cache-dir", "{tmp}/cache"],
    "serve": ["serve", "--port", "0", "--cache-dir", "{tmp}/cache"],
    "bench": ["bench", "--json", "--frames", "10", "--texts", "1"],
    "bench-streams": ["bench", "--streams", "1", "--json"],
    "quality": ["quality", "--sentences", "1", "--json"],
    "calibrate": ["calibrate", "--cache-dir", "{tmp}/cache", "--frames", "4"],
}
CASES = [
    # (folder maker, broken file, what the line must say, commands that load this family)
    (_qwen3_with, "config.json", r"config\.json: not valid JSON \(Unterminated string", None),
    (_qwen3_with, "model.safetensors", r"model\.safetensors: ", ("synth", "serve", "calibrate")),
    (_reference_with, "model.json", r"model\.json: not valid JSON \(", None),
    (_reference_with, "temporal.onnx", r"temporal\.onnx", ("synth", "serve", "bench", "quality")),
]


# every (case, command that loads that case's family) pair
PAIRS = [
    (make, broken, says, command)
    for make, broken, says, commands in CASES
    for command in (commands or COMMANDS)
]


@pytest.mark.parametrize("make,broken,says,command", PAIRS, ids=[f"{p[1]}-{p[3]}" for p in PAIRS])
def test_a_broken_folder_is_one_line_naming_the_file(tmp_path, capsys, make, broken, says, command):
    folder = make(tmp_path, broken)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in COMMANDS[command]]
    assert main([*argv, "--model", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    cmd = argv[0]
    assert err[0].startswith(f"codecspec {cmd}: error: model: {folder}"), err[0]
    assert re.search(says, err[0]), err[0]


def test_the_json_error_is_a_model_load_error(tmp_path):
    d = _qwen3_with(tmp_path, "config.json")
    with pytest.raises(ModelLoadError, match="config.json: not valid JSON"):
        family_of(str(d))


def test_a_folder_that_is_no_model_still_says_so(tmp_path):
    with pytest.raises(ValueError, match="neither a model name"):
        family_of(str(tmp_path))
    assert not isinstance(_error(lambda: family_of(str(tmp_path))), ModelLoadError)


@pytest.mark.parametrize(
    "name,says",
    [
        ("tree.json", r"^model: {d} lacks \['tree.json'\]"),  # a folder where a file belongs
        ("offsets.npy", r"^model: {d}: ValueError: "),  # truncated: numpy's own error
    ],
)
def test_a_file_that_cannot_be_read_is_a_model_load_error(tmp_path, name, says):
    from codecspec.pipeline.registry import load_model

    d = _reference_with(tmp_path, name)
    if name == "tree.json":
        (d / name).unlink()
        (d / name).mkdir()
    with pytest.raises(ModelLoadError, match=says.format(d=re.escape(str(d)))):
        load_model(d)


def _error(fn):
    try:
        fn()
    except Exception as e:
        return e
    return None
