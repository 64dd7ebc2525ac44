"""The reference family's `codecspec bench` (the registry's "bench" hook for reference
folders).

It sits in the family's package, not in `codecspec.tts.commands`, so that the shared CLI
code imports no family: the shared command reaches it through the registry table.
"""

from __future__ import annotations

__all__ = ["bench_command"]


def bench_command(args) -> int:
    """The RVQ reference (registry hook): the depth loop alone and inside synthesis."""
    from codecspec.pipeline.depth_bench import bench_depth_loop
    from codecspec.tts.commands import bench_common, bench_report

    from .bench import bench_pipeline, record_reference

    common, model = bench_common(args)
    res = bench_depth_loop(model, args.frames, **common)
    if not args.no_pipeline:
        res.update(bench_pipeline(model, texts=args.texts, **common))
        # The issue this answers: the depth loop inside synthesis vs alone, same run.
        res["depth_in_pipeline_ratio"] = res["pipeline_depth_ms_per_frame"] / res["ar_ms_per_frame"]
    return bench_report(args, "reference", model, res, record_reference)
