"""The sampling flags as a partial law (`pipeline.family.SamplingOverride`): the CLI builds it
from --temperature / --top-k / --top-p without reading the model folder, and the model's
loader, which reads model.json anyway, resolves it there. A flag replaces its own field only;
any flag given is both stages' law where a v2/v3 folder has a "depth_sampling" of its own (as
an explicit law always was), and no flag keeps the folder's per-stage laws."""

from __future__ import annotations

import json

import pytest
from paths import DATA

import codecspec as cs
from codecspec.cli import build_parser
from codecspec.cli.options import params_from_args
from codecspec.pipeline.depth_bench import _model_params
from codecspec.pipeline.family import SamplingOverride, resolve_params
from codecspec.pipeline.registry import load_model, resolve_model_dir

FOLDER_LAW = {"temperature": 0.7, "top_k": 30, "top_p": 0.95}
GREEDY = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}


def _folder(src, out, **meta):
    """`src`'s files linked into `out`, model.json with `meta` over its keys."""
    out.mkdir()
    for f in src.iterdir():
        if f.name != "model.json":
            (out / f.name).symlink_to(f.resolve())
    (out / "model.json").write_text(json.dumps(json.loads((src / "model.json").read_text()) | meta))
    return out


def _flags(*argv):
    return params_from_args(build_parser().parse_args(["synth", "hi", *argv]))


def test_the_flags_are_read_without_the_folder(tmp_path):
    got = _flags("--model", str(tmp_path / "nowhere"), "--top-k", "5")
    assert got == SamplingOverride(top_k=5)
    assert _flags() == SamplingOverride()  # no flag: the model's own laws


@pytest.mark.parametrize(
    "field, value", [("temperature", -1.0), ("top_k", -1), ("top_p", 0.0), ("top_p", 1.5)]
)
def test_a_value_out_of_range_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=f"^{field}: "):
        SamplingOverride(**{field: value})


def test_an_override_replaces_its_fields_only():
    meta = {"sampling": FOLDER_LAW}
    assert resolve_params(SamplingOverride(top_k=5), meta) == cs.SamplingParams(0.7, 5, 0.95)
    assert resolve_params(SamplingOverride(), meta) is None  # the folder's own, per stage
    whole = cs.SamplingParams(0.5, 10, 1.0)
    assert resolve_params(whole, meta) is whole and resolve_params(None, meta) is None


def test_top_k_alone_keeps_the_folders_temperature_and_top_p(tmp_path):
    folder = _folder(DATA / "tiny_v3", tmp_path / "v3", sampling=FOLDER_LAW)
    tts = load_model(str(folder), threads=1, params=_flags("--top-k", "5"))
    assert tts.params == cs.SamplingParams(0.7, 5, 0.95)
    assert tts.depth_params == tts.params


def test_with_depth_sampling_a_flag_is_both_stages_law(tmp_path):
    """As a merged law passed as `params` was before: c0 and the depth levels both take it;
    without a flag c0 keeps "sampling" and the depth levels "depth_sampling"."""
    folder = _folder(DATA / "tiny_v3", tmp_path / "v3", sampling=FOLDER_LAW, depth_sampling=GREEDY)
    flagged = load_model(str(folder), threads=1, params=_flags("--top-k", "5"))
    assert flagged.params == flagged.depth_params == cs.SamplingParams(0.7, 5, 0.95)
    own = load_model(str(folder), threads=1, params=_flags())
    assert own.params == cs.SamplingParams(**FOLDER_LAW)
    assert own.depth_params == cs.SamplingParams(**GREEDY)
    # the bench's depth loop, which opens the depth decoder alone, resolves it alike
    assert _model_params(folder, _flags("--top-k", "5")) == flagged.depth_params
    assert _model_params(folder, _flags()) == own.depth_params


@pytest.mark.parametrize("name", ["reference", "fsq"])
def test_the_other_families_resolve_it_too(tmp_path, name):
    try:
        src = resolve_model_dir(name)
    except ValueError:
        pytest.skip(f"no {name} model folder")
    folder = _folder(src, tmp_path / name, sampling=FOLDER_LAW)
    tts = load_model(str(folder), threads=1, params=_flags("--top-k", "5"))
    assert tts.params == cs.SamplingParams(0.7, 5, 0.95)
