"""The speed-up map: a measured point on a real (tiny) calibration, and the reading of a map."""

import json

import numpy as np
import pytest

from codecspec.calibrate.speedup_map import (
    MAP_FORMAT,
    build_speedup_map,
    locate,
    map_table,
    shipped_map_path,
    where_on_the_map,
)
from codecspec.cli import main


def _doc(points):
    return {"format": MAP_FORMAT, "points": points}


def _pt(tpc, speedup, ideal):
    return {"tokens_per_call": tpc, "speedup": speedup, "ideal_speedup": ideal}


def test_locate_interpolates_and_finds_break_even():
    doc = _doc([_pt(2.0, 1.4, 1.6), _pt(1.0, 0.8, 0.9), _pt(1.5, 1.1, 1.2)])  # any order
    loc = locate(doc, 1.25)
    assert loc["inside"] and loc["speedup"] == pytest.approx(0.95)
    assert loc["ideal_speedup"] == pytest.approx(1.05)
    # measured speed-up crosses 1 between 1.0 (0.8x) and 1.5 (1.1x): at 1.0 + 0.2/0.3 * 0.5
    assert loc["break_even_tokens_per_call"] == pytest.approx(1.0 + 0.5 * 2 / 3)
    far = locate(doc, 3.0)
    assert not far["inside"] and far["speedup"] == pytest.approx(1.4)  # clamped
    assert (
        locate(_doc([_pt(1.0, 0.5, 0.6), _pt(2.0, 0.9, 1.0)]), 1.5)["break_even_tokens_per_call"]
        is None
    )


@pytest.mark.slow
def test_a_measured_point_has_consistent_figures(tmp_path):
    doc = build_speedup_map(tmp_path, sharpness=[60.0], frames=8, calib_frames=48, progress=False)
    (p,) = doc["points"]
    assert (tmp_path / "speedup_map.png").stat().st_size > 1000
    assert json.loads((tmp_path / "speedup_map.json").read_text()) == doc
    assert "| 60 |" in map_table(doc)
    # a sharp drift model: drafts are right most of the time, so calls are saved
    assert p["acceptance_top1_mean"] > 0.5 and p["tokens_per_call"] > 1.2
    assert p["speedup"] == pytest.approx(p["ar_ms_per_frame"] / p["spec_ms_per_frame"])
    assert p["efficiency"] == pytest.approx(p["speedup"] / p["ideal_speedup"])
    assert np.isfinite(p["ideal_speedup"]) and p["ideal_speedup"] > 0
    assert p["tree_nodes"] == p["budget"] + 1


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"sharpness": []}, "sharpness"),
        ({"sharpness": [-1.0]}, "sharpness"),
        ({"frames": 2}, "frames"),
        ({"frames": 8.0}, "frames"),
    ],
)
def test_bad_map_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        build_speedup_map(None, progress=False, **kw)


def test_the_shipped_map_places_a_model():
    path = shipped_map_path()
    doc = json.loads(path.read_text())
    assert doc["format"] == MAP_FORMAT and len(doc["points"]) >= 5
    acc = [p["acceptance_top1_mean"] for p in doc["points"]]
    assert min(acc) < 0.2 and max(acc) > 0.8, "the family spans low to high acceptance"

    class Best:
        simulated_tokens_per_call = 1.1

    class Result:
        best = Best()

    line = where_on_the_map(Result())
    assert "1.10 tokens/call" in line and "x measured" in line


def test_cli_refuses_bad_threads(capsys):
    with pytest.raises(SystemExit):
        main(["speedup-map", "--threads", "0"])
    assert "--threads" in capsys.readouterr().err
