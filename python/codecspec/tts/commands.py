"""What `codecspec synth` and `codecspec bench` run (their options: `codecspec.cli.synth`,
`codecspec.cli.bench`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from codecspec.frontend.textcheck import check_text
from codecspec.perf import peak_rss_mb


def params_from_args(args):
    """SamplingParams from --temperature/--top-k/--top-p over the model's own defaults."""
    import codecspec as cs
    from codecspec.pipeline.registry import resolve_model_dir

    if args.temperature is None and args.top_k is None and args.top_p is None:
        return None
    d = json.loads((resolve_model_dir(args.model) / "model.json").read_text())
    base = d["sampling"]
    return cs.SamplingParams(
        base["temperature"] if args.temperature is None else args.temperature,
        base["top_k"] if args.top_k is None else args.top_k,
        base["top_p"] if args.top_p is None else args.top_p,
    )


def read_text_file(path) -> str:
    """The text of a UTF-8 file for --text-file; one-line errors naming the option."""
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"--text-file: {p} is a directory, not a text file")
    if not p.is_file():
        raise ValueError(f"--text-file: no such file: {p}")
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"--text-file: {p} is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    except OSError as e:
        raise ValueError(f"--text-file: cannot read {p} ({e.strerror})") from None
    if not text.strip():
        raise ValueError(f"--text-file: {p} is empty")
    # Checked before the whitespace is joined: the index is the character's in the file.
    check_text(text, f"--text-file: {p}")
    return " ".join(text.split())  # line breaks of a wrapped file are not pauses


def stdin_pieces(fd=None, size: int = 4096):
    """Standard input's bytes as they arrive: os.read returns what the pipe holds now (a
    few bytes of an LLM's output), not a line or a full buffer."""
    fd = sys.stdin.fileno() if fd is None else fd
    while True:
        piece = os.read(fd, size)
        if not piece:
            return
        yield piece


def check_stdin_alone(args) -> None:
    """--text-stdin with a positional text or --text-file: a ValueError naming it."""
    if getattr(args, "text_stdin", False) and (args.text is not None or args.text_file):
        raise ValueError("--text-stdin: give the text one way (TEXT, --text-file or --text-stdin)")


def read_stdin_text() -> str:
    """--text-stdin read whole: the text verbatim (its line breaks too, as a text streamed
    from standard input is read), UTF-8; one-line errors naming the option."""
    try:
        text = b"".join(stdin_pieces()).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"--text-stdin: standard input is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    if not text.strip():
        raise ValueError("--text-stdin: standard input holds no text")
    return check_text(text, "--text-stdin")


def synth_text(args) -> str:
    """The text `codecspec synth` speaks: the positional text, --text-file's or standard
    input's (--text-stdin; all read whole); ValueError naming `text` where none or two are
    given. Every family's synth uses it."""
    check_stdin_alone(args)
    if getattr(args, "text_stdin", False):
        return read_stdin_text()
    if args.text_file is not None:
        if args.text:
            raise ValueError("text: give the text or --text-file, not both")
        return read_text_file(args.text_file)
    if args.text is None:
        raise ValueError("text: give the text to speak, --text-file FILE or --text-stdin")
    return check_text(args.text, "text")


def check_output(path) -> None:
    """Fails before synthesis, not after it, when the WAV cannot be written to `path`."""
    import tempfile

    p = Path(path)
    if p.is_dir():
        raise ValueError(f"--output: {p} is a directory")
    parent = p.parent
    while not parent.exists():  # write_wav creates missing folders: probe the first that exists
        parent = parent.parent
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"--output: {p} is not writable")
    try:  # os.access says yes to root everywhere, even on /proc: create a file to be sure
        tempfile.TemporaryFile(dir=parent).close()
    except OSError as e:
        raise ValueError(f"--output: cannot write into {parent} ({e.strerror})") from None


def synthesis_report(s, output, threads: int) -> dict:
    """The `synth --json` object: what was made and what each stage cost."""
    ms = s.stage_ms_per_frame()
    return {
        "output": str(output),
        "audio_seconds": s.audio_seconds,
        "frames": s.frames,
        "mode": s.mode,
        "tokens_per_call": s.tokens_per_call,
        "inner_calls_per_audio_second": s.calls_per_audio_second,
        "frontend_ms": 1e3 * s.frontend_seconds,
        "temporal_ms_per_frame": ms["temporal"],
        "depth_ms_per_frame": ms["depth"],
        "vocoder_ms": 1e3 * s.decode_seconds,
        "rtf": s.real_time_factor,
        "peak_rss_mb": peak_rss_mb(),
        "threads": threads,
        "sample_rate": s.sample_rate,
    } | _stop_and_temporal(s)


