"""What `codecspec bench` reports of a v2-family model (v2, v3): AR vs speculation in the
temporal loop, the depth loop, or both, with exact, SSD or PCG acceptance.

The one driver (`codecspec.pipeline.bench`) times the depth loop alone and the whole pipeline,
both sides on every held-out sentence; this family names its sides (`bench_sides`: what
`--loops` / `--accept` choose, by default what its calibration found to pay), its requests
(`bench_requests`: v3 reads the text) and its figures (`bench_keys`). Speed-ups are ratios of
medians (over sentences) of per-frame times: `temporal_speedup` the temporal loop alone
(target + draft calls + verification), `depth_speedup` the depth loop alone, `e2e_speedup`
both loops together and `pipeline_speedup` everything users wait for (frontend and vocoder
included).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

import codecspec as cs
from codecspec import perf
from codecspec.calibrate.decision import auto_mode
from codecspec.decode.temporal import Acceptance, speculation_config
from codecspec.fidelity import homogeneity_pvalue
from codecspec.pipeline.bench import side_figures
from codecspec.pipeline.depth_bench import depth_record, pipeline_totals

__all__ = ["bench_keys", "bench_requests", "bench_sides", "record"]


def _per_frame(rows, key) -> float:
    return float(np.median([1e3 * key(r) / r.frames for r in rows]))


def _group_samples(groups: cs.AcousticGroups, tokens, rng) -> np.ndarray:
    """A group per AR token, drawn uniformly from the groups holding it: with w[g, t] =
    1 / |groups_of(t)| this has the coarse law PCG's emitted groups follow."""
    out = np.empty(len(tokens), np.int64)
    for i, t in enumerate(tokens):
        g = groups.groups_of(int(t))
        out[i] = g[rng.integers(len(g))]
    return out


def bench_requests(tts, texts: list, args) -> list:
    """The held-out sentences as `generate` keywords: an aligned model (v3) reads espeak-ng's
    timing of the text, not stored phonemes."""
    if tts.aligned:
        return [{"text": t["text"], "language": t["language"]} for t in texts]
    return [{"text": "", "phonemes": t["phonemes"], "language": t["language"]} for t in texts]


def _theta(tts, args) -> Optional[float]:
    """PCG's group threshold: --theta, else the model's."""
    if args.accept == "pcg" and args.theta is None:
        return float(tts.meta.get("pcg_theta", 0.95))
    return args.theta


def bench_sides(tts, args) -> dict:
    """AR in both loops, and the speculation `--loops` / `--accept` name. Without --loops,
    what users get by default: the loops the model's calibration found to pay (the depth
    loop: its calibration's decision, `calibrate.decision`; the temporal loop: model.json's
    "temporal_speculation_pays", from bench/speculation_sweep.py), exact acceptance (a lossy
    or coarse rule is an explicit choice, so it needs explicit loops)."""
    if args.loops is not None:
        spec = speculation_config(args.loops, args.accept, args.beta, _theta(tts, args))
    elif args.accept != "exact":
        raise ValueError("accept: choose the loops (--loops) for a lossy or coarse rule")
    else:
        pays = bool(tts.meta.get("temporal_speculation_pays", False))
        spec = {"temporal": "spec" if pays else "ar", "accept": Acceptance(), "mode": "auto"}
    return {"ar": {"mode": "ar", "temporal": "ar"}, "spec": {**spec, "draft_len": args.draft_len}}


def bench_keys(tts, runs: dict, args, alone: dict) -> dict:
    """The figures of the driver's runs: timing and speed-ups, and the group rule's checks
    (PCG's group law, the swap stress test) on the codes both sides made."""
    spec_kw, theta = bench_sides(tts, args)["spec"], _theta(tts, args)
    out = _timing_figures(tts, runs, spec_kw, args.loops or "auto", args.draft_len)
    codes = {m: np.concatenate([r.codes for r in rows]) for m, rows in runs.items()}
    if args.accept == "pcg":
        pvals = _group_fidelity(tts, codes, runs["spec"], spec_kw, theta, args.seed)
        out["group_fidelity_pvalues"] = pvals
        out["group_fidelity_min_p"] = min(pvals.values()) if pvals else None
    out["quality"] = _swap_quality(tts, codes, spec_kw, theta, args.seed)
    return out


def _temporal_s(r) -> float:
    return r.temporal_stats.temporal_seconds


def _loops_s(r) -> float:
    return r.temporal_stats.temporal_seconds + r.depth_seconds


