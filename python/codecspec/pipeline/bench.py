"""`codecspec bench`: the one driver that times every family's pipeline.

A family whose model's `generate` reports its stages (`Result.stage_seconds`) is timed here
the same way for all: its depth loop alone first where it has one (`Family.bench_depth_loop`:
`depth_bench.bench_depth_loop`), then text -> waveform for every request the family names
(`Family.bench_requests`), each side it compares (`Family.bench_sides`: AR and its
speculative mode) in turn, the order flipping per request so that drifting load hits both
alike (`run_sides`); `side_figures` reduces each side to ms per frame (whole and per stage),
the real-time factor and tokens per call. What a family reports of that, under the keys its
records have always had, is its `bench_keys`; its record, `bench_record`. A family whose
stages cannot be timed as whole `generate` runs measures them itself (`bench_figures`:
Qwen3-TTS sizes each stage to a time budget); the driver completes the record it returns.

A family without `bench_keys` is still measured, from the protocol alone: requests through
`Family.prepare` and the one loop (`run_inline`, the engine with one slot), timed whole, per
decode mode it takes, next to the bound its `Family.stages()` weight bytes give at this
machine's measured bandwidth. Nothing here names a family.
"""

from __future__ import annotations

import time
from statistics import median
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.pipeline.family import Family, SpeechRequest
from codecspec.pipeline.loop import run_inline
from codecspec.progress import bar

__all__ = [
    "BENCH_TEXTS",
    "MODES",
    "bench",
    "completed_record",
    "family_record",
    "protocol_figures",
    "run_sides",
    "side_figures",
    "time_family",
]

MODES = ("ar", "spec")  # the record's two columns
# The serving engine's default limits (480 frames; 480 input characters -> 1.5 x 480 + 2
# phoneme ids): the bench's requests are held to what a served request may be.
MAX_FRAMES, MAX_PHONEMES = 480, 722

# Held-out sentences (in no training corpus of the project), plain English.
BENCH_TEXTS = (
    "The lighthouse keeper counted the ships that passed before dawn.",
    "Please bring the blue folder to the meeting on Thursday.",
    "A quiet river runs behind the old mill at the edge of town.",
    "Seven children painted the fence while their parents watched.",
)


# ---------------------------------------------------------------------- the one driver
def bench(args, model, common: dict, family) -> tuple:
    """(figures, record function) of `codecspec bench` for `family` (the `Family` class of
    `model`'s folder); `common`: the bench's shared keywords (seed, provider, threads,
    params, progress, depth). `cli/bench.py` reports them alike for every family."""
    if family.bench_figures is not None:  # the family times its stages itself
        return family.bench_figures(args), completed_record
    if family.bench_keys is None:  # the protocol's bench: prepare + the one loop
        return protocol_figures(args, model, common)
    res: dict = {}
    if family.bench_depth_loop:
        from codecspec.pipeline.depth_bench import bench_depth_loop

        res.update(bench_depth_loop(model, args.frames, **common))
    if not (args.no_pipeline and family.bench_depth_loop):  # nothing else runs alone
        res.update(bench_pipeline(family, args, model, common, res))
    return res, family.bench_record


def bench_pipeline(family, args, model, common: dict, alone: dict) -> dict:
    """Text -> waveform: the family's model loaded through the registry, its requests run
    side by side (`run_sides`), reported under its keys (`Family.bench_keys`; `alone`: the
    depth loop's figures, when it ran alone first)."""
    from codecspec.pipeline.depth_bench import load_bench_texts
    from codecspec.pipeline.registry import load_model

    load = {k: common[k] for k in ("provider", "threads", "params", "depth") if k in common}
    tts = load_model(model, **load)
    requests = family.bench_requests(tts, load_bench_texts(args.texts), args)
    sides = family.bench_sides(tts, args)
    runs = run_sides(
        tts, requests, sides, seed=common["seed"], progress=common["progress"], desc=family.name
    )
    return family.bench_keys(tts, runs, args, alone)


def run_sides(tts, requests, sides: dict, *, seed=0, progress=False, desc="") -> dict:
    """{side: [Result]}: every request (`generate` keywords) through `tts.generate` once per
    side (`sides`: side -> its `generate` keywords), request i with seed `seed + i`, after one
    untimed warm-up of each side (sessions, caches); the sides' order flips per request so
    that drifting load on a shared machine hits them alike."""
    for kw in sides.values():
        tts.generate(**requests[0], **{**kw, "decode_audio": False})
    runs: dict = {m: [] for m in sides}
    order = list(sides)
    for i in bar(range(len(requests)), f"bench {desc}".strip(), len(requests), show=progress):
        for m in order if i % 2 == 0 else order[::-1]:
            runs[m].append(tts.generate(**requests[i], **sides[m], seed=seed + i))
    return runs


