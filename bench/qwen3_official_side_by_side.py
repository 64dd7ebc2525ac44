"""Side by side on this CPU: the official PyTorch Qwen3-TTS vs codecspec AR and speculative.

The same checkpoint folder (a real download, or a random-weight folder of the real shape from
`codecspec random-checkpoint qwen3-0.6b DIR`), the same text, speaker and language, the same
thread count, greedy decoding in both (random weights never say eos, so every run makes the
same number of frames), in one process, the three systems interleaved and their order rotated
every repeat so that load from other users of the machine hits all alike; medians over repeats,
after one untimed full-length warm-up run of each system.

Timed per system and repeat:
  codes   text -> codes [frames, 16]: prefill, talker and code-predictor loop.
          official: `Qwen3TTSForConditionalGeneration.generate`, called exactly as
          `Qwen3TTSModel.generate_custom_voice` calls it (its own tokenizer, prompt and merged
          generation_config), with do_sample=False, subtalker_dosample=False and
          max_new_tokens = frames + 1 (the official loop returns one frame fewer than tokens);
          codecspec: `Qwen3TTS.generate_codes(temperature=0, max_frames=frames)`, mode ar / spec.
  decode  codes -> 24 kHz audio with each system's own 12 Hz speech decoder
          (official `speech_tokenizer.decode`; codecspec `SpeechDecoder.decode`).
  total   codes + decode.
Per frame = seconds / frames actually made; RTF = seconds / audio seconds (80 ms a frame).

The official model is loaded with `from_pretrained(..., dtype=torch.float32)` on the CPU (the
bf16 checkpoint is widened on load; the dtype and attention implementation it ran with are
printed and stored). codecspec runs the graphs `--weights` names (fp32, int8, int4; default: its
CPU default, int8; stored too). Speculative acceptance on random weights is not the acceptance
of the trained model; the figure to compare with the official one is AR, and spec is shown as
what this folder gives.

Not run in CI. Needs torch, transformers==4.57.3, `qwen-tts==0.1.1 --no-deps`, accelerate,
einops, librosa, soundfile (see scripts/qwen3_parity_fixtures.py; qwen_tts's imports of sox and
torchaudio are replaced by empty stand-ins, the 12 Hz model never calls them). Run it niced, it
takes minutes:

    codecspec random-checkpoint qwen3-0.6b /tmp/qwen3_06b_rand
    OMP_NUM_THREADS=2 nice -n 10 python bench/qwen3_official_side_by_side.py /tmp/qwen3_06b_rand \
        --threads 2 --frames 24 --repeats 5 [--weights fp32] --json side_by_side.json
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import os
import platform
import statistics
import sys
import time
import types

TEXT = "The quick brown fox jumps over the lazy dog."
SYSTEMS = ("official", "codecspec_ar", "codecspec_spec")


def _stand_in_modules() -> None:
    for name in ("sox", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules.setdefault(name, m)
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]


def _load_avg() -> list:
    return [round(x, 2) for x in os.getloadavg()]


class Official:
    def __init__(self, folder: str, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        _stand_in_modules()
        from qwen_tts import Qwen3TTSModel

        self.torch = torch
        self.wrap = Qwen3TTSModel.from_pretrained(folder, device_map="cpu", dtype=torch.float32)
        self.model = self.wrap.model
        self.dtype = str(next(self.model.talker.parameters()).dtype).replace("torch.", "")
        self.attn = getattr(self.model.config, "_attn_implementation", None)

    def codes(self, text: str, speaker: str, language: str, frames: int):
        w = self.wrap
        input_ids = w._tokenize_texts([w._build_assistant_text(text)])
        kw = w._merge_generate_kwargs(
            do_sample=False, subtalker_dosample=False, max_new_tokens=frames + 1
        )
        with self.torch.inference_mode():
            codes, _ = self.model.generate(
                input_ids=input_ids,
                instruct_ids=[None],
                languages=[language],
                speakers=[speaker],
                non_streaming_mode=True,
                **kw,
            )
        return codes[0]

    def decode(self, codes):
        wavs, _ = self.model.speech_tokenizer.decode([{"audio_codes": codes}])
        return wavs[0]


class Codecspec:
    def __init__(self, folder: str, threads: int, cache_dir, weights) -> None:
        from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

        self.tts = Qwen3TTS.load(
            folder, cache_dir=cache_dir, provider="cpu", threads=threads, weights=weights
        )
        self.weights = self.tts.weights
        self.dec = self.tts.speech_decoder()

    def codes(self, text: str, speaker: str, language: str, frames: int, mode: str):
        r = self.tts.generate_codes(
            text, speaker=speaker, language=language, mode=mode, temperature=0, max_frames=frames
        )
        return r.codes

    def decode(self, codes):
        return self.dec.decode(codes)


def _timed(fn, *a):
    """(result, wall s, process CPU s). CPU time counts every thread of the process; it moves
    less with other users' load than wall time, but includes spin-waiting workers."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*a)
    return out, time.perf_counter() - t0, time.process_time() - c0


