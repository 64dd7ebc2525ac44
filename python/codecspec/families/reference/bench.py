"""What `codecspec bench` reports of the reference (v1) family: the one driver
(`codecspec.pipeline.bench`) times its depth loop alone and its whole pipeline, AR and
speculative; here are the keys its figures have always had (`bench_keys`: `pipeline_ar_*`,
`pipeline_spec_*`, ...) and its record (`record`)."""

from __future__ import annotations

from codecspec import perf
from codecspec.pipeline.bench import side_figures
from codecspec.pipeline.depth_bench import depth_record, pipeline_totals

__all__ = ["bench_keys", "record"]


def bench_keys(tts, runs: dict, args, alone: dict) -> dict:
    """The pipeline's figures from the driver's runs {"ar", "spec"}: per side ms per frame
    (whole and per stage), real-time factor and tokens per call; the AR side's totals, and
    the depth loop inside synthesis against the same loop alone (`alone`), same run."""
    from codecspec.runtime import session_threads

    sides = {m: side_figures(rows) for m, rows in runs.items()}
    out = {"pipeline_texts": len(runs["ar"]), "threads": session_threads(tts.temporal)}
    for m, f in sides.items():
        out[f"pipeline_{m}_ms_per_frame"] = f["ms_per_frame"]
        out[f"pipeline_{m}_stage_ms_per_frame"] = f["stage_ms_per_frame"]
        out[f"pipeline_{m}_rtf"] = f["rtf"]
        out[f"pipeline_{m}_tokens_per_call"] = f["tokens_per_call"]
    ar = sides["ar"]
    # the temporal loop has no speculation in this family: both sides run it AR
    out["pipeline_totals"] = pipeline_totals(
        runs, {"ar": "ar", "spec": "spec"}, {"ar": "ar", "spec": "ar"}
    )
    out["audio_ms_per_frame"] = 1e3 / tts.codec.frame_rate
    out["pipeline_frames"] = ar["frames"]
    out["pipeline_audio_seconds"] = ar["audio_seconds"]
    out["pipeline_depth_ms_per_frame"] = ar["stage_ms_per_frame"]["depth"]
    out["pipeline_rtf"] = ar["rtf"]
    out["pipeline_speedup"] = ar["ms_per_frame"] / sides["spec"]["ms_per_frame"]
    out["vocoder_ms_per_audio_second"] = 1e3 * ar["seconds"]["vocoder"] / ar["audio_seconds"]
    out["depth_in_pipeline_ratio"] = out["pipeline_depth_ms_per_frame"] / alone["ar_ms_per_frame"]
    return out


def record(res: dict, model_dir, *, bandwidth: float, peak_rss_mb: float) -> dict:
    """The bench record (codecspec.perf) of `codecspec bench` on a reference folder."""
    rec = depth_record("reference", model_dir, res, bandwidth, peak_rss_mb, "codec.npz")
    return perf.finish_record(rec)
