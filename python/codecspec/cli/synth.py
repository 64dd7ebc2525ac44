"""`codecspec synth`: its options (a family's own: the registry's `cli_options`) and the
command (a Qwen3-TTS folder's is the family's own: `Family.synth_command`). The text
comes from `codecspec.frontend.text_input`, the audio goes through the model's `generate`
or `stream` into a WAV, and the report says what each stage cost."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from codecspec.cli import options
from codecspec.frontend.text_input import synth_text
from codecspec.perf import peak_rss_mb


def chunk_frames_arg(value: str) -> int:
    """argparse type of --chunk-frames: an integer >= 1 (frames per streamed chunk)."""
    return options.threads_arg(value)


def _input_and_output(p: argparse.ArgumentParser) -> None:
    options.text_input(p)
    p.add_argument(
        "--text-stdin",
        action="store_true",
        help="read the text from standard input, verbatim; with --stream and a Qwen3-TTS "
        "folder as it arrives (an LLM's output piped in): speech starts after the first "
        "words, and the codes are the whole text's in the streaming-text layout",
    )
    p.add_argument("--phonemes", default=None, help="espeak-ng IPA instead of text")
    p.add_argument(
        "--max-frames",
        type=int,
        default=None,
        help="longest utterance in frames (default 1000; fsq: 2x the text's length)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--stream",
        action="store_true",
        help="write the WAV chunk by chunk as frames are made, print time to first audio; "
        "--text-file is spoken sentence by sentence; Qwen3-TTS with --text-stdin: the text "
        "is read as it arrives",
    )
    p.add_argument(
        "--chunk-frames",
        type=chunk_frames_arg,
        default=8,
        help="--stream: frames per audio chunk (default 8 = 0.64 s)",
    )
    p.add_argument("-o", "--output", type=Path, default=None, help="WAV (default out.wav)")
    p.add_argument(
        "--codes-out",
        type=Path,
        default=None,
        help="also write the codes (int64 .npy [frames, codebooks]); with a Qwen3-TTS "
        "folder and no -o, only the codes",
    )


def _voice_and_decoding(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mode",
        choices=["auto", "ar", "spec", "pcg"],
        default="auto",
        help="depth loop: auto (default) = spec where calibration found it pays, else ar "
        "(same output law); pcg = group-level acceptance (v2)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--language",
        default=None,
        help="en, de, es or it (default en); Qwen3-TTS: a language its config names, e.g. "
        "english (default auto)",
    )
    p.add_argument(
        "--speaker",
        default=None,
        help="espeak-ng voice variant, e.g. f3 or m1; Qwen3-TTS CustomVoice: a speaker name",
    )
    p.add_argument("--rate", type=float, default=1.0, help="speaking rate (default 1.0)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "synth", help="text to speech with a shipped model or a Qwen3-TTS checkpoint folder"
    )
    _input_and_output(p)
    options.cache_dir(p)
    _voice_and_decoding(p)
    options.weights(p)
    options.provider(p)
    options.threads(p, help=options.CORES)
    p.add_argument("--model", default=None, help=options.MODEL_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    options.sampling(p)
    options.family_options("synth", p)
    p.set_defaults(func=cmd_synth)


def synthesis_report(s, output, threads: int) -> dict:
    """The `synth --json` object: what was made and what each stage cost."""
    ms = s.stage_ms_per_frame()
    out = {
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
    }
    if s.max_frames is not None:  # a stop head's family: did the length guard end it
        out.update(hit_max_frames=bool(s.hit_max_frames), max_frames=int(s.max_frames))
    st = s.temporal_stats
    if st is not None:  # a temporal speculation loop ran: its figures
        out["temporal_tokens_per_call"] = st.tokens_per_call
        out["temporal_acceptance"] = st.acceptance
        out["temporal_host_share"] = st.host_share
    return out


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

    from codecspec.codec.audio import check_output, write_wav
    from codecspec.pipeline import registry
    from codecspec.pipeline.registry import load_model
    from codecspec.runtime.threads import threads_in_use

    args.output_given = args.output is not None
    if args.output is None:
        args.output = Path("out.wav")
    entry = registry.find(args.model)  # None: loading the model names what is wrong with it
    family = None if entry is None else entry.load("engine")
    if family is not None and family.synth_command is not None:  # e.g. Qwen3-TTS folders
        return family.synth_command(args)
    if entry is not None:
        options.refuse_other_families_flags(args, "synth", entry)
    if args.codes_out is not None and args.stream:
        raise ValueError("--codes-out: not with --stream")
    text = synth_text(args) if args.phonemes is None else (args.text or "")
    check_output(args.output)
    clip = registry.take_options(entry, flags=True, ref_audio=getattr(args, "ref_audio", None))
    tts = load_model(
        args.model,
        provider=args.provider,
        threads=args.threads,
        params=options.params_from_args(args),
        **options.depth_kwargs(args),
        **clip,
    )
    if args.stream:
        return _synth_stream(args, tts, text, family)
    kw = _synth_kwargs(args) | family.request_options(args, tts)
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
    lines = family.synth_lines(s, args.output) or _synth_lines(s, args.output, report)
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


def _synth_stream(args, tts, text, family) -> int:
    """`synth --stream`: chunks go into the WAV as they come (a valid file at every chunk
    boundary, and after an interruption); --text-file is spoken sentence by sentence."""
    from codecspec.codec.audio import WavWriter
    from codecspec.runtime.threads import threads_in_use

    kw = _synth_kwargs(args) | family.request_options(args, tts)
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
