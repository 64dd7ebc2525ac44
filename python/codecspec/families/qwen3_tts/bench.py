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
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

import codecspec as cs

from .calibrate import CALIBRATION_TEXTS, _request
from .pipeline import SAMPLE_RATE, SAMPLES_PER_FRAME, Qwen3TTS

__all__ = [
    "shipped_qwen3_map",
    "bench_qwen3",
    "depth_bytes",
    "controlled_depth_run",
    "greedy_truth",
    "speedup_map",
]

FRAME_MS = 1e3 * SAMPLES_PER_FRAME / SAMPLE_RATE  # 80 ms of audio per frame


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


def _talker_frames(tts: Qwen3TTS, frames: int, seed: int, temperature, ref_audio, log):
    """(hiddens, c0s, codes, seconds per stage) of `frames` talker frames (AR depth loop)."""
    trace: list = []
    codes: list = []
    secs = {"talker": 0.0, "depth": 0.0, "wall": 0.0}
    i = 0
    while len(codes) < frames and i < 2 * len(CALIBRATION_TEXTS):
        text, lang = CALIBRATION_TEXTS[i % len(CALIBRATION_TEXTS)]
        info: dict = {}
        t0 = time.perf_counter()
        for f in tts.iter_frames(
            text,
            mode="ar",
            seed=seed + i,
            temperature=temperature,
            max_frames=frames - len(codes),
            info=info,
            trace=trace,
            **_request(tts, text, lang, i, ref_audio),
        ):
            codes.append(f)
        secs["wall"] += time.perf_counter() - t0 - info["seconds"]["prefill"]
        secs["talker"] += info["seconds"]["talker"]
        secs["depth"] += info["seconds"]["depth"]
        i += 1
        log(f"talker: {len(codes)}/{frames} frames")
    if not codes:
        raise ValueError("model: the talker ended every text before its first frame")
    hiddens = np.stack([h for h, _ in trace]).astype(np.float32)
    c0s = np.asarray([c for _, c in trace], np.int64)
    return hiddens, c0s, np.stack(codes), secs


def greedy_truth(dec, hiddens, c0s) -> list:
    """The greedy AR codes of every frame: what controlled drafts are right about."""
    saved = dec.params, dec.draft_control
    dec.params, dec.draft_control = cs.SamplingParams(0.0, 0, 1.0), None
    try:
        return [dec.decode_frame(h, int(c), cs.Generator(0), "ar") for h, c in zip(hiddens, c0s)]
    finally:
        dec.params, dec.draft_control = saved