def side_figures(rows: list) -> dict:
    """One side's figures from its results: frames, audio seconds, seconds per stage
    (sums), ms per frame whole and per stage (medians over requests of each request's
    figure, so one long utterance does not dominate), the real-time factor (total time over
    audio time) and the depth loop's tokens per graph call (None without one)."""
    per_stage = [r.stage_ms_per_frame() for r in rows]
    audio = sum(r.audio_seconds for r in rows)
    calls = sum(getattr(r, "depth_calls", 0) for r in rows)
    return {
        "frames": int(sum(r.frames for r in rows)),
        "audio_seconds": float(audio),
        "seconds": {k: float(sum(r.stage_seconds()[k] for r in rows)) for k in per_stage[0]},
        "ms_per_frame": float(np.median([1e3 * r.total_seconds / r.frames for r in rows])),
        "stage_ms_per_frame": {
            k: float(np.median([x[k] for x in per_stage])) for k in per_stage[0]
        },
        "rtf": sum(r.total_seconds for r in rows) / max(audio, 1e-9),
        "tokens_per_call": sum(r.depth_codes for r in rows) / calls if calls else None,
        "hit_max_frames": int(sum(r.hit_max_frames for r in rows)),
    }


def completed_record(res: dict, folder, *, bandwidth: float, peak_rss_mb: float) -> dict:
    """The record a family measured itself (`Family.bench_figures`), completed only where
    it left out a figure of this run (the bandwidth, the peak RSS), then its bounds, totals
    and verdict (`codecspec.perf.finish_record`)."""
    from codecspec.perf import finish_record

    run = {"peak_rss_mb": peak_rss_mb, "bandwidth_gbps": bandwidth / 1e9}
    res.update({k: v for k, v in run.items() if res.get(k) is None})
    return finish_record(res)


# ---------------------------------------------------------------------- the protocol alone
def protocol_figures(args, model, common) -> tuple:
    """`codecspec bench` for a family without figures of its own (`Family.bench_keys`):
    `time_family` over `--texts` held-out sentences (default all of BENCH_TEXTS), every mode
    the family decodes; (the figures, the record function), which `cli/bench.py` reports as
    it reports every family's. `model`: the folder; `common`: the bench's shared keywords."""
    from codecspec.graphs.row_probe import cpu_simd_flags
    from codecspec.pipeline.registry import open_family

    family = open_family(args.model, 1, MAX_FRAMES, MAX_PHONEMES, args.provider, args.threads)
    n = len(BENCH_TEXTS) if args.texts is None else int(args.texts)
    if n < 1:
        raise ValueError(f"--texts: expected an integer >= 1, got {n}")
    texts = [BENCH_TEXTS[i % len(BENCH_TEXTS)] for i in range(n)]
    modes = [m for m in MODES if m in family.modes]
    timing = time_family(family, texts, modes=modes, seed=args.seed)

    def record(res, folder, *, bandwidth: float, peak_rss_mb: float) -> dict:
        rec = family_record(family, timing, bandwidth)
        rec.update(model=str(args.model), provider=args.provider, threads=args.threads)
        rec.update(peak_rss_mb=peak_rss_mb, cpu_simd=cpu_simd_flags())
        return rec

    return {"threads": args.threads}, record


def time_family(
    family: Family,
    texts,
    *,
    modes=("ar",),
    seed: int = 0,
    rounds: int = 3,
    voice: Optional[str] = None,
    language: str = "en",
) -> dict:
    """mode -> {"frames", "ms_per_frame"}: every text through the one loop per round (one
    untimed warm-up first), the median over rounds of wall time ÷ frames. A round runs the
    modes back to back, so a busy machine slows them alike (ratios inside one run)."""
    if rounds < 1:
        raise ValueError(f"rounds: expected an integer >= 1, got {rounds!r}")
    texts = list(texts)
    if not texts:
        raise ValueError("texts: give at least one text")
    _run(family, texts[:1], modes[0], seed, voice, language)  # warm-up: sessions, caches
    per_mode: dict = {m: [] for m in modes}
    frames: dict = {}
    for _ in range(rounds):
        for m in modes:
            t0 = time.perf_counter()
            frames[m] = _run(family, texts, m, seed, voice, language)
            per_mode[m].append((time.perf_counter() - t0) / max(frames[m], 1))
    return {m: {"frames": frames[m], "ms_per_frame": 1e3 * median(v)} for m, v in per_mode.items()}


def _run(family: Family, texts, mode: str, seed: int, voice, language) -> int:
    """Frames made for `texts` in `mode`, each text a request of its own (seed + its index)."""
    n = 0
    for i, text in enumerate(texts):
        req = SpeechRequest(text, voice=voice, language=language, mode=mode, seed=seed + i)
        family.check(req)
        state = family.prepare(req, cs.Generator(seed + i))
        n += sum(1 for _ in run_inline(family, state))
    return n


def family_record(family: Family, timing: dict, bandwidth: Optional[float]) -> dict:
    """The bench record (`codecspec.perf`) of `time_family`'s figures: a row per stage of
    the family (`Family.stages()`: its weight bytes and their bound; the loop is timed whole,
    so a stage has no time of its own), the measured ms per frame as the total beside the
    sum of the bounds, and the real-time factor at the family's frame rate."""
    from codecspec.perf import finish_record, stage

    spec = "spec" in timing
    rows = [
        stage(s.name, None, None, s.weight_bytes, s.weight_bytes if spec else None, calls=s.calls)
        for s in family.stages()
    ]
    record = {
        "family": family.name,
        "frames": {m: t["frames"] for m, t in timing.items()},
        "ms_per_frame": {m: timing[m]["ms_per_frame"] if m in timing else None for m in MODES},
        "audio_ms_per_frame": 1e3 / float(family.frame_rate),
        "bandwidth_gbps": None if bandwidth is None else bandwidth / 1e9,
        "stages": rows,
    }
    return finish_record(record)
