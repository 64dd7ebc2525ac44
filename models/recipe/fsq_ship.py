"""`fsq.py ship`: export the trained FSQ model, measure it, write the shipped folder.

Writes to --model (default python/codecspec/models/fsq):
    encoder.onnx, step.onnx   the graphs (float16 storage, dynamic batch axis)
    fsqcodec.npz              the GroupFSQ codec
    model.json                format, frontend, levels, sampling, pace unit, length guard
    bench.json                held-out phoneme strings for `codecspec bench --model fsq`
    report.json               every figure below; MODEL_CARD.md (fsq_card.py) renders it
    channel_usage.png, training_curves.png, sample.wav
Measured: ONNX vs torch parity (one stream and a padded batch of two), held-out NLL of the
factorised heads vs the AR-over-groups head, the multi-information estimates, the AR head's
cost per frame, the stop head (teacher-forced and free-running), bench figures and the RVQ
reference's AR real-time factor on the same phoneme strings.
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import numpy as np
from card import _plt

from codecspec.runtime.session import open_session

SAMPLING = {"temperature": 0.9, "top_k": 0, "top_p": 1.0}
VOICES = {"en": "en-us", "de": "de", "es": "es", "it": "it"}
MAX_PACE = 2.0
ESPEAK_RATE, ESPEAK_PITCH = 170, 50  # an aligned model's timing voice: v3's corpus default
QUARTILE_NAMES = {
    1: "(steadiest)",
    4: "(most changing)",
}  # length guard: twice the text's nominal length


def load_trained(ckpt: Path):
    import torch

    from codecspec.families.fsq.torch_model import FSQModelConfig, FSQTrainModel

    ck = torch.load(ckpt, map_location="cpu", weights_only=False)
    cfg = FSQModelConfig(**ck["config"])
    model = FSQTrainModel(cfg)
    model.load_state_dict(ck["state_dict"])
    return model.eval(), ck


def export(model, out: Path) -> dict:
    import onnx

    from codecspec.families.fsq.torch_model import export_onnx
    from codecspec.graphs.storage import store_float16

    sizes = {}
    for path in export_onnx(model.temporal, out).values():
        onnx.save(store_float16(onnx.load(str(path))), str(path))
        sizes[path.name] = path.stat().st_size
    return sizes


# ---------------------------------------------------------------------------- parity
def _tensors(b, refs=None, null=False, seed=0) -> dict:
    """A held-out batch as tensors; a voice-prefix model's (`refs`, `VoiceReferences`) with
    a reference clip of each row's voice, or the null prefix (`null`)."""
    from codecspec.families.fsq.train import to_tensors

    t = to_tensors(b)
    return t if refs is None else t | refs.draw(b.ids, np.random.default_rng(seed), null=null)


def _prefix(model, t: dict):
    """The voice prefix of a batch of `_tensors` (None: a model without one)."""
    if not model.cfg.voice_queries:
        return None
    return model.temporal.voice_prefix(t["ref"], t["ref_lengths"], t["use_null"])


def _torch_logits(model, t: dict):
    import torch

    model.eval()  # every measurement: no dropout

    with torch.no_grad():
        _, ch, stop = model.temporal(
            t["phonemes"],
            t["phoneme_lengths"],
            t["language"],
            t["speaker"],
            t["codes"],
            t.get("track"),
            _prefix(model, t),
        )
    return ch.numpy(), stop.numpy()


def onnx_parity(out: Path, model, val, indices=(0, 1), refs=None) -> dict:
    """Max |ORT - torch| of channel and stop logits, teacher-forced step by step, for a
    padded batch of len(indices) held-out utterances (different lengths) and for the first
    one alone (a voice-prefix model: each with a reference clip, the prefix computed by
    voice.onnx)."""
    import torch

    from codecspec.families.fsq.model import FSQStepper

    enc = open_session(str(out / "encoder.onnx"), provider="cpu")
    step = open_session(str(out / "step.onnx"), provider="cpu")
    res = {}
    for name, idx in (("single", indices[:1]), ("batch", indices)):
        b = val.collate(list(idx))
        t = _tensors(b, refs)
        ref_ch, ref_stop = _torch_logits(model, t)
        feeds = {k: t[k].numpy() for k in ("phonemes", "phoneme_lengths", "language", "speaker")}
        if refs is not None:
            with torch.no_grad():
                feeds["prefix"] = _prefix(model, t).numpy()
            res[f"{name}_prefix"] = _voice_graph_parity(out, t, feeds["prefix"])
        ck, cv = enc.run(None, feeds)
        unit = model.cfg.frames_per_phoneme
        tracks = None if b.progress is None else list(b.progress)  # an aligned model's
        lengths = feeds["phoneme_lengths"]
        st = FSQStepper(step, ck, cv, feeds["speaker"], lengths, unit, tracks=tracks)
        codes = t["codes"].numpy()
        worst = [0.0, 0.0]
        for i in range(int(b.frame_lengths.min())):
            _, ch, stop = st.step(codes[:, i - 1] if i else None)
            worst[0] = max(worst[0], float(np.abs(ch - ref_ch[:, i]).max()))
            worst[1] = max(worst[1], float(np.abs(stop - ref_stop[:, i]).max()))
        res[name] = {"channel_logits_max_abs": worst[0], "stop_logits_max_abs": worst[1]}
    return res


