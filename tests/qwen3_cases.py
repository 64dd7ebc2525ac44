"""How a Qwen3-TTS fixture case (tests/data/qwen3_*/*.cases.json, written by
scripts/qwen3_parity_fixtures.py and scripts/qwen3_clone_fixtures.py) reads as codecspec's
arguments. A case holds the arguments the official call was given, and only those: what it
leaves out got the official method's default, so codecspec is given None there and its own
default must give the same codes (issue 49: a clone's default layout differed, and fixtures
that always named the layout could not show it)."""

from __future__ import annotations

from typing import Optional


def streaming_text(case: dict) -> Optional[bool]:
    """codecspec's `streaming_text` for the case: the official non_streaming_mode negated
    where the call passed one, None (the official default of the mode) where it did not."""
    nsm = case.get("non_streaming_mode")
    return None if nsm is None else not nsm


def language(case: dict) -> Optional[str]:
    """The case's language; None where the call passed none (codecspec's default, "auto",
    must be the official "Auto")."""
    return case.get("language")
