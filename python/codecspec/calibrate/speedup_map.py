"""The speed-up map of a device: what depth speculation gains here as a function of how
predictable a model's codes are.

A family of synthetic depth models of the shipped reference model's shape (5 x 256, 1024
codes, 4 offsets) whose draft acceptance is set by one knob: `drift_weights` makes the codes
"sticky" across RVQ levels, and its head `sharpness` sets how often a draft is right (top-1
head-reuse acceptance at depth 1 from ~0.05 at sharpness 5 to ~0.9 at 60+). Each model is
calibrated on this machine exactly as a user's model would be (offsets, acceptance, latency
profile, tree choice), then decoded AR and speculatively on the same frames, interleaved. Per
point the map records the measured speed-up next to the ideal one, tau(N) / c(N): the calls
the tree saves times the cost of each call, both from the same run's bare graph calls (host
work counted as free). The gap between the two is what host work and cache interference cost.

`codecspec speedup-map` builds it; `codecspec calibrate` prints where a model falls on it.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

import codecspec as cs
from codecspec.progress import bar

__all__ = [
    "where_on_the_map",
    "DEFAULT_SHARPNESS",
    "MAP_FORMAT",
    "PAPER_QWEN3_TOKENS_PER_CALL",
    "build_speedup_map",
    "locate",
    "map_point",
    "plot_speedup_map",
    "shipped_map_path",
]

MAP_FORMAT = "codecspec.speedup_map/1"
# Head sharpness of the family: top-1 acceptance from ~0.1 to ~0.95 (measured per point).
DEFAULT_SHARPNESS = (7.0, 10.0, 14.0, 18.0, 24.0, 32.0, 45.0, 70.0, 120.0)
# The on-device RVQ speculation paper's Qwen3-TTS 0.6B figure (offsets, K=3).
PAPER_QWEN3_TOKENS_PER_CALL = 2.47


def shipped_map_path() -> Path:
    """The map measured on the project's 2-core CPU, shipped beside the reference model."""
    return Path(__file__).resolve().parents[1] / "models" / "speedup_map.json"


def _family_member(workdir: Path, sharpness: float, seed: int) -> Path:
    from codecspec.calibrate.data import drift_weights
    from codecspec.graphs import build_depth_graph, save_model
    from codecspec.graphs.config import small_depth
    from codecspec.graphs.storage import round_bf16_exact
    from codecspec.runtime.depth_graph import heads_sidecar

    config = small_depth(
        intermediate_size=512, codebook_size=1024, c0_vocab_size=1024, num_draft_offsets=4
    )
    weights = drift_weights(config, seed=seed, sharpness=float(sharpness), drift=0.6)
    # As shipped: bf16-exact heads, so HeadBank keeps one half-size array for targets and
    # drafts (the host work between calls then evicts as little as the real model's does).
    weights["heads"] = round_bf16_exact(weights["heads"], "heads")
    path = workdir / f"drift_{sharpness:g}" / "depth.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_model(build_depth_graph(config, weights, heads="hidden"), path)
    np.save(heads_sidecar(path), np.asarray(weights["heads"], np.float32))
    return path


