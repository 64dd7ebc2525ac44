"""The speed-quality table of seed 001 on a model that speaks: per decoding mode, the
speed-up over AR, tokens per call in both loops, and words recognised / WER (Whisper, bootstrap
CIs) on the same held-out sentences and seeds.

    python bench/speed_quality.py --model v3 --seeds 2 --out docs/speed_quality
    # -> docs/speed_quality.json, docs/speed_quality.md (table), docs/speed_quality.png

The temporal-loop speed-up (target and draft calls and their host work, per frame) is quoted
beside the whole decoding's: on a small model the 15 depth calls of every frame dominate.

Modes (the v2 family's LOOPS[/ACCEPT], `codecspec quality`'s names): AR; exact temporal
speculation (SD) and exact speculation in both loops (the AR law); SSD(β) at several β (lossy
by design); PCG(θ) at several θ in the temporal loop (the group law). Speed: the decoding
seconds per frame (temporal + depth loops, the vocoder left out: it is the same for every
mode) of each mode over AR's, from the same run, the modes interleaved sentence by sentence so
that machine load falls on all of them alike; medians of per-utterance ratios are quoted
beside the pooled ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
try:
    import codecspec  # noqa: F401
except ImportError:  # a checkout whose package is not installed
    sys.path.insert(0, str(ROOT / "python"))

# (label, codecspec quality mode, beta, theta)
MODES = (
    ("AR", "ar", None, None),
    ("SD (exact, temporal)", "temporal", None, None),
    ("exact, both loops", "both", None, None),
    ("SSD β=0.1", "temporal/ssd", 0.1, None),
    ("SSD β=0.3", "temporal/ssd", 0.3, None),
    ("SSD β=0.5", "temporal/ssd", 0.5, None),
    ("PCG θ=0.95", "temporal/pcg", None, 0.95),
    ("PCG θ=0.9", "temporal/pcg", None, 0.9),
    ("PCG θ=0.8", "temporal/pcg", None, 0.8),
)


def run(model: str, sentences, seeds, threads: int, recognizer: str) -> dict:
    from codecspec.evaluation.intelligibility import Recognizer, resolve_sentences, score
    from codecspec.evaluation.reports import mode_kwargs
    from codecspec.pipeline.registry import load_model, model_family
    from codecspec.progress import bar

    rows = resolve_sentences(sentences)
    rec = Recognizer(recognizer, threads=threads)
    family = model_family(model)
    tts = load_model(model, provider="cpu", threads=threads)
    kwargs = [mode_kwargs(family, m, tts, beta or 0.3, theta) for _, m, beta, theta in MODES]
    clips = {label: [] for label, *_ in MODES}
    timing = {label: [] for label, *_ in MODES}
    jobs = [(i, r, seed) for i, r in enumerate(rows) for seed in seeds]
    for i, row, seed in bar(jobs, desc="speed x quality"):
        for (label, *_), kw in zip(MODES, kwargs):  # interleaved: load hits every mode alike
            t0 = time.perf_counter()
            s = tts.generate(row["text"], seed=seed, language="en", **kw)
            wall = time.perf_counter() - t0
            st = s.temporal_stats
            timing[label].append(
                dict(
                    frames=len(s.codes),
                    decode_s=s.temporal_seconds + s.depth_seconds,
                    temporal_s=st.temporal_seconds,
                    wall_s=wall,
                    target_calls=st.target_calls,
                    depth_calls=s.depth_calls,
                    depth_codes=s.depth_codes,
                    stopped=not s.hit_max_frames,
                )
            )
            clips[label].append((i, seed, s.wav, s.sample_rate))
    out = {"model": str(model), "seeds": list(seeds), "sentences": len(rows), "modes": {}}
    ar = timing["AR"]
    for label, mode, beta, theta in MODES:
        t = timing[label]
        rep = score(
            [(rows[i]["id"], seed, w, sr) for i, seed, w, sr in clips[label]],
            recognizer=rec,
            progress=False,
        )
        per_frame = np.array([x["decode_s"] / max(x["frames"], 1) for x in t])
        ar_frame = np.array([x["decode_s"] / max(x["frames"], 1) for x in ar])
        t_frame = np.array([x["temporal_s"] / max(x["frames"], 1) for x in t])
        ar_t_frame = np.array([x["temporal_s"] / max(x["frames"], 1) for x in ar])
        frames = sum(x["frames"] for x in t)
        out["modes"][label] = dict(
            mode=mode,
            beta=beta,
            theta=theta,
            lossless="exact" if mode in ("ar", "temporal", "both") else "no",
            speedup=float(ar_frame.sum() / per_frame.sum()),
            speedup_median=float(np.median(ar_frame / per_frame)),
            temporal_speedup=float(ar_t_frame.sum() / t_frame.sum()),
            ms_per_frame=1000.0 * float(np.sum([x["decode_s"] for x in t]) / frames),
            c0_per_target_call=frames / max(sum(x["target_calls"] for x in t), 1),
            depth_codes_per_call=sum(x["depth_codes"] for x in t)
            / max(sum(x["depth_calls"] for x in t), 1),
            runaway=sum(not x["stopped"] for x in t) / len(t),
            words_recognised=rep["words_recognised"],
            words_recognised_ci=rep["words_recognised_ci"],
            wer=rep["wer"],
            wer_ci=rep["wer_ci"],
            clips=len(t),
        )
    return out


def table(res: dict) -> str:
    head = (
        "| mode | law | speed-up, both loops (pooled / median) | temporal-loop speed-up "
        "| ms per frame | c0 per target call "
        "| depth codes per call | words recognised % (95% CI) | WER % (95% CI) | runaway |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for label, m in res["modes"].items():
        law = {"exact": "AR law", "no": "lossy" if "SSD" in label else "group law"}[m["lossless"]]
        lo, hi = m["words_recognised_ci"]
        wlo, whi = m["wer_ci"]
        lines.append(
            f"| {label} | {law} | {m['speedup']:.2f}× / {m['speedup_median']:.2f}× "
            f"| {m['temporal_speedup']:.2f}× "
            f"| {m['ms_per_frame']:.1f} | {m['c0_per_target_call']:.2f} "
            f"| {m['depth_codes_per_call']:.2f} "
            f"| {100 * m['words_recognised']:.1f} ({100 * lo:.1f}–{100 * hi:.1f}) "
            f"| {100 * m['wer']:.0f} ({100 * wlo:.0f}–{100 * whi:.0f}) "
            f"| {100 * m['runaway']:.0f}% |"
        )
    return head + "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    # modes sit close together (PCG θ beside SD), so names go in a legend, not beside points;
    # a family is one hue, its members shades and markers of it
    seen = {}
    for label, m in res["modes"].items():
        lo, hi = m["words_recognised_ci"]
        y = 100 * m["words_recognised"]
        family = "exact" if m["lossless"] == "exact" else "SSD" if "SSD" in label else "PCG"
        k = seen[family] = seen.get(family, -1) + 1
        shade = plt.get_cmap({"exact": "Greens", "PCG": "Blues", "SSD": "Reds"}[family])
        ax.errorbar(
            m["speedup"],
            y,
            yerr=[[y - 100 * lo], [100 * hi - y]],
            fmt="osD^v"[k % 5],
            color=shade(0.9 - 0.2 * (k % 4)),
            capsize=2,
            label=label,
        )
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_xlabel("decoding speed-up over AR (same run)")
    ax.set_ylabel("words recognised by Whisper base, % (95% CI)")
    ax.set_title(f"{res['model']}: speed vs words (green exact, blue PCG, red SSD)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="v3")
    ap.add_argument("--sentences", type=int, default=None, help="first n (default all 30)")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--recognizer", default="base", choices=["base", "tiny.en"])
    ap.add_argument("--out", default=str(ROOT / "docs" / "speed_quality"))
    args = ap.parse_args(argv)
    res = run(args.model, args.sentences, list(range(args.seeds)), args.threads, args.recognizer)
    res["command"] = "python bench/speed_quality.py " + " ".join(sys.argv[1:])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    out.with_suffix(".md").write_text(table(res))
    plot(res, out.with_suffix(".png"))
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
