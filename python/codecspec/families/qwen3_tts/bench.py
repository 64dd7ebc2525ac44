"""`codecspec bench --model QWEN3_DIR`: every stage of the Qwen3-TTS pipeline per 80 ms frame,
the depth loop autoregressive vs speculative on the same frames, each figure next to its
bandwidth bound (bytes of weights read ÷ this machine's streaming bandwidth, measured in the
same run; codecspec.perf).

The run: the talker makes `frames` frames of built-in texts (its step time, the host work
around it), the depth loop decodes each of those frames AR and speculatively, alternating
which goes first (machine load hits both alike), and the speech decoder turns the codes into
audio. `acceptance=A` replaces the drafts by controlled ones whose top candidate is right with
probability A (decode.depth.ControlledDrafts, greedy depth loop, a chain of `draft_depth`
drafts): with random weights of a real shape this times the real graphs at the acceptance a
trained checkpoint would give (the paper reports 2.47 codes per call for Qwen3-TTS 0.6B).

How much work each stage does is planned, not fixed (`plan_bench`, issue 53 item 6): a frame
costs ~8x more at fp32 than at int4, and 300 frames through every stage (the pipeline end to
end alone ran 9 x 300 frames) took over an hour at fp32 on a 0.6B folder. The talker's frames
come first, for at most a quarter of the time left after loading; their measured costs then
size the other stages (frames, rounds, repeats) to what is left of `budget` seconds, never
below MIN_FRAMES frames. The record's "plan" says what was run and what it was predicted to
cost.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.progress import bar

from .corpus import CALIBRATION_TEXTS, corpus_request
from .pipeline import SAMPLE_RATE, SAMPLES_PER_FRAME, Qwen3TTS

__all__ = [
    "BENCH_SECONDS",
    "BenchPlan",
    "FrameCosts",
    "plan_bench",
    "plan_seconds",
    "bench_qwen3",
    "bench_figures",
    "plan_line",
    "depth_bytes",
    "controlled_depth_run",
    "greedy_truth",
    "speedup_map",
]

FRAME_MS = 1e3 * SAMPLES_PER_FRAME / SAMPLE_RATE  # 80 ms of audio per frame

BENCH_SECONDS = 90.0  # what a bench aims at, loading included, at any precision
MIN_FRAMES = 8  # the fewest frames a stage is timed on (fewer when fewer were asked)
GOOD_FRAMES = 24  # a plan level with fewer frames gives way to one with fewer repeats
TALKER_SHARE = 0.25  # of the seconds left after loading, for the talker's frames
HEAD_FRAMES = 8  # speculative frames on which the heads a verify call reads are counted
# Plan levels, most repetition first: (pipeline rounds, TTFA repeats, timed calls per
# call shape when the chain is chosen here).
LEVELS = ((3, 3, 30), (2, 2, 20), (1, 1, 10))
ROW_COST = 0.6  # each extra row of a verify call, in AR calls (AVX2 int4 measured ~0.5-0.6)


@dataclass(frozen=True)
class FrameCosts:
    """Seconds measured in this run that the plan scales by."""

    frame: float  # one frame of free generation: talker step, AR depth loop, host work
    depth: float  # the AR depth loop of one frame
    prefill: float  # one request's prompt prefill
    decoder: float  # the speech decoder per frame (0 when it is not run)
    calls: int = 15  # graph calls of an AR depth frame
    chain: int = 3  # the longest draft chain (choose_draft_depth times chain + 1 shapes)


@dataclass(frozen=True)
class BenchPlan:
    """The work of a bench after its talker frames: `frames` frames through the depth loop
    (AR and speculative, each once; with an acceptance also the greedy truth), the speech
    decoder, the text stream and each end-to-end run; `chain_calls` timed calls per call
    shape when the chain is chosen here (0: not chosen); TTFA `ttfa_repeats` times each
    way; the pipeline end to end `pipeline_rounds` times per mode; `seconds` predicted."""

    frames: int
    chain_calls: int
    ttfa_repeats: int
    pipeline_rounds: int
    acceptance: bool
    decoder: bool
    pipeline: bool
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def plan_seconds(plan: BenchPlan, c: FrameCosts) -> float:
    """Predicted seconds of `plan` at costs `c`: each stage's runs times what a run costs,
    a speculative frame counted as an AR one (an upper bound where speculation pays)."""
    n = plan.frames
    s = (n + 1) * 2 * c.depth + min(n, HEAD_FRAMES) * c.depth  # AR + spec (+ warm-ups), heads
    if plan.acceptance:
        s += n * c.depth  # the greedy truth the controlled drafts follow
        call = c.depth / max(c.calls, 1)
        shapes = sum(1 + ROW_COST * q for q in range(c.chain + 1))
        s += (plan.chain_calls + 3) * call * shapes if plan.chain_calls else 0.0
    if plan.decoder:
        whole = c.frame + c.decoder  # a frame from the talker to audio
        s += (n + 4) * c.decoder  # the decoder stage (and its warm-up)
        s += (plan.ttfa_repeats + 1) * (3 * c.prefill + 2 * whole)  # cold: two prefills
        s += c.prefill + n * whole + 0.5  # the text stream (its first tokens arrive paced)
        if plan.pipeline:
            s += c.prefill + n * c.frame  # the AR truth
            s += 2 * (c.prefill + 2 * whole)  # a short warm-up run per mode
            s += 2 * plan.pipeline_rounds * (c.prefill + n * whole)
    return float(s)


def plan_bench(
    costs: FrameCosts,
    seconds: float,
    frames: int,
    *,
    acceptance: bool,
    decoder: bool,
    pipeline: bool,
    choose_chain: bool = True,
) -> BenchPlan:
    """The most work that fits in `seconds` at `costs`, at most `frames` frames: the first
    level of LEVELS (most repetition first) at which GOOD_FRAMES frames fit (or all asked),
    else the last level's best; never fewer than MIN_FRAMES frames (or `frames` when fewer
    were asked), so a machine too slow for the budget still gets figures, over it."""
    if int(frames) < 1:
        raise ValueError(f"frames: expected an integer >= 1, got {frames!r}")
    frames = int(frames)
    floor = min(MIN_FRAMES, frames)

    def make(n, level):
        rounds, repeats, calls = level
        calls = calls if acceptance and choose_chain else 0
        p = BenchPlan(n, calls, repeats, rounds, acceptance, decoder, decoder and pipeline)
        return BenchPlan(**{**p.as_dict(), "seconds": plan_seconds(p, costs)})

    best = None
    for level in LEVELS:
        # plan_seconds grows with n: the largest n that fits, by bisection
        lo, hi = floor - 1, frames
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if make(mid, level).seconds <= seconds:
                lo = mid
            else:
                hi = mid - 1
        if lo >= floor:
            best = make(lo, level)
            if lo >= min(frames, GOOD_FRAMES):
                return best
    return best if best is not None else make(floor, LEVELS[-1])


def _head_bytes(model_path, num_heads: int) -> int:
    """Bytes of one LM head as the depth graph stores it (every head has the same shape)."""
    import onnx

    m = onnx.load(str(model_path), load_external_data=False)
    from codecspec.perf import tensor_nbytes

    total = sum(
        tensor_nbytes(list(t.dims), t.data_type)
        for t in m.graph.initializer
        if t.name.startswith("head") and "_t" in t.name
    )
    return total // max(num_heads, 1)


def depth_bytes(tts: Qwen3TTS) -> dict:
    """{"transformer": bytes per call without heads, "head": bytes per head read}."""
    from codecspec.perf import graph_reads

    path = tts.depth.graph.path
    head = _head_bytes(path, tts.depth.G - 1)
    total = graph_reads(path).per_call(1)
    return {"transformer": total - (tts.depth.G - 1) * head, "head": head}


def _talker_frames(
    tts: Qwen3TTS,
    frames: int,
    seed: int,
    temperature,
    ref_audio,
    log,
    deadline: float = float("inf"),
    progress: bool = False,
):
    """(hiddens, c0s, codes, seconds per stage) of up to `frames` talker frames (AR depth
    loop); past `deadline` (a time.perf_counter() value) it stops once MIN_FRAMES frames are
    made."""
    trace: list = []
    secs = {"talker": 0.0, "depth": 0.0, "wall": 0.0, "prefill": 0.0, "requests": 0}
    made = bar(
        _free_frames(tts, frames, seed, temperature, ref_audio, deadline, trace, secs),
        "bench: talker frames",
        frames,
        show=progress,
    )
    codes = list(made)
    log(f"talker: {len(codes)} frames")
    if not codes:
        raise ValueError("model: the talker ended every text before its first frame")
    hiddens = np.stack([h for h, _ in trace[: len(codes)]]).astype(np.float32)
    c0s = np.asarray([c for _, c in trace[: len(codes)]], np.int64)
    return hiddens, c0s, np.stack(codes), secs


def _free_frames(tts, frames: int, seed: int, temperature, ref_audio, deadline, trace, secs):
    """The frames of `_talker_frames`, text after text; `secs` and `trace` filled as made."""
    floor, made, i = min(MIN_FRAMES, frames), 0, 0

    def done() -> bool:
        return made >= frames or (made >= floor and time.perf_counter() > deadline)

    while not done() and i < 2 * len(CALIBRATION_TEXTS):
        text, lang = CALIBRATION_TEXTS[i % len(CALIBRATION_TEXTS)]
        info: dict = {}
        t0 = time.perf_counter()
        it = tts.iter_frames(
            text,
            mode="ar",
            seed=seed + i,
            temperature=temperature,
            max_frames=frames - made,
            info=info,
            trace=trace,
            **corpus_request(tts, text, lang, i, ref_audio),
        )
        try:
            for f in it:
                made += 1
                yield f
                if done():
                    break
        finally:
            it.close()
            if "seconds" in info:
                secs["wall"] += time.perf_counter() - t0 - info["seconds"]["prefill"]
                secs["prefill"] += info["seconds"]["prefill"]
                secs["talker"] += info["seconds"]["talker"]
                secs["depth"] += info["seconds"]["depth"]
                secs["requests"] += 1
        i += 1


def greedy_truth(dec, hiddens, c0s, progress: bool = False) -> list:
    """The greedy AR codes of every frame: what controlled drafts are right about."""
    saved = dec.params, dec.draft_control
    dec.params, dec.draft_control = cs.SamplingParams(0.0, 0, 1.0), None
    pairs = bar(list(zip(hiddens, c0s)), "bench: greedy truth", show=progress)
    try:
        return [dec.decode_frame(h, int(c), cs.Generator(0), "ar") for h, c in pairs]
    finally:
        dec.params, dec.draft_control = saved


def controlled_depth_run(
    dec,
    hiddens,
    c0s,
    frames: int,
    acceptance,
    draft_depth,
    seed: int,
    truth=None,
    progress: bool = False,
):
    """The depth loop AR vs speculative on the same frames (decode.timing.interleaved_ar_spec);
    with `acceptance`, greedy and with controlled drafts on a chain of `draft_depth`
    (`truth`: greedy_truth of the frames, computed here when not given)."""
    from codecspec.decode.depth import ControlledDrafts
    from codecspec.decode.timing import interleaved_ar_spec

    saved = dec.params, dec.tree, dec.draft_control
    try:
        hook = None
        if acceptance is not None:
            dec.params = cs.SamplingParams(0.0, 0, 1.0)
            dec.set_tree(cs.DraftTree.chain(int(draft_depth)))
            truth = greedy_truth(dec, hiddens, c0s, progress) if truth is None else truth
            dec.draft_control = ControlledDrafts(acceptance, dec.V, seed)
            dec.draft_control.truth = truth[0]  # the warm-up decodes frame 0

            def hook(j):
                dec.draft_control.truth = truth[j]

        dec.stats.reset()
        run = interleaved_ar_spec(dec, hiddens, c0s, frames, seed, progress, before_frame=hook)
        stats = {"acceptance": dec.stats.acceptance}
        # The heads a speculative call reads, counted on a few frames apart from the timing.
        dec.stats.reset()
        dec.stats.head_reads = 0
        g = cs.Generator(seed)
        for j in range(min(frames, HEAD_FRAMES)):
            if hook is not None:
                hook(j)
            dec.decode_frame(hiddens[j], int(c0s[j]), g, "spec")
        stats["heads_per_spec_call"] = dec.stats.head_reads / max(dec.stats.calls, 1)
    finally:
        dec.params, dec.draft_control = saved[0], saved[2]
        dec.set_tree(saved[1])
        dec.stats.head_reads = None
    return run, stats


def _depth_stage(tts, run, stats, frames: int, sizes: dict) -> tuple:
    from codecspec.perf import stage

    G = tts.depth.G
    ar_ms, spec_ms = run.median_ms("ar"), run.median_ms("spec")
    calls_ar, calls_spec = run.calls["ar"] / frames, run.calls["spec"] / frames
    # An AR call reads one head; a speculative one the heads its nodes and drafts use.
    bytes_ar = calls_ar * (sizes["transformer"] + sizes["head"])
    bytes_spec = calls_spec * (sizes["transformer"] + stats["heads_per_spec_call"] * sizes["head"])
    host = {
        m: (float(np.sum(run.times[m])) - float(np.sum(run.graph_ms[m]))) / max(run.calls[m], 1)
        for m in ("ar", "spec")
    }
    extra = {
        "tokens_per_call": (G - 1) / max(calls_spec, 1e-9),
        "acceptance_measured": stats["acceptance"],
        "heads_per_spec_call": stats["heads_per_spec_call"],
        "host_ms_per_call": host,
        "calls_per_frame": {"ar": calls_ar, "spec": calls_spec},
    }
    return stage("depth loop", ar_ms, spec_ms, bytes_ar, bytes_spec), extra


def bench_qwen3(
    model_dir,
    *,
    frames: int = 32,
    cache_dir=None,
    provider: str = "cpu",
    threads=None,
    seed: int = 0,
    temperature=None,
    ref_audio=None,
    weights: Optional[str] = None,
    acceptance: Optional[float] = None,
    draft_depth: Optional[int] = None,
    decoder: bool = True,
    decoder_precision: Optional[str] = None,
    budget: Optional[float] = BENCH_SECONDS,
    progress: bool = False,
    log=None,
) -> dict:
    """The bench record (codecspec.perf's schema, plus Qwen3 keys; see the module doc).
    `frames` caps every stage's frames; `budget` (seconds from this call, loading included;
    None: no limit) sizes them (`plan_bench`); `progress` shows a bar per stage on stderr."""
    from codecspec.perf import reset_peak_rss

    start = time.perf_counter()
    log = log or (lambda m: None)
    budget = _check_bench_args(acceptance, frames, budget)
    load = dict(cache_dir=cache_dir, provider=provider, threads=threads, weights=weights, log=log)
    tts = Qwen3TTS.load(model_dir, decoder_precision=decoder_precision, **load)
    loaded = time.perf_counter()
    reset_peak_rss()  # the peak of the loaded model at work, not of a first run's build
    dec = tts.depth
    _check_draft_depth(dec, draft_depth)
    left = budget - (loaded - start)
    hiddens, c0s, codes, secs = _talker_frames(
        tts, int(frames), seed, temperature, ref_audio, log, loaded + TALKER_SHARE * left, progress
    )
    n_talker = len(codes)
    pipeline = acceptance is not None and ref_audio is None
    costs = _frame_costs(tts, secs, n_talker, _decoder_warm_up(tts, codes) if decoder else 0.0)
    stages_run = dict(acceptance=acceptance is not None, decoder=decoder, pipeline=pipeline)
    left = budget - (time.perf_counter() - start)
    plan = _plan(costs, left, n_talker, stages_run, draft_depth in (None, "auto"), log)
    n = plan.frames
    draft_depth, choice = _resolve_draft_depth(
        dec, acceptance, draft_depth, plan.chain_calls, progress
    )
    log(f"depth loop: {n} frames, AR and speculative")
    frames_in = (hiddens[:n], c0s[:n])
    run, depth_row, depth_extra = _depth_loop(
        tts, frames_in, acceptance, draft_depth, seed, progress
    )
    talker_row, host_row = _talker_and_host_stages(tts, secs, n_talker)
    stages = [talker_row, depth_row]
    audio: dict = {"ttfa_s": None, "ttfa_cold_prefix_s": None, "pipeline_end_to_end": None}
    if decoder:
        log("speech decoder")
        stages.append(_decoder_stage(tts, codes[:n]))
        sampling = (seed, temperature, ref_audio)
        pipe = (float(acceptance), draft_depth) if pipeline else None
        audio.update(_audio_stages(tts, n, plan, sampling, pipe, progress, log))
    stages.append(host_row)
    record = {
        **_run_identity(tts, threads),
        "frames": n,
        "talker_frames": n_talker,
        "acceptance": None if acceptance is None else float(acceptance),
        "draft_depth": draft_depth if acceptance is not None else int(dec.tree.max_depth),
        "draft_depth_choice": choice,
        "stages": stages,
        "depth_speedup": run.median_ms("ar") / max(run.median_ms("spec"), 1e-9),
        **_machine_and_calibration(tts),
        "plan": _plan_record(plan, budget, loaded - start, costs),
        **audio,
        **depth_extra,
    }
    record = _finish(record, tts, run, greedy=acceptance is not None or dec.params.temperature == 0)
    record["plan"]["bench_s"] = time.perf_counter() - start
    return record


def bench_figures(args) -> dict:
    """`codecspec bench --model DIR`'s figures (`Qwen3Family.bench_figures`, called by the
    one driver): `bench_qwen3` with the command's flags, its plan logged unless --json."""
    import sys

    if args.quality:  # refused before the run, not after it: the reports cannot load these
        raise ValueError("--quality: not for Qwen3-TTS folders (quality cannot load them)")
    log = (lambda m: None) if args.json else (lambda m: print(m, file=sys.stderr))
    same = ("frames", "cache_dir", "provider", "threads", "seed", "temperature", "ref_audio")
    kw = {k: getattr(args, k) for k in same + ("weights", "acceptance", "draft_depth")}
    kw["decoder_precision"] = args.decoder_precision
    kw.update(decoder=not args.no_pipeline, budget=args.budget or None, progress=not args.json)
    return bench_qwen3(args.model, **kw, log=log)  # looked up per call: tests replace it


