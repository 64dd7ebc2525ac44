"""The model-agnostic pipeline: the protocol a model family implements (`family.Family`,
its per-stream `StreamState` and `Frame`) and the one table of families (`registry`).

Nothing in this package names a family's code except by module path in the registry's
table, and it imports nothing from `codecspec.families` or `codecspec.train`
(tests/repository/test_layering.py)."""

from codecspec.pipeline.family import (
    Check,
    Family,
    Frame,
    SamplingOverride,
    StreamState,
    guard,
    guard_value,
    model_format,
    resolve_params,
    sampling_params,
)

__all__ = [
    "Check",
    "Family",
    "Frame",
    "SamplingOverride",
    "StreamState",
    "guard",
    "guard_value",
    "model_format",
    "resolve_params",
    "sampling_params",
]
