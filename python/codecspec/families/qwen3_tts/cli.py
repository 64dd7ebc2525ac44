"""`codecspec synth --model DIR` and `codecspec random-checkpoint` for Qwen3-TTS folders."""

from __future__ import annotations

import json
import sys
import time
from typing import Optional

import numpy as np

from codecspec.calibrate.decision import DECISION_FILE, auto_mode, speculation_pays


def _mode(args, tts) -> str:
    if args.mode == "pcg":
        raise ValueError("--mode: pcg is not available for Qwen3-TTS checkpoints (ar or spec)")
    # auto: spec where `codecspec calibrate --model DIR` measured that it pays
    pays = speculation_pays(tts.calibration_file(DECISION_FILE))
    return auto_mode(args.mode, pays)


def _write_codes(path, codes: np.ndarray) -> None:
    np.save(path, np.asarray(codes, np.int64))


def _request_kwargs(args, mode: str) -> dict:
    return dict(
        speaker=args.speaker,
        language=args.language,
        instruct=args.instruct,
        ref_audio=args.ref_audio,
        ref_text=args.ref_text,
        mode=mode,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        subtalker_temperature=args.subtalker_temperature,
        subtalker_top_k=args.subtalker_top_k,
        subtalker_top_p=args.subtalker_top_p,
        seed=args.seed,
        max_frames=args.max_frames,
        streaming_text=args.streaming_text,
    )


def _layout(info: dict):
    """Whether the prompt was the streaming-text layout (None before a prompt was built)."""
    p = info.get("prompt")
    return None if p is None else p.streaming_text


def _stream(args, tts, text, mode: str, load_s: float) -> int:
    """--stream: audio chunks go into the WAV as the decoder's streaming form emits them;
    `text` None: read from standard input as it arrives (--text-stdin)."""
    from codecspec.codec.audio import WavWriter
    from codecspec.frontend.text_input import stdin_pieces

    info: dict = {}
    frames: Optional[list] = [] if args.codes_out is not None else None
    source = tts.text_stream(stdin_pieces()) if text is None else text
    t0 = time.perf_counter()
    first = None
    with WavWriter(args.output, tts.sample_rate, update_header=True) as w:
        for chunk in tts.stream(
            source, info=info, frames_out=frames, **_request_kwargs(args, mode)
        ):
            if first is None and chunk.size:
                first = time.perf_counter()
            w.write(chunk)
        seconds = w.seconds
    if frames is not None:
        _write_codes(args.codes_out, np.asarray(frames, np.int64).reshape(len(frames), -1))
    report = {
        "output": str(args.output),
        "mode": mode,
        "streaming_text": _layout(info),
        "audio_seconds": seconds,
        "load_seconds": round(load_s, 3),
        "time_to_first_audio_ms": None if first is None else round(1e3 * (first - t0), 1),
        "total_seconds": round(time.perf_counter() - t0, 3),
        "hit_max_frames": info.get("hit_max_frames"),
        "codes_out": None if frames is None else str(args.codes_out),
    }
    if text is None:  # from the first text that arrived, not from the start of the command
        since = getattr(source, "first_text_at", None)
        ms = None if first is None or since is None else round(1e3 * (first - since), 1)
        report["first_audio_after_first_text_ms"] = ms
    print(
        json.dumps(report) if args.json else "\n".join(f"{k:>24}: {v}" for k, v in report.items())
    )
    return 0


def _synth_text(args) -> Optional[str]:
    """The text, or None where --stream --text-stdin reads it as it arrives (it is then
    spoken in the streaming-text layout, the only one that needs no text ahead)."""
    from codecspec.frontend.text_input import check_stdin_alone, synth_text

    if not (args.stream and args.text_stdin):
        return synth_text(args)
    check_stdin_alone(args)
    if args.streaming_text is False:
        raise ValueError(
            "--no-streaming-text: text read as it arrives (--stream --text-stdin) is spoken in "
            "the streaming-text layout; the whole-text layout needs all of it first"
        )
    return None


def _precision_note(args, tts) -> None:
    """Greedy decoding is how users compare with the official code, whose model is float32;
    quantised weights give other codes there (issue 26's divergence), so say so."""
    if args.quiet or tts.weights == "fp32":
        return
    if args.temperature is None or args.temperature != 0:
        return
    print(
        f"note: weights {tts.weights} are quantised, so greedy codes can differ from the "
        "official float32 model's; --weights fp32 (the default) reproduces them",
        file=sys.stderr,
    )