def plan_line(res: dict) -> str:
    """What the bench ran (`plan_bench`), for the table's foot."""
    p = res.get("plan") or {}
    if not p:
        return ""
    runs = f"{res['talker_frames']} talker frames, {p['frames']} frames per later stage"
    if p["decoder"]:
        runs += f", TTFA {p['ttfa_repeats']}x each way"
    if p["pipeline"]:
        runs += f", pipeline end to end {p['pipeline_rounds']}x per mode"
    budget = p.get("budget_s")
    aim = "no time limit" if budget is None else f"aimed at {budget:g} s"
    return f"bench: {runs}; {p['bench_s']:.0f} s including {p['load_s']:.0f} s loading ({aim})"


def _frame_costs(tts: Qwen3TTS, secs: dict, n_talker: int, decoder_s: float) -> FrameCosts:
    """What a frame of each stage cost in the talker's timed frames (the plan's input)."""
    dec = tts.depth
    return FrameCosts(
        frame=secs["wall"] / n_talker,
        depth=secs["depth"] / n_talker,
        prefill=secs["prefill"] / max(secs["requests"], 1),
        decoder=decoder_s,
        calls=dec.G - 1,
        chain=_longest_chain(dec),
    )


def _plan(costs: FrameCosts, left: float, n_talker: int, stages_run: dict, choose_chain, log):
    """`plan_bench` for the seconds left, logged."""
    plan = plan_bench(costs, left, n_talker, choose_chain=choose_chain, **stages_run)
    log(
        f"plan: {plan.frames} frames per stage, about {plan.seconds:.0f} s more "
        f"(a frame {1e3 * costs.frame:.0f} ms, its depth loop {1e3 * costs.depth:.0f} ms)"
    )
    return plan


