"""`codecspec calibrate --model DIR` chooses a weight precision by measuring this device, and
`--weights auto` runs it: the rule (fastest admissible), the stored record, the refusals."""

from __future__ import annotations

import json

import pytest
from paths import DATA

from codecspec.families.qwen3_tts.graphs import PRECISION_FILE, chosen_precision
from codecspec.families.qwen3_tts.precision import (
    MAX_KL,
    MIN_TOP1,
    admissible,
    calibrate_precision,
    choose,
)

DATA = DATA / "qwen3_tiny"


def _m(ms, kl=None, top1=None):
    entry = {"ms_per_frame": ms}
    if kl is not None:
        stage = {"kl_mean": kl, "top1_agreement": top1}
        entry["error"] = {"talker": dict(stage), "depth": dict(stage)}
    return entry


def test_the_fastest_admissible_precision_is_chosen():
    measured = {"fp32": _m(30.0), "int8": _m(20.0, 0.001, 1.0), "int4": _m(12.0, 0.01, 0.99)}
    assert choose(measured)["chosen"] == "int4"
    measured["int4"]["ms_per_frame"] = 25.0
    assert choose(measured)["chosen"] == "int8"
    measured["int8"]["ms_per_frame"] = measured["int4"]["ms_per_frame"] = 40.0
    assert choose(measured)["chosen"] == "fp32"  # quantising does not pay here


@pytest.mark.parametrize("kl,top1", [(MAX_KL * 2, 1.0), (0.0, MIN_TOP1 - 0.05)])
def test_a_model_whose_law_moved_is_refused_however_fast(kl, top1):
    """The deliberately unfaithful candidate: fastest by far, refused, and the reason says so."""
    measured = {"fp32": _m(30.0), "int8": _m(20.0, 0.0, 1.0), "int4": _m(1.0, kl, top1)}
    assert not admissible(measured["int4"])
    out = choose(measured)
    assert out["chosen"] == "int8" and "int4 refused" in out["reason"]
    # one stage alone out of bounds is enough
    measured["int4"]["error"]["talker"] = {"kl_mean": 0.0, "top1_agreement": 1.0}
    assert choose(measured)["chosen"] == "int8"


def test_no_admissible_precision_is_an_error():
    with pytest.raises(ValueError, match="measured"):
        choose({"int4": _m(1.0, 1.0, 0.0)})


def test_auto_weights_read_the_stored_choice(tmp_path):
    from codecspec.families.qwen3_tts.pipeline import resolve_weights

    assert resolve_weights("auto", "cpu", tmp_path) == "fp32"  # not calibrated: the default
    assert resolve_weights("auto", "cpu") == "auto"  # kept until the entry is known
    (tmp_path / PRECISION_FILE).write_text(json.dumps({"chosen": "int4", "reason": "r"}))
    assert resolve_weights("auto", "cpu", tmp_path) == "int4"
    assert resolve_weights("int8", "cpu", tmp_path) == "int8"  # asked for by name: as asked
    (tmp_path / PRECISION_FILE).write_text(json.dumps({"chosen": "int3"}))
    with pytest.raises(ValueError, match="weights"):
        resolve_weights("auto", "cpu", tmp_path)


def test_calibrate_measures_every_precision_and_auto_loads_the_choice(tmp_path):
    from codecspec.families.qwen3_tts.checkpoint import Qwen3Checkpoint
    from codecspec.families.qwen3_tts.graphs import build_or_load
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    folder = DATA / "custom_equal"
    entry = build_or_load(Qwen3Checkpoint(folder), cache_dir=tmp_path)
    record = calibrate_precision(entry, folder, cache_dir=tmp_path, frames=3, rounds=1)
    assert set(record["measured"]) == {"fp32", "int8", "int4"}
    for w, m in record["measured"].items():
        assert m["ms_per_frame"] > 0 and m["talker_ms"] > 0 and m["depth_ms"] > 0
        assert ("error" in m) == (w != "fp32")
        for stage in m.get("error", {}).values():
            assert 0.0 <= stage["top1_agreement"] <= 1.0 and stage["kl_mean"] >= 0.0
    assert record == json.loads((entry / PRECISION_FILE).read_text())
    assert chosen_precision(entry)["chosen"] == record["chosen"]
    assert record["chosen"] == choose(record["measured"])["chosen"]
    tts = Qwen3TTS.load(folder, cache_dir=tmp_path, weights="auto")
    assert tts.weights == record["chosen"]
