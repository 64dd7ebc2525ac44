"""The soak script's short variant (issue 51; the long run is `bench/serve_soak.py --minutes
30`, docs/serving.md): a `codecspec serve` process under mixed load for ~20 s answers every
valid request whole, no 5xx, and holds its descriptors; the heap trimmer it runs returns
freed memory when requests were answered, and only then."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from paths import REPO  # noqa: E402

from codecspec.serve import heap  # noqa: E402


def test_a_short_soak_loses_nothing(tmp_path):
    out = tmp_path / "soak.json"
    cmd = [sys.executable, str(REPO / "bench" / "serve_soak.py"), "--minutes", "0.33"]
    cmd += ["--clients", "3", "--sample-every", "2", "-o", str(out)]
    # the slope of a 20 s run is warm-up, not a leak: the long run judges it (--bound)
    cmd += ["--bound", "1e9"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    rep = json.loads(out.read_text())
    assert rep["lost"] == [] and rep["responses_5xx"] == 0, rep
    assert rep["counts"].get("valid_200", 0) > 0 and rep["counts"].get("bad_400", 0) > 0, rep
    assert "fds" not in rep["grew_after_warmup"], rep
    assert r.returncode in (0, 1), r.stderr[-2000:]  # 1: threads may vary with the pool


def test_the_heap_trimmer_trims_after_activity_only(monkeypatch):
    calls = []
    monkeypatch.setattr(heap, "trim", lambda: calls.append(1) or True)
    monkeypatch.setattr(heap, "_TRIM", object())  # as on glibc, wherever this runs
    answered = [0]
    t = heap.HeapTrimmer(lambda: answered[0], every=0.02).start()
    try:
        time.sleep(0.2)
        assert calls == [], "nothing answered, nothing to trim"
        answered[0] += 1
        deadline = time.monotonic() + 30
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls, "requests answered: the heap is trimmed"
    finally:
        t.stop()


def test_trim_runs_here():
    # glibc (CI's Linux): both exist; elsewhere both say False and do nothing
    assert heap.trim() is (heap._TRIM is not None)
