"""The FSQ family's `codecspec bench` figures (the registry's "bench_figures" hook for FSQ
folders).

It sits in the family's package so that the CLI imports no family (it reaches this
through the registry table), and it imports no CLI code: `codecspec.cli.bench` reports
the figures it returns.
"""

from __future__ import annotations

__all__ = ["bench_figures"]


def bench_figures(args, model, common) -> tuple:
    """FSQ: one graph call per frame; (its figures, the record function) for `model`'s folder
    with the bench's shared keywords `common`."""

    from .bench import bench_fsq, record_fsq

    res = bench_fsq(model, args.utterances, batch=args.batch, **common)
    return res, record_fsq
