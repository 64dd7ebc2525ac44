"""The main-job subcommands of `codecspec`: `synth` and `bench` on the reference model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROVIDERS = ["auto", "cpu", "cuda", "coreml"]
MODEL_HELP = "model name (reference, fsq) or folder (default: the shipped reference)"


def _params(args):
    """SamplingParams from --temperature/--top-k/--top-p over the model's own defaults."""
    import codecspec as cs
    from codecspec.tts.registry import resolve_model_dir

    if args.temperature is None and args.top_k is None and args.top_p is None:
        return None
    d = json.loads((resolve_model_dir(args.model) / "model.json").read_text())
    base = d["sampling"]
    return cs.SamplingParams(
        base["temperature"] if args.temperature is None else args.temperature,
        base["top_k"] if args.top_k is None else args.top_k,
        base["top_p"] if args.top_p is None else args.top_p,
    )


def _sampling(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=None, help="default: the model's 0.9")
    p.add_argument("--top-k", type=int, default=None, help="default: the model's 50")
    p.add_argument("--top-p", type=float, default=None, help="default: the model's 1.0")


def cmd_synth(args) -> int:
    from codecspec.codec.audio import write_wav
    from codecspec.tts.registry import load_model

    tts = load_model(args.model, provider=args.provider, threads=args.threads, params=_params(args))
    s = tts.generate(
        args.text,
        phonemes=args.phonemes,
        language=args.language,
        speaker=args.speaker,
        mode=args.mode,
        seed=args.seed,
        rate=args.rate,
        progress=not args.quiet,
    )
    write_wav(args.output, s.wav, s.sample_rate)
    if s.mode == "fsq":  # the FSQ family: no depth loop, a stop head
        from codecspec.tts.fsq_bench import synth_lines

        for k, v in synth_lines(s, args.output).items():
            print(f"{k:>22}: {v}")
        return 0
    lines = {
        "wrote": f"{args.output} ({s.sample_rate} Hz)",
        "audio seconds": f"{s.audio_seconds:.2f}",
        "frames": f"{len(s.codes)} x {s.codes.shape[1]} codes",
        "mode": s.mode,
        "inner calls / audio s": f"{s.calls_per_audio_second:.1f}",
        "tokens per call": f"{s.tokens_per_call:.2f}",
        "depth loop ms / frame": f"{1e3 * s.depth_seconds / len(s.codes):.2f}",
        "real-time factor": f"{s.real_time_factor:.3f} (temporal {s.temporal_seconds:.2f} s, "
        f"depth {s.depth_seconds:.2f} s, vocoder {s.decode_seconds:.2f} s)",
    }
    for k, v in lines.items():
        print(f"{k:>22}: {v}")
    return 0


def cmd_bench(args) -> int:
    from codecspec.tts.bench import bench_depth_loop
    from codecspec.tts.registry import model_family, resolve_model_dir

    kw = dict(
        seed=args.seed,
        provider=args.provider,
        threads=args.threads,
        params=_params(args),
        progress=not args.json,
    )
    if model_family(args.model) == "fsq":  # one graph call per frame: its own figures
        from codecspec.tts.fsq_bench import bench_fsq, print_bench

        res = bench_fsq(resolve_model_dir(args.model), args.utterances, batch=args.batch, **kw)
        return print_bench(res, args.json)
    res = bench_depth_loop(resolve_model_dir(args.model), args.frames, **kw)
    if args.json:
        print(json.dumps(res))
        return 0
    for k, v in res.items():
        if k == "fidelity_pvalues":
            continue
        print(f"{k:>24}: {v:.4g}" if isinstance(v, float) else f"{k:>24}: {v}")
    verdict = "pass" if res["fidelity_min_p"] > 1e-4 else "FAIL"
    print(f"{'fidelity (min p > 1e-4)':>24}: {verdict}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synth", help="text to speech with the shipped reference model")
    p.add_argument("text", help='text to speak (use "" with --phonemes)')
    p.add_argument("--phonemes", default=None, help="espeak-ng IPA instead of text")
    p.add_argument("-o", "--output", type=Path, default=Path("out.wav"))
    p.add_argument(
        "--mode",
        choices=["auto", "ar", "spec"],
        default="auto",
        help="auto (default): spec where calibration found it pays, else ar; same output law",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--language", default="en", help="en, de, es or it (default en)")
    p.add_argument("--speaker", default=None, help="espeak-ng voice variant, e.g. f3 or m1")
    p.add_argument("--rate", type=float, default=1.0, help="speaking rate (default 1.0)")
    p.add_argument("--provider", default="auto", choices=PROVIDERS)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--model", default=None, help=MODEL_HELP)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _sampling(p)
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("bench", help="AR vs speculative depth loop of the reference model")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--provider", default="auto", choices=PROVIDERS)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--model", default=None, help=MODEL_HELP)
    p.add_argument("--utterances", type=int, default=8, help="fsq: bench.json utterances")
    p.add_argument("--batch", type=int, default=1, help="fsq: also run this many as a batch")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _sampling(p)
    p.set_defaults(func=cmd_bench)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: codecspec synth|bench")
