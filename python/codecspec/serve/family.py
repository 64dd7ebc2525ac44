"""The protocol's old home: `Family`, `StreamState`, `Frame`, `guard`, `sampling_params` live in
`codecspec.pipeline.family` and are re-exported here for the code that imports them from this
module. The reference family's adapter that was here is
`codecspec.families.reference.model.ReferenceFamily`.
"""

from codecspec.pipeline.family import (  # noqa: F401  (re-exported: the names' old home)
    Check,
    Family,
    Frame,
    StreamState,
    guard,
    guard_value,
    sampling_params,
)
