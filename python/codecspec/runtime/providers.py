"""Execution-provider choice: "cpu", "cuda", "coreml" or "auto" (best available)."""

from __future__ import annotations

import logging

import onnxruntime as ort

log = logging.getLogger("codecspec.runtime")

PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
}
# What to install to get each provider, for the error message.
_PACKAGES = {
    "cuda": "onnxruntime-gpu (and a matching CUDA/cuDNN runtime)",
    "coreml": "onnxruntime on macOS (the PyPI wheel for macOS ships CoreML)",
}
AUTO_ORDER = ("cuda", "coreml", "cpu")


class ProviderUnavailable(ValueError):
    """The requested execution provider is not in this onnxruntime build."""


def available() -> list[str]:
    """Short names of the providers this onnxruntime build offers."""
    have = set(ort.get_available_providers())
    return [name for name, full in PROVIDERS.items() if full in have]


def resolve(provider: str) -> list[str]:
    """onnxruntime provider list for `provider`; CPU is always appended as the fallback for
    nodes the accelerator cannot take."""
    if not isinstance(provider, str) or provider.lower() not in (*PROVIDERS, "auto"):
        raise ValueError(
            f"provider: must be one of 'cpu', 'cuda', 'coreml', 'auto', got {provider!r}"
        )
    provider = provider.lower()
    have = available()
    if provider == "auto":
        chosen = next(p for p in AUTO_ORDER if p in have or p == "cpu")
        if chosen == "cpu" and len(have) == 1:
            log.info("provider auto: no accelerator provider available, using CPU")
        else:
            log.info("provider auto: using %s (available: %s)", chosen, ", ".join(have))
        provider = chosen
    elif provider not in have:
        raise ProviderUnavailable(
            f"provider: {provider!r} is not available in this onnxruntime build "
            f"(available: {', '.join(have)}); install {_PACKAGES.get(provider, 'onnxruntime')}"
        )
    names = [PROVIDERS[provider]]
    if provider != "cpu":
        names.append(PROVIDERS["cpu"])
    return names
