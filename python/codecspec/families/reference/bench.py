"""`codecspec bench` for reference (v1) folders: the whole pipeline users run
(`bench_pipeline`: text -> codes -> waveform on fixed held-out sentences, every stage timed),
AR and speculative alternating. The depth loop alone, the shared figures and the record are
`codecspec.tts.bench`'s (the depth-loop families share them).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.tts.bench import load_bench_texts, pipeline_totals

__all__ = ["bench_pipeline"]


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
    from codecspec.runtime import session_threads

    from .model import ReferenceTTS

    tts = ReferenceTTS(model_dir, provider=provider, threads=threads, params=params)
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
