"""The protocol's bench (`codecspec.pipeline.bench`): a family without a bench of its own is
timed through `Family.prepare` and the one loop, and its `stages()` weight bytes give the
bound beside the figure. Checked on the example family: the frames are the loop's, a family
made slower in its step measures slower in the same run, and the bound is bytes ÷
bandwidth. The one driver's timing (`run_sides`, `side_figures`), which every family with
figures of its own goes through, on a model that records its calls."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest
from example_family import ENTRY
from example_family.engine import ToyFamily
from example_family.model import write_folder

import codecspec as cs
from codecspec.pipeline import registry
from codecspec.pipeline.bench import (
    BENCH_TEXTS,
    family_record,
    run_sides,
    side_figures,
    time_family,
)
from codecspec.pipeline.family import Stage
from codecspec.pipeline.loop import run_inline
from codecspec.pipeline.result import Result
from codecspec.serve.engine import SpeechRequest


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    registry.register(ENTRY)
    yield write_folder(tmp_path_factory.mktemp("toy_bench"))
    registry.unregister(ENTRY.name)


class SlowToy(ToyFamily):
    """The example family with 2 ms of extra work per step (a degraded variant)."""

    def step(self, streams, check):
        time.sleep(0.002)
        return super().step(streams, check)


class WeighedToy(ToyFamily):
    def stages(self):
        return [Stage("logits", 4_000_000), Stage("sampling", 0, calls=0.0)]


def _open(cls, folder):
    return cls(folder, 1, 480, 722, "cpu", 1)


def test_frames_are_the_loops(folder):
    family = _open(ToyFamily, folder)
    got = time_family(family, BENCH_TEXTS[:2], rounds=1)
    want = 0
    for i, text in enumerate(BENCH_TEXTS[:2]):
        state = family.prepare(SpeechRequest(text, seed=i), cs.Generator(i))
        want += sum(1 for _ in run_inline(family, state))
    assert got["ar"]["frames"] == want > 0 and got["ar"]["ms_per_frame"] > 0


def test_a_slower_step_measures_slower_in_the_same_run(folder):
    fast, slow = _open(ToyFamily, folder), _open(SlowToy, folder)
    times: dict = {"fast": [], "slow": []}
    for _ in range(3):  # interleaved, so a busy machine slows both alike
        for name, family in (("fast", fast), ("slow", slow)):
            times[name].append(time_family(family, BENCH_TEXTS[:1], rounds=1)["ar"]["ms_per_frame"])
    t_fast, t_slow = (sorted(times[k])[1] for k in ("fast", "slow"))
    assert t_slow > t_fast + 1.5  # the 2 ms a step sleeps, less timer slack


def test_the_record_bounds_the_stages_by_bytes_over_bandwidth(folder):
    family = _open(WeighedToy, folder)
    timing = time_family(family, BENCH_TEXTS[:1], rounds=1)
    rec = family_record(family, timing, bandwidth=2e9)
    logits = rec["stages"][0]
    assert logits["name"] == "logits" and logits["bound_ms_ar"] == pytest.approx(2.0)
    assert rec["bound_ms_per_frame"]["ar"] == pytest.approx(2.0)
    assert rec["ms_per_frame"]["ar"] == timing["ar"]["ms_per_frame"]
    assert rec["ms_per_frame"]["spec"] is None  # the example family has one loop
    audio_ms = 1e3 / family.frame_rate  # 50 ms a frame at 20 frames/s
    assert rec["pipeline_rtf"]["ar"] == pytest.approx(rec["ms_per_frame"]["ar"] / audio_ms)


class Unweighed(ToyFamily):
    def stages(self):
        return []


def test_a_family_that_states_no_stages_gets_no_bound(folder):
    rec = family_record(_open(Unweighed, folder), {"ar": {"frames": 3, "ms_per_frame": 1.0}}, 1e9)
    assert rec["stages"] == [] and rec["bound_ms_per_frame"]["ar"] is None


def test_bad_arguments_name_themselves(folder):
    family = _open(ToyFamily, folder)
    with pytest.raises(ValueError, match="rounds"):
        time_family(family, BENCH_TEXTS, rounds=0)
    with pytest.raises(ValueError, match="texts"):
        time_family(family, [])
    with pytest.raises(ValueError, match="weights"):
        registry.open_family(str(folder), 1, 48, 64, "cpu", 1, weights="int8")


def test_the_command_prints_the_table(folder, capsys):
    from codecspec.cli import main

    assert main(["bench", "--model", str(folder), "--texts", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "example-toy" in out and "total" in out and "verdict:" in out


def test_codecspec_bench_runs_a_family_without_a_bench_of_its_own(folder, capsys):
    """The example family has no bench of its own: `codecspec bench --model DIR` measures it
    through the protocol, its `stages()` bounding the frame."""
    import json

    from codecspec.cli import main

    argv = ["bench", "--model", str(folder), "--json", "--texts", "1", "--provider", "cpu"]
    assert main(argv) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["family"] == "example-toy" and rec["frames"]["ar"] > 0
    assert [s["name"] for s in rec["stages"]] == ["logits"]
    assert rec["stages"][0]["bytes_ar"] > 0 and rec["bound_ms_per_frame"]["ar"] > 0
    assert rec["ms_per_frame"]["ar"] > 0 and rec["cpu_simd"]


# ---------------------------------------------------------------- the one driver's timing
@dataclass
class _Made(Result):
    """A result whose stages took `seconds` each (what `side_figures` reads)."""

    seconds: float = 0.0
    hit_max_frames: bool = False

    def stage_seconds(self) -> dict:
        return {"temporal": self.seconds, "depth": self.seconds}

    @property
    def audio_seconds(self) -> float:
        return self.frames / 10  # 10 frames a second


class _Recorder:
    """A model whose `generate` records its calls: frames = 2 + seed, 1 ms a frame per stage."""

    def __init__(self):
        self.calls = []

    def generate(self, text, *, mode, seed=0, decode_audio=True):
        self.calls.append((text, mode, seed, decode_audio))
        n = 2 + seed
        return _Made(np.zeros((n, 2), np.int64), seconds=1e-3 * n)


def test_run_sides_warms_each_side_then_flips_the_order_per_request():
    tts = _Recorder()
    sides = {"ar": {"mode": "ar"}, "spec": {"mode": "spec"}}
    runs = run_sides(tts, [{"text": "a"}, {"text": "b"}], sides, seed=5)
    warm, timed = tts.calls[:2], tts.calls[2:]
    assert [(m, audio) for _, m, _, audio in warm] == [("ar", False), ("spec", False)]
    assert timed == [("a", "ar", 5, True), ("a", "spec", 5, True)] + [
        ("b", "spec", 6, True),
        ("b", "ar", 6, True),
    ]
    assert [r.frames for r in runs["ar"]] == [7, 8]


def test_side_figures_are_medians_per_frame_and_sums_per_audio():
    rows = [_Made(np.zeros((n, 2), np.int64), seconds=1e-3 * n) for n in (2, 4, 30)]
    f = side_figures(rows)
    assert f["frames"] == 36 and f["audio_seconds"] == pytest.approx(3.6)
    assert f["ms_per_frame"] == pytest.approx(2.0)  # 1 ms a frame in each of two stages
    assert f["stage_ms_per_frame"] == {"temporal": pytest.approx(1.0), "depth": pytest.approx(1.0)}
    assert f["rtf"] == pytest.approx(0.072 / 3.6)
    assert f["tokens_per_call"] is None and f["hit_max_frames"] == 0  # no depth loop here