def _stop_and_temporal(s) -> dict:
    """Families with a stop head: did the guard end it; v2: the temporal loop's figures."""
    out = {}
    if getattr(s, "max_frames", None) is not None:
        hit = getattr(s, "hit_max_frames", None)
        if hit is None:  # the FSQ family says whether its stop head ended it
            hit = not bool(getattr(s, "stopped", True))
        out["hit_max_frames"] = bool(hit)
        out["max_frames"] = int(s.max_frames)
    st = getattr(s, "temporal_stats", None)
    if st is not None:
        out["temporal_tokens_per_call"] = st.tokens_per_call
        out["temporal_acceptance"] = st.acceptance
        out["temporal_host_share"] = st.host_share
    return out


def _speculation_kwargs(args, tts) -> dict:
    """generate() keywords from --loops/--accept/--beta/--theta/--draft-len (v2 family)."""
    given = args.loops is not None or args.accept != "exact"
    if getattr(tts, "meta", {}).get("format") != "codecspec-v2-tts/1":
        if given:
            raise ValueError("--loops/--accept: only the v2 family has these speculation options")
        return {}
    if args.loops is None:
        return {"draft_len": args.draft_len}
    from codecspec.decode.temporal import speculation_config

    theta = args.theta
    if args.accept == "pcg" and theta is None:
        theta = float(tts.meta.get("pcg_theta", 0.95))
    kw = speculation_config(args.loops, args.accept, args.beta, theta)
    kw["draft_len"] = args.draft_len
    if args.loops == "temporal":  # the depth loop keeps --mode
        kw.pop("mode")
    return kw


def _depth_kwargs(args) -> dict:
    """{"depth": ...} for a v2 model when --depth is given; other families have one."""
    if args.depth is None:
        return {}
    from codecspec.pipeline import registry

    if "depth" not in registry.family_of(args.model, detect=False).model_options:
        takers = [e.name for e in registry.families() if "depth" in e.model_options]
        raise ValueError(f"depth: --depth applies to {' and '.join(takers)} models only")
    return {"depth": args.depth}


def _synth_kwargs(args) -> dict:
    kw = dict(
        phonemes=args.phonemes,
        language=args.language or "en",
        speaker=args.speaker,
        mode=args.mode,
        seed=args.seed,
        rate=args.rate,
    )
    if args.max_frames is not None:
        kw["max_frames"] = args.max_frames
    return kw


def cmd_synth(args) -> int:
    import time

    from codecspec.codec.audio import write_wav
    from codecspec.pipeline import registry
    from codecspec.pipeline.registry import load_model
    from codecspec.runtime.threads import threads_in_use

    args.output_given = args.output is not None
    if args.output is None:
        args.output = Path("out.wav")
    entry = registry.find(args.model)  # a family with its own synth (Qwen3-TTS folders)
    hook = entry.hook("synth") if entry is not None else None
    if hook is not None:
        return hook(args)
    # --no-streaming-text is a choice too (False, not None): refused like --streaming-text
    qwen3_only = (args.instruct, args.streaming_text, args.ref_audio, args.ref_text)
    if any(v is not None for v in qwen3_only):
        raise ValueError(
            "--instruct / --[no-]streaming-text / --ref-audio / --ref-text: Qwen3-TTS checkpoints "
            "(--model DIR) only"
        )
    if args.codes_out is not None and args.stream:
        raise ValueError("--codes-out: not with --stream")
    text = synth_text(args) if args.phonemes is None else (args.text or "")
    check_output(args.output)
    tts = load_model(
        args.model,
        provider=args.provider,
        threads=args.threads,
        params=params_from_args(args),
        **_depth_kwargs(args),
    )
    if args.stream:
        return _synth_stream(args, tts, text)
    kw = _synth_kwargs(args)
    kw.update(_speculation_kwargs(args, tts))
    t0 = time.perf_counter()
    s = tts.generate(text, progress=not (args.quiet or args.json), **kw)
    first_audio_s = time.perf_counter() - t0  # the whole utterance is the first audio
    write_wav(args.output, s.wav, s.sample_rate)
    if args.codes_out is not None:
        import numpy as np

        np.save(args.codes_out, np.asarray(s.codes, np.int64))
    report = synthesis_report(s, args.output, threads_in_use(args.threads))
    report["time_to_first_audio_ms"] = 1e3 * first_audio_s
    if report.get("hit_max_frames"):
        print(
            f"warning: the stop head never fired; the max-length guard "
            f"({report['max_frames']} frames) ended the utterance",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(report))
        return 0
    own = entry.hook("synth_lines") if entry is not None else None  # FSQ: no depth loop
    lines = own(s, args.output) if own is not None else _synth_lines(s, args.output, report)
    for k, v in lines.items():
        print(f"{k:>22}: {v}")
    return 0