def _speculation_note(args, tts, mode: str) -> None:
    """Asked-for speculation where calibration measured verify rows that differ from AR's on
    this device (row_exact.py; e.g. int4 on AVX2, whose quantised MatMul computes one row
    unlike several): `auto` would not speculate there, `--mode spec` by name does, so say so."""
    from codecspec.calibrate.decision import DECISION_FILE, read_decision

    if args.quiet or mode != "spec" or args.mode != "spec":
        return
    rows = read_decision(tts.calibration_file(DECISION_FILE)).measured.get("tree_rows") or {}
    if rows.get("exact", True):
        return
    print(
        f"note: on this device `codecspec calibrate` measured verify rows at {tts.weights} that "
        f"differ from the AR rows by up to {rows.get('max_rel_diff', float('nan')):.2g} of the "
        "row: speculation here does not keep the AR law exactly (`--mode auto` decodes AR)",
        file=sys.stderr,
    )


def synth(args) -> int:
    """Text -> codes (-> 16-bit 24 kHz WAV) with a Qwen3-TTS checkpoint folder."""
    from codecspec.codec.audio import check_output

    from .checkpoint import Qwen3Checkpoint
    from .pipeline import Qwen3TTS, check_request
    from .reference_audio import read_reference

    if args.phonemes is not None:
        raise ValueError("--phonemes: Qwen3-TTS reads text, not phonemes")
    text = _synth_text(args)
    ck = Qwen3Checkpoint(args.model)
    check_request(  # a text still to come: the other arguments are checked now
        ck, text or "x", args.speaker, args.language, args.instruct, args.ref_audio, args.ref_text
    )
    if args.ref_audio is not None:
        read_reference(args.ref_audio)  # a bad WAV fails before any graph is built
    want_audio = args.codes_out is None or args.output_given
    if want_audio:
        check_output(args.output)
    log = (lambda m: None) if (args.quiet or args.json) else (lambda m: print(m, file=sys.stderr))
    t0 = time.perf_counter()
    tts = Qwen3TTS.load(
        args.model,
        cache_dir=args.cache_dir,
        provider=args.provider,
        threads=args.threads,
        log=log,
        weights=args.weights,
        decoder_precision=args.decoder_precision,
    )
    load_s = time.perf_counter() - t0
    _precision_note(args, tts)
    mode = _mode(args, tts)
    _speculation_note(args, tts, mode)
    if args.stream:
        return _stream(args, tts, text, mode, load_s)
    kw = _request_kwargs(args, mode)
    t1 = time.perf_counter()
    r = tts.generate_codes(text, **kw)
    gen_s = time.perf_counter() - t1
    if args.codes_out is not None:
        _write_codes(args.codes_out, r.codes)
    report = {
        "model": str(tts.ck.dir),
        "frames": r.frames,
        "mode": mode,
        # the layout the request got (the official default of its mode unless chosen)
        "streaming_text": r.prompt.streaming_text,
        "weights": tts.weights,
        "decoder_precision": tts.decoder_precision,
        "hit_max_frames": r.hit_max_frames,
        "load_seconds": round(load_s, 3),
        "generate_seconds": round(gen_s, 3),
        "depth_tokens_per_call": tts.depth.stats.tokens_per_call,
        "codes_out": None if args.codes_out is None else str(args.codes_out),
    }
    if want_audio:
        from codecspec.codec.audio import write_wav

        t2 = time.perf_counter()
        write_wav(args.output, tts.waveform(r), tts.sample_rate)
        report.update(
            output=str(args.output),
            sample_rate=tts.sample_rate,
            audio_seconds=r.frames * 0.08,
            vocoder_seconds=round(time.perf_counter() - t2, 3),
        )
    if r.hit_max_frames:
        print(
            f"warning: no eos within the frame limit; the utterance was cut at {r.frames} frames",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            if v is not None:
                print(f"{k:>22}: {v}")
    return 0


def random_checkpoint_command(args) -> int:
    """`codecspec random-checkpoint` (a subcommand of the family's `cli_commands`)."""
    from .random_checkpoint import write_random_checkpoint

    t0 = time.monotonic()
    info = write_random_checkpoint(
        args.shape,
        args.out,
        seed=args.seed,
        model_type=args.model_type,
        force=args.force,
        progress=not args.json,
    )
    info["seconds"] = round(time.monotonic() - t0, 1)
    if args.json:
        print(json.dumps(info))
        return 0
    gb = (info["model_bytes"] + info["speech_tokenizer_bytes"]) / 1e9
    print(
        f"wrote {info['out']}: random-weight Qwen3-TTS {info['shape']} {info['model_type']}, "
        f"{info['parameters']:,} talker+predictor parameters, {gb:.3f} GB, "
        f"{len(info['files'])} files ({info['seconds']}s). For speed measurements only: "
        "it speaks noise."
    )
    return 0
