"""The one table of model families (`codecspec.pipeline.registry`): folders and names map to
families, nothing is imported before a family is asked for, options a family does not take
are refused, and the old paths of moved modules are gone (no alias keeps them)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codecspec.pipeline import Family, registry


def _folder(tmp_path, name, fmt):
    d = tmp_path / name
    d.mkdir()
    (d / "model.json").write_text(json.dumps({"format": fmt}))
    return d


def test_every_format_maps_to_one_family(tmp_path):
    names = [e.name for e in registry.FAMILIES]
    assert len(set(names)) == len(names)
    assert registry.formats() == {
        "codecspec-reference-tts/1": "reference",
        "codecspec-fsq-tts/1": "fsq",
        "codecspec-v2-tts/1": "v2",
    }
    for fmt, name in registry.formats().items():
        d = _folder(tmp_path, name, fmt)
        assert registry.family_of(d).name == name
        assert registry.family_of(str(d)).name == name


def test_a_qwen3_folder_is_detected_by_its_config(tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3_tts"}))
    assert registry.family_of(str(d)).name == "qwen3-tts"
    # the old entry point reads model.json only, as it always did
    from codecspec.pipeline.registry import model_family

    with pytest.raises(ValueError, match="^model: .* neither a model name"):
        model_family(d)


def test_unknown_folders_and_formats_name_the_model(tmp_path):
    with pytest.raises(ValueError, match="^model: .* neither a model name"):
        registry.family_of(tmp_path)
    d = _folder(tmp_path, "odd", "someone-else/9")
    with pytest.raises(ValueError, match="^model: .* has model format 'someone-else/9'"):
        registry.family_of(d)
    assert registry.find(d) is None
    with pytest.raises(ValueError, match="^family: expected one of"):
        registry.by_name("nope")


def test_the_default_and_the_shipped_names():
    assert registry.family_of(None).name == "v2"  # v3 is the v2 family's runtime
    assert registry.family_of("fsq").name == "fsq"
    assert registry.DEFAULT_MODEL == "v3"
    assert registry.model_family("fsq") == "fsq"


def test_every_entry_names_importable_code():
    for e in registry.FAMILIES:
        engine = e.load("engine")
        assert issubclass(engine, Family) and engine.name in (e.name, "qwen3-tts")
        assert callable(e.load("model"))
        if e.formats:
            assert engine.formats == e.formats
    assert registry.by_name("fsq").load("engine").synth_command is None


def test_options_a_family_does_not_take_are_refused():
    fsq = registry.by_name("fsq")
    v2 = registry.by_name("v2")
    qwen3 = registry.by_name("qwen3-tts")
    assert registry.take_options(fsq, cache_dir="/c", weights=None) == {}
    assert registry.take_options(fsq, ref_audio="a.wav") == {"ref_audio": "a.wav"}
    with pytest.raises(ValueError, match="^weights: only for Qwen3-TTS checkpoint folders"):
        registry.take_options(fsq, weights="int8")
    want = "^ref_audio: only for Qwen3-TTS checkpoint or FSQ voice-prefix folders"
    with pytest.raises(ValueError, match=want):
        registry.take_options(v2, ref_audio="a.wav")
    with pytest.raises(ValueError, match="^weights: "):
        registry.take_options(None, weights="int8")
    got = registry.take_options(qwen3, cache_dir="/c", ref_audio=None, weights="int8")
    assert got == {"cache_dir": "/c", "ref_audio": None, "weights": "int8"}


def test_looking_a_folder_up_imports_no_family_code():
    code = (
        "import sys\n"
        "from codecspec.pipeline import registry\n"
        "registry.family_of('fsq'); registry.family_of(None)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('codecspec.cli', "
        "'codecspec.serve.', 'codecspec.families.', 'codecspec.train'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.strip() == "[]"


def test_the_old_homes_of_moved_modules_are_gone():
    """No alias keeps an old path: the protocol's (serve/family.py), tts/'s rooms, and the
    calibration names train/ re-exported."""
    import importlib

    for gone in ("serve.family", "tts", "tts.registry", "tts.commands", "tts.stream"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"codecspec.{gone}")
    import codecspec.train

    assert not hasattr(codecspec.train, "train_offsets")  # calibrate/'s, not re-exported


@pytest.mark.parametrize(
    "family, package",
    [("reference", "reference"), ("fsq", "fsq"), ("v2", "v2"), ("qwen3-tts", "qwen3_tts")],
)
def test_a_family_is_a_package_and_its_old_paths_are_gone(family, package):
    import importlib

    entry = registry.by_name(family)
    # the loaded model and its family share model.py (neither imports the other back);
    # Qwen3-TTS's model was always in its package (pipeline.py), its family in engine.py
    if family == "qwen3-tts":
        assert entry.load("engine").__module__ == "codecspec.families.qwen3_tts.engine"
    for what in ("model", "engine") if family != "qwen3-tts" else ():
        assert entry.load(what).__module__ == f"codecspec.families.{package}.model"
    # its `codecspec bench` is its family's too (shared CLI code imports no family)
    engine = entry.load("engine")
    bench = engine.bench_figures or engine.bench_record
    assert bench.__module__.startswith(f"codecspec.families.{package}.")
    old = {"reference": ("tts.model", "tts.temporal_batch", "serve.batched")}.get(
        family, (f"serve.{package.split('_')[0]}",)
    )
    for gone in old:  # the aliases kept while moving are removed (issue 30)
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"codecspec.{gone}")


def test_training_code_lives_in_the_families():
    """Each family's PyTorch model and loop are in its package; train/ keeps the shared
    parts, and the old paths (and the calibration aliases in train/) are gone."""
    import importlib

    for gone in ("tts_torch", "tts_train", "v2_torch", "v2_train", "fsq_torch", "fsq_train"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"codecspec.train.{gone}")
    for gone in ("acceptance", "calibrate", "data", "medusa", "offsets", "plots", "speedup_map"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"codecspec.train.{gone}")
    families = Path(registry.__file__).parents[1] / "families"
    for f in ("reference", "v2", "fsq"):
        for m in ("torch_model", "train"):
            assert (families / f / f"{m}.py").is_file(), (f, m)


def test_tts_keeps_no_alias_of_a_family_module():
    """The old tts/ paths of the moved fsq and v2 modules are gone: an alias there made tts/
    and families/ import each other (tests/repository/test_layering.py)."""
    import importlib

    for gone in ("tts.fsq", "tts.fsq_bench", "tts.v2", "tts.v2_bench"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"codecspec.{gone}")
    from codecspec.pipeline.family import Family

    fsq, v2 = (registry.by_name(f).load("engine") for f in ("fsq", "v2"))
    assert fsq.synth_lines.__func__ is not Family.synth_lines.__func__  # no depth loop
    assert v2.synth_lines.__func__ is Family.synth_lines.__func__  # the shared summary


def test_no_family_borrows_another_familys_members():
    """The phoneme families' text side (`languages`, `speakers`, `ids`) is the shared
    `codecspec.frontend.text.PhonemeModel`'s; no family's model derives from another's."""
    from codecspec.families.fsq.model import FSQTTS
    from codecspec.families.reference.model import ReferenceTTS
    from codecspec.families.v2.model import V2TTS
    from codecspec.frontend.text import PhonemeModel

    models = (ReferenceTTS, V2TTS, FSQTTS)
    for cls in models:
        assert [c for c in models if c is not cls and issubclass(cls, c)] == [], cls
        for name in ("languages", "speakers", "ids"):
            assert getattr(cls, name) is getattr(PhonemeModel, name), (cls, name)
        assert not hasattr(cls, "_ids"), cls
    tts = FSQTTS(registry.resolve_model_dir("fsq"), threads=1)
    spk = tts.speakers[-1]
    assert tts.ids("en", spk) == tts.frontend.ids("en", spk)
    assert tts.frontend.ids("en", spk) == (tts.languages.index("en"), len(tts.speakers) - 1)
    assert tts.ids("en") == tts.frontend.ids("en", tts.meta["default_speaker"])
    with pytest.raises(ValueError, match=r"^language: expected one of \[.*'en'.*\], got 'xx'"):
        tts.ids("xx", spk)
    with pytest.raises(ValueError, match="^speaker: expected one of"):
        tts.ids("en", "nobody")
