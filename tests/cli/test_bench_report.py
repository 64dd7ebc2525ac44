"""The lines `codecspec bench` prints under its table, per family, pinned word for word: the
table, the family class's own lines (`Family.bench_lines`: FSQ's --batch line), then the
shared depth loop's fidelity line. Moving a line between the shared report and a family
must not change a character of what a user reads."""

from __future__ import annotations

from argparse import Namespace

import pytest

from codecspec import perf
from codecspec.cli.bench import bench_report
from codecspec.pipeline import registry

FSQ_BATCH = {"batch": 4, "batch_ms_per_step": 4.08824, "batch_frames_per_second": 123.4}
FIDELITY = {"fidelity_min_p": 0.0029638}
FIDELITY_LINE = (
    "fidelity: speculative vs AR codes per position, min p 0.00296 over 300 frames (> 1e-4): pass"
)


@pytest.fixture
def report(monkeypatch, capsys):
    """(family name, figures) -> what the human report prints, with the table stubbed (its
    own tests are test_perf.py's) and no bandwidth probe or quality run."""
    monkeypatch.setattr(perf, "render_table", lambda res: "TABLE")
    monkeypatch.setattr(perf, "stream_bandwidth", lambda threads: 1e10)
    args = Namespace(json=False, quality=False, frames=300)

    def run(name: str, res: dict) -> list:
        family = registry.by_name(name).load("engine")
        assert bench_report(args, family, "folder", dict(res), lambda *a, **kw: {}) == 0
        return capsys.readouterr().out.splitlines()

    return run


def test_fsq_prints_its_batch_line_only_with_a_batch(report):
    line = "batch of 4: 4.09 ms per step, 123 frames/s"
    assert report("fsq", FSQ_BATCH) == ["TABLE", line]
    assert report("fsq", dict(FSQ_BATCH, batch=1)) == ["TABLE"]
    assert report("fsq", {}) == ["TABLE"]


@pytest.mark.parametrize("name", ["reference", "v2"])
def test_the_depth_loop_families_print_the_fidelity_line(report, name):
    assert report(name, FIDELITY) == ["TABLE", FIDELITY_LINE]
    failed = report(name, {"fidelity_min_p": 5e-5})
    assert failed[1].endswith("min p 5e-05 over 300 frames (> 1e-4): FAIL")