def _talker_and_host_stages(tts: Qwen3TTS, secs: dict, n_talker: int):
    """The talker step's stage row and the host's (the c0 head's float32 matrix-vector
    product and sampling, once per frame), each with the bytes it reads."""
    from codecspec.perf import graph_reads, stage

    talker_ms = 1e3 * secs["talker"] / n_talker
    talker_bytes = graph_reads(tts.talker.graph.path).per_call(1)
    bank = tts.talker.head
    head = 4 * bank.vocab_size * bank.hidden_size
    host_ms = 1e3 * (secs["wall"] - secs["talker"] - secs["depth"]) / n_talker
    return (
        stage("talker step", talker_ms, talker_ms, talker_bytes, talker_bytes),
        stage("host (c0 head, sampling)", host_ms, host_ms, head, head),
    )


def _run_identity(tts: Qwen3TTS, threads) -> dict:
    return {
        "family": "qwen3",
        "model": str(tts.ck.dir),
        "provider": tts.depth.graph.provider,
        "threads": threads,
        "weights": tts.weights,
        **_decoder_identity(tts),
    }


def _decoder_identity(tts: Qwen3TTS) -> dict:
    """The speech decoder's precision, and for int8 its error measured against float32 (when
    the run loaded the decoder: --no-pipeline does not, and need not build its graph)."""
    out = {"decoder_precision": tts.decoder_precision}
    if tts.decoder_precision != "fp32" and tts._decoder is not None:
        from .decoder_int8 import int8_error

        out["decoder_error"] = int8_error(tts.speech_decoder().graph_path)
    return out


