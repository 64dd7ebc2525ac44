"""The v2 family's decode modes as the commands name them: `codecspec synth`'s flags
(`speculation_options`), `codecspec quality`'s and `bench --quality`'s modes.

A v2/v3 model speculates on two loops (temporal: the draft LM's c0; depth: the code
predictor's tree) with one of three acceptance rules, so its modes are "ar" or
`LOOPS[/ACCEPT]` ("both", "temporal/ssd", "depth/pcg", ...). `V2Family`'s
`request_options`, `quality_mode` and `quality_modes` answer with these; the shared
commands name no family.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["bench_modes", "mode_kwargs", "speculation_options"]

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


def bench_modes(args) -> list:
    """AR and the speculative side `codecspec bench` measured: `--loops[/--accept]` (both
    loops, exact, when --loops is not given)."""
    spec = "both" if args.loops is None else args.loops
    return ["ar", spec if args.accept == "exact" else f"{spec}/{args.accept}"]


def speculation_options(args, tts) -> dict:
    """`V2TTS.generate` keywords from --loops/--accept/--beta/--theta/--draft-len (`args`);
    PCG's group cosine defaults to the model's own."""
    if args.loops is None:
        return {"draft_len": args.draft_len}
    from codecspec.decode.temporal import speculation_config

    theta = args.theta
    if args.accept == "pcg" and theta is None:
        theta = float(tts.meta.get("pcg_theta", 0.95))
    kw = speculation_config(args.loops, args.accept, args.beta, theta)
    kw["draft_len"] = args.draft_len
    if args.loops == "temporal":  # the depth loop keeps --mode
        kw.pop("mode")
    return kw
