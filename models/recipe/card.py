"""Write MODEL_CARD.md and its plots from ship.py's report.json (numbers are never typed in).

python models/recipe/card.py --model models/reference
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models/reference"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(train: dict, path: Path) -> None:
    plt = _plt()
    c = train["curves"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("c0", "temporal c0"), ("draft_c0", "draft c0"), ("depth", "depth c1..c15")):
        ys = [r[key] for r in c["train"]]
        k = 25  # running mean: single batches are noisy
        sm = [
            sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1])
            for i in range(len(ys))
        ]
        ax[0].plot(c["steps"], sm, label=f"{label} (train, mean of {k})")
        ax[0].plot(
            c["val_steps"], [r[key] for r in c["val"]], "o--", ms=3, label=f"{label} (held-out)"
        )
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("cross-entropy (nats)")
    ax[0].set_title("training curves")
    ax[0].legend(fontsize=7)
    last = c["val_levels"][-1]
    first = c["val_levels"][0]
    lv = list(range(1, len(last) + 1))
    ax[1].plot(lv, first, "o-", label=f"step {c['val_steps'][0]}")
    ax[1].plot(lv, last, "o-", label=f"step {c['val_steps'][-1]}")
    ax[1].set_xlabel("RVQ level")
    ax[1].set_ylabel("held-out cross-entropy (nats)")
    ax[1].set_title("depth decoder per level")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_entropy(entropy: dict, path: Path, vocab: int) -> None:
    import math

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    lv = list(range(1, len(entropy["raw"]) + 1))
    ax.plot(lv, entropy["raw"], "o-", label="softmax (T = 1)")
    ax.plot(lv, entropy["warped"], "s-", label="sampled (T = 0.9, top-k 50)")
    ax.axhline(math.log(vocab), color="grey", ls=":", label=f"uniform over {vocab}")
    ax.axhline(math.log(50), color="grey", ls="--", label="uniform over 50")
    ax.set_xlabel("RVQ level predicted (c_l)")
    ax.set_ylabel("entropy (nats)")
    ax.set_title("depth decoder: entropy per position (held-out, teacher-forced)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SAMPLE_TEXT = "The quick brown fox jumps over the lazy dog."


def write_sample(model: Path) -> bool:
    """sample.wav (the model, seed 0) and sample.png (its log-mel beside espeak-ng's own
    rendition of the same text); False when espeak-ng is missing."""
    import shutil
    import subprocess
    import tempfile

    from codecspec.codec.audio import read_wav, write_wav
    from codecspec.families.reference.model import ReferenceTTS

    if shutil.which("espeak-ng") is None:
        return False
    tts = ReferenceTTS(model, provider="cpu")
    s = tts.generate(SAMPLE_TEXT, seed=0, speaker="f1")
    write_wav(model / "sample.wav", s.wav, s.sample_rate)
    with tempfile.TemporaryDirectory() as tmp:
        ref = Path(tmp) / "ref.wav"
        subprocess.run(["espeak-ng", "-v", "en-us+f1", "-w", str(ref), SAMPLE_TEXT], check=True)
        wav, sr = read_wav(ref)
    plt = _plt()
    fig, ax = plt.subplots(2, 1, figsize=(9, 5))
    for a, (x, rate, title) in zip(
        ax,
        (
            (s.wav, s.sample_rate, f"reference model, seed 0 ({s.mode}), Griffin-Lim"),
            (wav, sr, "espeak-ng en-us+f1 (the kind of speech it was trained on)"),
        ),
    ):
        mel = tts.codec.features(x, rate).reshape(-1, tts.codec.cfg.n_mels)
        a.imshow(mel.T, origin="lower", aspect="auto")
        a.set_title(title)
        a.set_ylabel("mel band")
    ax[1].set_xlabel("10 ms frames")
    fig.tight_layout()
    fig.savefig(model / "sample.png", dpi=90)
    plt.close(fig)
    return True


def _why(cal: dict, ent: dict, top1: list) -> str:
    """What decides whether depth speculation pays on this model and machine."""
    import math

    one = next((r for r in cal["budgets"] if r["budget"] == 1), None)
    if one is None:
        return ""
    lo, hi = min(ent["warped"]), max(ent["warped"])
    return (
        "**What decides it.** A one-draft chain pays when its draft is accepted more often "
        "than a 2-token call costs extra: break-even a ≈ cost(2)/cost(1) - 1 = "
        f"{one['cost_ratio'] - 1:.0%} here, measured a = {top1[0]:.0%}. The depth decoder's "
        f"sampled distributions keep {lo:.1f}-{hi:.1f} nats of entropy per position "
        f"(e^H ≈ {math.exp(lo):.0f}-{math.exp(hi):.0f} equally likely codes), and a draft of "
        "c_(l+2) is made without knowing c_(l+1): with residual codes this uncertain no "
        "drafter is accepted often, which is also why offsets, head reuse and Medusa heads land "
        "within about 1% of each other below. `codecspec synth` therefore defaults to "
        "`--mode auto`, which reads `speculation_pays` from device_profile.json and runs AR "
        "here; both modes have the same output law.\n"
    )


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _table(header: list, rows: list) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def vocoder_section(v: dict) -> str:
    """The card's "Vocoder" section from report.json["vocoder"] (models/recipe/vocoder.py)."""
    lsd, ms = v["lsd_db"], v["ms_per_audio_second"]
    return "\n".join(
        [
            "## Vocoder\n",
            f"Griffin-Lim with momentum, {v['iterations']} iterations, on {v['utterances']} "
            f"held-out utterances ({v['audio_seconds']:.0f} s), the two vocoders interleaved "
            "(`python models/recipe/vocoder.py`): v1 ran in float64 with momentum "
            "0.99; the current one runs on a precomputed float32 overlap-add plan with "
            "momentum 0.9.\n",
            _table(
                ["vocoder", "LSD after the codec (dB)", "ms per audio second"],
                [
                    ["v1 (float64, momentum 0.99)", f"{lsd['v1']:.3f}", f"{ms['v1']:.1f}"],
                    ["current (float32 plan, 0.9)", f"{lsd['new']:.3f}", f"{ms['new']:.1f}"],
                ],
            ),
            f"\n{v['speedup']:.2f}x faster; lower LSD on {v['lsd_better_count']} of "
            f"{v['utterances']} utterances (largest increase {v['lsd_db_diff_max']:+.4f} dB).\n",
        ]
    )


