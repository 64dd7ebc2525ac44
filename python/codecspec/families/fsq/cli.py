"""The FSQ family's `codecspec bench` (the registry's "bench" hook for FSQ folders).

It sits in the family's package, not in `codecspec.tts.commands`, so that the shared CLI
code imports no family: the shared command reaches it through the registry table.
"""

from __future__ import annotations

__all__ = ["bench_command"]


def bench_command(args) -> int:
    """FSQ: one graph call per frame, its own figures."""
    from codecspec.tts.commands import bench_common, bench_report

    from .bench import bench_fsq, record_fsq

    common, model = bench_common(args)
    res = bench_fsq(model, args.utterances, batch=args.batch, **common)
    return bench_report(args, "fsq", model, res, record_fsq)
