"""`codecspec bench` for reference (v1) folders: the whole pipeline users run
(`bench_pipeline`: text -> codes -> waveform on fixed held-out sentences, every stage timed),
AR and speculative alternating, and the record (`record_reference`). The depth loop alone
and the record's shared parts are `codecspec.pipeline.depth_bench`'s (the depth-loop families share
them).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

import codecspec as cs
from codecspec import perf
from codecspec.pipeline.depth_bench import (
    base_record,
    bench_depth_loop,
    depth_alone_stage,
    depth_choice,
    frame_ms,
    load_bench_texts,
    pipeline_figures,
    pipeline_stages,
    pipeline_totals,
)

__all__ = ["bench_figures", "bench_pipeline", "record_reference"]


def _median_of(rows: list, key) -> float:
    return float(np.median([key(r) for r in rows]))


def bench_pipeline(
    model_dir=None,
    *,
    texts: Optional[int] = None,
    seed: int = 0,
    provider: str = "auto",
    threads: Optional[int] = None,
    params: Optional[cs.SamplingParams] = None,
    progress: bool = True,
) -> dict:
    """Text -> codes -> waveform for each held-out sentence, AR and speculative alternating
    (the order flips every sentence so that drifting load hits both), each stage timed
    (frontend, temporal, depth, vocoder). Per-frame figures are medians over sentences of
    each sentence's mean; the real-time factor is total time over audio time."""
    from codecspec.pipeline.registry import load_model
    from codecspec.runtime import session_threads

    # the family's model, loaded through the registry (model.py's family asks for this bench)
    folder = "reference" if model_dir is None else model_dir
    tts = load_model(folder, provider=provider, threads=threads, params=params)
    sentences = load_bench_texts(texts)
    tts.generate("", phonemes=sentences[0]["phonemes"], mode="ar", decode_audio=False)  # warm
    runs: dict = {"ar": [], "spec": []}
    it = range(len(sentences))
    if progress:
        from codecspec.progress import bar

        it = bar(it, desc="bench pipeline", total=len(sentences))
    for i in it:
        t = sentences[i]
        for m in ("ar", "spec") if i % 2 == 0 else ("spec", "ar"):
            runs[m].append(
                tts.generate("", phonemes=t["phonemes"], language=t["language"], mode=m, seed=i)
            )
    out = {"pipeline_texts": len(sentences), "threads": session_threads(tts.temporal)}
    for m, rows in runs.items():
        ms = [r.stage_ms_per_frame() for r in rows]
        out[f"pipeline_{m}_ms_per_frame"] = _median_of(
            rows, lambda r: 1e3 * r.total_seconds / r.frames
        )
        out[f"pipeline_{m}_stage_ms_per_frame"] = {
            k: float(np.median([x[k] for x in ms])) for k in ms[0]
        }
        out[f"pipeline_{m}_rtf"] = sum(r.total_seconds for r in rows) / sum(
            r.audio_seconds for r in rows
        )
        out[f"pipeline_{m}_tokens_per_call"] = sum(r.depth_codes for r in rows) / sum(
            r.depth_calls for r in rows
        )
    ar = runs["ar"]
    out["pipeline_totals"] = pipeline_totals(
        runs, {"ar": "ar", "spec": "spec"}, {"ar": "ar", "spec": "ar"}
    )
    out["audio_ms_per_frame"] = 1e3 / tts.codec.frame_rate
    out["pipeline_frames"] = sum(r.frames for r in ar)
    out["pipeline_audio_seconds"] = sum(r.audio_seconds for r in ar)
    out["pipeline_depth_ms_per_frame"] = out["pipeline_ar_stage_ms_per_frame"]["depth"]
    out["pipeline_rtf"] = out["pipeline_ar_rtf"]
    out["pipeline_speedup"] = out["pipeline_ar_ms_per_frame"] / out["pipeline_spec_ms_per_frame"]
    out["vocoder_ms_per_audio_second"] = (
        1e3 * sum(r.decode_seconds for r in ar) / sum(r.audio_seconds for r in ar)
    )
    return out


def record_reference(res: dict, model_dir, *, bandwidth: float, peak_rss_mb: float) -> dict:
    """The bench record (codecspec.perf) of `codecspec bench` on the reference family, from
    bench_depth_loop's (and the pipeline's, when it ran) figures."""
    rec = base_record("reference", model_dir, res, bandwidth, peak_rss_mb)
    rec["calibration"] = {"depth": depth_choice(model_dir, res.get("depth", "positional"))}
    rec["audio_ms_per_frame"] = res.get("audio_ms_per_frame") or frame_ms(model_dir)
    totals = res.get("pipeline_totals")
    if totals is None:  # --no-pipeline: the depth loop is all that ran
        rec["stages"] = [depth_alone_stage(res, in_total=True)]
        rec["pipeline_rtf"] = {"ar": None, "spec": None}
    else:
        rec["stages"] = pipeline_stages(model_dir, totals, res.get("depth_reads"), "codec.npz") + [
            depth_alone_stage(res, in_total=False)
        ]
        rec.update(pipeline_figures(totals))
    return perf.finish_record(rec)


def bench_figures(args, model, common) -> tuple:
    """The RVQ reference: the depth loop alone and inside synthesis; (the figures, the
    record function) for `model`'s folder with the bench's shared keywords `common`."""
    res = bench_depth_loop(model, args.frames, **common)
    if not args.no_pipeline:
        res.update(bench_pipeline(model, texts=args.texts, **common))
        # The issue this answers: the depth loop inside synthesis vs alone, same run.
        res["depth_in_pipeline_ratio"] = res["pipeline_depth_ms_per_frame"] / res["ar_ms_per_frame"]
    return res, record_reference