def map_point(
    model_path,
    *,
    frames: int = 160,
    calib_frames: int = 256,
    budgets: Sequence[int] = (1, 2, 4, 8, 12, 16),
    params: Optional[cs.SamplingParams] = None,
    provider: str = "cpu",
    threads: Optional[int] = None,
    seed: int = 0,
) -> dict:
    """Calibrates one depth model here and measures AR vs speculative decoding on `frames`
    synthetic frames: measured and ideal speed-up, tokens per call, the chosen tree."""
    from codecspec.calibrate.data import synthetic_inputs
    from codecspec.calibrate.device import calibrate
    from codecspec.decode import DepthDecoder
    from codecspec.decode.timing import ideal_speedup, interleaved_ar_spec

    params = params or cs.SamplingParams(0.9, 50, 1.0)
    model_path = Path(model_path)
    res = calibrate(
        model_path,
        model_path.parent / "calib",
        frames=calib_frames,
        budgets=tuple(budgets),
        provider=provider,
        seed=seed,
        params=params,
        threads=threads,
        latency_repeats=15,
        end_to_end_frames=0,
        overhead_frames=0,
        plots=False,
        progress=False,
    )
    dec = DepthDecoder(
        model_path,
        tree=res.tree,
        offsets=res.offsets,
        params=params,
        provider=provider,
        threads=threads,
    )
    hiddens, c0s = synthetic_inputs(dec.config, frames, seed + 101)
    run = interleaved_ar_spec(dec, hiddens, c0s, frames, seed, False)
    ar_ms, spec_ms = run.median_ms("ar"), run.median_ms("spec")
    spec_cpf = run.calls["spec"] / frames
    ideal = ideal_speedup(dec, spec_cpf)
    top1 = res.acceptance.top(1)
    return {
        "tokens_per_call": (dec.G - 1) / spec_cpf,
        "acceptance_top1": [float(x) for x in top1],
        "acceptance_top1_mean": float(np.mean(top1)),
        "budget": int(res.budget),
        "tree_nodes": int(res.tree.num_nodes),
        "ar_ms_per_frame": ar_ms,
        "spec_ms_per_frame": spec_ms,
        "speedup": ar_ms / spec_ms,
        "ideal_speedup": ideal["ideal_speedup"],
        "efficiency": (ar_ms / spec_ms) / ideal["ideal_speedup"],
        "predicted_speedup": float(res.predicted_speedup),
        "cost_ratio": ideal["graph_ms_tree"] / ideal["graph_ms_q1"],
        "graph_ms_q1": ideal["graph_ms_q1"],
        "graph_ms_tree": ideal["graph_ms_tree"],
        "ar_host_share": run.host_share("ar"),
        "spec_host_share": run.host_share("spec"),
        "speculation_pays": res.decision.speculate,
    }