def _timing_figures(tts, runs: dict, spec_kw: dict, loops: str, draft_len: int) -> dict:
    """The record's timing and counting keys (in their historical order) and the speed-ups,
    each a ratio of per-sentence medians of per-frame times."""
    from codecspec.runtime import session_threads

    sides = {m: side_figures(rows) for m, rows in runs.items()}
    sp = runs["spec"]
    out = {
        "model_family": "v2",
        "loops": loops,
        "accept": spec_kw["accept"].label,
        "draft_len": draft_len,
        "depth_mode": spec_kw["mode"],
        "pipeline_texts": len(sp),
        "threads": session_threads(tts.temporal),
        "frames": {m: f["frames"] for m, f in sides.items()},
        # the round loop's own clock: target + draft calls + verification, not the depth loop
        "temporal_ms_per_frame": {m: _per_frame(rows, _temporal_s) for m, rows in runs.items()},
        "depth_ms_per_frame": {m: f["stage_ms_per_frame"]["depth"] for m, f in sides.items()},
        "pipeline_ms_per_frame": {m: f["ms_per_frame"] for m, f in sides.items()},
        "temporal_tokens_per_call": sum(r.frames for r in sp)
        / sum(r.temporal_stats.target_calls for r in sp),
        "temporal_acceptance": sum(r.temporal_stats.accepted for r in sp)
        / max(1, sum(r.temporal_stats.drafted for r in sp)),
        "temporal_host_share": float(np.median([r.temporal_stats.host_share for r in sp])),
        "depth_tokens_per_call": sides["spec"]["tokens_per_call"],
        "pipeline_rtf": {m: f["rtf"] for m, f in sides.items()},
        "hit_max_frames": {m: f["hit_max_frames"] for m, f in sides.items()},
    }
    _add_speedups(out, tts, runs, spec_kw)
    return out


def _add_speedups(out: dict, tts, runs: dict, spec_kw: dict) -> None:
    tm, dm, pm = (
        out[k] for k in ("temporal_ms_per_frame", "depth_ms_per_frame", "pipeline_ms_per_frame")
    )
    out["temporal_speedup"] = tm["ar"] / tm["spec"]
    out["depth_speedup"] = dm["ar"] / dm["spec"]
    # the depth loop inside the pipeline (its speculative side is what --loops chose; by
    # default the model's calibration, which may be AR): the CLI's record states
    # depth_speedup of the depth loop alone, speculation on, so this keeps its own name
    out["pipeline_depth_speedup"] = out["depth_speedup"]
    spec_depth = auto_mode(spec_kw["mode"], tts.speculation_pays)
    out["pipeline_totals"] = pipeline_totals(
        runs, {"ar": "ar", "spec": spec_depth}, {"ar": "ar", "spec": spec_kw["temporal"]}
    )
    out["audio_ms_per_frame"] = 1e3 / tts.codec.frame_rate
    out["e2e_speedup"] = _per_frame(runs["ar"], _loops_s) / _per_frame(runs["spec"], _loops_s)
    out["pipeline_speedup"] = pm["ar"] / pm["spec"]


def _group_fidelity(tts, codes: dict, sp: list, spec_kw: dict, theta, seed: int) -> dict:
    """PCG's group-law check: p-values that the speculative run's emitted c0 groups follow the
    AR codes' group law (empty when the temporal loop did not speculate)."""
    rng = np.random.default_rng(seed)
    pvals = {}
    if spec_kw["temporal"] == "spec":
        grp = tts.pcg_c0_groups(theta)
        ga = _group_samples(grp, codes["ar"][:, 0], rng)
        gs = np.concatenate([np.asarray(r.temporal_stats.groups, np.int64) for r in sp])
        pvals["c0"] = homogeneity_pvalue(
            np.bincount(ga, minlength=grp.num_groups), np.bincount(gs, minlength=grp.num_groups)
        )
    return pvals


def _swap_quality(tts, codes: dict, spec_kw: dict, theta, seed: int) -> dict:
    """{"theta": theta} and, with a theta, the swap stress test on the AR codes (every code
    swapped within its group) for each loop that used groups."""
    from codecspec.evaluation.quality import swap_distortion

    q: dict = {"theta": theta}
    if theta is None:
        return q
    if spec_kw["temporal"] == "spec":
        q["swap_added_db_c0"] = swap_distortion(
            tts.codec, codes["ar"], {0: tts.pcg_c0_groups(theta)}, 1.0, seed
        )
    if spec_kw["mode"] == "pcg":
        groups = dict(enumerate(tts.depth_groups(theta)))
        groups.pop(0)
        q["swap_added_db_levels_1_up"] = swap_distortion(tts.codec, codes["ar"], groups, 1.0, seed)
    return q


def record(res: dict, model_dir, *, bandwidth: float, peak_rss_mb: float) -> dict:
    """The bench record (codecspec.perf) of `codecspec bench` on a v2-family folder (v2 or
    v3): the depth-loop families' (`depth_record`) with the temporal loop's figures."""
    import json
    from pathlib import Path

    from .codec import CodecV2

    d = Path(model_dir)
    meta = json.loads((d / "model.json").read_text())
    family = "v3" if meta.get("conditioning") == "phoneme_track" else "v2"
    # a codec file other than v1's codec.npz is this family's (as V2TTS loads it)
    codec = meta.get("codec_file") or "codec_v2.npz"
    codecs = {} if codec == "codec.npz" else {codec: CodecV2}
    rec = depth_record(family, d, res, bandwidth, peak_rss_mb, codec, codecs)
    rec["calibration"]["temporal"] = "spec" if meta.get("temporal_speculation_pays") else "ar"
    if "pipeline_totals" in res:
        rec["temporal_speedup"] = res.get("temporal_speedup")
        rec["temporal_tokens_per_call"] = res.get("temporal_tokens_per_call")
    return perf.finish_record(rec)
