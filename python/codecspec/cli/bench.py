"""`codecspec bench`: its options (a family's own: the registry's `cli_options`) and the
command: with --streams the serving engine's scaling bench
(`codecspec.serve.commands.cmd_bench_streams`), else the one driver over the family
(`codecspec.pipeline.bench`); the figures are reported here, with --quality's table after
them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from codecspec.cli import options
from codecspec.cli.quality import quality_options, run_quality, summary


def run(args) -> int:
    """The scaling bench with --streams, else the family's own."""
    if args.streams:
        from codecspec.serve.commands import cmd_bench_streams

        return cmd_bench_streams(args)
    return cmd_bench(args)


def _scaling(p: argparse.ArgumentParser) -> None:
    """`codecspec bench --streams 1,4,16,64`: the in-process scaling bench of the engine."""
    p.add_argument(
        "--streams",
        type=options.positive_ints,
        default=None,
        help="scaling bench at these stream counts",
    )
    p.add_argument(
        "--stream-mode",
        default="both",
        help="both (ar and spec, default) or a comma list of ar, spec, auto (the model's "
        "calibrated choice per loop: v2/v3 speculate on the temporal loop only)",
    )
    p.add_argument("--plot", type=Path, default=None, help="PNG of the scaling bench")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="AR vs speculative depth loop of the reference model")
    options.cache_dir(p, help="Qwen3-TTS: graph cache (see synth)")
    options.weights(p)
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    options.provider(p)
    options.threads(p, help=options.CORES)
    p.add_argument("--model", default=None, help=options.MODEL_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--texts", type=int, default=None, help="held-out sentences for the pipeline (default 8)"
    )
    p.add_argument(
        "--no-pipeline", action="store_true", help="only the depth loop, not text -> waveform"
    )
    p.add_argument(
        "--quality",
        action="store_true",
        help="also score intelligibility (words recognised, WER; needs codecspec[quality]) "
        "of AR and the speculative mode on the held-out evaluation sentences",
    )
    quality_options(p, prefix="quality-")
    options.sampling(p)
    _scaling(p)
    options.family_options("bench", p)
    p.set_defaults(func=run)


def cmd_bench(args) -> int:
    """`codecspec bench`: every family timed by the one driver
    (`codecspec.pipeline.bench.bench`, over what its `Family` class names) and reported
    here."""
    from codecspec.pipeline import registry
    from codecspec.pipeline.bench import bench

    entry = registry.family_of(args.model)
    family = entry.load("engine")
    options.refuse_other_families_flags(args, "bench", entry)
    common, model = bench_common(args)
    res, record = bench(args, model, common, family)
    return bench_report(args, family, model, res, record)


def bench_common(args) -> tuple:
    """(keyword arguments every family's bench takes, the model's folder)."""
    from codecspec.pipeline.registry import resolve_model_dir

    common = dict(
        seed=args.seed,
        provider=args.provider,
        threads=args.threads,
        params=options.params_from_args(args),
        progress=not args.json,
    )
    model = resolve_model_dir(args.model)
    common.update(options.depth_kwargs(args))
    return common, model


def bench_report(args, family, model, res: dict, record) -> int:
    """The bench's record (codecspec.perf: every stage next to its bandwidth bound, measured
    in this run) joined to its figures (`family`: the `Family` class); --quality's table
    after it. Prints the table and verdict, or with --json one object (the record's keys win
    over older ones of the same name: the family's older figures keep theirs, e.g.
    pipeline_ar_rtf, loop_ms_per_frame)."""
    from codecspec.perf import peak_rss_mb, render_table, stream_bandwidth

    rss = peak_rss_mb()  # before the bandwidth probe, whose buffer would be the peak
    # a bandwidth the family's own run measured (at its sessions' threads) is not probed again
    bw = res.get("bandwidth_gbps")
    bandwidth = 1e9 * bw if bw else stream_bandwidth(threads=int(res.get("threads") or 1))
    res.update(record(res, model, bandwidth=bandwidth, peak_rss_mb=rss))
    table = _bench_quality(args, family, res)
    if args.json:
        print(json.dumps(res))
        return 0
    print("\n".join([render_table(res), *family.bench_lines(res)]))
    if "fidelity_min_p" in res:  # the depth loop alone: AR and speculative codes compared
        ok = "pass" if res["fidelity_min_p"] > 1e-4 else "FAIL"
        print(
            f"fidelity: speculative vs AR codes per position, min p {res['fidelity_min_p']:.3g} "
            f"over {args.frames} frames (> 1e-4): {ok}"
        )
    if table is not None:  # the intelligibility table (in --json it is in the object)
        print()
        print(table)
    return 0


def _bench_quality(args, family, res: dict):
    """--quality: intelligibility of the sides the bench measured, as `family` (its class)
    names them (`quality_modes`: v2's `loops[/accept]`). Adds the figures to `res`
    ("intelligibility") and returns the table to print after the bench's lines."""
    if not args.quality:
        return None
    from codecspec.evaluation.intelligibility import report_table

    modes = family.quality_modes(args)
    reports = run_quality(args, args.model, modes, prefix="quality_")
    res["intelligibility"] = summary(reports)
    rec = next(iter(reports.values()))
    res["intelligibility_recognizer"] = rec["recognizer"]
    res["intelligibility_sentences"] = rec["sentences"]
    return report_table(reports)
