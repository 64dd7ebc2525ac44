"""One thread budget per process: every session of a pipeline runs on the shared pool.

Each case runs in a fresh interpreter, because the pool belongs to the process and this test
process already has one (conftest.py)."""

import json
import os
import subprocess
import sys

import pytest

from codecspec.families.reference.model import default_model_dir
from codecspec.runtime import ThreadBudgetError, open_session, pool_size, session_threads
from codecspec.runtime.threads import available_cpus, check_threads

MODEL = default_model_dir()
linux_only = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")

# Opens the reference pipeline's sessions (encoder, temporal, depth) with 2 threads and reports
# how many OS threads the process gained, per session kind.
PROBE = """
import json, os, sys
from codecspec.runtime import session_threads
def nthreads():
    return len(os.listdir("/proc/self/task"))
before = nthreads()
from codecspec.families.reference.model import ReferenceTTS
tts = ReferenceTTS(provider="cpu", threads=2)
so = tts.temporal.get_session_options()
print(json.dumps({
    "added": nthreads() - before,
    "per_session": [s.get_session_options().use_per_session_threads
                    for s in (tts.encoder, tts.temporal, tts.depth.graph.session)],
    "threads": [session_threads(s) for s in (tts.encoder, tts.temporal, tts.depth.graph.session)],
}))
"""


def _probe(env_extra: dict) -> dict:
    env = dict(os.environ, **env_extra)
    r = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@linux_only
@pytest.mark.skipif(available_cpus() < 2, reason="needs 2 CPUs for a 2-thread pool")
def test_pipeline_sessions_share_one_pool():
    shared = _probe({})
    own = _probe({"CODECSPEC_THREAD_POOL": "session"})
    # The shared pool of 2 threads is the caller plus one worker, whatever the session count;
    # one pool per session adds a worker for each of the three sessions.
    assert shared["per_session"] == [False, False, False]
    assert shared["threads"] == [2, 2, 2]
    assert own["per_session"] == [True, True, True]
    assert own["added"] - shared["added"] == 2, (shared, own)


def test_this_process_runs_every_session_on_the_shared_pool():
    s = open_session(str(MODEL / "temporal.onnx"), provider="cpu")
    assert not s.get_session_options().use_per_session_threads
    assert session_threads(s) == pool_size() == 1  # conftest.py set the budget


def test_a_different_thread_count_is_refused_not_substituted():
    with pytest.raises(ThreadBudgetError, match="threads: .*pool has 1 thread"):
        open_session(str(MODEL / "temporal.onnx"), provider="cpu", threads=2)
    with pytest.raises(ThreadBudgetError, match="threads"):
        check_threads(available_cpus() + 1)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2"])
def test_thread_count_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="threads"):
        check_threads(bad)


def test_unknown_pool_mode_is_named(monkeypatch):
    monkeypatch.setenv("CODECSPEC_THREAD_POOL", "fast")
    with pytest.raises(ValueError, match="CODECSPEC_THREAD_POOL"):
        open_session(str(MODEL / "temporal.onnx"), provider="cpu")
