"""Reference model v2: codec v2 -> two-stage temporal LM + draft + depth decoder -> shipped.

    python models/recipe/v2.py codec                 # ~/.cache/codecspec/v2/codec (~1 min)
    python models/recipe/v2.py train --minutes 70    # ~/.cache/codecspec/v2/train/ckpt.pt
    python models/recipe/v2.py ship                  # models/v2
    python models/recipe/v2.py shared-depth --minutes 10   # + the shared depth decoder

`train` is resumable: run the same command again (on this machine, or on a fresh one with the
corpus rebuilt by corpus.py and the checkpoint folder copied) and it continues from the last
checkpoint on the same learning-rate schedule until --minutes of training time in total.
Checkpoints live outside the repository (`--work`, default ~/.cache/codecspec/v2).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    import codecspec  # noqa: F401
except ImportError:  # running from a checkout whose package is not installed
    sys.path.insert(0, str(ROOT / "python"))

# the chosen codec (docs/codec_v2.md §5): 16 levels of 1024 codes, 8,8,4,4 Lloyd-Max grids
# over PCA components 0-47 with 4 interleaved refinements of the strongest 16 components
LEVELS = (1, 2, 4, 8, 16)
CODEC = dict(grid=(8, 8, 4, 4), refine=4, refine_grid=(8, 8, 4, 4))


def log(msg: str) -> None:
    print(f"[v2] {msg}", file=sys.stderr, flush=True)


def cmd_codec(args) -> int:
    from codec import read_manifest
    from codec_v2 import V1_PATH, load_features

    from codecspec.codec import Codec
    from codecspec.codec.data import save_codes
    from codecspec.families.v2.codec import CodecV2, V2Config
    from codecspec.progress import bar

    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    out = work / "codec"
    out.mkdir(parents=True, exist_ok=True)
    rows = read_manifest(corpus)
    spectral = Codec.load(V1_PATH).cfg
    feats = load_features(rows, corpus, out / "features.npz", spectral)
    train = np.concatenate([f for f, r in zip(feats, rows) if r["split"] == "train"])
    t0 = time.monotonic()
    cfg = V2Config.blocks(**CODEC)
    codec = CodecV2.fit(train, cfg, spectral)
    codec.save(out / "codec_v2.npz")
    codec = CodecV2.load(out / "codec_v2.npz")  # encode with what ships (float16 basis)
    codes = [codec.encode_features(f) for f in bar(feats, desc="encode")]
    save_codes(
        out / "codes.npz",
        [r["id"] for r in rows],
        [r["split"] for r in rows],
        codes,
        codec.frame_rate,
    )
    test = [f for f, r in zip(feats, rows) if r["split"] == "test"]
    te = np.concatenate(test)
    tc = np.concatenate([c for c, r in zip(codes, rows) if r["split"] == "test"])
    err = [float(((codec.decode_features(tc[:, :k]) - te) ** 2).sum(1).mean()) for k in LEVELS]
    var = float(te.var(0).sum())
    rep = dict(
        config=cfg.to_json(),
        level_sizes=list(cfg.level_sizes),
        heldout_unexplained={k: round(e / var, 4) for k, e in zip(LEVELS, err)},
        seconds=round(time.monotonic() - t0, 1),
    )
    (out / "codec.json").write_text(json.dumps(rep, indent=1))
    log(f"codec v2 {cfg.level_sizes[0]} codes x {cfg.n_levels}: {rep['heldout_unexplained']}")
    return 0


def cmd_train(args) -> int:
    import torch

    from codecspec.families.v2.torch_model import V2TemporalConfig
    from codecspec.families.v2.train import train_v2
    from codecspec.train.common import reference_depth_config
    from codecspec.train.dataset import TTSDataset

    torch.set_num_threads(args.threads)
    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    codes = work / "codec" / "codes.npz"
    if not codes.is_file():
        raise SystemExit(f"no {codes}: run `v2.py codec` first")
    # a warm start keeps the folder's phoneme ids: its frontend reads the corpus (a symbol the
    # folder never saw becomes <unk>, as it does at synthesis)
    frontend = _folder_frontend(args.init_from) if args.init_from else None
    train = TTSDataset(corpus, codes, "train", frontend=frontend)
    val = TTSDataset(corpus, codes, "test", frontend=train.frontend)
    f = train.frontend
    tcfg = V2TemporalConfig(
        vocab_size=len(f.vocab),
        num_languages=len(f.languages),
        num_speakers=len(f.speakers),
        window=args.window,
        draft_layers=args.draft_layers,
        ce_draft=args.ce_draft,
        aligned=getattr(args, "aligned", False),
    )
    dcfg = reference_depth_config(1024)
    if args.init_from:  # a warm start is the folder's model: its shapes (stop_hidden, ...)
        tcfg, dcfg = _folder_configs(args.init_from, args.ce_draft)
    log(f"train {train.stats()['frames']} frames, held-out {val.stats()['frames']} frames")
    _, curves = train_v2(
        train,
        val,
        tcfg,
        dcfg,
        Path(args.out).expanduser() if args.out else work / "train",
        minutes=args.minutes,
        max_steps=args.max_steps,
        lr=args.lr,
        distill=args.distill,
        rate_jitter=args.rate_jitter,
        seed=args.seed,
        depth_frames=args.depth_frames,
        warmup=args.warmup,
        init_from=Path(args.init_from).expanduser() if args.init_from else None,
        reexport=_ship_export,
        init_other_corpus=args.init_other_corpus,
        freeze_depth=args.freeze_depth,
    )
    log(f"done: step {curves.steps[-1]}; held-out {curves.val[-1]}")
    return 0


def _folder_configs(folder, ce_draft: bool):
    """(temporal, depth) configurations of a shipped model folder (`ce_draft`: the run's own
    choice, a module the folder never holds)."""
    from codecspec.families.v2.torch_model import V2TemporalConfig
    from codecspec.graphs.config import DepthDecoderConfig

    meta = json.loads((Path(folder).expanduser() / "model.json").read_text())
    tcfg = V2TemporalConfig(**{**meta["temporal_config"], "ce_draft": ce_draft})
    return tcfg, DepthDecoderConfig.from_dict(meta["depth_config"])


def _folder_frontend(folder):
    """The phoneme, language and speaker tables a shipped model folder was trained with."""
    from codecspec.frontend.text import Frontend

    meta = json.loads((Path(folder).expanduser() / "model.json").read_text())
    return Frontend.from_dict(meta["frontend"])


def _ship_export(model, out: Path) -> None:
    """The ship step's export of a V2Model's graphs (what `train --init-from` must reproduce
    from the weights it read out of a shipped folder)."""
    from ship import export_graphs

    from codecspec.families.v2.torch_model import export_onnx

    export_graphs(model, out, export_temporal=export_onnx)


# ---------------------------------------------------------------------- ship
SHIP_DIR = ROOT / "models" / "v2"
THETAS = (0.99, 0.98, 0.95, 0.9, 0.8)


def load_checkpoint(path: Path):
    """(V2Model in eval mode, checkpoint dict); the draft with the higher held-out temporal
    acceptance (distilled or cross-entropy-only) becomes the exported `draft`."""
    import torch

    from codecspec.families.v2.torch_model import V2Model, V2TemporalConfig
    from codecspec.graphs.config import DepthDecoderConfig

    ck = torch.load(path, map_location="cpu", weights_only=False)
    tcfg = V2TemporalConfig(**ck["temporal_config"])
    model = V2Model(tcfg, DepthDecoderConfig.from_dict(ck["depth_config"]))
    model.load_state_dict(ck["state_dict"])
    val = ck["curves"]["val"][-1]
    ck["draft_choice"] = "distilled"
    if tcfg.ce_draft and val.get("ce_accept", 0.0) > val["accept"]:
        model.temporal.draft.load_state_dict(model.temporal.draft_ce.state_dict())
        ck["draft_choice"] = "cross-entropy"
    return model.eval(), ck


def frozen_frames(
    model,
    corpus: Path,
    work: Path,
    train_frames: int,
    frames: int,
    seed: int,
    prev: int = 0,
    frontend=None,
    phone: int = 0,
):
    """(train, held-out) teacher-forced (h_t, codes) of the corpus's two splits: what a depth
    decoder trains and is judged on with the temporal LM frozen (`prev` > 0: each h_t
    followed by the codes of the `prev` frames before it, `phone` > 0: by the phoneme
    context of the track, see `teacher_forced`; `frontend`: the model's tables, default the
    corpus's own)."""
    from codecspec.train.dataset import TTSDataset

    codes = work / "codec" / "codes.npz"
    train_ds = TTSDataset(corpus, codes, "train", frontend=frontend)
    held_ds = TTSDataset(corpus, codes, "test", frontend=train_ds.frontend)
    train = teacher_forced(model, train_ds, train_frames, seed + 1, prev, phone)
    return train, teacher_forced(model, held_ds, frames, seed, prev, phone)


def teacher_forced(model, ds, max_frames: int, seed: int, prev: int = 0, phone: int = 0):
    """(h_t [N, D], real codes [N, 16]) of held-out utterances, the LM fed their real c0.
    With `prev` > 0 each h_t row is followed by the codes of frames t-1..t-prev ([N, D +
    prev * 16], as floats; the codebook size where the utterance has no such frame); with
    `phone` > 0 by the phoneme ids at the track's phoneme and `phone` either side, then the
    position inside it (`phone_context`)."""
    if prev and phone:
        raise ValueError("prev and phone: one context at a time")
    import torch

    from codecspec.families.v2.train import to_tensors

    hs, codes, total = [], [], 0
    with torch.no_grad():
        for b in ds.batches(8, seed=seed, max_frames=1200):
            t = to_tensors(b)
            h = model.temporal(
                t["phonemes"],
                t["phoneme_lengths"],
                t["language"],
                t["speaker"],
                t["codes"][..., 0],
                t["frames_per_phoneme"],
                t.get("track"),
            )[0]
            m, c = t["frame_mask"], t["codes"]
            if prev:
                h = torch.cat([h, _previous_codes(c, prev, model.depth.c.codebook_size)], -1)
            if phone:
                h = torch.cat([h, phone_context(t["phonemes"], t["track"], phone)], -1)
            hs.append(h[m].numpy())
            codes.append(c[m].numpy())
            total += int(m.sum())
            if total >= max_frames:
                break
    return np.concatenate(hs)[:max_frames], np.concatenate(codes)[:max_frames]


def _previous_codes(codes, frames: int, missing: int):
    """[B, T, frames * G] float: the codes of frames t-1..t-frames, `missing` before the start."""
    import torch

    out = []
    for k in range(1, frames + 1):
        p = torch.full_like(codes, missing)
        p[:, k:] = codes[:, :-k]
        out.append(p)
    return torch.cat(out, -1).float()


PHONE_PAD = 512  # the context's id where the track's neighbour lies outside the phonemes


def phone_context(phonemes, track, width: int):
    """[B, T, 2 * width + 2] float: the ids of the phonemes at floor(u_t) - width ..
    floor(u_t) + width of the phoneme tensor (PHONE_PAD outside it), then u_t - floor(u_t)."""
    import torch

    if int(phonemes.max()) >= PHONE_PAD:
        raise ValueError(f"phoneme ids reach {int(phonemes.max())}: PHONE_PAD is {PHONE_PAD}")
    at = torch.floor(track).long()
    cols = []
    for k in range(-width, width + 1):
        j = at + k
        inside = (j >= 0) & (j < phonemes.shape[1])
        ids = torch.gather(phonemes, 1, j.clamp(0, phonemes.shape[1] - 1))
        cols.append(torch.where(inside, ids, PHONE_PAD).float())
    cols.append((track - at).float())
    return torch.stack(cols, -1)


def onnx_parity(tts, model, ds) -> dict:
    """Max |ORT - torch| of c0 and stop logits, step by step over the ring cache, on the
    longest of the first 40 held-out utterances (past the window, so eviction is covered)."""
    import torch

    from codecspec.families.v2.train import to_tensors

    i = max(range(min(40, len(ds))), key=lambda k: ds[k].frames)
    t = to_tensors(ds.collate([i]))
    with torch.no_grad():
        _, ref, ref_stop, ref_d, _, _ = model.temporal(
            t["phonemes"],
            t["phoneme_lengths"],
            t["language"],
            t["speaker"],
            t["codes"][..., 0],
            t["frames_per_phoneme"],
            t.get("track"),
        )
    enc = tts.encoder.run(
        None,
        {
            "phonemes": t["phonemes"].numpy(),
            "language": t["language"].numpy(),
            "speaker": t["speaker"].numpy(),
        },
    )
    spk = int(t["speaker"][0])
    expected = float(t["frames_per_phoneme"][0]) * (int(t["phoneme_lengths"][0]) - 2)
    if "track" in t:  # v3: the phoneme track is the pace
        expected = t["track"][0].numpy()
    c0 = t["codes"][0, :, 0].numpy()
    worst = {"c0": 0.0, "stop": 0.0, "draft_c0": 0.0}
    for draft in (False, True):
        st = tts.stepper(enc, spk, expected, draft=draft)
        for k in range(len(c0)):
            h, lg, sl = st.step(None if k == 0 else c0[k - 1 : k][None])
            want = (ref_d if draft else ref)[0, k].numpy()
            key = "draft_c0" if draft else "c0"
            worst[key] = max(worst[key], float(np.abs(lg - want).max()))
            if not draft:
                worst["stop"] = max(worst["stop"], float(abs(sl[0] - ref_stop[0, k])))
    worst["frames"] = len(c0)
    worst["window"] = tts.window
    return worst


def row_pace(tts, r: dict, num_phonemes: int):
    """A held-out row's pace: v2's expected length, or v3's track from the row's timing."""
    if not getattr(tts, "aligned", False):
        return tts.expected_frames(num_phonemes, r["language"])
    from codecspec.frontend.aligned import phoneme_track

    starts = [float(t) for _, t in r["events"]]
    return phoneme_track(starts, float(r["end_ms"]), 1000.0 / tts.codec.frame_rate)


class _Recorder:
    """Wraps a V2 stepper for the shared frame loop: steps the draft LM on the same history
    and keeps h_t, c0 and both LMs' logits of every frame."""

    def __init__(self, target, draft):
        self.target, self.draft = target, draft
        self.h, self.lt, self.ld = [], [], []

    def step(self, prev):
        h, lt, st = self.target.step(prev)
        _, ld, _ = self.draft.step(prev)
        self.h.append(h)
        self.lt.append(lt)
        self.ld.append(ld)
        return h, lt, st


def _generate(steps, tts, generator, guard: int) -> tuple:
    """(codes int64 [n, G], stopped) of one utterance, AR: per frame c0 drawn from the step's
    logits, c1.. by the depth loop, then the stop head's Bernoulli draw (the runtime's frame
    law, in its order of draws), each frame fed back, until the stop head fires (its frame
    included) or `guard` frames (the recorder needs each step's outputs, so not the engine's
    loop)."""
    import codecspec as cs

    prev, codes = None, []
    for _ in range(guard):
        h, logits, stop_logit = steps.step(prev)
        c0 = cs.sample(logits, tts.params, generator)
        frame = tts.depth.decode_frame(h, c0, generator, "ar")[None].astype(np.int64)
        stop = cs.sample_stop(np.asarray(stop_logit, np.float32), generator)
        codes.append(frame[0])
        prev = frame
        if stop[0]:
            return np.stack(codes), True
    return np.stack(codes), False


def free_generation(tts, rows, seed: int) -> dict:
    """AR synthesis of held-out texts (their IPA, language and voice): per frame h_t, the codes
    and both LMs' c0 logits; per text frames, stop/guard and espeak-ng's frame count."""
    import codecspec as cs
    from codecspec.progress import bar

    rec = dict(h=[], codes=[], lt=[], ld=[], frames=[], ref_frames=[], stopped=[])
    for i, r in enumerate(bar(rows, desc="free generation")):
        _, ids, _, spk, enc = tts.encode_text(None, r["phonemes"], r["language"], r["variant"])
        expected = row_pace(tts, r, len(ids) - 2)
        steps = _Recorder(tts.stepper(enc, spk, expected), tts.stepper(enc, spk, expected, True))
        guard = tts.max_frames_for(expected)
        codes, stopped = _generate(steps, tts, cs.Generator(seed + i), guard)
        n = len(codes)
        rec["h"].append(np.stack(steps.h[:n]))
        rec["lt"].append(np.stack(steps.lt[:n]))
        rec["ld"].append(np.stack(steps.ld[:n]))
        rec["codes"].append(codes)
        rec["frames"].append(n)
        rec["ref_frames"].append(int(np.ceil(r["num_samples"] / tts.codec.spectral.frame_hop)))
        rec["stopped"].append(stopped)
    return rec


def measure_acceptance(out: Path, tts, free, tf_h, tf_codes, theta: float) -> dict:
    """The report's "acceptance" block and the full tables behind it."""
    from codecspec.calibrate.acceptance import (
        depth_acceptance,
        group_partition,
        temporal_acceptance,
    )
    from codecspec.calibrate.data import read_heads, teacher_forced_hidden
    from codecspec.runtime.depth_graph import DepthGraph

    graph = DepthGraph(out / "depth.onnx", "cpu")
    heads = read_heads(out / "depth.onnx")
    offsets = np.load(out / "offsets.npy")
    emb = [tts.codec.embeddings(k) for k in range(tts.codec.n_levels)]
    res = {}
    h, codes = np.concatenate(free["h"]), np.concatenate(free["codes"])
    for name, (hh, cc) in {"free": (h, codes), "teacher_forced": (tf_h, tf_codes)}.items():
        z = teacher_forced_hidden(graph, hh, cc[:, 0], cc, progress=False)
        res[name] = {
            "offsets": depth_acceptance(z, cc, heads, offsets, emb, THETAS),
            "head_reuse": depth_acceptance(z, cc, heads, 0 * offsets, emb, THETAS),
        }
    lt, ld = np.concatenate(free["lt"]), np.concatenate(free["ld"])
    c0_in = np.load(out / "c0_embeddings.npy").astype(np.float32)
    temporal = {}
    for t in THETAS:
        temporal[str(t)] = {
            "c0_input_embedding": temporal_acceptance(
                lt, ld, tts.params, group_partition(c0_in, t)
            ),
            "codec": temporal_acceptance(lt, ld, tts.params, group_partition(emb[0], t)),
        }
    fr, ref = np.array(free["frames"]), np.array(free["ref_frames"])
    free_off = res["free"]["offsets"]
    # temporal PCG's c0 groups: the space whose groups accept more at θ (a space of
    # singleton groups accepts exactly what exact acceptance does, so PCG would be SD)
    at = temporal[str(theta)]
    space = max(("c0_input_embedding", "codec"), key=lambda s: at[s]["group"])
    block = {
        "theta": theta,
        "depth_exact": free_off["exact"],
        "depth_group": free_off["group"][str(theta)],
        "temporal_exact": at["codec"]["exact"],
        "temporal_group": at[space]["group"],
        "c0_space": "codec" if space == "codec" else "embedding",
    }
    stop = {
        "texts": len(fr),
        "stopped": int(np.sum(free["stopped"])),
        "hit_guard": int(len(fr) - np.sum(free["stopped"])),
        "length_error_mean": float(np.mean((fr - ref) / ref)),
        "length_error_abs_mean": float(np.mean(np.abs(fr - ref) / ref)),
    }
    return {"acceptance": block, "depth": res, "temporal": temporal, "stop_head": stop}


def pcg_tree(out: Path, tts, free, calib, theta: float) -> dict:
    """The depth tree for PCG verification: group-level acceptance a_g[d][r] of the offsets'
    drafts on the free-generation frames, the same device latency profile and budget choice
    as the exact tree; written to tree_pcg.json."""
    from codecspec.calibrate.acceptance import group_acceptance_matrix
    from codecspec.calibrate.data import read_heads, teacher_forced_hidden
    from codecspec.calibrate.device import choose_budget
    from codecspec.runtime.depth_graph import DepthGraph

    h, codes = np.concatenate(free["h"]), np.concatenate(free["codes"])
    z = teacher_forced_hidden(DepthGraph(out / "depth.onnx", "cpu"), h, codes[:, 0], codes)
    groups = tts.depth_groups(theta)
    acc = group_acceptance_matrix(
        z, codes, read_heads(out / "depth.onnx"), np.load(out / "offsets.npy"), groups
    )
    budget, rows = choose_budget(acc, calib.latency, [r.budget for r in calib.rows])
    best = next(r for r in rows if r.budget == budget)
    (out / "tree_pcg.json").write_text(best.tree.to_json())
    return {
        "theta": theta,
        "budget": budget,
        "top1": acc.top(1).tolist(),
        "simulated_tokens_per_call": best.simulated_tokens_per_call,
        "speedup_simulated": best.speedup_simulated,
        "rows": [
            {
                "budget": r.budget,
                "tokens_per_call": r.simulated_tokens_per_call,
                "speedup": r.speedup_simulated,
            }
            for r in rows
        ],
    }


def c0_input_embeddings(model) -> np.ndarray:
    """The target LM's c0 input-embedding rows (unit length, start token dropped): the group
    space of the paper (PCG over the target's input embeddings)."""
    e = model.temporal.c0_in.weight.detach().numpy()[:-1].astype(np.float32)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def speech_distance(v2, rows, corpus: Path, seed: int) -> dict:
    """DTW log-mel distance to espeak-ng's rendering (the corpus wav) of each held-out text,
    for v2 and the shipped v1, and the length error of both."""
    from codecspec.codec.audio import read_wav
    from codecspec.evaluation.quality import dtw_log_mel_distance, mean_ci
    from codecspec.families.reference.model import ReferenceTTS
    from codecspec.progress import bar

    v1 = ReferenceTTS()
    cfg = v1.codec.cfg
    dist = {"v1": [], "v2": []}
    lengths = {"v1": [], "v2": []}
    for i, r in enumerate(bar(rows, desc="speech distance")):
        ref, _ = read_wav(str(corpus / r["path"]))
        for name, m in (("v1", v1), ("v2", v2)):
            aligned = getattr(m, "aligned", False)  # v3 reads espeak-ng's timing of the text
            s = m.generate(
                r["text"] if aligned else "",
                phonemes=None if aligned else r["phonemes"],
                language=r["language"],
                speaker=r["variant"],
                mode="ar",
                seed=seed + i,
            )
            dist[name].append(dtw_log_mel_distance(ref, s.wav, cfg))
            lengths[name].append((len(s.wav) - len(ref)) / len(ref))
    out = {}
    for k in dist:
        m, ci = mean_ci(dist[k])
        out[k] = {
            "mean_db": m,
            "ci95_db": ci,
            "per_text": dist[k],
            "length_error_mean": float(np.mean(lengths[k])),
            "length_error_abs_mean": float(np.mean(np.abs(lengths[k]))),
        }
    diff = np.array(dist["v2"]) - np.array(dist["v1"])
    out["v2_minus_v1"] = dict(zip(("mean_db", "ci95_db"), mean_ci(diff)))
    return out


def export_folder(args, out: Path):
    """The runnable part of a shipped folder from the checkpoint: graphs, codec, model.json.
    Returns (model, checkpoint, meta, sizes, train set, held-out set)."""
    import shutil

    from ship import (
        SAMPLING,
        V3_SAMPLING,
        V3_SAMPLING_CHOICE,
        VOICES,
        export_graphs,
        frames_per_phoneme,
    )

    from codecspec.families.v2.model import V2_FORMAT
    from codecspec.families.v2.torch_model import export_onnx
    from codecspec.frontend.text import Frontend
    from codecspec.train.dataset import TTSDataset

    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    src = getattr(args, "checkpoint", None)
    model, ck = load_checkpoint(Path(src).expanduser() if src else work / "train" / "ckpt.pt")
    codes = work / "codec" / "codes.npz"
    aligned = bool(getattr(args, "aligned", False))
    codec_file = "codec.npz" if aligned else "codec_v2.npz"
    codec_src = ROOT / "models/reference/codec.npz" if aligned else None
    shutil.copy(codec_src or work / "codec" / "codec_v2.npz", out / codec_file)
    # a checkpoint made from a folder keeps that folder's phoneme ids (`v3.py checkpoint`)
    frontend = Frontend.from_dict(ck["frontend"]) if "frontend" in ck else None
    train = TTSDataset(corpus, codes, "train", frontend=frontend)
    held = TTSDataset(corpus, codes, "test", frontend=train.frontend)
    log(f"exporting graphs (draft: {ck['draft_choice']})")
    sizes = export_graphs(model, out, export_temporal=export_onnx)
    np.save(out / "c0_embeddings.npy", c0_input_embeddings(model).astype(np.float16))
    sizes["c0_embeddings.npy"] = (out / "c0_embeddings.npy").stat().st_size
    params_count = {
        "temporal": sum(
            p.numel() for n, p in model.temporal.named_parameters() if not n.startswith("draft")
        ),
        "draft_temporal": sum(p.numel() for p in model.temporal.draft.parameters()),
        "depth": sum(p.numel() for p in model.depth.parameters()),
    }
    meta = {
        "format": V2_FORMAT,
        "frontend": train.frontend.to_dict(),
        "sampling": SAMPLING,
        "voices": VOICES,
        "default_speaker": train.frontend.speakers.names[0],
        "frames_per_phoneme": frames_per_phoneme(train),
        "max_pace": 2.0,
        "temporal_config": ck["temporal_config"],
        "depth_config": ck["depth_config"],
        "parameters": params_count,
        "draft_choice": ck["draft_choice"],
    }
    if aligned:  # v3: espeak-ng's phoneme timing conditions every frame, v1's codec speaks
        meta.update(
            conditioning="phoneme_track",
            codec_file=codec_file,
            voices={k: v for k, v in VOICES.items() if k in train.frontend.languages},
            espeak_rate=170,
            espeak_pitch=50,
            sampling=V3_SAMPLING,
            sampling_choice=V3_SAMPLING_CHOICE,
        )
    (out / "model.json").write_text(json.dumps(meta, indent=1))
    return model, ck, meta, sizes, train, held


def _as_recorded(path: Path) -> Path:
    """`path` relative to the working directory when it lies under it: calibration, the
    ablation and the report record the paths they are given, and a shipped folder must not
    carry the absolute path of the checkout it was built in."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def cmd_ship(args) -> int:
    import shutil

    from ship import depth_entropy

    from codecspec.calibrate.device import calibrate
    from codecspec.codec.data import load_manifest
    from codecspec.decode.depth import stage_params
    from codecspec.families.v2.model import V2TTS
    from codecspec.pipeline.depth_bench import bench_depth_loop
    from codecspec.train.ablate import ablate

    t0 = time.monotonic()
    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    out = _as_recorded(Path(args.out))
    model, ck, meta, sizes, train, held = export_folder(args, out)
    params_count = meta["parameters"]
    tts = V2TTS(out, provider="cpu", threads=args.threads)
    parity = onnx_parity(tts, model, held)
    log(f"ORT vs torch: {parity}")
    meta["onnx_parity_max_abs"] = parity
    (out / "model.json").write_text(json.dumps(meta, indent=1))

    hiddens, real = teacher_forced(model, held, args.frames, args.seed)
    hiddens = hiddens.astype(np.float16).astype(np.float32)  # what frames.npz ships
    c0s = real[:, 0]
    n_ship = min(args.ship_frames, len(c0s))
    np.savez_compressed(
        out / "frames.npz", hiddens=hiddens[:n_ship].astype(np.float16), c0s=c0s[:n_ship]
    )
    log("calibrating the depth loop (offsets, acceptance, latency, tree)")
    params = stage_params(meta)  # the folder's own depth law: the loop calibrated here
    calib = calibrate(
        out / "depth.onnx",
        out / "calibration",
        inputs=(hiddens, c0s),
        frames=len(c0s),
        budgets=(1, 2, 4, 8, 16, 32),
        params=params,
        threads=args.threads,
        seed=args.seed,
        save_beside_model=False,
    )
    for f in ("offsets.npy", "tree.json", "device_profile.json"):
        shutil.copy(out / "calibration" / f, out / f)
    if args.ablation:
        log("ablation: head reuse vs offsets vs Medusa heads")
        ablate(
            out / "depth.onnx",
            out / "ablation",
            inputs=(hiddens, c0s),
            frames=len(c0s),
            params=params,
            seed=args.seed,
            threads=args.threads,
        )
    entropy = depth_entropy(out, hiddens, c0s, real)
    tts = V2TTS(out, provider="cpu", threads=args.threads)  # with offsets and tree now
    rows = [r for r in load_manifest(corpus) if r["split"] == "test"]
    rows = sorted(rows, key=lambda r: (r["id"][-2:], r["id"]))  # one rendition per text first
    log("free generation on held-out texts: acceptance and the stop head")
    free = free_generation(tts, rows[: args.texts], args.seed)
    acc = measure_acceptance(out, tts, free, hiddens, real, args.theta)
    log(f"acceptance {acc['acceptance']}; stop head {acc['stop_head']}")
    acc["pcg_tree"] = pcg_tree(out, tts, free, calib, args.theta)
    meta["pcg_theta"] = args.theta
    meta["pcg_c0_space"] = acc["acceptance"]["c0_space"]  # V2TTS.pcg_c0_groups reads it
    (out / "model.json").write_text(json.dumps(meta, indent=1))
    log(f"PCG depth tree at θ {args.theta}: {acc['pcg_tree']}")
    dist = None
    if args.distance:
        log("speech distance to espeak-ng: v1 vs this model")
        dist = speech_distance(tts, rows[: args.texts], corpus, args.seed)
        log(f"v1 {dist['v1']['mean_db']:.2f} dB, this model {dist['v2']['mean_db']:.2f} dB")
    bench = bench_depth_loop(out, 300, seed=args.seed, provider="cpu", threads=args.threads)
    codec_rep = work / "codec_report" / "report.json"
    report = {
        "sizes": sizes,
        "train": {
            k: ck[k]
            for k in ("step", "seconds", "train_args", "draft_choice", "stop_refit", "depth_passes")
            if k in ck
        }
        | {"curves": ck["curves"], "parameters": params_count},
        "entropy": entropy,
        "calibration": calib.profile,
        "ablation": json.loads((out / "ablation" / "ablation.json").read_text())
        if args.ablation
        else None,
        "bench": bench,
        "codec": json.loads((work / "codec" / "codec.json").read_text())
        if (work / "codec" / "codec.json").is_file()
        else {"file": meta.get("codec_file"), "source": "the v1 reference codec"},
        "codec_report": json.loads(codec_rep.read_text()) if codec_rep.is_file() else None,
        "speech_distance": dist,
        "seconds": round(time.monotonic() - t0, 1),
    } | acc
    (out / "report.json").write_text(json.dumps(report))
    log(f"done in {report['seconds'] / 60:.1f} min")
    return 0


# ---------------------------------------------------------------------- shared depth decoder
def _export_positional(depth_model, out: Path) -> dict:
    """depth.onnx (float16 storage) + depth.heads.npy as `ship.export_graphs` writes them."""
    from codecspec.graphs import build_depth_graph, save_model
    from codecspec.graphs.storage import round_bf16_exact, store_float16
    from codecspec.train.networks import depth_weights

    out.mkdir(parents=True, exist_ok=True)
    w = depth_weights(depth_model)
    w["heads"] = round_bf16_exact(w["heads"], "heads")
    graph = store_float16(build_depth_graph(depth_model.c, w, variant="cpu", heads="hidden"))
    save_model(graph, out / "depth.onnx")
    np.save(out / "depth.heads.npy", w["heads"].astype(np.float16))
    return {f: (out / f).stat().st_size for f in ("depth.onnx", "depth.heads.npy")}


def _trained_depth(kind: str, cache: Path, steps: int, key: dict, train, held, args):
    """A depth decoder trained on frozen h_t for `steps` steps (reused from `cache` when the
    checkpoint step, budget and seed match)."""
    import torch

    from codecspec.train.common import reference_depth_config
    from codecspec.train.depth_train import train_depth
    from codecspec.train.networks import DepthModel, SharedDepthModel

    torch.manual_seed(args.seed)
    if kind == "shared":
        model = SharedDepthModel(
            reference_depth_config(1024, num_layers=args.shared_layers),
            level_embeddings=args.level_embeddings,
        )
    else:
        model = DepthModel(reference_depth_config(1024))
    key = dict(key, kind=kind, steps=steps, level_embeddings=args.level_embeddings)
    path = cache / f"{kind}.pt"
    if path.is_file():
        ck = torch.load(path, map_location="cpu", weights_only=False)
        if ck.get("key") == key:
            model.load_state_dict(ck["state_dict"])
            log(f"{kind}: reusing {path} ({ck['train']['seconds']} s of training)")
            return model.eval(), ck["train"]
    log(f"training the {kind} depth decoder: {steps} steps of {args.batch} frames")
    info = train_depth(
        model, *train, steps=steps, batch=args.batch, lr=args.lr, seed=args.seed, progress=True
    )
    info["train_loss_last50"] = float(np.mean(info.pop("train_loss")[-50:]))
    cache.mkdir(parents=True, exist_ok=True)
    torch.save({"key": key, "state_dict": model.state_dict(), "train": info}, path)
    return model.eval(), info


def _step_seconds(args, train) -> float:
    """Seconds per training step of the shared decoder on this machine (3 timed steps)."""
    import torch

    from codecspec.train.common import reference_depth_config
    from codecspec.train.depth_train import train_depth
    from codecspec.train.networks import SharedDepthModel

    m = SharedDepthModel(reference_depth_config(1024, num_layers=args.shared_layers))
    train_depth(m, *train, steps=1, batch=args.batch)  # warm-up
    t0 = time.monotonic()
    train_depth(m, *train, steps=3, batch=args.batch)
    del m, torch
    return (time.monotonic() - t0) / 3


def _measure_decoder(name, make_decoder, graph_path, heads, calib_dir, hiddens, c0s, args):
    """Calibrate into `calib_dir` (None: skip) and bench one decoder."""
    from ship import SAMPLING

    import codecspec as cs
    from codecspec.calibrate.device import calibrate
    from codecspec.pipeline.depth_bench import bench_decoder

    params = cs.SamplingParams(**SAMPLING)
    profile = None
    if calib_dir is not None:
        log(f"{name}: calibrating (offsets, acceptance, latency, tree)")
        res = calibrate(
            graph_path,
            calib_dir,
            inputs=(hiddens, c0s),
            frames=args.calib_frames,
            budgets=(1, 2, 4, 8, 16, 32),
            params=params,
            threads=args.threads,
            seed=args.seed,
            heads=heads,
            save_beside_model=False,
            plots=False,
            progress=False,
        )
        profile = res.profile
    if make_decoder is None:
        return profile, None
    dec = make_decoder(params)
    log(f"{name}: bench, {args.bench_frames} frames AR vs spec")
    bench = bench_decoder(
        dec, hiddens, c0s, args.bench_frames, seed=args.seed, params=params, progress=False
    )
    return profile, bench


def export_shared(shared, out: Path, cache: Path, held, args) -> tuple[dict, dict, dict, int]:
    """Trained SharedDepthModel `shared` into model folder `out`: depth_shared.npz (the
    shared weights once; the graph is built from them at load), its offsets, tree and device
    profile calibrated on the held-out frames `held`, then benched AR vs speculative.
    Returns (report fields, calibration profile, bench, bytes of depth_shared.npz)."""
    import shutil

    from codecspec.decode.shared_depth import (
        SHARED_FILE,
        SHARED_OFFSETS,
        SHARED_PROFILE,
        SHARED_TREE,
        shared_decoder_from_dir,
    )
    from codecspec.graphs import save_model
    from codecspec.graphs.shared import build_shared_graph, load_shared, save_shared

    hiddens = held[0].astype(np.float16).astype(np.float32)  # as frames.npz ships them
    real = held[1]
    c0s = real[:, 0]
    arrays = shared.shared_arrays()
    save_shared(out / SHARED_FILE, shared.c, arrays, **shared.save_options())
    spec, arrays = load_shared(out / SHARED_FILE)
    t1 = time.monotonic()
    graph, heads = build_shared_graph(spec, arrays, codebooks=shared.codebooks)
    build_s = time.monotonic() - t1
    sgraph = cache / "shared" / "depth_shared.onnx"  # calibration input only, not shipped
    save_model(graph, sgraph)
    np.save(sgraph.with_name("depth_shared.heads.npy"), heads.astype(np.float16))
    ce_onnx = _graph_ce(sgraph, heads, hiddens, real, args.threads)
    if not (out / "frames.npz").is_file():  # what `codecspec bench` decodes
        n = min(1024, len(c0s))
        np.savez_compressed(out / "frames.npz", hiddens=held[0][:n].astype(np.float16), c0s=c0s[:n])
    calib = cache / "shared" / "calibration"
    prof, _ = _measure_decoder("shared", None, sgraph, heads, calib, hiddens, c0s, args)
    for src, dst in (
        ("offsets.npy", SHARED_OFFSETS),
        ("tree.json", SHARED_TREE),
        ("device_profile.json", SHARED_PROFILE),
    ):
        shutil.copy(calib / src, out / dst)

    def open_shared(p):
        return shared_decoder_from_dir(out, params=p, provider="cpu", threads=args.threads)

    _, bench = _measure_decoder("shared", open_shared, None, None, None, hiddens, c0s, args)
    fields = {
        "graph_build_seconds": round(build_s, 3),
        "shared_heldout_ce_onnx_per_level": [round(float(x), 4) for x in ce_onnx],
    }
    return fields, prof, bench, (out / SHARED_FILE).stat().st_size


def cmd_shared_depth(args) -> int:
    """Train the shared depth decoder (and a per-position one on the same frozen h_t and
    budget), export it into the model folder, calibrate, and compare side by side with the
    per-position decoders (the jointly trained one `ship` ships, and the same-budget one)."""
    import shutil
    import tempfile

    import torch

    import codecspec as cs
    from codecspec.decode import DepthDecoder
    from codecspec.train.depth_train import heldout_cross_entropy

    torch.set_num_threads(args.threads)
    t0 = time.monotonic()
    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    out = Path(args.model_dir)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache).expanduser() if args.cache else work / "shared_depth"
    cache.mkdir(parents=True, exist_ok=True)
    src = Path(args.checkpoint).expanduser() if args.checkpoint else work / "train" / "ckpt.pt"
    with tempfile.TemporaryDirectory() as tmp:  # the checkpoint is rewritten while training
        shutil.copy(src, Path(tmp) / "ckpt.pt")
        model, ck = load_checkpoint(Path(tmp) / "ckpt.pt")
    log(f"teacher-forced h_t of checkpoint step {ck.get('step')}")
    train, held = frozen_frames(model, corpus, work, args.train_frames, args.frames, args.seed)
    joint = model.depth.eval()
    del model

    steps = args.steps or max(1, int(args.minutes * 60 / _step_seconds(args, train)))
    key = {"ckpt_step": ck.get("step"), "train_frames": len(train[0]), "seed": args.seed}
    key |= {"batch": args.batch, "lr": args.lr, "shared_layers": args.shared_layers}
    shared, shared_info = _trained_depth("shared", cache, steps, key, train, held, args)
    positional, pos_info = _trained_depth("positional", cache, steps, key, train, held, args)

    # frames as frames.npz ships them (float16 h_t)
    hiddens = held[0].astype(np.float16).astype(np.float32)
    real = held[1]
    c0s = real[:, 0]
    ce = {
        "shared": heldout_cross_entropy(shared, hiddens, real),
        "positional_same_budget": heldout_cross_entropy(positional, hiddens, real),
        "positional_joint": heldout_cross_entropy(joint, hiddens, real),
    }

    fields, prof, bench, nbytes = export_shared(shared, out, cache, held, args)
    report = {
        "checkpoint": str(src),
        "checkpoint_step": ck.get("step"),
        "train_frames": len(train[0]),
        "heldout_frames": len(real),
        "budget": {"steps": steps, "batch": args.batch, "minutes_requested": args.minutes},
        **fields,
    }
    rows = {}
    rows["shared"] = _row(shared, shared_info, nbytes, ce["shared"], prof, bench)

    shipped = ("depth.onnx", "depth.heads.npy", "offsets.npy", "tree.json", "device_profile.json")
    for name, m, info in (
        ("positional_joint", joint, {"note": "trained jointly with the temporal LM"}),
        ("positional_same_budget", positional, pos_info),
    ):
        if name == "positional_joint" and all((out / f).is_file() for f in shipped):
            d, calib = out, None  # the folder's own (shipped) per-position decoder
            prof = json.loads((out / "device_profile.json").read_text())
        else:
            d, calib = cache / name, cache / name / "calibration"
            _export_positional(m, d)
        nbytes = sum((d / f).stat().st_size for f in ("depth.onnx", "depth.heads.npy"))

        def open_positional(p, d=d, calib=calib):
            kw = {}
            if calib is not None:
                kw["offsets"] = np.load(calib / "offsets.npy")
                kw["tree"] = cs.DraftTree.from_json((calib / "tree.json").read_text())
            return DepthDecoder.from_dir(d, params=p, provider="cpu", threads=args.threads, **kw)

        if calib is not None:
            prof, _ = _measure_decoder(
                name, None, d / "depth.onnx", None, calib, hiddens, c0s, args
            )
        _, bench = _measure_decoder(name, open_positional, None, None, None, hiddens, c0s, args)
        rows[name] = _row(m, info, nbytes, ce[name], prof, bench)
    report["decoders"] = rows
    sh, pj, pb = rows["shared"], rows["positional_joint"], rows["positional_same_budget"]
    report["ratios"] = {
        "parameters_shared_over_positional": sh["parameters"] / pj["parameters"],
        "bytes_shared_over_positional": sh["bytes"] / pj["bytes"],
        "ce_shared_over_same_budget": sh["heldout_ce_mean"] / pb["heldout_ce_mean"],
        "ce_shared_over_joint": sh["heldout_ce_mean"] / pj["heldout_ce_mean"],
        "tokens_per_call_shared_over_same_budget": sh["tokens_per_call"] / pb["tokens_per_call"],
    }
    report["seconds"] = round(time.monotonic() - t0, 1)
    (out / "shared_depth_report.json").write_text(json.dumps(report, indent=1))
    log(f"side by side -> {out / 'shared_depth_report.json'}: {report['ratios']}")
    return 0


def _row(model, info, nbytes, ce_levels, profile, bench) -> dict:
    from codecspec.train.depth_train import count_parameters

    prof = profile or {}
    return {
        "parameters": count_parameters(model),
        "bytes": int(nbytes),
        "train": info,
        "heldout_ce_per_level": [round(float(x), 4) for x in ce_levels],
        "heldout_ce_mean": float(np.mean(ce_levels)),
        "tokens_per_call_simulated": prof.get("simulated_tokens_per_call"),
        "speedup_simulated": prof.get("simulated_speedup"),
        "chosen_budget": prof.get("chosen_budget"),
        "tree_nodes": bench["tree_nodes"],
        "tokens_per_call": bench["tokens_per_call"],
        "speedup": bench["speedup"],
        "ar_ms_per_frame": bench["ar_ms_per_frame"],
        "spec_ms_per_frame": bench["spec_ms_per_frame"],
        "ideal_speedup": bench["ideal_speedup"],
        "fidelity_min_p": bench["fidelity_min_p"],
    }


def _graph_ce(graph, heads, hiddens, real, threads: int) -> np.ndarray:
    """Held-out CE per level of an ONNX depth graph with host heads (teacher-forced).
    `threads`: the run's own (the process has one onnxruntime pool, sized by its first
    session: a pool of 1 made here failed every later session of a --threads 2 run)."""
    from codecspec.calibrate.data import teacher_forced_hidden
    from codecspec.runtime.depth_graph import DepthGraph

    g = DepthGraph(graph, "cpu", threads)
    z = teacher_forced_hidden(g, hiddens, real[:, 0], real, progress=False)
    ce = []
    for lvl in range(heads.shape[0]):
        lg = z[:, lvl + 1] @ heads[lvl].T
        lg = lg - lg.max(1, keepdims=True)
        lse = np.log(np.exp(lg).sum(1))
        ce.append(float(np.mean(lse - lg[np.arange(len(lg)), real[:, lvl + 1]])))
    return np.array(ce)


def add_train_args(t) -> None:
    """The `train` options (shared with the v3 recipe)."""
    t.add_argument("--out", default=None, help="checkpoint folder (default: <work>/train)")
    t.add_argument("--minutes", type=float, default=70.0, help="training time in total")
    t.add_argument("--max-steps", type=int, default=None)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--window", type=int, default=64, help="self-attention window (frames)")
    t.add_argument("--draft-layers", type=int, default=1)
    t.add_argument(
        "--ce-draft",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train a cross-entropy-only draft beside the distilled one (the ablation)",
    )
    t.add_argument("--distill", type=float, default=0.5, help="draft loss: KL weight vs CE")
    t.add_argument("--rate-jitter", type=float, default=0.15, help="log-normal sigma of r")
    t.add_argument("--depth-frames", type=int, default=384)
    t.add_argument("--lr", type=float, default=1.5e-3, help="peak learning rate")
    t.add_argument("--warmup", type=float, default=0.04, help="warm-up share of the schedule")
    t.add_argument(
        "--init-from",
        default=None,
        metavar="DIR",
        help="a fresh run starts from this shipped model folder's weights (checked: its "
        "re-export must reproduce the folder, its held-out losses the folder's run's); "
        "a run with a checkpoint resumes that instead",
    )
    t.add_argument(
        "--init-other-corpus",
        action="store_true",
        help="with --init-from: the corpus is not the one the folder was trained on, so its "
        "held-out losses are reported at step 0, not compared with the folder's run",
    )
    t.add_argument(
        "--freeze-depth",
        action="store_true",
        help="keep the depth decoder's weights as they start (a warm start's depth decoder, "
        "trained further alone, is kept); its loss still shapes the temporal LM",
    )


def add_ship_args(s, ship_dir) -> None:
    """The `ship` options (shared with the v3 recipe)."""
    s.add_argument("--out", default=str(ship_dir))
    s.add_argument("--checkpoint", default=None, help="default: <work>/train/ckpt.pt")
    s.add_argument("--frames", type=int, default=4096, help="held-out frames for calibration")
    s.add_argument("--ship-frames", type=int, default=1024, help="frames kept in frames.npz")
    s.add_argument("--texts", type=int, default=50, help="held-out texts generated")
    s.add_argument("--theta", type=float, default=0.95, help="θ of the acceptance block")
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument(
        "--ablation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="head reuse vs offsets vs Medusa heads (trains Medusa heads: the longest step)",
    )
    s.add_argument(
        "--distance",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="DTW log-mel distance to espeak-ng, beside v1 (the old secondary quality figure)",
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus")
    ap.add_argument("--work", default="~/.cache/codecspec/v2", help="codec, checkpoints")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("codec", help="fit codec v2 and encode the corpus")
    c.set_defaults(fn=cmd_codec)
    t = sub.add_parser("train", help="train (or resume) temporal LM + draft + depth decoder")
    add_train_args(t)
    t.set_defaults(fn=cmd_train)
    s = sub.add_parser("ship", help="export, calibrate, measure: the shipped model folder")
    add_ship_args(s, SHIP_DIR)
    s.set_defaults(fn=cmd_ship)
    d = sub.add_parser(
        "shared-depth", help="train + ship the shared-parameter depth decoder, side by side"
    )
    d.add_argument("--model-dir", default=str(SHIP_DIR), help="where depth_shared.* go")
    d.add_argument("--checkpoint", default=None, help="default: <work>/train/ckpt.pt")
    d.add_argument("--cache", default=None, help="trained decoders (default <work>/shared_depth)")
    d.add_argument("--minutes", type=float, default=10.0, help="shared decoder training time")
    d.add_argument("--steps", type=int, default=None, help="training steps (overrides minutes)")
    d.add_argument("--batch", type=int, default=256, help="frames per step")
    d.add_argument("--lr", type=float, default=1.5e-3)
    d.add_argument("--shared-layers", type=int, default=2)
    d.add_argument(
        "--level-embeddings",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a learned vector per level added to the shared code embedding",
    )
    d.add_argument("--train-frames", type=int, default=60000, help="teacher-forced frames")
    d.add_argument("--frames", type=int, default=4096, help="held-out frames (CE, calibration)")
    d.add_argument("--calib-frames", type=int, default=1024)
    d.add_argument("--bench-frames", type=int, default=300)
    d.add_argument("--threads", type=int, default=1)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(fn=cmd_shared_depth)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
