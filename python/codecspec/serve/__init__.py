"""Serving many streams at once: continuous batching (`engine`), the OpenAI-compatible HTTP
app (`app`, encodings in `audio`), scale-out on Ray Serve (`ray`) and the scaling bench /
load test (`bench`).

The engine is one loop over a model-family adapter (`family`: the RVQ reference; `fsq`: the
FSQ family; `v2`: reference model v2, one round loop per stream). The batched stages
(`batched`, `fsq.FSQSlots`) sit on top of each family's own stages: the same sessions, heads
and sampling, driven for many streams per graph call.
"""

from codecspec.serve.engine import Engine, Overloaded, SpeechRequest, StreamFailed

__all__ = ["Engine", "Overloaded", "SpeechRequest", "StreamFailed"]