def card(model: Path, corpus_json: Path, codec_md: Path) -> str:
    rep = json.loads((model / "report.json").read_text())
    meta = json.loads((model / "model.json").read_text())
    corpus = json.loads(corpus_json.read_text()) if corpus_json.is_file() else {}
    tr, cal, ent = rep["train"], rep["calibration"], rep["entropy"]
    files = sorted(p for p in model.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    tc, dc = meta["temporal_config"], meta["depth_config"]
    par = meta["parameters"]
    best = next(r for r in cal["budgets"] if r["budget"] == cal["chosen_budget"])
    bench = rep.get("bench") or {}
    qwen = rep.get("qwen3_prediction")
    val = tr["curves"]["val"][-1]
    s = []
    s.append("# Model card: codecspec reference codec-LM TTS\n")
    s.append(
        "A small text-to-speech model trained on this project's own machines so that codecspec "
        "ships a real codec language model to run, hear and measure. It is a benchmark "
        "subject for lossless depth speculation, not a production voice: it speaks espeak-ng "
        "speech through a Griffin-Lim vocoder.\n"
    )
    s.append("## Architecture\n")
    s.append(
        _table(
            ["part", "shape", "parameters"],
            [
                [
                    "phoneme encoder + temporal frame decoder",
                    f"d={tc['d_model']}, {tc['encoder_layers']} encoder + {tc['decoder_layers']} "
                    f"decoder layers, {tc['num_heads']} heads, cross-attention, progress features",
                    f"{par['temporal']:,}",
                ],
                [
                    "draft temporal model",
                    f"{tc['draft_layers']} decoder layer, same encoder",
                    f"{par['draft_temporal']:,}",
                ],
                [
                    "depth decoder (Qwen3-TTS code-predictor layout)",
                    f"{dc['num_layers']} layers, hidden {dc['hidden_size']}, GQA {dc['num_heads']}/"
                    f"{dc['num_kv_heads']}, head dim {dc['head_dim']}, "
                    f"SwiGLU {dc['intermediate_size']},"
                    f" q/k-norm, RoPE; {dc['num_codebooks'] - 1} heads x {dc['codebook_size']}",
                    f"{par['depth']:,}",
                ],
            ],
        )
    )
    s.append(
        "\nPer frame (12.5 frames/s): the temporal model gives h_t and c0; the depth decoder "
        "reads [h_t, emb(c0), emb(c1), ...] and predicts c1..c15 (16 RVQ levels of 1024 "
        "codes). Frame count = phonemes x frames-per-phoneme of the language / rate "
        f"({', '.join(f'{k} {v}' for k, v in meta['frames_per_phoneme'].items())}). "
        "Sampling: temperature 0.9, top-k 50 for c0 and the depth codes (Qwen3-TTS defaults).\n"
    )
    s.append("## Data\n")
    if corpus:
        s.append(
            f"{corpus.get('hours', '?')} h of espeak-ng speech of Debian fortunes "
            f"({', '.join(corpus['args']['languages'])}; voice variants "
            f"{', '.join(corpus['args']['variants'])}; random pitch "
            f"{corpus['args']['pitch']}, rate {corpus['args']['rate']} wpm, pauses "
            f"{corpus['args']['gap']}), {corpus['args']['renditions']} renditions per text, "
            f"held-out split by text ({corpus['args']['test_fraction']:.0%}).\n"
        )
    ts, hs = tr["train_stats"], tr["heldout_stats"]
    s.append(
        f"Train: {ts['utterances']} utterances, {ts['frames']:,} frames ({ts['hours']} h); "
        f"held-out: {hs['utterances']} utterances, {hs['frames']:,} frames.\n"
    )
    s.append("## Codec reconstruction (held-out)\n")
    if codec_md.is_file():
        s.append(codec_md.read_text().strip() + "\n")
    if rep.get("vocoder"):
        s.append(vocoder_section(rep["vocoder"]))
    s.append("## Training\n")
    s.append(
        f"{tr['steps']} AdamW steps in {tr['seconds'] / 60:.0f} min on {tr['threads']} CPU "
        f"thread(s), PyTorch. Final held-out cross-entropy (nats): c0 {val['c0']:.3f}, draft c0 "
        f"{val['draft_c0']:.3f}, depth (mean of c1..c15) {val['depth']:.3f} "
        f"(uniform: {__import__('math').log(1024):.3f}).\n"
    )
    s.append("![training curves](training_curves.png)\n")
    s.append("## Depth decoder: entropy per position\n")
    s.append("![entropy](entropy.png)\n")
    s.append(
        _table(
            ["level"] + [str(i) for i in range(1, len(ent["raw"]) + 1)],
            [
                ["H softmax"] + [f"{x:.2f}" for x in ent["raw"]],
                ["H sampled"] + [f"{x:.2f}" for x in ent["warped"]],
            ],
        )
        + "\n"
    )
    s.append("## Speculation on this model\n")
    top1 = [round(x, 3) for x in [sum(r[:1]) for r in cal["acceptance"]]]
    top1_0 = [round(x, 3) for x in [sum(r[:1]) for r in cal["acceptance_zero_offsets"]]]
    s.append(
        f"Calibrated on {cal['frames']} frames of held-out utterances ({cal['acceptance_frames']} "
        f"measured). Top-1 acceptance by draft depth: offsets {top1}, head reuse {top1_0}. "
        f"Chosen tree: N = {cal['chosen_budget']} drafts ({best['nodes']} nodes, depth "
        f"{best['max_depth']}); simulated tokens/call {best['simulated_tokens_per_call']:.2f}, "
        f"predicted speed-up {best['speedup_simulated']:.2f}x.\n"
    )
    s.append(_why(cal, ent, top1))
    if bench:
        s.append(
            _table(
                ["", "AR", "speculative"],
                [
                    [
                        "calls / frame",
                        f"{bench['ar_calls_per_frame']:.2f}",
                        f"{bench['spec_calls_per_frame']:.2f}",
                    ],
                    [
                        "ms / frame (median)",
                        f"{bench['ar_ms_per_frame']:.2f}",
                        f"{bench['spec_ms_per_frame']:.2f}",
                    ],
                ],
            )
        )
        s.append(
            f"\nMeasured wall-clock speed-up of the depth loop {bench['speedup']:.2f}x "
            f"(tokens/call {bench['tokens_per_call']:.2f}; ideal from the same run's graph "
            f"latencies {bench['ideal_speedup']:.2f}x, efficiency {bench['efficiency']:.0%}); "
            f"fidelity min p {bench['fidelity_min_p']:.3f} over {bench['frames']} frames "
            f"(`codecspec bench --frames {bench['frames']}`).\n"
        )
    s.append("### Ablation: head reuse vs offsets vs Medusa heads\n")
    s.append((model / "ablation" / "ablation.md").read_text().strip() + "\n")
    s.append("![ablation](ablation/ablation.png)\n")
    if qwen:
        s.append("### Prediction for a Qwen3-TTS-size depth decoder on this CPU\n")
        s.append(
            f"**{qwen['label']}.** This model's measured acceptance x the measured verify "
            f"latency of a random-weight 0.6B-size depth graph (ms by query length: "
            f"{qwen['latency_ms']}): best N = {qwen['budget']}, {qwen['tokens_per_call']} "
            f"tokens/call, predicted speed-up {qwen['speedup']}x.\n"
        )
    if (model / "sample.png").is_file():
        s.append("## Listen\n")
        s.append(
            f'`sample.wav`: "{SAMPLE_TEXT}" (`codecspec synth "{SAMPLE_TEXT}" --speaker f1`).'
            " Below, its log-mel spectrum beside espeak-ng's own rendition of the text: pauses,"
            " harmonics and formant movements are there, but the model is small and briefly "
            "trained, so expect slurred, partly intelligible speech.\n"
        )
        s.append("![sample](sample.png)\n")
    s.append("## Files\n")
    s.append(_table(["file", "size"], [[p.name, _mb(p.stat().st_size)] for p in files]))
    s.append(f"\nTotal {_mb(total)} (large weights stored as float16 and widened at load).\n")
    s.append("## Rebuild\n")
    s.append(
        "`bash models/recipe/build.sh` (corpus, codec, training, export, calibration, "
        "this card; about 2 h on 2 cores).\n"
    )
    s.append("## Limitations\n")
    s.append(
        "- Trained for under an hour on a 2-core CPU: intelligible at best, often mumbled.\n"
        "- espeak-ng voices only; the Griffin-Lim vocoder adds phasey artefacts.\n"
        "- Speed figures come from a shared, noisy 2-core machine; rerun `codecspec bench`.\n"
    )
    return "\n".join(s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus")
    ap.add_argument("--codec", default="~/.cache/codecspec/codec")
    args = ap.parse_args(argv)
    model = Path(args.model)
    rep = json.loads((model / "report.json").read_text())
    plot_curves(rep["train"], model / "training_curves.png")
    vocab = json.loads((model / "model.json").read_text())["depth_config"]["codebook_size"]
    plot_entropy(rep["entropy"], model / "entropy.png", vocab)
    write_sample(model)
    text = card(
        model,
        Path(args.corpus).expanduser() / "corpus.json",
        Path(args.codec).expanduser() / "recon.md",
    )
    (model / "MODEL_CARD.md").write_text(text)
    print(f"wrote {model / 'MODEL_CARD.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
