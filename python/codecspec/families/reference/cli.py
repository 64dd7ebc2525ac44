"""The reference family's `codecspec bench` figures (the registry's "bench_figures" hook
for reference folders).

It sits in the family's package so that the CLI imports no family (it reaches this
through the registry table), and it imports no CLI code: `codecspec.cli.bench` reports
the figures it returns.
"""

from __future__ import annotations

__all__ = ["bench_figures"]


def bench_figures(args, model, common) -> tuple:
    """The RVQ reference: the depth loop alone and inside synthesis; (the figures, the
    record function) for `model`'s folder with the bench's shared keywords `common`."""
    from codecspec.pipeline.depth_bench import bench_depth_loop

    from .bench import bench_pipeline, record_reference

    res = bench_depth_loop(model, args.frames, **common)
    if not args.no_pipeline:
        res.update(bench_pipeline(model, texts=args.texts, **common))
        # The issue this answers: the depth loop inside synthesis vs alone, same run.
        res["depth_in_pipeline_ratio"] = res["pipeline_depth_ms_per_frame"] / res["ar_ms_per_frame"]
    return res, record_reference
