"""Shared pytest configuration for the codecspec test-suite.

Puts tests/ on sys.path (so ``from stats import ...`` works whatever the import mode) and
registers a deterministic hypothesis profile (fixed seeds, no deadline: the machine is shared).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

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
