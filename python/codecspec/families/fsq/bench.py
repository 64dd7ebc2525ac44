"""`codecspec bench --model fsq` and `codecspec synth --model fsq`: the FSQ family end to end.

The bench synthesises the held-out phoneme strings shipped in the model folder (bench.json,
so no espeak-ng is needed) through the whole pipeline, each utterance ended by the stop head:
graph calls per frame (1 by construction, counted), ms per frame of the step graph and of the
frame decoder, the vocoder's time and the real-time factor; with `batch` > 1 it also runs the
first `batch` utterances together through the engine's loop (`run_together`: one step call
per frame for every stream still running).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import codecspec as cs
from codecspec.pipeline import registry
from codecspec.pipeline.loop import run_together

__all__ = ["bench_figures", "load_bench_texts", "bench_fsq", "record_fsq"]


def load_bench_texts(model_dir) -> list:
    path = Path(model_dir) / "bench.json"
    if not path.is_file():
        raise FileNotFoundError(f"model_dir: no bench.json in {model_dir}")
    return json.loads(path.read_text())["utterances"]


def _one(tts, u: dict, seed: int, vocoder: bool):
    return tts.generate(
        "",
        phonemes=u["phonemes"],
        language=u["language"],
        speaker=u["speaker"],
        seed=seed,
        decode_audio=vocoder,
    )


def _batched(tts, utts: list, seed: int) -> dict:
    """len(utts) streams together, one slot each, through the engine's loop: step calls, ms
    per step, frames per second (the encoder calls included)."""
    ids = [tts.tokens("", u["phonemes"], u["language"])[1] for u in utts]
    guards = [tts.max_frames_for(len(i)) for i in ids]
    t0 = time.perf_counter()
    fsq = registry.family_of(tts.dir, detect=False).load("engine")  # model.py's FSQFamily
    family = fsq(tts, len(utts), max(guards), max(len(i) for i in ids))
    gens = [cs.Generator(seed).fork(b) for b in range(len(utts))]
    states = [
        family.state(i, *tts.ids(u["language"], u["speaker"]), tts.params, g, guard)
        for i, u, g, guard in zip(ids, utts, gens, guards)
    ]
    calls0, t1 = family.slots.calls, time.perf_counter()
    codes = run_together(family, states)
    t2 = time.perf_counter()
    steps = family.slots.calls - calls0
    return {
        "batch": len(utts),
        "batch_step_calls": steps,
        "batch_ms_per_step": 1e3 * (t2 - t1) / steps,
        "batch_frames_per_second": sum(len(c) for c in codes) / (t2 - t0),
    }


def bench_fsq(
    model_dir=None,
    utterances: int = 8,
    *,
    batch: int = 1,
    seed: int = 0,
    provider: str = "auto",
    threads: Optional[int] = None,
    params: Optional[cs.SamplingParams] = None,
    vocoder: bool = True,
    progress: bool = True,
) -> dict:
    if isinstance(utterances, bool) or not isinstance(utterances, int) or utterances < 1:
        raise ValueError(f"utterances: expected an int >= 1, got {utterances!r}")
    from codecspec.runtime import session_threads

    # the family's model, loaded through the registry (model.py's family asks for this bench)
    folder = "fsq" if model_dir is None else model_dir
    tts = registry.load_model(folder, provider=provider, threads=threads, params=params)
    texts = load_bench_texts(tts.dir)[:utterances]
    _one(tts, texts[0], seed, False)  # warm-up outside the counts
    it = texts
    if progress:
        from codecspec.progress import bar

        it = bar(texts, desc="bench fsq", total=len(texts))
    runs = [_one(tts, u, seed + i, vocoder) for i, u in enumerate(it)]
    frames = sum(len(s.codes) for s in runs)
    step_s = sum(s.temporal_seconds for s in runs)
    samp_s = sum(s.sampling_seconds for s in runs)
    voc_s = sum(s.decode_seconds for s in runs)
    audio = sum(s.audio_seconds for s in runs)
    out = {
        "model": str(tts.dir),
        "utterances": len(runs),
        "frames": frames,
        "audio_seconds": round(audio, 3),
        "calls_per_frame": sum(s.graph_calls for s in runs) / frames,
        "ms_per_frame": 1e3 * (step_s + samp_s) / frames,
        # the same: `codecspec bench --json`'s record has its own ms_per_frame {ar, spec}
        "loop_ms_per_frame": 1e3 * (step_s + samp_s) / frames,
        "step_ms_per_frame": 1e3 * step_s / frames,
        "sampling_ms_per_frame": 1e3 * samp_s / frames,
        "vocoder_seconds": voc_s,
        "real_time_factor": (step_s + samp_s + voc_s) / audio if vocoder else None,
        "real_time_factor_no_vocoder": (step_s + samp_s) / audio,
        "stopped_by_stop_head": sum(s.stopped for s in runs),
        "hit_max_frames": sum(not s.stopped for s in runs),
        "frames_vs_reference": round(frames / sum(u["frames"] for u in texts), 4),
        "provider": tts.step_graph.get_providers()[0],
        "threads": session_threads(tts.step_graph),
        "audio_ms_per_frame": 1e3 / tts.codec.frame_rate,
    }
    if batch > 1:
        out.update(_batched(tts, load_bench_texts(tts.dir)[:batch], seed))
    return out


def record_fsq(res: dict, model_dir, *, bandwidth: float, peak_rss_mb: float) -> dict:
    """The bench record (codecspec.perf) of `codecspec bench --model fsq`: one step-graph
    call per frame, so every speculative figure is None."""
    from codecspec import perf
    from codecspec.pipeline.depth_bench import codec_reads

    d = Path(model_dir)
    frames, utts = max(int(res["frames"]), 1), int(res["utterances"])
    step, enc = perf.graph_reads(d / "step.onnx"), perf.graph_reads(d / "encoder.onnx")
    per_utt, per_frame = codec_reads(d / "fsqcodec.npz")
    voc_ms = 1e3 * res["vocoder_seconds"] / frames
    stages = [
        perf.stage(
            "step graph + encoder",
            res["step_ms_per_frame"],
            None,
            step.per_call(1) + enc.per_call(0) * utts / frames,
            None,
        ),
        perf.stage("sampling (host)", res["sampling_ms_per_frame"], None, 0, None),
        perf.stage(
            "vocoder",
            voc_ms,
            None,
            per_utt * utts / frames + per_frame,
            None,
            note="Griffin-Lim FFTs: compute-bound, its weights are a few kB per frame",
        ),
    ]
    rec = {
        "family": "fsq",
        "model": str(d),
        "provider": res.get("provider"),
        "threads": res.get("threads"),
        "weights": step.weights,
        "bandwidth_gbps": bandwidth / 1e9,
        "peak_rss_mb": peak_rss_mb,
        "stages": stages,
        "audio_ms_per_frame": res["audio_ms_per_frame"],
        "depth_speedup": None,
        "tokens_per_call": None,
        "calibration": None,
    }
    return perf.finish_record(rec)


def bench_figures(args, model, common) -> tuple:
    """FSQ: one graph call per frame; (its figures, the record function) for `model`'s folder
    with the bench's shared keywords `common`."""

    res = bench_fsq(model, args.utterances, batch=args.batch, **common)
    return res, record_fsq
