"""`codecspec bench` on a v2 model: AR vs speculation in the temporal loop, the depth loop, or
both, with exact, SSD or PCG acceptance — the whole pipeline, one run.

Every held-out bench sentence is synthesised all-AR and with the chosen speculation, the order
flipping per sentence so drifting load hits both alike. Speed-ups are ratios of medians (over
sentences) of per-frame times: `temporal_speedup` the temporal loop alone (target + draft
calls + verification), `depth_speedup` the depth loop alone, `e2e_speedup` both loops together
and `pipeline_speedup` everything users wait for (frontend and vocoder included).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

import codecspec as cs
from codecspec import perf
from codecspec.calibrate.decision import auto_mode
from codecspec.decode.temporal import (  # LOOPS, speculation_config: re-exported (moved)
    LOOPS,
    Acceptance,
    speculation_config,
)
from codecspec.fidelity import homogeneity_pvalue
from codecspec.pipeline.depth_bench import (
    base_record,
    bench_depth_loop,
    depth_alone_stage,
    depth_choice,
    load_bench_texts,
    pipeline_figures,
    pipeline_stages,
    pipeline_totals,
)

__all__ = ["bench_figures", "LOOPS", "bench_v2", "record_v2", "speculation_config"]

# `loops=None`: what users get by default, the loops the model's calibration found to pay
# (the depth loop: its calibration's decision, `calibrate.decision`; the temporal loop:
# model.json's "temporal_speculation_pays", from bench/speculation_sweep.py), exact acceptance.


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


def bench_v2(
    model_dir=None,
    *,
    loops: Optional[str] = None,
    accept: str = "exact",
    beta: float = 0.3,
    theta: Optional[float] = None,
    draft_len: int = 3,
    texts: Optional[int] = None,
    seed: int = 0,
    provider: str = "auto",
    threads: Optional[int] = None,
    params: Optional[cs.SamplingParams] = None,
    progress: bool = True,
    depth: str = "positional",
) -> dict:
    from codecspec.pipeline.registry import load_model

    # the family's model, loaded through the registry (model.py's family asks for this bench)
    folder = "v2" if model_dir is None else model_dir
    tts = load_model(folder, provider=provider, threads=threads, params=params, depth=depth)
    if accept == "pcg" and theta is None:
        theta = float(tts.meta.get("pcg_theta", 0.95))
    spec_kw, loops = _spec_side(tts, loops, accept, beta, theta)
    spec_kw["draft_len"] = draft_len
    sentences = load_bench_texts(texts)
    runs = _interleaved_runs(tts, sentences, spec_kw, f"bench v2 {loops}/{accept}", progress)
    out = _timing_figures(tts, runs, spec_kw, loops, draft_len, len(sentences))
    codes = {m: np.concatenate([r.codes for r in rows]) for m, rows in runs.items()}
    if accept == "pcg":
        pvals = _group_fidelity(tts, codes, runs["spec"], spec_kw, theta, seed)
        out["group_fidelity_pvalues"] = pvals
        out["group_fidelity_min_p"] = min(pvals.values()) if pvals else None
    out["quality"] = _swap_quality(tts, codes, spec_kw, theta, seed)
    return out


def _spec_side(tts, loops: Optional[str], accept: str, beta: float, theta) -> tuple[dict, str]:
    """(generate() keywords of the speculative side, the loops label). `loops=None` benches what
    users get by default: the loops the model's calibration found to pay, exact acceptance
    (a lossy or coarse rule is an explicit choice, so it needs explicit loops)."""
    if loops is not None:
        return speculation_config(loops, accept, beta, theta), loops
    if accept != "exact":
        raise ValueError("accept: choose the loops (--loops) for a lossy or coarse rule")
    pays = bool(tts.meta.get("temporal_speculation_pays", False))
    return {"temporal": "spec" if pays else "ar", "accept": Acceptance(), "mode": "auto"}, "auto"


def _say(tts, t: dict, **kw):
    """One bench sentence through generate()."""
    # an aligned model (v3) reads espeak-ng's timing of the text, not stored phonemes
    if tts.aligned:
        return tts.generate(t["text"], language=t["language"], **kw)
    return tts.generate("", phonemes=t["phonemes"], language=t["language"], **kw)


def _interleaved_runs(tts, sentences, spec_kw: dict, desc: str, progress: bool) -> dict:
    """{"ar": results, "spec": results}, one per sentence each, after one warm-up of each
    side; the order flips per sentence so drifting load hits both alike."""
    _say(tts, sentences[0], decode_audio=False, mode="ar", temporal="ar")
    _say(tts, sentences[0], decode_audio=False, **spec_kw)
    runs: dict = {"ar": [], "spec": []}
    it = range(len(sentences))
    if progress:
        from codecspec.progress import bar

        it = bar(it, desc=desc, total=len(sentences))
    for i in it:
        t = sentences[i]
        for m in ("ar", "spec") if i % 2 == 0 else ("spec", "ar"):
            kw = spec_kw if m == "spec" else {"mode": "ar", "temporal": "ar"}
            runs[m].append(_say(tts, t, seed=i, **kw))
    return runs


def _temporal_s(r) -> float:
    return r.temporal_stats.temporal_seconds


def _loops_s(r) -> float:
    return r.temporal_stats.temporal_seconds + r.depth_seconds


def _timing_figures(tts, runs: dict, spec_kw: dict, loops: str, draft_len: int, n: int) -> dict:
    """The record's timing and counting keys (in their historical order) and the speed-ups,
    each a ratio of per-sentence medians of per-frame times."""
    from codecspec.runtime import session_threads

    sp = runs["spec"]
    out = {
        "model_family": "v2",
        "loops": loops,
        "accept": spec_kw["accept"].label,
        "draft_len": draft_len,
        "depth_mode": spec_kw["mode"],
        "pipeline_texts": n,
        "threads": session_threads(tts.temporal),
        "frames": {m: int(sum(r.frames for r in rows)) for m, rows in runs.items()},
        "temporal_ms_per_frame": {m: _per_frame(rows, _temporal_s) for m, rows in runs.items()},
        "depth_ms_per_frame": {
            m: _per_frame(rows, lambda r: r.depth_seconds) for m, rows in runs.items()
        },
        "pipeline_ms_per_frame": {
            m: _per_frame(rows, lambda r: r.total_seconds) for m, rows in runs.items()
        },
        "temporal_tokens_per_call": sum(r.frames for r in sp)
        / sum(r.temporal_stats.target_calls for r in sp),
        "temporal_acceptance": sum(r.temporal_stats.accepted for r in sp)
        / max(1, sum(r.temporal_stats.drafted for r in sp)),
        "temporal_host_share": float(np.median([r.temporal_stats.host_share for r in sp])),
        "depth_tokens_per_call": sum(r.depth_codes for r in sp) / sum(r.depth_calls for r in sp),
        "pipeline_rtf": {
            m: sum(r.total_seconds for r in rows) / sum(r.audio_seconds for r in rows)
            for m, rows in runs.items()
        },
        "hit_max_frames": {m: int(sum(r.hit_max_frames for r in rows)) for m, rows in runs.items()},
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


def record_v2(res: dict, model_dir, *, bandwidth: float, peak_rss_mb: float) -> dict:
    """The bench record (codecspec.perf) of `codecspec bench` on a v2-family folder (v2 or
    v3), from bench_depth_loop's and (when it ran) bench_v2's figures."""
    import json
    from pathlib import Path

    d = Path(model_dir)
    meta = json.loads((d / "model.json").read_text())
    family = "v3" if meta.get("conditioning") == "phoneme_track" else "v2"
    rec = base_record(family, d, res, bandwidth, peak_rss_mb)
    rec["calibration"] = {
        "depth": depth_choice(d, res.get("depth", "positional")),
        "temporal": "spec" if meta.get("temporal_speculation_pays") else "ar",
    }
    totals = res.get("pipeline_totals")
    if totals is None:  # --no-pipeline: the depth loop is all that ran
        from codecspec.pipeline.depth_bench import frame_ms

        from .codec import CodecV2

        # a codec file other than v1's codec.npz is this family's (as V2TTS loads it)
        ours = meta.get("codec_file") or "codec_v2.npz"
        rec["audio_ms_per_frame"] = frame_ms(d, {} if ours == "codec.npz" else {ours: CodecV2})
        rec["stages"] = [depth_alone_stage(res, in_total=True)]
        rec["pipeline_rtf"] = {"ar": None, "spec": None}
        return perf.finish_record(rec)
    rec["audio_ms_per_frame"] = res["audio_ms_per_frame"]
    codec = meta.get("codec_file", "codec_v2.npz")
    rec["stages"] = pipeline_stages(d, totals, res.get("depth_reads"), codec) + [
        depth_alone_stage(res, in_total=False)
    ]
    rec.update(pipeline_figures(totals))
    rec["temporal_speedup"] = res.get("temporal_speedup")
    rec["temporal_tokens_per_call"] = res.get("temporal_tokens_per_call")
    return perf.finish_record(rec)


def bench_figures(args, model, common) -> tuple:
    """v2/v3: temporal and depth loops, AR vs speculation, both on the pipeline; (the
    figures, the record function) for `model`'s folder with the bench's shared keywords
    `common`."""
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