def _synth_lines(s, output, report: dict) -> dict:
    """synth's summary of a model with a depth loop (a family without its own)."""
    return {
        "wrote": f"{output} ({s.sample_rate} Hz)",
        "audio seconds": f"{s.audio_seconds:.2f}",
        "frames": f"{s.frames} x {s.codes.shape[1]} codes",
        "mode": s.mode,
        "inner calls / audio s": f"{s.calls_per_audio_second:.1f}",
        "tokens per call": f"{s.tokens_per_call:.2f}",
        "ms / frame": "  ".join(f"{k} {v:.2f}" for k, v in s.stage_ms_per_frame().items()),
        "real-time factor": f"{s.real_time_factor:.3f} ({report['threads']} threads)",
        "peak RSS": f"{report['peak_rss_mb']:.0f} MiB",
    }


def stream_report(st, output, threads: int, interrupted: bool = False) -> dict:
    """The `synth --stream --json` object (an `AudioStream`'s figures)."""
    n = max(st.frames, 1)
    ttfa = st.time_to_first_audio
    return {
        "output": str(output),
        "stream": True,
        "interrupted": interrupted,
        "stopped": st.stopped,  # every sentence ended by its own length rule, not max_frames
        "audio_seconds": st.audio_seconds,
        "frames": st.frames,
        "sentences": st.sentences,
        "chunks": st.chunks,
        "chunk_frames": st.chunk_frames,
        "mode": st.mode,
        "time_to_first_audio_ms": None if ttfa is None else 1e3 * ttfa,
        "frontend_ms": 1e3 * st.frontend_seconds,
        "temporal_ms_per_frame": 1e3 * st.step_seconds / n,
        "depth_ms_per_frame": 1e3 * st.decode_seconds / n,  # the frame decoder (with c0)
        "vocoder_ms": 1e3 * st.vocoder_seconds,
        "rtf": st.real_time_factor,
        "peak_rss_mb": peak_rss_mb(),
        "threads": threads,
        "sample_rate": st.sample_rate,
    }


def _synth_stream(args, tts, text) -> int:
    """`synth --stream`: chunks go into the WAV as they come (a valid file at every chunk
    boundary, and after an interruption); --text-file is spoken sentence by sentence."""
    from codecspec.codec.audio import WavWriter
    from codecspec.runtime.threads import threads_in_use

    kw = _synth_kwargs(args)
    kw.update(_speculation_kwargs(args, tts))
    split = args.text_file is not None and args.phonemes is None
    st = tts.stream(text, chunk_frames=args.chunk_frames, split_sentences=split, **kw)
    interrupted = False
    writer = WavWriter(args.output, st.sample_rate, update_header=True)
    try:
        for chunk in st:
            writer.write(chunk)
            if st.chunks == 1 and not (args.quiet or args.json):  # live, before the summary
                ms = 1e3 * st.time_to_first_audio
                print(
                    f"first audio after {ms:.0f} ms, streaming into {args.output}", file=sys.stderr
                )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        st.close()
        writer.close()
    report = stream_report(st, args.output, threads_in_use(args.threads), interrupted)
    if args.json:
        print(json.dumps(report))
        return 130 if interrupted else 0
    ttfa = report["time_to_first_audio_ms"]
    lines = {
        "wrote": f"{args.output} ({st.sample_rate} Hz, streamed"
        + (", interrupted)" if interrupted else ")"),
        "audio seconds": f"{st.audio_seconds:.2f}",
        "frames": f"{st.frames} in {st.chunks} chunks of {st.chunk_frames}",
        "sentences": str(st.sentences),
        "mode": st.mode,
        "time to first audio": "none" if ttfa is None else f"{ttfa:.0f} ms",
        "real-time factor": f"{st.real_time_factor:.3f} ({report['threads']} threads)",
        "peak RSS": f"{report['peak_rss_mb']:.0f} MiB",
    }
    for k, v in lines.items():
        print(f"{k:>22}: {v}")
    return 130 if interrupted else 0