def build_speedup_map(
    out_dir=None,
    *,
    sharpness: Sequence[float] = DEFAULT_SHARPNESS,
    frames: int = 160,
    calib_frames: int = 256,
    provider: str = "cpu",
    threads: Optional[int] = None,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    """Measures every member of the drift family on this device; writes speedup_map.json,
    speedup_map.md and speedup_map.png into `out_dir` when given."""
    sharpness = [float(s) for s in sharpness]
    if not sharpness or any(not np.isfinite(s) or s <= 0 for s in sharpness):
        raise ValueError(f"sharpness: expected positive numbers, got {sharpness}")
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 8:
        raise ValueError(f"frames: expected an int >= 8, got {frames!r}")
    t0 = time.monotonic()
    points = []
    it = bar(sharpness, "speed-up map", len(sharpness), show=progress)
    with tempfile.TemporaryDirectory() as tmp:
        for s in it:
            path = _family_member(Path(tmp), s, seed)
            pt = map_point(
                path,
                frames=frames,
                calib_frames=calib_frames,
                provider=provider,
                threads=threads,
                seed=seed,
            )
            points.append({"sharpness": s, **pt})
    from codecspec.calibrate.profile import cpu_model, utc_now
    from codecspec.runtime.threads import threads_in_use

    doc = {
        "format": MAP_FORMAT,
        "date": utc_now(),
        "cpu_model": cpu_model(),
        "threads": threads_in_use(threads),  # also right with per-session pools
        "provider": provider,
        "frames": frames,
        "calib_frames": calib_frames,
        "model_shape": "5 x 256, 1024 codes, 4 offsets (the shipped reference depth model)",
        "seconds": round(time.monotonic() - t0, 1),
        "points": points,
    }
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "speedup_map.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "speedup_map.md").write_text(map_table(doc) + "\n")
        plot_speedup_map(doc, out / "speedup_map.png", marks=shipped_marks())
    return doc


def shipped_marks() -> dict:
    """Tokens per call of the shipped reference model (its report.json bench), to mark."""
    from codecspec.model_store import named_model_dir

    rep = named_model_dir("reference") / "report.json"
    try:
        tpc = json.loads(rep.read_text())["bench"]["tokens_per_call"]
    except (OSError, KeyError, ValueError):
        return {}
    return {"shipped reference (v1)": float(tpc)}


def map_table(doc: dict) -> str:
    rows = [
        "| sharpness | top-1 acceptance (mean over depths) | tree N | tokens/call | "
        "measured speed-up | ideal tau/c | efficiency |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in doc["points"]:
        rows.append(
            f"| {p['sharpness']:g} | {p['acceptance_top1_mean']:.2f} | {p['budget']} | "
            f"{p['tokens_per_call']:.2f} | {p['speedup']:.2f}x | {p['ideal_speedup']:.2f}x | "
            f"{100 * p['efficiency']:.0f}% |"
        )
    return "\n".join(rows)


def _sorted_points(doc: dict) -> list:
    return sorted(doc["points"], key=lambda p: p["tokens_per_call"])


def locate(doc: dict, tokens_per_call: float) -> dict:
    """Where a model with `tokens_per_call` falls on a map: the measured and ideal speed-up
    interpolated between the two neighbouring points (clamped at the ends)."""
    pts = _sorted_points(doc)
    x = [p["tokens_per_call"] for p in pts]
    t = float(tokens_per_call)
    return {
        "tokens_per_call": t,
        "speedup": float(np.interp(t, x, [p["speedup"] for p in pts])),
        "ideal_speedup": float(np.interp(t, x, [p["ideal_speedup"] for p in pts])),
        "inside": x[0] <= t <= x[-1],
        "break_even_tokens_per_call": _break_even(pts),
    }


def _break_even(pts: list) -> Optional[float]:
    """Smallest tokens per call at which the measured speed-up crosses 1 (None if never)."""
    for a, b in zip(pts, pts[1:]):
        if a["speedup"] < 1.0 <= b["speedup"]:
            f = (1.0 - a["speedup"]) / (b["speedup"] - a["speedup"])
            return a["tokens_per_call"] + f * (b["tokens_per_call"] - a["tokens_per_call"])
    if pts and pts[0]["speedup"] >= 1.0:
        return pts[0]["tokens_per_call"]
    return None


def plot_speedup_map(doc: dict, path, marks: Optional[dict] = None) -> Optional[Path]:
    """Measured and ideal speed-up vs tokens per call; vertical marks for the shipped model
    (from its report.json when present), the paper's Qwen3-TTS figure and `marks`."""
    try:
        from codecspec.calibrate.plots import pyplot, save

        plt = pyplot()
    except ImportError:
        return None
    pts = _sorted_points(doc)
    x = [p["tokens_per_call"] for p in pts]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ax.plot(x, [p["ideal_speedup"] for p in pts], "o--", color="0.55", label="ideal tau(N)/c(N)")
    ax.plot(x, [p["speedup"] for p in pts], "o-", color="C0", label="measured (AR / spec)")
    for p in pts:
        ax.annotate(
            f"a={p['acceptance_top1_mean']:.2f}\nN={p['budget']}",
            (p["tokens_per_call"], p["speedup"]),
            textcoords="offset points",
            xytext=(4, -22),
            fontsize=7,
        )
    ax.axhline(1.0, color="k", lw=0.8)
    marks = dict(marks or {})
    marks.setdefault("Qwen3-TTS (paper, offsets)", PAPER_QWEN3_TOKENS_PER_CALL)
    for i, (name, tpc) in enumerate(marks.items()):
        ax.axvline(tpc, color=f"C{i + 2}", ls=":", lw=1.2)
        ax.text(
            tpc, ax.get_ylim()[1], f" {name}\n {tpc:.2f}", color=f"C{i + 2}", fontsize=8, va="top"
        )
    ax.set_xlabel("tokens per depth-model call (measured)")
    ax.set_ylabel("depth-loop speed-up over AR")
    ax.set_title(f"Speed-up map: {doc.get('cpu_model', '?')}, {doc.get('threads', '?')} threads")
    return save(fig, ax, path, legend_size=8)


def where_on_the_map(result, path=None) -> str:
    """One line: the calibrated model's tokens per call placed on this device's speed-up map
    (`path`; default the shipped one, measured on the project's CPU)."""
    path = shipped_map_path() if path is None else path
    if not path.is_file():
        return "speed-up map: none shipped; build one with `codecspec speedup-map`"
    doc = json.loads(path.read_text())
    tpc = result.best.simulated_tokens_per_call
    loc = locate(doc, tpc)
    where = "inside" if loc["inside"] else "outside (clamped to)"
    be = loc["break_even_tokens_per_call"]
    return (
        f"speed-up map ({doc.get('cpu_model', '?')}, {doc.get('threads', '?')} threads): "
        f"{tpc:.2f} tokens/call is {where} the measured range -> {loc['speedup']:.2f}x measured "
        f"there (ideal {loc['ideal_speedup']:.2f}x); speculation pays from "
        f"{'n/a' if be is None else f'{be:.2f}'} tokens/call on that device"
    )
