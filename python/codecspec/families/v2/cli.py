"""The v2 family's `codecspec bench` (the registry's "bench" hook for v2 and v3 folders).

It sits in the family's package, not in `codecspec.tts.commands`, so that the shared CLI
code imports no family: the shared command reaches it through the registry table.
"""

from __future__ import annotations

__all__ = ["bench_command"]


def bench_command(args) -> int:
    """v2/v3: temporal and depth loops, AR vs speculation, both on the pipeline."""
    from codecspec.pipeline.depth_bench import bench_depth_loop
    from codecspec.tts.commands import bench_common, bench_report

    from .bench import bench_v2, record_v2

    common, model = bench_common(args)
    res = bench_depth_loop(model, args.frames, **common)
    if not args.no_pipeline:
        res.update(
            bench_v2(
                model,
                loops=args.loops,
                accept=args.accept,
                beta=args.beta,
                theta=args.theta,
                draft_len=args.draft_len,
                texts=args.texts,
                **common,
            )
        )
    return bench_report(args, "v2", model, res, record_v2)
