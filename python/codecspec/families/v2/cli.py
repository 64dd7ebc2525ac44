"""The v2 family's `codecspec bench` figures (the registry's "bench_figures" hook for v2
and v3 folders).

It sits in the family's package so that the CLI imports no family (it reaches this
through the registry table), and it imports no CLI code: `codecspec.cli.bench` reports
the figures it returns.
"""

from __future__ import annotations

__all__ = ["bench_figures"]


def bench_figures(args, model, common) -> tuple:
    """v2/v3: temporal and depth loops, AR vs speculation, both on the pipeline; (the
    figures, the record function) for `model`'s folder with the bench's shared keywords
    `common`."""
    from codecspec.pipeline.depth_bench import bench_depth_loop

    from .bench import bench_v2, record_v2

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
    return res, record_v2
