"""SD vs SSD vs PCG on the shipped v2 model: speed-up against distance to espeak-ng.

    python bench/speculation_sweep.py run --shard 0/2 &    # the two halves on two cores
    python bench/speculation_sweep.py run --shard 1/2 &
    python bench/speculation_sweep.py report               # merge -> docs/speculation.{md,json,png}

Every held-out corpus text (its IPA, language and voice, so espeak-ng's rendering in the corpus
is the reference) is synthesised with every configuration, in rotating order so drifting load
hits all alike. Per configuration: tokens per target call, temporal / depth / end-to-end speed-up
(ratio of the medians over texts of ms per frame, against the all-AR runs of the same process),
and quality (b): DTW log-mel distance to espeak-ng, mean and 95% CI over texts x seeds. Quality
(a), the within-group swap stress test, is computed on the AR codes; (c), exactness, is the test
suite's (tests/decode/test_temporal_loop.py).
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
except ImportError:
    sys.path.insert(0, str(ROOT / "python"))

from codecspec.decode.temporal import Acceptance  # noqa: E402


def _pcg(theta: float, space: str = "codec") -> dict:
    return {"temporal": "spec", "accept": Acceptance("pcg", theta=theta), "c0_space": space}


# name: (generate() keywords, seeds: "main" points get every seed, sweep points the first)
CONFIGS = {
    "AR": ({"mode": "ar", "temporal": "ar"}, "main"),
    "SD": ({"temporal": "spec", "accept": Acceptance("exact")}, "main"),
    "SSD b=0.2": ({"temporal": "spec", "accept": Acceptance("ssd", beta=0.2)}, "main"),
    "SSD b=0.4": ({"temporal": "spec", "accept": Acceptance("ssd", beta=0.4)}, "sweep"),
    # c0 groups in codec space (the target LM's input embeddings give singleton groups down
    # to θ 0.8 on this model, so PCG over them is SD: the one "PCG-emb" point shows it)
    "PCG t=0.95": (_pcg(0.95), "main"),
    "PCG t=0.9": (_pcg(0.9), "sweep"),
    "PCG t=0.8": (_pcg(0.8), "sweep"),
    "PCG-emb t=0.8": (_pcg(0.8, "embedding"), "sweep"),
    "depth spec": ({"mode": "spec", "temporal": "ar"}, "sweep"),
    "depth PCG t=0.95": ({"mode": "pcg", "depth_theta": 0.95, "temporal": "ar"}, "sweep"),
    "both exact": ({"temporal": "spec", "mode": "spec"}, "sweep"),
    "both PCG t=0.95": (_pcg(0.95) | {"mode": "pcg", "depth_theta": 0.95}, "sweep"),
}


def log(msg: str) -> None:
    print(f"[sweep] {msg}", file=sys.stderr, flush=True)


def held_out_rows(corpus: Path, n: int) -> list:
    from codecspec.codec.data import load_manifest

    rows = [r for r in load_manifest(corpus) if r["split"] == "test"]
    return sorted(rows, key=lambda r: (r["id"][-2:], r["id"]))[:n]


def cmd_run(args) -> int:
    from codecspec.codec.audio import read_wav
    from codecspec.evaluation.quality import dtw_log_mel_distance
    from codecspec.families.v2.model import V2TTS
    from codecspec.progress import bar

    k, n = (int(x) for x in args.shard.split("/"))
    tts = V2TTS(args.model, provider="cpu", threads=args.threads)
    rows = held_out_rows(Path(args.corpus).expanduser(), args.texts)[k::n]
    names = list(CONFIGS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recs = []
    jobs = [(i, r, s) for i, r in enumerate(rows) for s in range(args.seeds)]
    for j, (i, r, seed) in enumerate(bar(jobs, desc=f"sweep {args.shard}")):
        ref, _ = read_wav(str(Path(args.corpus).expanduser() / r["path"]))
        order = names[j % len(names) :] + names[: j % len(names)]
        for name in order:
            kw, kind = CONFIGS[name]
            if seed > 0 and kind != "main":
                continue
            t0 = time.perf_counter()
            syn = tts.generate(
                "",
                phonemes=r["phonemes"],
                language=r["language"],
                speaker=r["variant"],
                seed=1000 * seed + i,
                **kw,
            )
            st = syn.temporal_stats
            recs.append(
                {
                    "config": name,
                    "text": r["id"],
                    "seed": seed,
                    "frames": syn.frames,
                    "temporal_ms": 1e3 * st.temporal_seconds / syn.frames,
                    "depth_ms": 1e3 * syn.depth_seconds / syn.frames,
                    "total_ms": 1e3 * syn.total_seconds / syn.frames,
                    "target_calls": st.target_calls,
                    "drafted": st.drafted,
                    "accepted": st.accepted,
                    "host_share": st.host_share,
                    "depth_calls": syn.depth_calls,
                    "depth_codes": syn.depth_codes,
                    "distance_db": dtw_log_mel_distance(ref, syn.wav, tts.codec.spectral),
                    "length_error": (len(syn.wav) - len(ref)) / len(ref),
                    "hit_guard": bool(syn.hit_max_frames),
                    "wall_s": time.perf_counter() - t0,
                    "codes": syn.codes.tolist() if name == "AR" else None,
                }
            )
        (out / f"shard{k}.json").write_text(json.dumps(recs))
    log(f"{len(recs)} syntheses -> {out}/shard{k}.json")
    return 0


def summarise(recs: list, tts) -> dict:
    from codecspec.evaluation.quality import mean_ci, swap_distortion

    by = {}
    for r in recs:
        by.setdefault(r["config"], []).append(r)
    ar = by["AR"]

    def med(rows, key):
        return float(np.median([x[key] for x in rows]))

    table = {}
    for name, rows in by.items():
        m, ci = mean_ci([x["distance_db"] for x in rows])
        table[name] = {
            "syntheses": len(rows),
            "temporal_tokens_per_call": sum(x["frames"] for x in rows)
            / sum(x["target_calls"] for x in rows),
            "temporal_acceptance": sum(x["accepted"] for x in rows)
            / max(1, sum(x["drafted"] for x in rows)),
            "depth_tokens_per_call": sum(x["depth_codes"] for x in rows)
            / sum(x["depth_calls"] for x in rows),
            "temporal_speedup": med(ar, "temporal_ms") / med(rows, "temporal_ms"),
            "depth_speedup": med(ar, "depth_ms") / med(rows, "depth_ms"),
            "e2e_speedup": (med(ar, "temporal_ms") + med(ar, "depth_ms"))
            / (med(rows, "temporal_ms") + med(rows, "depth_ms")),
            "pipeline_speedup": med(ar, "total_ms") / med(rows, "total_ms"),
            "host_share": med(rows, "host_share"),
            "distance_db": m,
            "distance_ci95_db": ci,
            "length_error_abs": float(np.mean([abs(x["length_error"]) for x in rows])),
            "hit_guard": int(sum(x["hit_guard"] for x in rows)),
        }
    codes = np.concatenate([np.asarray(x["codes"]) for x in ar])
    swaps = {}
    for t in (0.98, 0.95, 0.9, 0.8):
        groups = dict(enumerate(tts.depth_groups(t)))
        groups.pop(0)
        swaps[str(t)] = {
            "c0_input_embedding_groups": swap_distortion(
                tts.codec, codes, {0: tts.pcg_c0_groups(t, "embedding")}, 1.0
            ),
            "c0_codec_groups": swap_distortion(tts.codec, codes, {0: tts.codec.groups(0, t)}, 1.0),
            "levels_1_up": swap_distortion(tts.codec, codes, groups, 1.0),
        }
    return {"table": table, "swap_added_db": swaps}


def render(rep: dict) -> str:
    cols = (
        ("syntheses", "n", "{:d}"),
        ("temporal_tokens_per_call", "c0 / target call", "{:.2f}"),
        ("temporal_acceptance", "draft acc.", "{:.2f}"),
        ("depth_tokens_per_call", "depth tok/call", "{:.2f}"),
        ("temporal_speedup", "temporal x", "{:.2f}"),
        ("depth_speedup", "depth x", "{:.2f}"),
        ("e2e_speedup", "both loops x", "{:.2f}"),
        ("pipeline_speedup", "pipeline x", "{:.2f}"),
        ("distance_db", "dist. to espeak-ng dB", "{:.2f}"),
        ("distance_ci95_db", "± CI95", "{:.2f}"),
        ("length_error_abs", "|len err|", "{:.1%}"),
    )
    lines = [
        "| config | " + " | ".join(c[1] for c in cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for name, row in rep["table"].items():
        lines.append(f"| {name} | " + " | ".join(f.format(row[k]) for k, _, f in cols) + " |")
    lines += [
        "",
        "Within-group swap stress test (dB of log-mel change when every code of the levels is "
        "replaced by a random group-mate, on the AR codes):",
        "",
        "| θ | c0, LM input-embedding groups | c0, codec groups | levels 1-15 |",
        "|---|---:|---:|---:|",
    ]
    for t, v in rep["swap_added_db"].items():
        lines.append(
            f"| {t} | {v['c0_input_embedding_groups']:.2f} | {v['c0_codec_groups']:.2f} | "
            f"{v['levels_1_up']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rep: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    fams = {"SSD": "tab:red", "PCG": "tab:blue", "SD": "tab:green", "AR": "black"}
    for fam, color in fams.items():
        pts = [(n, r) for n, r in rep["table"].items() if n.split()[0] == fam]
        if not pts:
            continue
        xs = [r["temporal_speedup"] for _, r in pts]
        ys = [r["distance_db"] for _, r in pts]
        es = [r["distance_ci95_db"] for _, r in pts]
        ax.errorbar(xs, ys, yerr=es, fmt="o-" if len(pts) > 1 else "o", color=color, label=fam)
        for (n, _), x, y in zip(pts, xs, ys):
            ax.annotate(n.split(" ", 1)[-1] if " " in n else "", (x, y), fontsize=7)
    ax.set_xlabel("temporal-loop speed-up over AR (median ms/frame ratio)")
    ax.set_ylabel("DTW log-mel distance to espeak-ng (dB)")
    ax.set_title("Temporal speculation on reference model v2: speed-up vs quality")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def cmd_report(args) -> int:
    from codecspec.families.v2.model import V2TTS

    out = Path(args.out)
    recs = []
    for f in sorted(out.glob("shard*.json")):
        recs += json.loads(f.read_text())
    tts = V2TTS(args.model, provider="cpu", threads=1)
    rep = summarise(recs, tts)
    rep["command"] = "python bench/speculation_sweep.py run --shard k/2 (k = 0, 1); ... report"
    docs = Path(args.docs)
    (docs / "speculation.json").write_text(json.dumps(rep, indent=1))
    (docs / "speculation_table.md").write_text(render(rep))
    plot(rep, docs / "speculation.png")
    print(render(rep))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="v2 model folder (default: the shipped one)")
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus")
    ap.add_argument("--out", default=str(Path.home() / ".cache/codecspec/sweep"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--texts", type=int, default=50)
    r.add_argument("--seeds", type=int, default=2)
    r.add_argument("--shard", default="0/1", help="k/n: this process's share of the texts")
    r.add_argument("--threads", type=int, default=1)
    r.set_defaults(fn=cmd_run)
    p = sub.add_parser("report")
    p.add_argument("--docs", default=str(ROOT / "docs"))
    p.set_defaults(fn=cmd_report)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