def cmd_bench(args) -> int:
    """`codecspec bench`: the family's own bench (the registry's "bench" hook); a family
    without one gets the protocol's (`codecspec.pipeline.bench`: every decode mode it takes
    through the one loop, beside the bound its `Family.stages()` give)."""
    from codecspec.pipeline import registry

    entry = registry.family_of(args.model)
    hook = entry.hook("bench")
    if hook is None:  # the protocol's bench: prepare + the one loop, timed whole
        from codecspec.pipeline.bench import bench_command

        return bench_command(args)
    return hook(args)


def bench_common(args) -> tuple:
    """(keyword arguments every family's bench takes, the model's folder)."""
    from codecspec.pipeline.registry import resolve_model_dir

    common = dict(
        seed=args.seed,
        provider=args.provider,
        threads=args.threads,
        params=params_from_args(args),
        progress=not args.json,
    )
    model = resolve_model_dir(args.model)
    common.update(_depth_kwargs(args))
    return common, model


def bench_report(args, family: str, model, res: dict, record) -> int:
    """The bench's record (codecspec.perf: every stage next to its bandwidth bound, measured
    in this run) joined to its figures; --quality's table after it. Prints the table and
    verdict, or with --json one object (the record's keys win over older ones of the same
    name: the family's older figures keep theirs, e.g. pipeline_ar_rtf, loop_ms_per_frame)."""
    from codecspec.perf import peak_rss_mb, render_table, stream_bandwidth

    rss = peak_rss_mb()  # before the bandwidth probe, whose buffer would be the peak
    bandwidth = stream_bandwidth(threads=int(res.get("threads") or 1))
    res.update(record(res, model, bandwidth=bandwidth, peak_rss_mb=rss))
    table = _bench_quality(args, family, res)
    if args.json:
        print(json.dumps(res))
        return 0
    print(render_table(res))
    if "fidelity_min_p" in res:  # the depth loop alone: AR and speculative codes compared
        ok = "pass" if res["fidelity_min_p"] > 1e-4 else "FAIL"
        print(
            f"fidelity: speculative vs AR codes per position, min p {res['fidelity_min_p']:.3g} "
            f"over {args.frames} frames (> 1e-4): {ok}"
        )
    if res.get("batch", 1) > 1:
        print(
            f"batch of {res['batch']}: {res['batch_ms_per_step']:.2f} ms per step, "
            f"{res['batch_frames_per_second']:.0f} frames/s"
        )
    return _print_table(table, args.json)


def bench_quality_modes(family: str, loops, accept: str) -> list:
    """AR and the speculative side the bench measured: the family's own ("quality_modes"
    hook: v2's `loops[/accept]`), else AR and "spec" where its engine adapter speculates."""
    from codecspec.pipeline import registry

    entry = registry.by_name(family)
    hook = entry.hook("quality_modes")
    if hook is not None:
        return hook(loops, accept)
    return ["ar"] + [m for m in entry.load("engine").modes if m == "spec"]


def _bench_quality(args, family: str, res: dict):
    """--quality: intelligibility of AR and the bench's speculative modes. Adds the figures
    to `res` ("intelligibility") and returns the table to print after the bench's lines."""
    if not args.quality:
        return None
    from codecspec.evaluation.intelligibility import report_table
    from codecspec.tts.quality_commands import run_quality, summary

    modes = bench_quality_modes(family, args.loops, args.accept)
    reports = run_quality(args, args.model, modes, prefix="quality_")
    res["intelligibility"] = summary(reports)
    rec = next(iter(reports.values()))
    res["intelligibility_recognizer"] = rec["recognizer"]
    res["intelligibility_sentences"] = rec["sentences"]
    return report_table(reports)


def _print_table(table, as_json: bool) -> int:
    """The intelligibility table after the bench's lines (in --json it is in the object)."""
    if table is not None and not as_json:
        print()
        print(table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: codecspec synth|bench")