def _depth_loop(tts: Qwen3TTS, frames_in, acceptance, draft_depth, seed: int, progress):
    """The depth loop timed AR and speculative on the talker's own frames: the run, its
    stage row and its extra record keys."""
    hiddens, c0s = frames_in
    n = len(c0s)
    run, stats = controlled_depth_run(
        tts.depth, hiddens, c0s, n, acceptance, draft_depth, seed, progress=progress
    )
    row, extra = _depth_stage(tts, run, stats, n, depth_bytes(tts))
    return run, row, extra


def _plan_record(plan, budget: float, load_s: float, costs: FrameCosts) -> dict:
    return {
        **plan.as_dict(),
        "budget_s": None if budget == float("inf") else budget,
        "load_s": load_s,
        "costs_s": asdict(costs),
    }


def _machine_and_calibration(tts: Qwen3TTS) -> dict:
    """The peak memory, the CPU's SIMD flags and what calibration chose: beside every figure
    because ratios and rounding differ between CPU kinds."""
    from codecspec.graphs.row_probe import cpu_simd_flags
    from codecspec.perf import peak_rss_mb

    return {
        "audio_ms_per_frame": FRAME_MS,
        "peak_rss_mb": peak_rss_mb(),
        "calibration": {"depth": _calibrated(tts), "precision": _precision_choice(tts)},
        "cpu_simd": cpu_simd_flags(),
    }


