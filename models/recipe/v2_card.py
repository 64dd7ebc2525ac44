"""MODEL_CARD.md of reference model v2 from the folder's report.json (written by v2.py ship).

python models/recipe/v2_card.py --model models/v2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _table(header: list, rows: list) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def plot_curves(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = curves["val_steps"]
    for k in ("c0", "draft_c0", "ce_draft_c0", "depth"):
        if curves["val"] and k in curves["val"][0]:
            ax[0].plot(steps, [v[k] for v in curves["val"]], label=k)
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("held-out cross-entropy (nats)")
    ax[0].legend()
    for k, lab in (("accept", "distilled draft"), ("ce_accept", "cross-entropy draft")):
        if curves["val"] and k in curves["val"][0]:
            ax[1].plot(steps, [v[k] for v in curves["val"]], label=lab)
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("held-out Σ min(p, q), T = 1")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_spectrograms(model: Path, corpus: Path, path: Path) -> None:
    """espeak-ng's rendering of one held-out text beside v1's and v2's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codecspec.codec.audio import read_wav
    from codecspec.codec.data import load_manifest
    from codecspec.evaluation.quality import log_mel
    from codecspec.families.reference.model import ReferenceTTS
    from codecspec.families.v2.model import V2TTS

    r = sorted(
        (r for r in load_manifest(corpus) if r["split"] == "test" and r["language"] == "en"),
        key=lambda r: r["id"],
    )[0]
    ref, _ = read_wav(str(corpus / r["path"]))
    v1, v2 = ReferenceTTS(), V2TTS(model)
    kw = dict(phonemes=r["phonemes"], language="en", speaker=r["variant"], mode="ar")
    wavs = {"espeak-ng": ref, "v1": v1.generate("", **kw).wav, "v2": v2.generate("", **kw).wav}
    fig, ax = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    for a, (name, w) in zip(ax, wavs.items()):
        m = log_mel(w, v1.codec.cfg)
        a.imshow(m.T, origin="lower", aspect="auto", cmap="magma", vmin=m.max() - 8)
        a.set_title(f"{name}: {r['text'][:70]}", fontsize=9)
        a.set_ylabel("mel band")
    ax[-1].set_xlabel("10 ms sub-frame")
    fig.tight_layout()
    fig.savefig(path, dpi=60)