def run_once(system: str, off: Official, cs: Codecspec, args) -> dict:
    req = (TEXT, args.speaker, args.language, args.frames)
    if system == "official":
        codes, t_codes, c_codes = _timed(off.codes, *req)
        wav, t_dec, c_dec = _timed(off.decode, codes)
        n = int(codes.shape[0])
    else:
        codes, t_codes, c_codes = _timed(cs.codes, *req, system.rsplit("_", 1)[1])
        wav, t_dec, c_dec = _timed(cs.decode, codes)
        n = int(len(codes))
    return {
        "frames": n,
        "codes_s": t_codes,
        "decode_s": t_dec,
        "codes_cpu_s": c_codes,
        "decode_cpu_s": c_dec,
        "samples": int(len(wav)),
    }


def summarise(runs: dict) -> dict:
    out = {}
    for system, rs in runs.items():
        frames = rs[0]["frames"]
        keys = ("codes_s", "decode_s", "codes_cpu_s", "decode_cpu_s")
        per = {k: [r[k] / max(r["frames"], 1) for r in rs if k in r] for k in keys}
        per["total_s"] = [a + b for a, b in zip(per["codes_s"], per["decode_s"])]
        out[system] = {
            "frames": frames,
            "frames_all_runs": sorted({r["frames"] for r in rs}),
            **{f"{k}_per_frame": statistics.median(v) for k, v in per.items() if v},
            "codes_s_per_frame_best": min(per["codes_s"]),
            "codes_s_per_frame_runs": per["codes_s"],
            "decode_s_per_frame_runs": per["decode_s"],
            "total_s_per_frame_runs": per["total_s"],
        }
        out[system]["rtf_codes"] = out[system]["codes_s_per_frame"] / 0.08
        out[system]["rtf_total"] = out[system]["total_s_per_frame"] / 0.08
    o = out["official"]
    for system in ("codecspec_ar", "codecspec_spec"):
        c = out[system]
        c["official_over_this_codes"] = o["codes_s_per_frame"] / c["codes_s_per_frame"]
        c["official_over_this_total"] = o["total_s_per_frame"] / c["total_s_per_frame"]
        c["official_over_this_codes_best"] = (
            o["codes_s_per_frame_best"] / c["codes_s_per_frame_best"]
        )
        if "codes_cpu_s_per_frame" in c:
            c["official_over_this_codes_cpu"] = (
                o["codes_cpu_s_per_frame"] / c["codes_cpu_s_per_frame"]
            )
        # Within one repeat the systems ran back to back: the paired ratio sees the same load.
        for k in ("codes", "total"):
            paired = [a / b for a, b in zip(o[f"{k}_s_per_frame_runs"], c[f"{k}_s_per_frame_runs"])]
            c[f"official_over_this_{k}_per_repeat"] = paired
            c[f"official_over_this_{k}_paired_median"] = statistics.median(paired)
    return out