def _check_bench_args(acceptance, frames, budget) -> float:
    """The budget in seconds (inf: none), after checking the arguments a user passes."""
    if acceptance is not None and not (0.0 <= float(acceptance) <= 1.0):
        raise ValueError(f"acceptance: expected a number in [0, 1], got {acceptance!r}")
    if int(frames) < 2:
        raise ValueError(f"frames: expected at least 2, got {frames!r}")
    if budget is not None and not float(budget) > 0:
        raise ValueError(f"budget: expected a number of seconds > 0, got {budget!r}")
    return float("inf") if budget is None else float(budget)


def _audio_stages(tts: Qwen3TTS, n: int, plan, sampling, pipe, progress, log) -> dict:
    """What a listener waits for: first audio (warm and cold prefix), text streamed at
    TEXT_RATE, and with `pipe` = (acceptance, draft_depth) the pipeline end to end."""
    seed, temperature, ref_audio = sampling
    warm, cold = time_to_first_audio(tts, seed, temperature, ref_audio, plan.ttfa_repeats, progress)
    out: dict = {"ttfa_s": warm, "ttfa_cold_prefix_s": cold}
    log(f"text streamed at {TEXT_RATE:g} tokens/s: first audio, underruns")
    out["text_stream"] = from_the_text(tts, n, seed, temperature, ref_audio)
    if pipe is not None:
        acceptance, draft_depth = pipe
        log(f"pipeline end to end at acceptance {acceptance}")
        out["pipeline_end_to_end"] = pipeline_at_acceptance(
            tts, acceptance, draft_depth, n, seed, plan.pipeline_rounds, progress
        )
    return out


