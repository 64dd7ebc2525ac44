"""The reference TTS's stages driven for many streams per graph call.

`BatchedTemporal` (`codecspec.tts.temporal_batch`) runs the temporal step graph for every
active stream in one call, on the shipped graph given a batch axis and attention masks in
memory; `ReferenceTTS.generate` runs its utterance as one slot of the same stepper.

`BatchedDepth`, the depth loop for many frames per call, lives in
`codecspec.decode.batched_depth` (the single-stream temporal loop uses it too); its names are
re-exported here.
"""

from __future__ import annotations

from codecspec.decode.batched_depth import (  # noqa: F401  (the engine's names for them)
    ROOT_ONLY,
    BatchedDepth,
    DepthLane,
    batch_depth_graph,
    sample_roots,
    verify_lanes,
)
from codecspec.runtime.slots import SlotCache  # noqa: F401  (also the FSQ stepper's)
from codecspec.tts.temporal_batch import (  # noqa: F401,E402  (the engine's names)
    BatchedTemporal,
    batch_temporal_graph,
)