def card(model: Path, corpus: Path) -> str:
    rep = json.loads((model / "report.json").read_text())
    meta = json.loads((model / "model.json").read_text())
    tr, acc = rep["train"], rep["acceptance"]
    sizes = {p.name: p.stat().st_size for p in model.iterdir() if p.is_file()}
    total = sum(sizes.values())
    val = tr["curves"]["val"][-1]
    par = tr["parameters"]
    sd = rep["speech_distance"]
    default = sd["v2"]["mean_db"] < sd["v1"]["mean_db"]
    L = []
    L.append("# Reference model v2: two-stage codec LM on codec v2\n")
    L.append(
        "A text-to-speech model trained here from espeak-ng speech (4 languages, several "
        "voices) so that codecspec's speculation can be measured on a model whose codes a "
        "model can predict (`docs/codec_v2.md`). Temporal LM over c0 only "
        f"(sliding window of {meta['temporal_config']['window']} frames, ring-buffer cache, "
        "Bernoulli stop head, speaking-rate input), a one-layer draft LM, and a Qwen3-TTS-layout "
        "depth decoder for c1..c15. Recipe: `models/recipe/v2.py` (docs/reference_model_v2.md).\n"
    )
    L.append(
        f"Parameters: temporal LM {par['temporal'] / 1e6:.2f} M, draft LM "
        f"{par['draft_temporal'] / 1e6:.2f} M, depth decoder {par['depth'] / 1e6:.2f} M. "
        f"Files: {total / 1e6:.1f} MB in all (budget 40 MB).\n"
    )
    L.append(
        _table(["file", "MB"], [[k, f"{v / 1e6:.2f}"] for k, v in sorted(sizes.items())]) + "\n"
    )
    L.append("## Training\n")
    L.append(
        f"{tr.get('step')} steps, {tr.get('seconds', 0) / 60:.0f} min of training time on one "
        f"CPU thread (arguments {tr.get('train_args')}). Held-out cross-entropies (nats): c0 "
        f"{val['c0']:.3f}, draft c0 {val['draft_c0']:.3f} (distilled) / "
        f"{val.get('ce_draft_c0', float('nan')):.3f} (cross-entropy only), stop "
        f"{val['stop']:.4f}, depth {val['depth']:.3f}. Held-out Σ min(p, q) at T = 1: distilled "
        f"{val['accept']:.3f}, cross-entropy {val.get('ce_accept', float('nan')):.3f}; shipped "
        f"draft: **{tr.get('draft_choice')}**.\n"
    )
    L.append("![training curves](training.png)\n")
    c = rep["codec"]
    L.append("## Codec v2\n")
    L.append(
        f"16 levels of {c['level_sizes'][0]} codes (Lloyd-Max grids 8,8,4,4 over PCA components, "
        "4 interleaved refinements; docs/codec_v2.md). Held-out unexplained variance after k "
        "levels: "
        + ", ".join(f"{k}: {_pct(v)}" for k, v in c["heldout_unexplained"].items())
        + ".\n"
    )
    cr = rep.get("codec_report")
    if cr:
        st = cr["stability"]["v2"]
        rows = []
        for k in range(16):
            p1, r2 = st["pitch+1"], st["rate+2"]
            rows.append(
                [
                    k,
                    f"{_pct(p1['identical'][k])} / {_pct(p1['within_one'][k])}",
                    f"{_pct(r2['identical'][k])} / {_pct(r2['within_one'][k])}",
                ]
                + [f"{cr['groups']['v2'][k][i]:.1f}" for i in (1, 2, 3)]  # θ 0.98, 0.95, 0.9
            )
        L.append(
            "Per-level stability under re-rendering (same / within one grid step) and mean "
            "group size at θ:\n\n"
            + _table(["level", "pitch+1", "rate+2", "group θ 0.98", "θ 0.95", "θ 0.9"], rows)
            + "\n"
        )
        sw = cr.get("swap", {})
        if sw:
            L.append(
                "Within-group swaps (every level 1-15 at once, held-out frames): "
                + ", ".join(
                    f"θ {t}: +{sw[t]['levels_1_up']:.2f} dB"
                    for t in ("0.99", "0.98", "0.95", "0.9")
                    if t in sw
                )
                + ".\n"
            )
    L.append("## Draft acceptance\n")
    L.append(
        f"The `acceptance` block of report.json (θ = {acc['theta']}; free generation on held-out "
        "texts at T = 0.9, top-k 50; top-1 drafts; group = the draft's group holds the target's "
        "sample):\n"
    )
    dep = rep["depth"]
    thetas = list(dep["free"]["offsets"]["group"])
    rows = []
    for kind in ("free", "teacher_forced"):
        for dr in ("head_reuse", "offsets"):
            a = dep[kind][dr]
            rows.append(
                [kind, dr, " ".join(f"{x:.3f}" for x in a["exact"])]
                + [" ".join(f"{x:.3f}" for x in a["group"][t]) for t in thetas]
            )
    L.append(
        _table(["inputs", "drafter", "exact, depth 1..K"] + [f"group θ {t}" for t in thetas], rows)
        + "\n"
    )
    L.append("Temporal (draft LM vs target, Σ min(p, q) of the warped c0 distributions):\n")
    rows = [
        [
            t,
            f"{v['codec']['exact']:.3f}",
            f"{v['c0_input_embedding']['group']:.3f}",
            f"{v['codec']['group']:.3f}",
        ]
        for t, v in rep["temporal"].items()
    ]
    L.append(
        _table(["θ", "exact", "group (LM input embeddings)", "group (codec space)"], rows) + "\n"
    )
    abl = rep["ablation"]
    rows = {}
    for r in abl["rows"]:
        rows.setdefault(r["budget"], {})[r["drafter"]] = r["simulated_tokens_per_call"]
    L.append(
        "Drafter ablation (depth loop, simulated tokens per call of the best tree per budget, "
        "held-out frames; `ablation/ablation.md`):\n\n"
        + _table(
            ["budget", "head reuse", "offsets", "Medusa"],
            [
                [b, *(f"{v.get(d, float('nan')):.3f}" for d in ("head_reuse", "offsets", "medusa"))]
                for b, v in sorted(rows.items())
            ],
        )
        + "\n"
    )
    sh = rep["stop_head"]
    L.append("## Stop head\n")
    L.append(
        f"{sh['stopped']} of {sh['texts']} held-out texts ended by the stop head, "
        f"{sh['hit_guard']} by the max-length guard ({meta['max_pace']} x the announced "
        f"length + 8 frames). Length against espeak-ng's rendering: mean "
        f"{100 * sh['length_error_mean']:+.1f}%, mean absolute "
        f"{100 * sh['length_error_abs_mean']:.1f}%.\n"
    )
    L.append("## Distance to espeak-ng (v1 vs v2)\n")
    L.append(
        f"DTW log-mel distance to espeak-ng's rendering of the same {len(sd['v1']['per_text'])} "
        f"held-out texts (same IPA, language and voice; AR, seed per text): v1 "
        f"{sd['v1']['mean_db']:.2f} ± {sd['v1']['ci95_db']:.2f} dB, v2 "
        f"{sd['v2']['mean_db']:.2f} ± {sd['v2']['ci95_db']:.2f} dB (v2 - v1: "
        f"{sd['v2_minus_v1']['mean_db']:+.2f} ± {sd['v2_minus_v1']['ci95_db']:.2f} dB). "
        + (
            "v2 is closer, so it is the default model."
            if default
            else "v2 is not closer than v1, so v1 stays the default (`--model v2` selects v2)."
        )
        + "\n"
    )
    if (model / "spectrograms.png").is_file():
        L.append("![spectrograms](spectrograms.png)\n")
        L.append(
            "Read by eye, the spectrograms are mixed: v2 follows espeak-ng's segment timing "
            "and formant regions more closely than v1, but smears the harmonics (its fine "
            "codec levels are coarse grids), where v1 keeps sharper harmonics at the wrong "
            "places. The DTW distance above weighs both.\n"
        )
    b = rep["bench"]
    cal = rep["calibration"]
    L.append("## Depth loop on this machine\n")
    L.append(
        f"Calibrated tree: speculation {'pays' if cal.get('speculation_pays') else 'does not pay'}"
        f" here (`device_profile.json`); bench on the shipped frames: AR "
        f"{b['ar_ms_per_frame']:.2f} ms/frame, speculative {b['spec_ms_per_frame']:.2f} "
        f"ms/frame ({b['speedup']:.2f}x, {b['tokens_per_call']:.2f} tokens per call).\n"
    )
    sd_path = model / "shared_depth_report.json"
    if sd_path.is_file():
        L.append(shared_depth_section(json.loads(sd_path.read_text())))
    return "\n".join(L)


