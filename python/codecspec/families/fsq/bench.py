"""What `codecspec bench --model fsq` reports: the FSQ family end to end.

The one driver (`codecspec.pipeline.bench`) times the held-out phoneme strings shipped in the
model folder (`bench_requests`: bench.json, so no espeak-ng is needed), each utterance ended
by the stop head, on its one side (AR: nothing to speculate). Its figures (`bench_keys`):
graph calls per frame (1 by construction, counted), ms per frame of the step graph and of
the frame decoder, the vocoder's time and the real-time factor; with `--batch` > 1 also the
first `batch` utterances together through the engine's loop (`run_together`: one step call
per frame for every stream still running). `bench_fsq` is the same for a Python caller.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import codecspec as cs
from codecspec.pipeline import registry
from codecspec.pipeline.bench import run_sides, side_figures
from codecspec.pipeline.family import SpeechRequest
from codecspec.pipeline.loop import run_together

__all__ = ["bench_fsq", "bench_keys", "bench_lines", "bench_requests", "load_bench_texts", "record"]


def load_bench_texts(model_dir, count: Optional[int] = None) -> list:
    """The folder's bench.json utterances (phonemes, language, speaker, reference frames),
    the first `count` of them (None: all)."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"utterances: expected an int >= 1, got {count!r}")
    path = Path(model_dir) / "bench.json"
    if not path.is_file():
        raise FileNotFoundError(f"model_dir: no bench.json in {model_dir}")
    return json.loads(path.read_text())["utterances"][:count]


def _requests(tts, utts: list) -> list:
    """generate()'s keywords per utterance: its text for an aligned model (espeak-ng times
    its phonemes), its phoneme string otherwise."""
    if tts.aligned:
        return [{k: u[k] for k in ("text", "language", "speaker")} for u in utts]
    keys = ("phonemes", "language", "speaker")
    return [{"text": "", **{k: u[k] for k in keys}} for u in utts]


def bench_requests(tts, texts: list, args) -> list:
    """The folder's own utterances (`--utterances` of them), not the held-out `texts`: the
    stop head was trained on its corpus's phoneme strings."""
    return _requests(tts, load_bench_texts(tts.dir, args.utterances))


def _speech_request(tts, u: dict) -> tuple:
    """(SpeechRequest, ids with bos/eos, frame guard) of a bench.json utterance."""
    if tts.aligned:
        mnemonics, track = tts.phoneme_track(u["text"], u["language"], u["speaker"])
        ids = tts.tokens(None, mnemonics, u["language"])[1]
        req = SpeechRequest(u["text"], "text", u["speaker"], u["language"])
        return req, ids, tts.max_frames_for(len(ids), track)
    ids = tts.tokens("", u["phonemes"], u["language"])[1]
    req = SpeechRequest(u["phonemes"], "ipa", u["speaker"], u["language"])
    return req, ids, tts.max_frames_for(len(ids))


def _batched(tts, utts: list, seed: int) -> dict:
    """len(utts) streams together, one slot each, through the engine's loop: step calls, ms
    per step, frames per second (the encoder calls included)."""
    reqs, ids, guards = zip(*(_speech_request(tts, u) for u in utts))  # the slots' size
    t0 = time.perf_counter()
    fsq = registry.family_of(tts.dir, detect=False).load("engine")  # model.py's FSQFamily
    family = fsq(tts, len(utts), max(guards), max(len(i) for i in ids))
    states = [family.prepare(r, cs.Generator(seed).fork(b)) for b, r in enumerate(reqs)]
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


def bench_keys(tts, runs: dict, args, alone: dict) -> dict:
    """The figures of the driver's runs (one side), and `--batch`'s together."""
    return _figures(tts, runs["ar"], args.batch, args.seed, vocoder=True)


def bench_lines(res: dict) -> list:
    """`--batch`'s figures, printed under the table (none without a batch)."""
    if res.get("batch", 1) <= 1:
        return []
    ms, fps = res["batch_ms_per_step"], res["batch_frames_per_second"]
    return [f"batch of {res['batch']}: {ms:.2f} ms per step, {fps:.0f} frames/s"]


def _figures(tts, runs: list, batch: int, seed: int, vocoder: bool) -> dict:
    """Per frame over all utterances (sums, not medians: ms_per_frame is the loop's
    throughput); this family's step graph is the driver's "temporal" stage and its frame
    decoder the "depth" one (`FSQSynthesis.stage_seconds`)."""
    from codecspec.runtime import session_threads

    f = side_figures(runs)
    frames, audio = f["frames"], f["audio_seconds"]
    step_s, samp_s, voc_s = (f["seconds"][k] for k in ("temporal", "depth", "vocoder"))
    utts = load_bench_texts(tts.dir, len(runs))
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
        "hit_max_frames": f["hit_max_frames"],
        "frames_vs_reference": round(frames / sum(u["frames"] for u in utts), 4),
        "provider": tts.step_graph.get_providers()[0],
        "threads": session_threads(tts.step_graph),
        "audio_ms_per_frame": 1e3 / tts.codec.frame_rate,
    }
    if batch > 1:
        out.update(_batched(tts, load_bench_texts(tts.dir, batch), seed))
    return out


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
    """`codecspec bench --model fsq`'s figures for a Python caller (the recipe's report):
    the driver's runs of the first `utterances` of the folder's bench.json."""
    folder = "fsq" if model_dir is None else model_dir
    tts = registry.load_model(folder, provider=provider, threads=threads, params=params)
    requests = _requests(tts, load_bench_texts(tts.dir, utterances))
    side = {"ar": {"mode": "ar", "decode_audio": vocoder}}
    runs = run_sides(tts, requests, side, seed=seed, progress=progress, desc="fsq")
    return _figures(tts, runs["ar"], batch, seed, vocoder)


def record(res: dict, model_dir, *, bandwidth: float, peak_rss_mb: float) -> dict:
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