def _decoder_warm_up(tts: Qwen3TTS, codes: np.ndarray) -> float:
    """Seconds per frame of the speech decoder's first call on a few frames (it opens the
    decoder; the plan's estimate of a decoder frame, on the high side)."""
    sd = tts.speech_decoder()
    k = min(len(codes), 4)
    t0 = time.perf_counter()
    sd.decode(codes[:k])
    return (time.perf_counter() - t0) / k


def _longest_chain(dec) -> int:
    """Drafts per round a chain can hold: the graph's draft offsets, within a frame's levels."""
    return min(dec.config.num_draft_offsets, dec.G - 2)


def _check_draft_depth(dec, draft_depth) -> None:
    K = _longest_chain(dec)
    if draft_depth in (None, "auto") or (isinstance(draft_depth, int) and 1 <= draft_depth <= K):
        return
    raise ValueError(f"draft_depth: expected 'auto' or 1..{K}, got {draft_depth!r}")


def _resolve_draft_depth(
    dec, acceptance, draft_depth, calls: int = 30, progress: bool = False
) -> tuple:
    """(chain, choice record): with an acceptance, the chain asked or chosen here
    (`choose_draft_depth`, `calls` timed calls per shape); without one the chain is unused
    and "auto" stands for K."""
    auto = draft_depth in (None, "auto")
    if acceptance is None:
        return (_longest_chain(dec) if auto else draft_depth), None
    calls = max(int(calls), 1)
    asked = None if auto else draft_depth
    choice = choose_draft_depth(dec, float(acceptance), asked, calls, progress)
    return choice["depth"], choice


SHORTER_CHAIN_MARGIN = 1.03  # choose_draft_depth: a longer chain must be predicted 3% faster


def choose_draft_depth(
    dec, acceptance: float, asked: Optional[int] = None, calls: int = 30, progress: bool = False
):
    """The chain (drafts per round) this device pays most for at a controlled `acceptance`,
    or `asked`'s prediction beside the others: every chain's verify call timed against the AR
    call (the decoder's bound calls, interleaved, medians), and the frame's calls predicted by
    the independence model of calibration (`calibrate.budget.predict_tree`: prefill, trees cut
    at the frame's end) with each draft right with probability `acceptance`. A verify call
    costs 1.1-1.6x an AR call on an AVX-512 VNNI CPU and 2.4-2.9x on AVX2 at four rows, so the
    chain that pays differs per machine (docs/performance.md)."""
    from codecspec.calibrate.budget import predict_tree

    depths = range(1, _longest_chain(dec) + 1)
    ms = _call_ms(dec, depths, calls, progress) if progress else _call_ms(dec, depths, calls)
    ar = (dec.G - 1) * ms[1]  # the prefill and 14 steps, one row each

    def cost(q, prefill=False):
        return ms[1] if prefill else ms[int(q)]

    predicted = {}
    for d in depths:
        accept = np.full((d, 1), float(acceptance))
        frame = predict_tree(cs.DraftTree.chain(d), accept, dec.G, cost)
        predicted[d] = ar / frame["ms_per_frame"]
    # The model leaves out what grows with a call's rows besides the graph: the host's verify
    # work (0.07 ms for an AR call, 0.21 for a verify call on the AVX-512 EPYC), and longer
    # chains gained less end to end than in the depth loop alone there. So a longer chain
    # must be predicted at least SHORTER_CHAIN_MARGIN faster to be chosen.
    top = max(predicted.values())
    best = min(d for d, x in predicted.items() if x * SHORTER_CHAIN_MARGIN >= top)
    return {
        "depth": best if asked is None else int(asked),
        "by": "auto" if asked is None else "asked",
        "predicted_speedup": predicted,
        "call_ratio": {q: ms[q] / ms[1] for q in sorted(ms) if q > 1},
    }


def _call_ms(dec, depths, calls: int, progress: bool = False) -> dict:
    """{rows: median ms} of the AR call (1 row) and each chain's verify call (d + 1 rows),
    interleaved; the decoder's tree is restored after."""
    saved = dec.tree
    bound = {1: dec._step_call}
    for d in depths:
        dec.set_tree(cs.DraftTree.chain(d))
        bound[d + 1] = dec._tree_call
    dec.set_tree(saved)
    for q, call in bound.items():
        call.heads[:q] = np.arange(1, q + 1)  # levels 1..q: each row a valid head
    times: dict = {q: [] for q in bound}
    for i in bar(range(calls + 3), "bench: verify-call costs", show=progress):
        for q, call in bound.items():
            t0 = time.perf_counter()
            call.run()
            if i >= 3:  # warm-up
                times[q].append(time.perf_counter() - t0)
    return {q: 1e3 * float(np.median(t)) for q, t in times.items()}