def controlled_depth_run(
    dec, hiddens, c0s, frames: int, acceptance, draft_depth, seed: int, truth=None
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
            truth = greedy_truth(dec, hiddens, c0s) if truth is None else truth
            dec.draft_control = ControlledDrafts(acceptance, dec.V, seed)
            dec.draft_control.truth = truth[0]  # the warm-up decodes frame 0

            def hook(j):
                dec.draft_control.truth = truth[j]

        dec.stats.reset()
        run = interleaved_ar_spec(dec, hiddens, c0s, frames, seed, False, before_frame=hook)
        stats = {"acceptance": dec.stats.acceptance}
        # The heads a speculative call reads, counted on a few frames apart from the timing.
        dec.stats.reset()
        dec.stats.head_reads = 0
        g = cs.Generator(seed)
        for j in range(min(frames, 8)):
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
    log=None,
) -> dict:
    """The bench record (codecspec.perf's schema, plus Qwen3 keys; see the module doc)."""
    from codecspec.graphs.row_probe import cpu_simd_flags
    from codecspec.perf import graph_reads, peak_rss_mb, reset_peak_rss, stage

    log = log or (lambda m: None)
    if acceptance is not None and not (0.0 <= float(acceptance) <= 1.0):
        raise ValueError(f"acceptance: expected a number in [0, 1], got {acceptance!r}")
    if int(frames) < 2:
        raise ValueError(f"frames: expected at least 2, got {frames!r}")
    tts = Qwen3TTS.load(
        model_dir, cache_dir=cache_dir, provider=provider, threads=threads, weights=weights, log=log
    )
    reset_peak_rss()  # the peak of the loaded model at work, not of a first run's build
    dec = tts.depth
    _check_draft_depth(dec, draft_depth)
    hiddens, c0s, codes, secs = _talker_frames(tts, int(frames), seed, temperature, ref_audio, log)
    n = len(codes)
    draft_depth, choice = _resolve_draft_depth(dec, acceptance, draft_depth)
    log(f"depth loop: {n} frames, AR and speculative")
    run, stats = controlled_depth_run(dec, hiddens, c0s, n, acceptance, draft_depth, seed)
    depth_row, depth_extra = _depth_stage(tts, run, stats, n, depth_bytes(tts))
    talker_ms = 1e3 * secs["talker"] / n
    talker_bytes = graph_reads(tts.talker.graph.path).per_call(1)
    stages = [stage("talker step", talker_ms, talker_ms, talker_bytes, talker_bytes), depth_row]
    audio: dict = {"ttfa_s": None, "ttfa_cold_prefix_s": None, "pipeline_end_to_end": None}
    if decoder:
        stages.append(_decoder_stage(tts, codes))
        warm, cold = time_to_first_audio(tts, seed, temperature, ref_audio)
        audio.update(ttfa_s=warm, ttfa_cold_prefix_s=cold)
        log(f"text streamed at {TEXT_RATE:g} tokens/s: first audio, underruns")
        audio["text_stream"] = from_the_text(tts, int(frames), seed, temperature, ref_audio)
        if acceptance is not None and ref_audio is None:
            log(f"pipeline end to end at acceptance {acceptance}")
            audio["pipeline_end_to_end"] = pipeline_at_acceptance(
                tts, float(acceptance), draft_depth, int(frames), seed
            )
    bank = tts.talker.head  # the c0 head's matrix-vector product, once per frame (float32)
    head = 4 * bank.vocab_size * bank.hidden_size
    host_ms = 1e3 * (secs["wall"] - secs["talker"] - secs["depth"]) / n
    stages.append(stage("host (c0 head, sampling)", host_ms, host_ms, head, head))
    record = {
        "family": "qwen3",
        "model": str(tts.ck.dir),
        "provider": dec.graph.provider,
        "threads": threads,
        "weights": tts.weights,
        "frames": n,
        "acceptance": None if acceptance is None else float(acceptance),
        "draft_depth": draft_depth if acceptance is not None else int(dec.tree.max_depth),
        "draft_depth_choice": choice,
        "stages": stages,
        "audio_ms_per_frame": FRAME_MS,
        "peak_rss_mb": peak_rss_mb(),
        "depth_speedup": run.median_ms("ar") / max(run.median_ms("spec"), 1e-9),
        "calibration": {"depth": _calibrated(tts), "precision": _precision_choice(tts)},
        "cpu_simd": cpu_simd_flags(),
        **audio,
        **depth_extra,
    }
    return _finish(record, tts, run, greedy=acceptance is not None or dec.params.temperature == 0)


def _longest_chain(dec) -> int:
    """Drafts per round a chain can hold: the graph's draft offsets, within a frame's levels."""
    return min(dec.config.num_draft_offsets, dec.G - 2)


def _check_draft_depth(dec, draft_depth) -> None:
    K = _longest_chain(dec)
    if draft_depth in (None, "auto") or (isinstance(draft_depth, int) and 1 <= draft_depth <= K):
        return
    raise ValueError(f"draft_depth: expected 'auto' or 1..{K}, got {draft_depth!r}")


def _resolve_draft_depth(dec, acceptance, draft_depth) -> tuple:
    """(chain, choice record): with an acceptance, the chain asked or chosen here
    (`choose_draft_depth`); without one the chain is unused and "auto" stands for K."""
    auto = draft_depth in (None, "auto")
    if acceptance is None:
        return (_longest_chain(dec) if auto else draft_depth), None
    choice = choose_draft_depth(dec, float(acceptance), None if auto else draft_depth)
    return choice["depth"], choice


SHORTER_CHAIN_MARGIN = 1.03  # choose_draft_depth: a longer chain must be predicted 3% faster


def choose_draft_depth(dec, acceptance: float, asked: Optional[int] = None, calls: int = 30):
    """The chain (drafts per round) this device pays most for at a controlled `acceptance`,
    or `asked`'s prediction beside the others: every chain's verify call timed against the AR
    call (the decoder's bound calls, interleaved, medians), and the frame's calls predicted by
    the independence model of calibration (`calibrate.device.predict_tree`: prefill, trees cut
    at the frame's end) with each draft right with probability `acceptance`. A verify call
    costs 1.1-1.6x an AR call on an AVX-512 VNNI CPU and 2.4-2.9x on AVX2 at four rows, so the
    chain that pays differs per machine (docs/performance.md)."""
    from codecspec.calibrate.device import predict_tree

    depths = range(1, _longest_chain(dec) + 1)
    ms = _call_ms(dec, depths, calls)
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