def table(summary: dict, official_dtype: str, weights: str = "fp32") -> str:
    rows = [
        "| system | frames | codes s/frame | codes CPU-s/frame | decode s/frame | total s/frame "
        "| RTF total | official ÷ this (codes / total) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for system in SYSTEMS:
        s = summary[system]
        ratio = (
            f"{s['official_over_this_codes']:.2f}× / {s['official_over_this_total']:.2f}×"
            if system != "official"
            else "1"
        )
        name = (
            f"official PyTorch ({official_dtype})"
            if system == "official"
            else f"{system} ({weights})"
        )
        rows.append(
            f"| {name} | {s['frames']} | {s['codes_s_per_frame']:.3f} | "
            f"{s.get('codes_cpu_s_per_frame', float('nan')):.3f} | "
            f"{s['decode_s_per_frame']:.3f} | {s['total_s_per_frame']:.3f} | "
            f"{s['rtf_total']:.2f} | {ratio} |"
        )
    return "\n".join(rows)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a Qwen3-TTS 12 Hz CustomVoice folder")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--speaker", default="aiden")
    ap.add_argument("--language", default="english")
    ap.add_argument("--cache-dir", default=None, help="codecspec graph cache")
    ap.add_argument(
        "--weights",
        default=None,
        choices=["fp32", "int8", "int4"],
        help="codecspec's talker / code-predictor weights (default: its CPU default)",
    )
    ap.add_argument("--json", default=None, help="write the record here")
    args = ap.parse_args(argv)
    for name in ("threads", "frames", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1")

    load_start = _load_avg()
    t0 = time.perf_counter()
    from codecspec.runtime.threads import configure

    configure(args.threads)  # onnxruntime's shared pool, before any session exists
    cs = Codecspec(args.model, args.threads, args.cache_dir, args.weights)
    t_cs = time.perf_counter() - t0
    t0 = time.perf_counter()
    off = Official(args.model, args.threads)
    t_off = time.perf_counter() - t0
    print(
        f"loaded: codecspec {t_cs:.1f}s ({cs.weights} weights), official {t_off:.1f}s "
        f"(dtype {off.dtype}, attention {off.attn})",
        file=sys.stderr,
    )

    # Warm-up at the full length, not timed: the official path's first pass over new sequence
    # lengths ran up to 16x slower than later ones here (one thread busy: per-shape kernel
    # setup), which is a once-per-process cost, not the steady speed compared here.
    for system in SYSTEMS:
        run_once(system, off, cs, args)
    runs: dict = {s: [] for s in SYSTEMS}
    for rep in range(args.repeats):
        k = rep % len(SYSTEMS)
        for system in SYSTEMS[k:] + SYSTEMS[:k]:
            r = run_once(system, off, cs, args)
            runs[system].append(r)
            print(
                f"repeat {rep}: {system}: {r['frames']} frames, codes {r['codes_s']:.2f}s, "
                f"decode {r['decode_s']:.2f}s",
                file=sys.stderr,
            )
    summary = summarise(runs)
    import onnxruntime as ort
    import torch

    record = {
        "model": os.path.abspath(args.model),
        "text": TEXT,
        "speaker": args.speaker,
        "language": args.language,
        "frames_requested": args.frames,
        "repeats": args.repeats,
        "threads": args.threads,
        "decoding": "greedy (official do_sample=False, subtalker_dosample=False; codecspec "
        "temperature 0)",
        "official_dtype": off.dtype,
        "official_attention": off.attn,
        "codecspec_weights": cs.weights,
        "load_seconds": {"codecspec": t_cs, "official": t_off},
        "load_average": {"start": load_start, "end": _load_avg()},
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "onnxruntime": ort.__version__,
        },
        "summary": summary,
        "runs": runs,
    }
    print(table(summary, off.dtype, cs.weights))
    for system in ("codecspec_ar", "codecspec_spec"):
        c = summary[system]
        per = ", ".join(f"{r:.2f}" for r in c["official_over_this_codes_per_repeat"])
        print(
            f"{system}: official ÷ this, paired per repeat (codes): {per}; "
            f"median {c['official_over_this_codes_paired_median']:.2f}× "
            f"(total: {c['official_over_this_total_paired_median']:.2f}×); best of each: "
            f"{c['official_over_this_codes_best']:.2f}×; CPU time: "
            f"{c.get('official_over_this_codes_cpu', float('nan')):.2f}×"
        )
    print(f"load average (1, 5, 15 min): start {load_start}, end {record['load_average']['end']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)
    return record


if __name__ == "__main__":
    main()
