"""`codecspec speedup-map`: measured vs ideal depth speculation speed-up vs acceptance, here."""

from __future__ import annotations

import argparse
import json

from codecspec.cli import options


def cmd_speedup_map(args) -> int:
    from codecspec.calibrate.speedup_map import DEFAULT_SHARPNESS, build_speedup_map, map_table

    doc = build_speedup_map(
        args.out,
        sharpness=args.sharpness or DEFAULT_SHARPNESS,
        frames=args.frames,
        calib_frames=args.calib_frames,
        provider=args.provider,
        threads=args.threads,
        seed=args.seed,
        progress=not args.json,
    )
    if args.json:
        print(json.dumps(doc))
    else:
        print(map_table(doc))
        print(f"wrote {args.out}/speedup_map.json, .md, .png ({doc['seconds']:.0f} s)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "speedup-map", help="measured vs ideal depth speculation speed-up vs acceptance, here"
    )
    p.add_argument("--out", default="speedup_map", help="output directory (default ./speedup_map)")
    p.add_argument(
        "--sharpness",
        type=float,
        nargs="+",
        default=None,
        help="drift-family head sharpness values (default: 9 points, a ~0.1-0.95)",
    )
    p.add_argument("--frames", type=int, default=160, help="AR+spec frames per point")
    p.add_argument("--calib-frames", type=int, default=256)
    options.provider(p, default="cpu")
    options.threads(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    p.set_defaults(func=cmd_speedup_map)
