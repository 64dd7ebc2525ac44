"""The v2 family's decode modes as `codecspec quality` and `codecspec bench --quality` name them.

A v2/v3 model speculates on two loops (temporal: the draft LM's c0; depth: the code
predictor's tree) with one of three acceptance rules, so its modes are "ar" or
`LOOPS[/ACCEPT]` ("both", "temporal/ssd", "depth/pcg", ...). The registry's "quality_mode"
and "quality_modes" hooks of the v2 entry point here; the shared commands name no family.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["mode_kwargs", "bench_modes"]

ACCEPTS = ("exact", "ssd", "pcg")


def mode_kwargs(mode: str, tts=None, beta: float = 0.3, theta: Optional[float] = None) -> dict:
    """`V2TTS.generate` keywords of a mode; ValueError naming `modes` for one it lacks. PCG's
    group cosine defaults to the model's own (model.json "pcg_theta", else 0.95)."""
    from codecspec.decode.temporal import LOOPS, speculation_config

    if mode == "ar":
        return {"mode": "ar", "temporal": "ar"}
    loops, _, accept = mode.partition("/")
    accept = accept or "exact"
    if loops not in LOOPS or accept not in ACCEPTS:
        raise ValueError(
            f"modes: {mode!r} is not a v2 mode (ar, or LOOPS[/ACCEPT] with LOOPS in {LOOPS} "
            f"and ACCEPT in {', '.join(ACCEPTS)})"
        )
    if accept == "pcg" and theta is None:
        theta = 0.95 if tts is None else float(tts.meta.get("pcg_theta", 0.95))
    return speculation_config(loops, accept, beta, theta)


def bench_modes(loops: Optional[str], accept: str) -> list:
    """AR and the speculative side `codecspec bench` measured: `loops[/accept]` (both loops,
    exact, when --loops is not given)."""
    spec = "both" if loops is None else loops
    return ["ar", spec if accept == "exact" else f"{spec}/{accept}"]