def _voice_graph_parity(out: Path, t: dict, want: np.ndarray) -> float:
    """Max |voice.onnx - torch| of the prefixes of a batch's reference clips (one by one,
    each cut to its own frames, as the runtime reads a clip)."""
    voice = open_session(str(out / "voice.onnx"), provider="cpu")
    worst = 0.0
    for k, n in enumerate(t["ref_lengths"].numpy()):
        if bool(t["use_null"][k]):
            continue
        ref = t["ref"][k : k + 1, :n].numpy()
        worst = max(worst, float(np.abs(voice.run(None, {"ref_channels": ref})[0] - want[k]).max()))
    return worst


# ---------------------------------------------------------------------------- NLL
def heldout_nll(model, val, max_frames: int = 1536, refs=None, null=False) -> dict:
    """Frame-weighted held-out NLLs (nats per frame) over the whole test split (a
    voice-prefix model: each utterance read with a reference clip of its voice, or with the
    null prefix)."""
    from codecspec.families.fsq.train import evaluate

    batches = [
        _tensors(b, refs, null, seed=i)
        for i, b in enumerate(val.batches(16, seed=1, max_frames=max_frames))
    ]
    v, per_ch = evaluate(model, batches)
    frames = int(sum(int(b["frame_mask"].sum()) for b in batches))
    if model.ar is None:  # levels per group: no AR-over-groups head to compare with
        return {
            "frames": frames,
            "factorised_nats_per_frame": v["fact"],
            "stop_bce": v["stop"],
            "per_channel_nats": per_ch,
        }
    gap = v["fact"] - v["ar"]
    return {
        "frames": frames,
        "factorised_nats_per_frame": v["fact"],
        "ar_over_groups_nats_per_frame": v["ar"],
        "gap_nats_per_frame": gap,
        "gap_relative": gap / v["ar"],
        "multi_information_bits_per_frame": gap / math.log(2),
        "stop_bce": v["stop"],
        "per_channel_nats": per_ch,
    }


