"""ONNX Runtime plumbing: provider choice, sessions, the host-owned KV cache."""

from codecspec.runtime.kv import KVCache
from codecspec.runtime.providers import ProviderUnavailable, available, resolve
from codecspec.runtime.session import open_session, session_options

__all__ = [
    "KVCache",
    "ProviderUnavailable",
    "available",
    "open_session",
    "resolve",
    "session_options",
]