def _decoder_stage(tts: Qwen3TTS, codes: np.ndarray) -> dict:
    """The 12 Hz speech decoder's stage row: one warm decode of the utterance's codes (the
    bench warmed the decoder up before, `_decoder_warm_up`)."""
    from codecspec.perf import graph_reads, stage

    n = len(codes)
    sd = tts.speech_decoder()
    t0 = time.perf_counter()
    sd.decode(codes)
    ms = 1e3 * (time.perf_counter() - t0) / n
    nbytes = graph_reads(sd.graph_path).per_call(1) / n  # one call decodes the utterance
    name = "speech decoder" if sd.precision == "fp32" else f"speech decoder ({sd.precision})"
    return stage(name, ms, ms, nbytes, nbytes)


def _finish(record: dict, tts: Qwen3TTS, run, greedy: bool) -> dict:
    """The greedy agreement, the threads and bandwidth the sessions see, and perf's totals."""
    from codecspec.perf import finish_record, stream_bandwidth
    from codecspec.runtime.session import session_threads

    if greedy:
        # greedy: the speculative codes must be the AR codes (up to the rounding a quantised
        # graph's activations add, docs/performance.md)
        same = run.codes["ar"] == run.codes["spec"]
        record["greedy_spec_equals_ar"] = bool(same.all())
        record["greedy_code_agreement"] = float(same.mean())
    n_threads = session_threads(tts.depth.graph.session)  # the probe reads as the sessions do
    record["threads"] = n_threads
    record["bandwidth_gbps"] = stream_bandwidth(threads=n_threads) / 1e9
    finish_record(record)
    record["stage_ms_per_frame"] = {
        r["name"]: {"ar": r["ar_ms"], "spec": r["spec_ms"]} for r in record["stages"]
    }
    return record


WARM_UP_FRAMES = 2  # the frames of pipeline_at_acceptance's warm-up run per mode


def pipeline_at_acceptance(
    tts: Qwen3TTS,
    acceptance: float,
    draft_depth: int,
    frames: int,
    seed: int,
    rounds: int = 3,
    progress: bool = False,
) -> dict:
    """The whole pipeline, text -> codes -> waveform, run end to end AR and speculatively
    with controlled drafts (top candidate right with probability `acceptance`), interleaved
    over `rounds` after a short warm-up run per mode (WARM_UP_FRAMES frames), medians in ms
    per frame. Greedy: the speculative codes are the AR codes (an exact mode), so frame j's
    drafts are set from the AR run's frame j."""
    text, lang = CALIBRATION_TEXTS[0]
    kw = dict(temperature=0, seed=seed, max_frames=frames, **corpus_request(tts, text, lang, 0))
    from codecspec.decode.depth import SequencedDrafts

    truth = tts.generate_codes(text, mode="ar", **kw).codes
    dec = tts.depth
    saved = dec.tree, dec.draft_control
    control = SequencedDrafts(acceptance, dec.V, truth, seed)
    dec.set_tree(cs.DraftTree.chain(int(draft_depth)))
    dec.draft_control = control
    times: dict = {"ar": [], "spec": []}
    same = True
    runs = [
        (r, m) for r in range(int(rounds) + 1) for m in (("ar", "spec"), ("spec", "ar"))[r % 2 == 0]
    ]
    warm = {**kw, "max_frames": min(frames, WARM_UP_FRAMES)}
    try:
        for r, mode in bar(runs, "bench: pipeline end to end", show=progress):
            control.rewind()
            t0 = time.perf_counter()
            wav, res = tts.synthesize(text, mode=mode, **(kw if r else warm))
            if r:  # round 0 warms up
                times[mode].append(1e3 * (time.perf_counter() - t0) / max(len(res.codes), 1))
            same = same and np.array_equal(res.codes, truth[: len(res.codes)])
    finally:
        dec.draft_control = saved[1]
        dec.set_tree(saved[0])
    ar, spec = float(np.median(times["ar"])), float(np.median(times["spec"]))
    return {
        "acceptance": float(acceptance),
        "frames": int(len(truth)),
        "ar_ms": ar,
        "spec_ms": spec,
        "speedup": ar / max(spec, 1e-9),
        "codes_equal_ar": bool(same),
    }


def time_to_first_audio(
    tts: Qwen3TTS, seed: int, temperature, ref_audio, repeats: int = 3, progress: bool = False
):
    """(warm, cold prefix) median seconds from `stream()` to its first audio chunk, the graphs
    loaded and the speech decoder open: prompt, prefill, the first frame and its decoder call.
    Warm: the voice's prompt prefix is in the talker's prefix cache (a repeated voice); cold:
    the cache is emptied before each run (a voice's first request)."""
    from .talker import PrefixCache

    text, lang = CALIBRATION_TEXTS[0]
    kw = corpus_request(tts, text, lang, 0, ref_audio)
    kept = tts.talker.prefixes
    times: dict = {"cold": [], "warm": []}
    try:
        rounds = bar(range(repeats + 1), "bench: time to first audio", show=progress)
        for r in rounds:  # the first round warms the stream's own allocations
            for kind in ("cold", "warm"):
                if kind == "cold":
                    tts.talker.prefixes = PrefixCache()
                t0 = time.perf_counter()
                chunks = tts.stream(
                    text, seed=seed + r, temperature=temperature, max_frames=8, **kw
                )
                next(chunks, None)
                times[kind].append(time.perf_counter() - t0)
                chunks.close()
    finally:
        tts.talker.prefixes = kept
    return float(np.median(times["warm"][1:])), float(np.median(times["cold"][1:]))