def _entropy_bits(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    # Miller-Madow: the plug-in estimate is biased low by (K - 1) / 2N nats
    return float(-(p * np.log2(p)).sum() + (len(p) - 1) / (2 * counts.sum() * math.log(2)))


def marginal_multi_information(codec, train_channels: np.ndarray) -> dict:
    """Without context: per group, Σ_j H(c_j) - H(group code), on the training frames (bits)."""
    per, ranges = codec.cfg.width, codec.cfg.packed_ranges
    packed = codec.pack(train_channels)
    out = []
    for g in range(codec.cfg.groups):
        hs = sum(_entropy_bits(np.bincount(train_channels[:, g * per + j])) for j in range(per))
        out.append(hs - _entropy_bits(np.bincount(packed[:, g], minlength=ranges[g])))
    return {"per_group_bits": [round(x, 4) for x in out], "sum_bits": round(sum(out), 4)}


# ---------------------------------------------------------------------------- AR cost
def ar_head_cost(model, out: Path, reps: int = 30) -> dict:
    """ms per frame of the AR-over-groups head on ONNX Runtime: G sequential calls, each of
    the whole G-position causal trunk (the codes sampled so far, the rest padding), with
    group k's head applied on the host to position k (the project's heads-on-the-host design:
    an in-graph einsum over all G heads re-lays out G x V x d weights per call). A KV-cached
    trunk would do less arithmetic per call, but at G = 8 positions a call is mostly fixed
    overhead, and the G calls stay sequential either way."""
    import torch

    cfg, ar = model.cfg, model.ar

    class ARTrunk(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ar = ar

        def forward(self, h, groups):
            p = self.ar.proj(h)[:, None, :]
            prev = self.ar.code_emb(groups[:, :-1] + self.ar.row0)
            x = p + self.ar.pos + torch.cat([torch.zeros_like(prev[:, :1]), prev], dim=1)
            return self.ar.norm(self.ar.layers(x, mask=self.ar.mask))

    path = out.parent / (out.name + "_ar_trunk.onnx")
    args = (torch.zeros(1, cfg.d_model), torch.zeros(1, cfg.groups, dtype=torch.long))
    torch.onnx.export(
        ARTrunk().eval(),
        args,
        str(path),
        input_names=["h", "groups"],
        output_names=["z"],
        opset_version=17,
        dynamo=False,
    )
    sess = open_session(str(path), provider="cpu")
    heads = ar.heads.detach().numpy()
    feeds = {
        "h": np.zeros((1, cfg.d_model), np.float32),
        "groups": np.zeros((1, cfg.groups), np.int64),
    }
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for k in range(cfg.groups):
            z = sess.run(None, feeds)[0]
            _ = heads[k] @ z[0, k]
        times.append(time.perf_counter() - t0)
    path.unlink()
    return {"calls_per_frame": cfg.groups, "ms_per_frame": 1e3 * float(np.median(times))}


# ---------------------------------------------------------------------------- stop head
def stop_teacher_forced(model, val, refs=None) -> dict:
    """Held-out, teacher-forced: the frame where the stop probability peaks vs the true end,
    and the mean stop probability before the last frame."""
    import torch

    errs, early = [], []
    for b in val.batches(16, seed=1, max_frames=1536):
        t = _tensors(b, refs)
        _, stop = _torch_logits(model, t)
        p = 1.0 / (1.0 + np.exp(-stop))
        for i, n in enumerate(b.frame_lengths):
            errs.append(int(np.argmax(p[i, :n])) - (n - 1))
            early.append(float(p[i, : n - 1].mean()))
    del torch
    e = np.abs(np.array(errs))
    return {
        "utterances": len(errs),
        "peak_at_last_frame": float((e == 0).mean()),
        "peak_within_2_frames": float((e <= 2).mean()),
        "mean_stop_prob_before_end": float(np.mean(early)),
    }


def bench_texts(val, manifest: list, n: int = 16) -> list:
    """The first `n` held-out utterances as (phonemes, language, speaker, real frames)."""
    by_id = {r["id"]: r for r in manifest}
    names_l, names_s = val.frontend.languages.names, val.frontend.speakers.names
    rows = []
    for i in range(min(n, len(val))):
        u = val[i]
        rows.append(
            {
                "id": u.id,
                "text": by_id[u.id]["text"],
                "phonemes": by_id[u.id]["phonemes"],
                "language": names_l[u.language],
                "speaker": names_s[u.speaker],
                "frames": u.frames,
            }
        )
    return rows


def model_json(ck: dict, codec, frontend, sampling=None) -> dict:
    """model.json of a trained checkpoint; `sampling`: the folder's law (default SAMPLING)."""
    c = ck["config"]
    meta = {
        "format": "codecspec-fsq-tts/1",
        "frontend": frontend.to_dict(),
        **codec.cfg.to_meta(),
        "sampling": sampling or SAMPLING,
        "voices": VOICES,
        "default_speaker": "f1",
        "pace_unit": c["frames_per_phoneme"],
        "max_pace": MAX_PACE,
        "config": c,
    }
    if c.get("aligned"):  # told espeak-ng's phoneme track, in the voice its corpus speaks
        meta |= {"voices": {"en": "en-us"}, "conditioning": "phoneme_track"}
        meta |= {"espeak_rate": ESPEAK_RATE, "espeak_pitch": ESPEAK_PITCH}
    if c.get("voice_queries"):  # no voice asked for: the null prefix (voices.npz)
        meta["default_voice"] = "neutral"
    return meta


# what a voice-prefix folder's named voices say in their reference clips (espeak-ng at the
# timing voice's rate and pitch); the Q-Former reads what the frames share, not the words
VOICE_TEXT = (
    "A quiet voice carried over the water, and the boat turned slowly toward the pier "
    "while seven gulls circled above the harbour."
)


def write_voices(model, dest: Path, names: list) -> dict:
    """voices.npz of a voice-prefix model: `neutral` (the learned null prefix) and one
    prefix per training voice in `names`, read by the exported voice.onnx from espeak-ng
    saying VOICE_TEXT in that voice, as a user's clip would be (`VoiceBank.clone`)."""
    from codecspec.families.fsq.codec import FSQCodec
    from codecspec.families.fsq.voice import NEUTRAL, VoiceBank
    from codecspec.frontend.espeak import render

    null = model.temporal.voice.null.detach().numpy().astype(np.float32)
    np.savez(dest / "voices.npz", **{NEUTRAL: null})
    bank = VoiceBank(dest, FSQCodec.load(dest / "fsqcodec.npz"), provider="cpu", threads=1)
    for name in names:
        r = render(VOICE_TEXT, f"en-us+{name}", ESPEAK_RATE, ESPEAK_PITCH, 0)
        bank.add(name, (r.audio, r.sample_rate))
    np.savez(dest / "voices.npz", **bank.prefixes)
    return {"voices": len(bank.prefixes), "bytes": (dest / "voices.npz").stat().st_size}


def copy_codec(codec_dir: Path, out: Path) -> None:
    shutil.copy(codec_dir / "fsqcodec.npz", out / "fsqcodec.npz")
    if (codec_dir / "channel_usage.png").is_file():
        shutil.copy(codec_dir / "channel_usage.png", out / "channel_usage.png")


# ---------------------------------------------------------------------------- runtime figures
def _reference(fsq):
    """The pipeline compared with this model, and its name: an aligned model against the
    default model (v3, AR, on the same texts), the other against the RVQ reference (AR, on
    the same phoneme strings)."""
    from codecspec.pipeline.registry import load_model

    if fsq.aligned:
        return "v3_ar", load_model("v3", provider="cpu")
    return "reference_ar", load_model("reference", provider="cpu")


def _request(fsq, u: dict) -> dict:
    """generate()'s keywords for a bench.json utterance: its text for an aligned model (the
    track comes from espeak-ng), its phoneme string otherwise."""
    kw = dict(language=u["language"], speaker=u["speaker"])
    return dict(kw, text=u["text"]) if fsq.aligned else dict(kw, text="", phonemes=u["phonemes"])


def compare_rtf(model_dir: Path, texts: list, seed: int = 0) -> dict:
    """Whole-pipeline real-time factor of the FSQ model and of the reference pipeline
    (`_reference`) in AR mode on the same inputs, interleaved utterance by utterance (same
    load for both)."""
    from codecspec.families.fsq.model import FSQTTS

    fsq = FSQTTS(model_dir, provider="cpu")
    name, ref = _reference(fsq)
    acc = {"fsq": [0.0, 0.0, 0, 0], name: [0.0, 0.0, 0, 0]}  # s, audio s, frames, calls
    for i, u in enumerate(texts):
        kw = _request(fsq, u)
        for key, tts, extra in (("fsq", fsq, {}), (name, ref, {"mode": "ar"})):
            rest = {k: v for k, v in kw.items() if k != "text"}
            s = tts.generate(kw["text"], seed=seed + i, **rest, **extra)
            a = acc[key]
            a[0] += s.real_time_factor * s.audio_seconds
            a[1] += s.audio_seconds
            a[2] += len(s.codes)
            a[3] += (
                s.graph_calls if key == "fsq" else len(s.codes) * (1 + s.depth_calls / len(s.codes))
            )
    out = {
        k: {
            "real_time_factor": v[0] / v[1],
            "audio_seconds": round(v[1], 2),
            "frames": v[2],
            "graph_calls_per_frame": v[3] / v[2],
        }
        for k, v in acc.items()
    }
    return out | {"reference": name}


def write_sample(model_dir: Path, text: dict) -> dict:
    from codecspec.codec.audio import write_wav
    from codecspec.families.fsq.model import FSQTTS

    fsq = FSQTTS(model_dir, provider="cpu")
    kw = _request(fsq, text)
    s = fsq.generate(kw.pop("text"), **kw)
    write_wav(model_dir / "sample.wav", 0.9 * s.wav / max(1e-9, np.abs(s.wav).max()), s.sample_rate)
    return {
        "id": text["id"],
        "frames": len(s.codes),
        "real_frames": text["frames"],
        "stopped": s.stopped,
    }


def plot_curves(curves: dict, path: Path) -> None:
    try:
        plt = _plt()
    except ImportError:  # matplotlib is optional: no plot
        return
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("fact", "factorised heads"), ("ar", "AR over groups")):
        ax[0].plot(
            curves["steps"],
            [r[key] for r in curves["train"]],
            lw=0.5,
            alpha=0.5,
            label=f"{label} (train)",
        )
        ax[0].plot(
            curves["val_steps"],
            [r[key] for r in curves["val"]],
            "o-",
            ms=3,
            label=f"{label} (held-out)",
        )
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("NLL (nats per frame)")
    ax[0].legend(fontsize=8)
    ax[1].plot(curves["val_steps"], [r["stop"] for r in curves["val"]], "o-", ms=3)
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("held-out stop BCE")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------- model card
def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def _layout(rep: dict) -> str:
    """How the codec's levels are laid out, in words."""
    if isinstance(rep["packed_range"], int):
        return (
            f"{rep['groups']} groups x levels {rep['levels']} = {rep['channels']} channels over "
            f"PCA-{rep['channels']}"
        )
    lv = [v for g in rep["levels"] for v in g]
    return (
        f"{rep['channels']} channels over PCA-{rep['channels']} in {rep['groups']} groups of "
        f"{len(rep['levels'][0])}, levels following the components' variances ({lv[0]} for "
        f"the first, {lv[-1]} for the last)"
    )


def codec_markdown(rep: dict) -> str:
    lines = [
        f"GroupFSQ codec: {_layout(rep)} of 8 x 80 log-mel, {rep['frame_rate']} frames/s; "
        f"{rep['bits_per_second']} bit/s nominal ({rep['bits_per_frame']} bits per frame), "
        f"{rep['entropy_bits_per_second']} bit/s by the "
        f"channels' entropy on the training frames. Held-out: {rep['test_utterances']} "
        f"utterances, {rep['test_frames']} frames (LSD on {rep['lsd_utterances']}).",
        "",
        "| code | feature MSE | unexplained var. | mel distortion (dB) | LSD after GL (dB) |",
        "|---|---|---|---|---|",
    ]
    for r in rep["table"]:
        lsd = f"{r['lsd_db']:.2f}" if "lsd_db" in r else "—"
        lines.append(
            f"| {r['name']} | {r['feature_mse']:.4f} | {100 * r['unexplained']:.1f}% | "
            f"{r['mel_db']:.2f} | {lsd} |"
        )
    u = rep["channel_usage"]
    lines += [
        "",
        "Per-channel entropy on the training frames (bits; ceiling log2 levels): "
        + ", ".join(f"{r['entropy_bits']:.2f}/{r['ceiling_bits']:.2f}" for r in u),
        f"Mean usage {np.mean([r['entropy_bits'] / r['ceiling_bits'] for r in u]):.1%} of the "
        f"ceiling; every level used: {all(r['used'] == r['levels'] for r in u)}.",
        "",
    ]
    return "\n".join(lines)


def _codec_section(rep: dict) -> list:
    return ["## Codec", "", codec_markdown(rep["codec"]), "![channel usage](channel_usage.png)", ""]


def _nll_section(rep: dict) -> list:
    n, m, a = rep["nll"], rep["marginal_multi_information"], rep["ar_head_cost"]
    b, pg, rtf = rep["bench"], rep["gap_breakdown"]["per_group"], rep["rtf_vs_reference"]
    rate = rep["codec"]["frame_rate"]
    extra = rate * a["ms_per_frame"] / 1e3  # the AR head's share of the real-time factor
    fsq_rtf = rtf["fsq"]["real_time_factor"]
    return [
        "## What the factorisation costs (held-out, nats per frame)",
        "",
        "| head | NLL / frame | calls per frame |",
        "|---|---|---|",
        f"| 32 factorised channel heads (shipped) | {n['factorised_nats_per_frame']:.3f} | 1 |",
        f"| AR over the 8 groups (measurement head) | {n['ar_over_groups_nats_per_frame']:.3f} "
        f"| 1 + {a['calls_per_frame']} |",
        "",
        f"Gap {n['gap_nats_per_frame']:.3f} nats/frame = {100 * n['gap_relative']:.1f}% of the "
        f"AR head's NLL, on {n['frames']} held-out frames: the conditional multi-information "
        f"estimate I(c_1; ...; c_32 | context) ≈ {n['multi_information_bits_per_frame']:.2f} "
        f"bits per frame. Without context (training frames, within each group, Miller-Madow "
        f"plug-in): Σ_j H(c_j) - H(group) = {m['sum_bits']:.2f} bits per frame over the 8 "
        f"groups ({', '.join(f'{x:.3f}' for x in m['per_group_bits'])}).",
        "",
        "Per group (nats per frame; group 0's AR correction sees only h_t, so its gap is "
        "within-group dependence alone, group k's also sees groups 0..k-1):",
        "",
        "| group | " + " | ".join(str(r["group"]) for r in pg) + " |",
        "|---" * (len(pg) + 1) + "|",
        "| factorised | " + " | ".join(f"{r['factorised']:.2f}" for r in pg) + " |",
        "| AR | " + " | ".join(f"{r['ar']:.2f}" for r in pg) + " |",
        "| gap | " + " | ".join(f"{r['factorised'] - r['ar']:.2f}" for r in pg) + " |",
        "",
        "Where the gap is (held-out frames by quartile of frame-to-frame change in PCA "
        "space; nats per frame):",
        "",
        "| change quartile | factorised | AR over groups | gap |",
        "|---|---|---|---|",
        *(
            f"| {r['quartile']} {QUARTILE_NAMES.get(r['quartile'], '')} "
            f"| {r['factorised']:.2f} | {r['ar']:.2f} | {r['gap']:.2f} |"
            for r in rep["gap_breakdown"]["by_change"]
        ),
        "",
        f"The AR head would cost {a['ms_per_frame']:.2f} ms per frame on ONNX Runtime "
        f"({a['calls_per_frame']} sequential calls) on top of the step graph's "
        f"{b['step_ms_per_frame']:.2f} ms, plus one host sampling round per group.",
        f"At {rate} frames/s that adds about {extra:.3f} to the real-time factor (FSQ "
        f"{fsq_rtf:.3f} -> about {fsq_rtf + extra:.3f}, still below the RVQ reference's AR "
        f"{rtf['reference_ar']['real_time_factor']:.3f}).",
        "",
    ]


# the pipeline each card compares with (`compare_rtf`'s "reference"): its row, the inputs
REFERENCES = {
    "reference_ar": ("RVQ reference, AR", "phoneme strings"),
    "v3_ar": ("v3 (the default model), AR", "texts"),
}


def _runtime_section(rep: dict, model: str = "fsq") -> list:
    b, r, st, par = (
        rep["bench"],
        rep["rtf_vs_reference"],
        rep["stop_teacher_forced"],
        rep["onnx_parity"],
    )
    key = r.get("reference", "reference_ar")
    (f, ref), (row, inputs) = (r["fsq"], r[key]), REFERENCES[key]
    return [
        "## Runtime (this machine, CPU, shared)",
        "",
        f"`codecspec bench --model {model} --utterances {b['utterances']} --batch 8`: "
        f"{b['calls_per_frame']:.2f} graph calls per frame, {b['ms_per_frame']:.2f} ms per frame "
        f"(step graph {b['step_ms_per_frame']:.2f}, sampling {b['sampling_ms_per_frame']:.3f}), "
        f"real-time factor {b['real_time_factor']:.3f} with the vocoder "
        f"({b['real_time_factor_no_vocoder']:.3f} without); a batch of {b.get('batch', 1)} "
        f"streams: {b.get('batch_ms_per_step', float('nan')):.2f} ms per step, "
        f"{b.get('batch_frames_per_second', float('nan')):.0f} frames/s.",
        "",
        f"| pipeline, same {inputs}, interleaved | RTF | graph calls / frame | frames |",
        "|---|---|---|---|",
        f"| FSQ (this model) | {f['real_time_factor']:.3f} | {f['graph_calls_per_frame']:.2f} "
        f"| {f['frames']} |",
        f"| {row} | {ref['real_time_factor']:.3f} | "
        f"{ref['graph_calls_per_frame']:.2f} | {ref['frames']} |",
        "",
        f"Stop head: free-running, {b['stopped_by_stop_head']} of {b['utterances']} bench "
        f"utterances ended by the stop head ({b['hit_max_frames']} by the length guard), "
        f"{b['frames_vs_reference']:.2f}x the real utterances' frames. Teacher-forced on "
        f"{st['utterances']} held-out utterances: stop probability peaks at the last frame "
        f"{100 * st['peak_at_last_frame']:.0f}% of the time, within 2 frames "
        f"{100 * st['peak_within_2_frames']:.0f}%; mean stop probability before the end "
        f"{st['mean_stop_prob_before_end']:.4f}.",
        "",
        f"ONNX vs torch (teacher-forced, step by step): channel logits max |diff| "
        f"{par['single']['channel_logits_max_abs']:.2e} (one stream), "
        f"{par['batch']['channel_logits_max_abs']:.2e} (padded batch of 2); stop logits "
        f"{max(par['single']['stop_logits_max_abs'], par['batch']['stop_logits_max_abs']):.2e}.",
        "",
    ]


# measured by `codecspec quality --model fsq` (docs/quality.md); the card leads with it
PURPOSE = [
    "**What this model is for: a test subject for factorised sampling, not a voice.** It does ",
    "not say its text: Whisper base recognises 2.9% of the words of its speech on the 30 ",
    "held-out evaluation sentences (95% CI 0.7–5.7%; chance, espeak-ng cut into shuffled 80 ms ",
    "blocks, scores 7.5%), and its codec alone, resynthesising espeak-ng's speech, leaves 38% ",
    "of the words recognisable against 69% for the original (8 groups of 4 channels over a ",
    "fixed PCA basis; shared notes on intelligibility; `codecspec quality ",
    "--model fsq`, docs/quality.md). It exists to exercise the FSQ primitives (32 parallel ",
    "channel heads, `cs.sample_factorized`, the Bernoulli stop head, one call per frame) and ",
    "the serving engine's FSQ family at a realistic size. For speech, use the default model ",
    "(reference v3) or `fsq-aligned`, this family's network trained the v3 way (told ",
    "espeak-ng's phoneme timing, over a codec that keeps the words): 57.3% of the words of ",
    "held-out corpus texts (docs/fsq_model.md). ",
]


def card(rep: dict) -> str:
    t = rep["training"]
    files = ", ".join(f"`{k}` {_mb(v)}" for k, v in rep["sizes"].items())
    lines = [
        "# FSQ model family (GEPARD-style): 32 channel heads + a stop head, one call per frame",
        "",
        "A temporal LM over GroupFSQ codes (8 groups x levels [8, 7, 6, 6]) trained here on "
        "the reference corpus (espeak-ng speech, 4 languages, 8 voices). Per frame ONE step "
        "graph call gives all 32 channel heads and the stop logit; `cs.sample_factorized` + "
        "`cs.sample_stop` sample the frame. Recipe: `python models/recipe/fsq.py all`; "
        "design: docs/fsq_model.md.",
        "",
        *PURPOSE,
        "",
        f"Files: {files}; everything shipped {_mb(rep['shipped_bytes'])}.",
        f"Training: {t['steps']} steps, {t['seconds'] / 60:.1f} min on {t['threads']} CPU "
        f"thread(s); temporal model {t['parameters']['temporal']:,} parameters (shipped), AR "
        f"head {t['parameters']['ar_head']:,} (measurement only, not shipped).",
        "",
        "![training curves](training_curves.png)",
        "",
    ]
    lines += _codec_section(rep) + _nll_section(rep) + _runtime_section(rep)
    lines += [
        "## Limitations",
        "",
        "Small model, half an hour of CPU training: intelligibility is far from a real TTS, "
        "and the PCA-32 front end (5% of the log-mel variance lost before quantisation) plus "
        "Griffin-Lim bound the sound quality. The stop head can end an utterance early or "
        "late; the length guard (2x the nominal length) bounds it and is reported.",
        "",
    ]
    return "\n".join(lines)


SETS_NOTE = "The evaluation sets (everyday, SUS, hard) beside v3: docs/fsq_model.md."
VOICE_WORDS_NOTE = (
    "Voice f1 (a training voice), texts held out of this corpus and of fsq-aligned's; "
    "fsq-aligned beside it on the same texts: docs/fsq_model.md."
)


def words_lines(listen: dict, after: str = SETS_NOTE) -> list:
    """What the card says the model speaks, from `fsq.py listen`'s figures; `after`: what
    the card adds (where the evaluation sets' figures are)."""
    if not listen:
        return ["Words recognised: not measured for this folder (`fsq.py listen --json`)."]
    lo, hi = listen["words_recognised_ci"]
    return [
        f"**Words recognised** by Whisper base on {listen['sentences']} held-out corpus texts "
        f"x {listen['clips'] // listen['sentences']} seeds (`fsq.py listen`): "
        f"**{100 * listen['words_recognised']:.1f}%** (95% CI {100 * lo:.1f}–{100 * hi:.1f}); "
        f"{listen['runaways']} of {listen['clips']} clips ran to the length guard. {after}"
    ]


def aligned_card(rep: dict, words: list) -> str:
    """The model card of an FSQ model trained the v3 way (levels per group, phoneme track);
    `words`: the lines that say what it speaks (measured by the caller)."""
    t, c, n = rep["training"], rep["codec"], rep["nll"]
    files = ", ".join(f"`{k}` {_mb(v)}" for k, v in rep["sizes"].items())
    return "\n".join(
        [
            f"# FSQ model family: {c['channels']} channel heads + a stop head, one call per "
            "frame, told espeak-ng's phoneme timing",
            "",
            f"A temporal LM over GroupFSQ codes ({c['groups']} groups of 4 channels, levels "
            "that follow the PCA components' variances) trained here on v3's corpus (espeak-ng "
            "speech, English, 4 voices, with every phoneme's start time). Per frame ONE step "
            "graph call gives every channel head and the stop logit; `cs.sample_factorized` + "
            "`cs.sample_stop` sample the frame. Like v3 it is told which phoneme each frame "
            "speaks (espeak-ng's timing: the step graph's `pace` input carries the track). "
            "Recipe: the fsq-aligned chain at the end of `models/recipe/build.sh` (`fsq.py "
            "codec --bits 200`, `train --minutes 60 --threads 1`, `ship --temperature 0` on "
            "corpus_v3n); design: docs/fsq_model.md.",
            "",
            *words,
            "",
            f"Files: {files}; everything shipped {_mb(rep['shipped_bytes'])}.",
            f"Training: {t['steps']} steps, {t['seconds'] / 60:.1f} min on {t['threads']} CPU "
            f"thread(s); {t['parameters']['temporal']:,} parameters. Held-out NLL "
            f"{n['factorised_nats_per_frame']:.2f} nats per frame over {n['frames']} frames.",
            "",
            "![training curves](training_curves.png)",
            "",
            *_codec_section(rep),
            *_runtime_section(rep, model="DIR"),
        ]
    )


def voice_lines(voice: dict) -> list:
    """What the card says of the prefix, from `bench/voice_prefix.py --out`'s summary."""
    if not voice:
        return ["Voice prefix on held-out voices: not measured (`bench/voice_prefix.py`)."]
    v = voice["summary"]
    lo, hi = v["clone_beats_neutral_ci"]
    words = ""
    if "clone_words" in v:
        words = (
            f" Words recognised (Whisper base) in those clips: {100 * v['clone_words']:.1f}% "
            f"with the clip's prefix, {100 * v['neutral_words']:.1f}% with the null prefix."
        )
    return [
        f"**Voices it never heard** ({len(v['voices'])} espeak-ng voices held out of training: "
        f"{', '.join(v['voices'])}; {v['pairs']} reference clips at pitches drawn from the "
        "corpus's range; `bench/voice_prefix.py`): speaker similarity (GE2E) to the "
        f"reference clip **{v['clone_mean']:.3f}** with the clip's prefix, "
        f"{v['neutral_mean']:.3f} with the null prefix, {v['other_mean']:.3f} with another "
        f"held-out voice's clip; the codec's ceiling (espeak-ng in the reference's voice "
        f"through this codec) {v['codec_mean']:.3f}, espeak-ng itself "
        f"{v['espeak-ng_mean']:.3f}. The clip's prefix beats the null prefix in "
        f"**{100 * v['clone_beats_neutral']:.0f}%** of the pairs (95% CI {100 * lo:.0f}–"
        f"{100 * hi:.0f}, voices resampled) and another voice's clip in "
        f"{100 * v['clone_beats_other']:.0f}%.{words}",
    ]


def voice_card(rep: dict, words: list, voice: list) -> str:
    """The model card of an FSQ voice-prefix model (fsq-aligned's network + a Q-Former)."""
    t, n, nn = rep["training"], rep["nll"], rep["nll_null_prefix"]
    cfg = rep["config"]
    files = ", ".join(f"`{k}` {_mb(v)}" for k, v in rep["sizes"].items())
    par = rep["onnx_parity"]
    return "\n".join(
        [
            "# FSQ voice-prefix model: speaks in the voice of a reference clip",
            "",
            "GEPARD's voice prefix on the `fsq-aligned` network: a Q-Former "
            f"({cfg['voice_queries']} learned queries, {cfg['voice_blocks']} blocks of "
            "self-attention, cross-attention to the clip's frames and an MLP) reads a reference "
            "clip's FSQ channels into "
            f"{cfg['voice_queries']} prefix vectors, once per clip; they join the text "
            "encoder's input (their mean its speaker slot), so every request pays for its voice "
            "at prefill only and the step graph is fsq-aligned's. The learned null prefix "
            "(`neutral`, the default) is the voice of a request without a clip. Trained from "
            f"fsq-aligned's weights on espeak-ng speech in {len(rep['voices'])} voices (every "
            "utterance read with another clip of its voice and pitch, 15% with the null "
            "prefix); the stages, their corpora and figures: docs/fsq_model.md.",
            "",
            "```bash",
            "codecspec synth --model models/fsq-voices --ref-audio clip.wav "
            '"Text to say." -o out.wav',
            "codecspec serve --model models/fsq-voices --voices-dir clips/  # NAME.wav: voice NAME",
            "```",
            "",
            *voice,
            "",
            *words,
            "",
            f"Held-out NLL (teacher-forced, {n['frames']} frames): "
            f"{n['factorised_nats_per_frame']:.2f} nats per frame with a training clip of each "
            f"utterance's voice, {nn['factorised_nats_per_frame']:.2f} with the null prefix.",
            f"Named voices: `neutral` and the {len(rep['voices'])} training voices "
            "(`voices.npz`, each read from espeak-ng saying one sentence).",
            f"Files: {files}; everything shipped {_mb(rep['shipped_bytes'])}.",
            f"Training: {t['steps']} steps, {t['seconds'] / 60:.1f} min on {t['threads']} CPU "
            f"thread(s); {t['parameters']['temporal']:,} parameters.",
            "ONNX vs torch: channel logits max |diff| "
            f"{par['single']['channel_logits_max_abs']:.2e} (one stream), "
            f"{par['batch']['channel_logits_max_abs']:.2e} (padded batch); "
            f"prefix {max(par['single_prefix'], par['batch_prefix']):.2e}.",
            "",
            "![training curves](training_curves.png)",
            "",
        ]
    )


# ---------------------------------------------------------------------------- where the gap is
def _per_frame_nll(model, codec, t: dict):
    """Per real frame and group: factorised NLL, AR NLL [N, G]; and how far the frame moved
    from the last one (L2 in PCA space of the coded values) [N]."""
    import torch
    import torch.nn.functional as F

    from codecspec.families.fsq.torch_model import channel_log_probs

    model.eval()
    with torch.no_grad():
        h, logits, _ = model.temporal(
            t["phonemes"], t["phoneme_lengths"], t["language"], t["speaker"], t["codes"]
        )
        m, tgt = t["frame_mask"], t["codes"][t["frame_mask"]]
        lp = channel_log_probs(logits[m], model.temporal.log_index)
        per = len(model.cfg.levels)
        fact = -lp.gather(-1, tgt[..., None])[..., 0].view(len(tgt), -1, per).sum(-1)
        g = model.pack(tgt)
        ar = F.cross_entropy(model.ar(h[m], g, lp).transpose(1, 2), g, reduction="none")
    c = t["codes"].numpy()
    z = codec.latent(c.reshape(-1, c.shape[-1])).reshape(*c.shape[:2], -1)
    move = np.concatenate(
        [np.zeros_like(z[:, :1, 0]), np.linalg.norm(np.diff(z, axis=1), axis=-1)], 1
    )
    return fact.numpy(), ar.numpy(), move[m.numpy()]


def gap_breakdown(model, codec, val) -> dict:
    """Where the factorisation gap sits, held-out: per group (group 0's AR correction sees
    only h_t, so its gap is pure within-group dependence; group k's also sees groups < k),
    and per quartile of frame-to-frame change (if what the model is unsure about is when the
    next sound starts, the gap sits on the changing frames)."""
    from codecspec.families.fsq.train import to_tensors

    batches = val.batches(16, seed=1, max_frames=1536)
    parts = [_per_frame_nll(model, codec, to_tensors(b)) for b in batches]
    fact, ar, move = (np.concatenate(x) for x in zip(*parts))
    per_group = [
        {"group": k, "factorised": float(fact[:, k].mean()), "ar": float(ar[:, k].mean())}
        for k in range(fact.shape[1])
    ]
    fact, ar = fact.sum(1), ar.sum(1)
    edges = np.quantile(move, [0.0, 0.25, 0.5, 0.75, 1.0])
    rows = []
    for q, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        s = (move >= lo) & (move <= hi) if q == 0 else (move > lo) & (move <= hi)
        rows.append(
            {
                "quartile": q + 1,
                "frames": int(s.sum()),
                "factorised": float(fact[s].mean()),
                "ar": float(ar[s].mean()),
                "gap": float((fact[s] - ar[s]).mean()),
            }
        )
    return {"per_group": per_group, "by_change": rows}
