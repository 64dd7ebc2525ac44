"""The one decision for `auto` (calibrate/decision.py): the format's round trip, the two older
files it still reads, the AR default, malformed files, and the shipped folders deciding as
they always did. The compatibility check is shown a reader that forgets an old key and must
flag it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from paths import REPO

from codecspec.calibrate import decision as dec
from codecspec.calibrate.decision import (
    DECISION_FILE,
    DECISION_FORMAT,
    Decision,
    auto_mode,
    decision_files,
    read_decision,
    speculation_pays,
    write_decision,
)

PACKAGE_MODELS = Path(dec.__file__).resolve().parents[1] / "models"


def test_the_format_round_trips(tmp_path):
    measured = {"rule": "measured_speedup > 1", "measured_speedup": 1.31}
    device = {"cpu_model": "Example CPU", "cpu_flags": ["avx2", "fma"], "threads": 4}
    got = write_decision(tmp_path, speculate=True, why="1.31x AR", measured=measured, device=device)
    f = tmp_path / DECISION_FILE
    assert got.source == f and not list(tmp_path.glob(".*.tmp"))  # written in one rename
    assert json.loads(f.read_text()) == {
        "format": DECISION_FORMAT,
        "speculate": True,
        "why": "1.31x AR",
        "measured": measured,
        "device": device,
    }
    back = read_decision(f)
    assert back == Decision(True, "1.31x AR", measured, device, f) == read_decision(tmp_path)
    assert back.mode == "spec" and speculation_pays(tmp_path) is True
    write_decision(f, speculate=False, why="0.9x AR")  # a file path works as well
    assert read_decision(tmp_path).mode == "ar" and read_decision(tmp_path).measured == {}


def test_where_a_decision_lives(tmp_path):
    """One rule for the names: a folder's decision.json first, then the older names, with a
    calibration's tags (the shared depth decoder's prefix, a Qwen3-TTS precision) kept."""
    names = lambda p: [f.name for f in decision_files(p)]  # noqa: E731
    assert names(tmp_path) == ["decision.json", "device_profile.json", "speculation.json"]
    assert names(tmp_path / "device_profile.json")[0] == "decision.json"
    assert names(tmp_path / "depth_shared.device_profile.json")[:2] == [
        "depth_shared.decision.json",
        "depth_shared.device_profile.json",
    ]
    assert names(tmp_path / "speculation.int8.json") == [
        "decision.int8.json",
        "device_profile.int8.json",
        "speculation.int8.json",
    ]
    assert names(tmp_path / "decision.int4.json")[-1] == "speculation.int4.json"
    assert names(tmp_path / "other.json") == ["other.json"]


# ---------------------------------------------------------------------- older folders
def _old_folders(root: Path) -> list:
    """(what a reader is given, what the older reader decided) for folders written by the
    calibration commands before the one format: both files, both values, both tags."""
    cases = []
    for i, pays in enumerate((True, False)):
        d = root / f"reference_{i}"
        d.mkdir()
        profile = {"format": "codecspec.device_profile", "speculation_pays": pays}
        (d / "device_profile.json").write_text(json.dumps({**profile, "chosen_budget": 4}))
        (d / "depth_shared.device_profile.json").write_text(json.dumps(profile))
        q = root / f"qwen3_{i}"
        q.mkdir()
        (q / "speculation.int8.json").write_text(json.dumps({"speculate": pays}))
        (q / "speculation.json").write_text(
            json.dumps({"tokens_per_call": 1.4, "measured_speedup": 1.2, "speculate": pays})
        )
        cases += [
            (d, pays),
            (d / "device_profile.json", pays),
            (d / "depth_shared.device_profile.json", pays),
            (q / "speculation.json", pays),
            (q / "decision.json", pays),  # the new name of a folder that has only the old
            (q / "decision.int8.json", pays),
        ]
    return cases


def compat_failures(read, root: Path) -> list:
    """One line per older folder `read` (path -> Decision) decides otherwise than before."""
    bad = []
    for path, pays in _old_folders(root):
        try:
            got = read(path)
        except Exception as e:  # a reader that raises on an old folder fails it as well
            bad.append(f"{path.relative_to(root)}: {type(e).__name__}: {e}")
            continue
        if got.speculate is not pays or got.source is None:
            bad.append(f"{path.relative_to(root)}: {got.speculate} (was {pays})")
    return bad


def test_older_folders_decide_as_before(tmp_path):
    assert compat_failures(read_decision, tmp_path) == []
    d = read_decision(tmp_path / "qwen3_0" / "speculation.json")
    assert d.measured == {"tokens_per_call": 1.4, "measured_speedup": 1.2}
    assert "speculation.json" in d.why and d.source.name == "speculation.json"
    assert read_decision(tmp_path / "reference_0").measured == {"chosen_budget": 4}


def test_the_compat_check_flags_a_reader_that_ignores_an_old_key(tmp_path, monkeypatch):
    """The check above must fail a reader that knows only the newer key (monkeypatched, the
    real reader forgets device_profile.json's "speculation_pays"), and one that reads only
    the new format (every older file taken for "no calibration")."""
    forgets, only_new = tmp_path / "forgets", tmp_path / "only_new"
    forgets.mkdir(), only_new.mkdir()
    with monkeypatch.context() as m:
        m.setattr(dec, "LEGACY_KEYS", {"speculation": "speculate"})
        bad = compat_failures(read_decision, forgets)
    assert bad and all(line.startswith("reference_") for line in bad), bad
    assert len(compat_failures(lambda p: Decision(False, ""), only_new)) == 12


def test_the_new_file_wins_over_an_older_one(tmp_path):
    (tmp_path / "device_profile.json").write_text(json.dumps({"speculation_pays": False}))
    write_decision(tmp_path, speculate=True, why="recalibrated")
    for given in (tmp_path, tmp_path / "device_profile.json"):
        assert read_decision(given).speculate is True
        assert read_decision(given).source.name == DECISION_FILE


# ---------------------------------------------------------------------- defaults and errors
def test_no_calibration_decodes_ar_everywhere(tmp_path):
    for path in (None, tmp_path, tmp_path / "absent", tmp_path / "speculation.int8.json"):
        d = read_decision(path)
        assert d.speculate is False and d.source is None and d.mode == "ar", path
        assert speculation_pays(path) is False
    assert auto_mode("auto", False) == "ar" and auto_mode("auto", True) == "spec"
    assert auto_mode("spec", False) == "spec" and auto_mode("ar", True) == "ar"


@pytest.mark.parametrize(
    "text, says",
    [
        ("{not json", "not a JSON"),
        ("[true]", "expected a JSON object"),
        (json.dumps({"tree_nodes": 5}), "holds no decision"),
        (json.dumps({"speculation_pays": "yes"}), "must be true or false"),
        (json.dumps({"speculate": 1}), "must be true or false"),
        (json.dumps({"format": DECISION_FORMAT, "why": "x"}), "holds no 'speculate'"),
        (json.dumps({"format": DECISION_FORMAT, "speculate": True, "measured": 3}), "object"),
        (json.dumps({"format": "codecspec-decision/9", "speculate": True}), "is not"),
    ],
)
def test_a_malformed_file_is_a_value_error_naming_it(tmp_path, text, says):
    """Not a silent AR: a broken calibration would read as "speculation does not pay"."""
    f = tmp_path / "device_profile.json"
    f.write_text(text)
    for given in (f, tmp_path):
        with pytest.raises(ValueError, match=says) as e:
            read_decision(given)
        assert str(f) in str(e.value) and "codecspec calibrate" in str(e.value)


# ---------------------------------------------------------------------- shipped folders
def _shipped_profiles() -> list:
    found = sorted(PACKAGE_MODELS.glob("*/*device_profile.json"))
    found += sorted((REPO / "models").glob("*/*device_profile.json"))
    return found


@pytest.mark.parametrize("profile", _shipped_profiles(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_folders_decide_as_their_profile_says(profile):
    """The shipped model folders are not regenerated: their device_profile.json's
    "speculation_pays" is still what decides."""
    want = json.loads(profile.read_text())["speculation_pays"]
    got = read_decision(profile)
    assert got.speculate is want and got.source == profile
    if profile.name == "device_profile.json":
        assert read_decision(profile.parent) == got


def test_a_model_folder_decides_through_the_one_reader(tmp_path):
    """The reference family's model: its shipped profile, then a decision.json written over
    it, then neither (AR)."""
    from codecspec.pipeline.registry import load_model, resolve_model_dir

    src = resolve_model_dir("reference")
    dst = tmp_path / "reference"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.png", "ablation", "calibration"))
    shipped = json.loads((dst / "device_profile.json").read_text())["speculation_pays"]
    assert load_model(dst).speculation_pays is shipped
    write_decision(dst, speculate=not shipped, why="a test's decision")
    assert load_model(dst).speculation_pays is (not shipped)
    (dst / DECISION_FILE).unlink()
    (dst / "device_profile.json").unlink()
    assert load_model(dst).speculation_pays is False


@pytest.mark.parametrize(
    ("simulated", "end_to_end", "speculate"),
    [
        (1.05, {"speedup": 1.03}, True),
        (1.05, None, True),  # no timed run: the replay decides
        (1.017, {"speedup": 0.924}, False),  # the replay ahead, the real decoder behind
        (0.98, {"speedup": 1.2}, False),
    ],
)
def test_the_timed_decoder_has_the_last_word(simulated, end_to_end, speculate):
    """Speculate only where the replay and, when it was measured, the real decoder timed end
    to end both beat the AR loop; the rule that read the replay alone fails the third case."""
    from codecspec.calibrate.profile import speculation_wins

    assert speculation_wins(simulated, end_to_end) is speculate
