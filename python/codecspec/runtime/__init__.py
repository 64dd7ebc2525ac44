"""ONNX Runtime plumbing: provider choice, sessions, one thread budget, the host KV cache."""

from codecspec.runtime.kv import KVCache
from codecspec.runtime.providers import ProviderUnavailable, available, resolve
from codecspec.runtime.session import open_session, session_options, session_threads
from codecspec.runtime.threads import ThreadBudgetError, configure, pool_size

__all__ = [
    "KVCache",
    "ProviderUnavailable",
    "ThreadBudgetError",
    "available",
    "configure",
    "open_session",
    "pool_size",
    "resolve",
    "session_options",
    "session_threads",
]