TEXT_RATE = 30.0  # tokens a second: an LLM writing the text as it is spoken


def from_the_text(tts: Qwen3TTS, frames: int, seed: int, temperature, ref_audio) -> dict:
    """Latency measured from the text (issue 49): the calibration text fed to
    `stream_text` token by token at TEXT_RATE (`text_latency`): the first audio after the
    first token, and the underruns of the audio played from its first chunk on."""
    from .text_latency import text_stream_latency

    text, lang = CALIBRATION_TEXTS[0]
    kw = corpus_request(tts, text, lang, 0, ref_audio)
    return text_stream_latency(
        tts, text, TEXT_RATE, seed=seed, temperature=temperature, max_frames=frames, **kw
    )


def _precision_choice(tts: Qwen3TTS) -> Optional[str]:
    """ "int4: fastest of ..." when `codecspec calibrate` chose a precision here, else None."""
    from .graphs import chosen_precision

    doc = chosen_precision(tts.entry)
    return None if doc is None else f"{doc['chosen']}: {doc['reason']}"


def _calibrated(tts: Qwen3TTS) -> Optional[str]:
    """ "spec" or "ar": what this precision's calibration decided; None where none ran."""
    from codecspec.calibrate.decision import DECISION_FILE, read_decision

    decision = read_decision(tts.calibration_file(DECISION_FILE))
    return None if decision.source is None else decision.mode


def speedup_map(
    model_dir,
    *,
    weights: Optional[str] = None,
    acceptances=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
    depths=None,
    frames: int = 16,
    cache_dir=None,
    threads=None,
    seed: int = 0,
    log=None,
) -> dict:
    """The speed-up map of a checkpoint's own depth graphs at its real shape: for each
    top-1 acceptance and chain depth N, the depth loop AR vs speculative (controlled drafts,
    interleaved) next to the ideal tau(N)/c(N) from bare calls of the same run; the format of
    codecspec.calibrate.speedup_map (its plot and `locate` read it)."""
    import platform

    from codecspec.calibrate.speedup_map import MAP_FORMAT
    from codecspec.decode.timing import ideal_speedup

    log = log or (lambda m: None)
    tts = Qwen3TTS.load(
        model_dir, cache_dir=cache_dir, provider="cpu", threads=threads, weights=weights, log=log
    )
    dec = tts.depth
    K = dec.config.num_draft_offsets
    depths = tuple(range(1, min(K, dec.G - 2) + 1)) if depths is None else tuple(depths)
    rng = np.random.default_rng(seed)
    hiddens = rng.standard_normal((frames, dec.config.input_width)).astype(np.float32)
    c0s = rng.integers(0, dec.config.c0_vocab_size, frames)
    truth = greedy_truth(dec, hiddens, c0s)
    points = []
    for n in depths:
        for a in acceptances:
            run, stats = controlled_depth_run(dec, hiddens, c0s, frames, a, n, seed, truth)
            dec.set_tree(cs.DraftTree.chain(n))  # ideal_speedup times the tree call's shape
            spec_cpf = run.calls["spec"] / frames
            ideal = ideal_speedup(dec, spec_cpf, blocks=5)
            ar, spec = run.median_ms("ar"), run.median_ms("spec")
            host = np.sum(run.times["spec"]) - np.sum(run.graph_ms["spec"])
            points.append(
                {
                    "acceptance": float(a),
                    "acceptance_top1_mean": stats["acceptance"],
                    "budget": n,
                    "tree_nodes": n + 1,
                    "tokens_per_call": (dec.G - 1) / spec_cpf,
                    "ar_ms_per_frame": ar,
                    "spec_ms_per_frame": spec,
                    "speedup": ar / spec,
                    "ideal_speedup": ideal["ideal_speedup"],
                    "efficiency": (ar / spec) / ideal["ideal_speedup"],
                    "cost_ratio": ideal["graph_ms_tree"] / ideal["graph_ms_q1"],
                    "graph_ms_q1": ideal["graph_ms_q1"],
                    "graph_ms_tree": ideal["graph_ms_tree"],
                    "host_ms_per_call": float(host) / max(run.calls["spec"], 1),
                }
            )
            pt = points[-1]
            log(f"N={n} a={a:.1f}: {pt['speedup']:.2f}x (ideal {pt['ideal_speedup']:.2f}x)")
    dec.set_tree(cs.DraftTree.chain(min(K, dec.G - 2)))
    return {
        "format": MAP_FORMAT,
        "model": str(tts.ck.dir),
        "shape": {
            "hidden": dec.config.hidden_size,
            "layers": dec.config.num_layers,
            "vocab": dec.V,
            "groups": dec.G,
        },
        "weights": tts.weights,
        "threads": threads,
        "frames": frames,
        "cpu_model": platform.processor() or platform.machine(),
        "points": points,
    }
