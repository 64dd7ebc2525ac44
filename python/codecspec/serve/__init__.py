"""Serving many streams at once: continuous batching (`engine`), the OpenAI-compatible HTTP
app (`app`), scale-out on Ray Serve (`ray`) and the scaling bench / load test (`bench`).

The batched stages (`batched`) sit on top of the reference TTS's own stages: the same
sessions, heads, offsets and draft tree, driven for many streams per graph call.
"""

from codecspec.serve.engine import Engine, Overloaded, SpeechRequest, StreamFailed

__all__ = ["Engine", "Overloaded", "SpeechRequest", "StreamFailed"]
