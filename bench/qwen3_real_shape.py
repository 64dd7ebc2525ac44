"""Qwen3-TTS at its real size on this CPU: the figures of docs/qwen3_tts.md's table and
docs/performance.md, from one run.

No real weights can be downloaded here, and the time of a graph call does not depend on the
values of its weights, so this measures a random-weight folder of the real shape (written by
`codecspec random-checkpoint qwen3-0.6b DIR`) with controlled draft acceptance (only the
acceptance needs real weights; decode.depth.ControlledDrafts):

1. per precision (fp32, int8, int4): the speed-up map of the code predictor, top-1
   acceptance 0.1 .. 0.9 x chain depth 1 .. 3, measured vs ideal tau(N)/c(N), read at the
   paper's 2.47 codes per call (docs/qwen3_speedup_map_<w>.png; the int8/fp32 maps are what
   `codecspec calibrate --model DIR` locates a checkpoint on);
2. per precision: the whole pipeline (talker, depth loop AR and speculative at the acceptance
   and depth the map puts nearest the paper's 2.47 codes per call, the 12 Hz speech
   decoder), every stage next to its bandwidth bound, peak RSS;
3. how far a quantised graph's logits move with the grouping of positions into calls (what
   separates speculative from AR decoding of a quantised model; quant_error.grouping_error).

    codecspec random-checkpoint qwen3-0.6b /tmp/qwen3_06b
    python bench/qwen3_real_shape.py --model /tmp/qwen3_06b --threads 2 [--ship-maps]

Writes docs/qwen3_real_shape.{json,md} (and the map plots); --ship-maps also copies the maps
into python/codecspec/models/ for `calibrate`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAPER = 2.47


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def nearest_point(doc: dict, target: float = PAPER) -> dict:
    """The measured map point whose tokens per call is nearest `target`, preferring the
    faster one among near ties (what a calibrated tree would pick)."""
    pts = sorted(doc["points"], key=lambda p: abs(p["tokens_per_call"] - target))
    near = [p for p in pts if abs(p["tokens_per_call"] - target) <= 0.15] or pts[:1]
    return max(near, key=lambda p: p["speedup"])


def run(args) -> dict:
    global DOCS
    DOCS = Path(args.out)
    DOCS.mkdir(parents=True, exist_ok=True)
    from codecspec.calibrate.speedup_map import locate, plot_speedup_map
    from codecspec.families.qwen3_tts.bench import bench_qwen3, speedup_map
    from codecspec.families.qwen3_tts.quant_error import grouping_error

    out: dict = {"model": str(args.model), "threads": args.threads, "weights": {}}
    for w in args.weights:
        _log(f"{w}: speed-up map")
        doc = speedup_map(
            args.model,
            weights=w,
            # up to 1.0: a quantised verify call rounds a few positions differently from the
            # AR run the controlled drafts are right about (docs/performance.md), so its
            # codes per call at a given acceptance fall short of fp32's
            acceptances=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0),
            frames=args.map_frames,
            cache_dir=args.cache_dir,
            threads=args.threads,
            log=_log,
        )
        loc = locate(doc, PAPER)
        pick = nearest_point(doc)
        plot_speedup_map(doc, DOCS / f"qwen3_speedup_map_{w}.png")
        (DOCS / f"qwen3_speedup_map_{w}.json").write_text(json.dumps(doc, indent=1))
        if args.ship_maps:
            dst = ROOT / "python" / "codecspec" / "models" / f"qwen3_speedup_map.{w}.json"
            shutil.copyfile(DOCS / f"qwen3_speedup_map_{w}.json", dst)
        _log(f"{w}: pipeline at a={pick['acceptance']} N={pick['budget']}")
        rec = bench_qwen3(
            args.model,
            frames=args.frames,
            cache_dir=args.cache_dir,
            provider="cpu",
            threads=args.threads,
            weights=w,
            acceptance=pick["acceptance"],
            draft_depth=pick["budget"],
            decoder=not args.no_decoder,
            log=_log,
        )
        entry = {"map_at_paper": loc, "map_point": pick, "pipeline": rec}
        if w != "fp32":
            entry["grouping_error"] = grouping_error(
                args.model, w, cache_dir=args.cache_dir, threads=args.threads
            )
        out["weights"][w] = entry
    return out


def table(res: dict) -> str:
    rows = [
        "| weights | talker ms | depth AR ms | depth spec ms | depth ×  | codes/call | "
        "decoder ms | host ms | total AR / spec ms | RTF AR / spec | bound AR / spec ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w, e in res["weights"].items():
        r = e["pipeline"]
        st = r["stage_ms_per_frame"]

        def ms(name, mode="ar", st=st):
            v = st.get(name, {}).get(mode)
            return "–" if v is None else f"{v:.1f}"

        host = next((k for k in st if k.startswith("host")), "host")
        rows.append(
            f"| {w} | {ms('talker step')} | {ms('depth loop')} | {ms('depth loop', 'spec')} | "
            f"{r['depth_speedup']:.2f}× | {r['tokens_per_call']:.2f} | {ms('speech decoder')} | "
            f"{ms(host)} | {r['ms_per_frame']['ar']:.0f} / {r['ms_per_frame']['spec']:.0f} | "
            f"{r['pipeline_rtf']['ar']:.2f} / {r['pipeline_rtf']['spec']:.2f} | "
            f"{r['bound_ms_per_frame']['ar']:.0f} / {r['bound_ms_per_frame']['spec']:.0f} |"
        )
    lines = ["\n".join(rows), ""]
    for w, e in res["weights"].items():
        loc, g = e["map_at_paper"], e.get("grouping_error")
        line = (
            f"- {w}: the speed-up map at {PAPER} codes/call: {loc['speedup']:.2f}× measured, "
            f"{loc['ideal_speedup']:.2f}× ideal; bandwidth {e['pipeline']['bandwidth_gbps']:.1f}"
            f" GB/s; host work {e['pipeline']['host_ms_per_call']['spec']:.2f} ms per "
            "speculative call"
        )
        if g:
            line += (
                f"; logits move by up to {g['max_abs']:.3f} with the grouping of positions into "
                f"calls (mean TV of the sampled law {g['tv_mean']:.4f}, greedy codes "
                f"agree {100 * g['argmax_agreement']:.1f}%)"
            )
        lines.append(line)
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a real-shape Qwen3-TTS folder")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--frames", type=int, default=24, help="pipeline frames per precision")
    ap.add_argument("--map-frames", type=int, default=12, help="frames per map point")
    ap.add_argument("--weights", nargs="+", default=["fp32", "int8", "int4"])
    ap.add_argument("--no-decoder", action="store_true")
    ap.add_argument("--ship-maps", action="store_true")
    ap.add_argument("--out", default=str(DOCS), help="where the figures go (default docs/)")
    ap.add_argument(
        "--table-only", action="store_true", help="rewrite the .md from the stored .json"
    )
    args = ap.parse_args(argv)
    if args.table_only:
        md = table(json.loads((Path(args.out) / "qwen3_real_shape.json").read_text()))
        (Path(args.out) / "qwen3_real_shape.md").write_text(md + "\n")
        print(md)
        return 0
    t0 = time.time()
    res = run(args)
    res["seconds"] = round(time.time() - t0, 1)
    res["load_average_at_end"] = list(np.round(np.array(__import__("os").getloadavg()), 2))
    for w in res["weights"].values():
        w["load_average_at_end"] = res["load_average_at_end"]
    path = DOCS / "qwen3_real_shape.json"
    if path.is_file():  # a run of some precisions updates theirs and keeps the others
        old = json.loads(path.read_text())
        if old.get("model") == res["model"]:
            res["weights"] = {**old.get("weights", {}), **res["weights"]}
    path.write_text(json.dumps(res, indent=1, default=float))
    md = table(res)
    (DOCS / "qwen3_real_shape.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