def shared_depth_section(r: dict) -> str:
    """The two depth decoders side by side (models/recipe/v2.py shared-depth)."""
    d = r["decoders"]
    names = (
        ("positional_joint", "per-position (shipped, trained with the LM)"),
        ("positional_same_budget", "per-position, same frozen h_t and budget"),
        ("shared", "shared (tied)"),
    )
    rows = [
        [
            label,
            f"{d[k]['parameters'] / 1e6:.2f} M",
            f"{d[k]['bytes'] / 1e6:.1f} MB",
            f"{d[k]['heldout_ce_mean']:.3f}",
            f"{d[k]['tokens_per_call']:.3f}",
            f"{d[k]['speedup']:.2f}x",
            f"{d[k]['ar_ms_per_frame']:.1f}",
        ]
        for k, label in names
        if k in d
    ]
    ratios = r["ratios"]
    return (
        "## Depth decoders side by side (per-position vs fully shared)\n\n"
        f'`V2TTS(depth="shared")`, `--depth shared` (docs/shared_depth.md). Both trained on '
        f"h_t of the shipped checkpoint ({r['budget']['steps']} steps of "
        f"{r['budget']['batch']} frames for the two decoders trained here; "
        f"{r['heldout_frames']} held-out frames):\n\n"
        + _table(
            [
                "decoder",
                "parameters",
                "bytes",
                "held-out CE",
                "tokens/call",
                "spec speed-up",
                "AR ms/frame",
            ],
            rows,
        )
        + f"\n\nShared over per-position: parameters "
        f"{ratios['parameters_shared_over_positional']:.3f}, held-out CE "
        f"{ratios['ce_shared_over_same_budget']:.4f} of the same-budget decoder's, tokens per "
        f"call {ratios['tokens_per_call_shared_over_same_budget']:.3f} of it.\n"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models/v2"))
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    model, corpus = Path(args.model), Path(args.corpus).expanduser()
    if not args.no_plots:
        rep = json.loads((model / "report.json").read_text())
        plot_curves(rep["train"]["curves"], model / "training.png")
        plot_spectrograms(model, corpus, model / "spectrograms.png")
    text = card(model, corpus)
    (model / "MODEL_CARD.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
