"""Shared pytest configuration for the codecspec test-suite.

Puts tests/ on sys.path (so ``from stats import ...`` works whatever the import mode) and
registers a deterministic hypothesis profile (fixed seeds, no deadline: the machine is shared).
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The reference models v1 and v2 are not in the wheel: the tests (and the CLI processes they
# start) find them in the repository's models/ folder, also when codecspec is the installed
# wheel rather than this source tree.
_REPO_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")
os.environ["CODECSPEC_MODEL_PATH"] = os.pathsep.join(
    p for p in (os.environ.get("CODECSPEC_MODEL_PATH"), _REPO_MODELS) if p
)

try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "codecspec",
        derandomize=True,
        deadline=None,
        max_examples=100,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
    )
    settings.load_profile("codecspec")
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass

# Every test in this process shares one onnxruntime thread pool (codecspec.runtime.threads);
# one thread keeps the suite's timings stable on a shared 2-core machine. Tests of the pool
# itself run in fresh subprocesses.
from codecspec.runtime.threads import configure  # noqa: E402

configure(1)


# CI's skip policy: only tests that exercise PyTorch (training, the torch models and their
# export) or a GPU / macOS execution provider may skip, each with its reason. The run ends with
# the list of skips outside the policy; CODECSPEC_STRICT_SKIPS=1 (set by .ci/run) fails it.
ALLOWED_SKIP = re.compile(r"PyTorch|\bGPU\b|CUDA|TensorRT|macOS|CoreML", re.IGNORECASE)
_skipped: list = []


def skip_reason(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)


def pytest_runtest_logreport(report):
    if report.skipped:
        _skipped.append((report.nodeid, skip_reason(report)))


def _outside_policy() -> list:
    return [(node, why) for node, why in _skipped if not ALLOWED_SKIP.search(why)]


def pytest_sessionfinish(session, exitstatus):
    if _outside_policy() and os.environ.get("CODECSPEC_STRICT_SKIPS") == "1" and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    bad = _outside_policy()
    if bad:
        terminalreporter.section("skips outside the policy (PyTorch / GPU / macOS only)")
        for node, why in bad:
            terminalreporter.line(f"{node}: {why}")