def _call_ms(dec, depths, calls: int) -> dict:
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
    for i in range(calls + 3):
        for q, call in bound.items():
            t0 = time.perf_counter()
            call.run()
            if i >= 3:  # warm-up
                times[q].append(time.perf_counter() - t0)
    return {q: 1e3 * float(np.median(t)) for q, t in times.items()}


def _decoder_stage(tts: Qwen3TTS, codes: np.ndarray) -> dict:
    """The 12 Hz speech decoder's stage row: one warm decode of the utterance's codes."""
    from codecspec.perf import graph_reads, stage

    n = len(codes)
    sd = tts.speech_decoder()
    sd.decode(codes[: min(n, 4)])  # warm-up
    t0 = time.perf_counter()
    sd.decode(codes)
    ms = 1e3 * (time.perf_counter() - t0) / n
    nbytes = graph_reads(sd.graph_path).per_call(1) / n  # one call decodes the utterance
    return stage("speech decoder", ms, ms, nbytes, nbytes)


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


def pipeline_at_acceptance(
    tts: Qwen3TTS, acceptance: float, draft_depth: int, frames: int, seed: int, rounds: int = 3
) -> dict:
    """The whole pipeline, text -> codes -> waveform, run end to end AR and speculatively
    with controlled drafts (top candidate right with probability `acceptance`), interleaved
    over `rounds`, medians in ms per frame. Greedy: the speculative codes are the AR codes
    (an exact mode), so frame j's drafts are set from the AR run's frame j."""
    text, lang = CALIBRATION_TEXTS[0]
    kw = dict(temperature=0, seed=seed, max_frames=frames, **_request(tts, text, lang, 0))
    from codecspec.decode.depth import SequencedDrafts

    truth = tts.generate_codes(text, mode="ar", **kw).codes
    dec = tts.depth
    saved = dec.tree, dec.draft_control
    control = SequencedDrafts(acceptance, dec.V, truth, seed)
    dec.set_tree(cs.DraftTree.chain(int(draft_depth)))
    dec.draft_control = control
    times: dict = {"ar": [], "spec": []}
    same = True
    try:
        for r in range(int(rounds) + 1):
            for mode in ("ar", "spec") if r % 2 else ("spec", "ar"):
                control.rewind()
                t0 = time.perf_counter()
                wav, res = tts.synthesize(text, mode=mode, **kw)
                if r:  # round 0 warms up
                    times[mode].append(1e3 * (time.perf_counter() - t0) / max(len(res.codes), 1))
                same = same and np.array_equal(res.codes, truth)
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


def time_to_first_audio(tts: Qwen3TTS, seed: int, temperature, ref_audio, repeats: int = 3):
    """(warm, cold prefix) median seconds from `stream()` to its first audio chunk, the graphs
    loaded and the speech decoder open: prompt, prefill, the first frame and its decoder call.
    Warm: the voice's prompt prefix is in the talker's prefix cache (a repeated voice); cold:
    the cache is emptied before each run (a voice's first request)."""
    from .talker import PrefixCache

    text, lang = CALIBRATION_TEXTS[0]
    kw = _request(tts, text, lang, 0, ref_audio)
    kept = tts.talker.prefixes
    times: dict = {"cold": [], "warm": []}
    try:
        for r in range(repeats + 1):  # the first round warms the stream's own allocations
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
    kw = _request(tts, text, lang, 0, ref_audio)
    return text_stream_latency(
        tts, text, TEXT_RATE, seed=seed, temperature=temperature, max_frames=frames, **kw
    )


def _precision_choice(tts: Qwen3TTS) -> Optional[str]:
    """ "int4: fastest of ..." when `codecspec calibrate` chose a precision here, else None."""
    from .precision import chosen_precision

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


def shipped_qwen3_map(config, weights: str):
    """The speed-up map shipped for this code predictor shape and precision (measured on the
    project's 2-core CPU by bench/qwen3_real_shape.py), or None."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "models" / f"qwen3_speedup_map.{weights}.json"
    if not path.is_file():
        return None
    shape = json.loads(path.read_text()).get("shape", {})
    want = {
        "hidden": config.hidden_size,
        "layers": config.num_layers,
        "vocab": config.codebook_size,
        "groups": config.num_codebooks,
    }
    return path if shape == want else None
