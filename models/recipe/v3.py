"""Reference model v3: the v2 two-stage codec LM told which phoneme each frame speaks.

    python models/recipe/v3.py corpus                # espeak-ng with phoneme timing (~10 min)
    python models/recipe/v3.py codec                 # encode it with the v1 codec (~3 min)
    python models/recipe/v3.py train --minutes 60    # ~/.cache/codecspec/v3/train/ckpt.pt
    python models/recipe/v3.py stop                  # stop head refit: .../v3/stop/ckpt.pt
    python models/recipe/v3.py ship --checkpoint ~/.cache/codecspec/v3/stop/ckpt.pt
    python bench/speed_quality.py --model v3 --seeds 3 --threads 1 \
        --out docs/speed_quality_rounds               # words and speed per decoding mode
    python models/recipe/v3.py temporal              # does temporal speculation pay? (model.json)
    python models/recipe/v3_card.py                  # MODEL_CARD.md
    python models/recipe/v3.py listen [--export DIR]  # words recognised: a probe (checkpoint)
    python models/recipe/v3.py shared-depth --cache C --out DIR  # seed 002's depth decoder

What changes from v2 (docs/reference_model_v3.md): the corpus keeps espeak-ng's own phoneme
timing (`corpus.py --timed`), the temporal LM reads the phoneme track u_t of
`codecspec.frontend.aligned` instead of an expected progress (its cross-attention gets a prior
centred on the phoneme being spoken), and the codec is v1's, which keeps the words (67.5% of
words recognised after resynthesis against v2's 55%, docs/quality.md).
Everything else — the depth decoder, the draft LM, the ring cache, the stop head, the ship
step's calibration and measurements — is v2's recipe, run with these settings. `train` is
resumable exactly as v2's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
try:
    import codecspec  # noqa: F401
except ImportError:  # running from a checkout whose package is not installed
    sys.path.insert(0, str(ROOT / "python"))

import v2  # noqa: E402  (the v2 recipe: train and ship are shared)

V1_CODEC = ROOT / "models" / "reference" / "codec.npz"
SHIP_DIR = ROOT / "python" / "codecspec" / "models" / "v3"
# English only (the recognizer that judges the model is English), four voice variants
CORPUS_ARGS = [
    "--languages", "en", "--variants", "f1,f2,m1,m3", "--renditions", "2",
    "--timed", "--seed", "3",
]  # fmt: skip


def log(msg: str) -> None:
    print(f"[v3] {msg}", file=sys.stderr, flush=True)


def cmd_corpus(args) -> int:
    cmd = [
        sys.executable,
        str(HERE / "corpus.py"),
        "--out",
        args.corpus,
        "--hours",
        str(args.hours),
    ]
    cmd += CORPUS_ARGS + ["--texts", args.texts, "--skip-texts", str(args.skip_texts)]
    cmd += ["--overwrite"] if args.overwrite else []
    return subprocess.call(cmd)


_CODEC = None


def _encode(path: str) -> np.ndarray:
    """One utterance's v1 codes (in a worker process: the codec is loaded once per worker)."""
    global _CODEC
    from codecspec.codec import Codec, read_wav

    _CODEC = _CODEC or Codec.load(V1_CODEC)
    wav, sr = read_wav(path)
    return _CODEC.encode(wav, sr).astype(np.int16)


def cmd_codec(args) -> int:
    """codes.npz of every corpus utterance through the v1 codec (16 levels x 1024)."""
    from codec import read_manifest

    from codecspec.codec import Codec
    from codecspec.codec.data import save_codes
    from codecspec.progress import bar

    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    out = work / "codec"
    out.mkdir(parents=True, exist_ok=True)
    rows = read_manifest(corpus)
    if not all("events" in r for r in rows):
        raise SystemExit(f"{corpus} has no phoneme timing: build it with `v3.py corpus`")
    t0 = time.monotonic()
    paths = [str(corpus / r["path"]) for r in rows]
    with ProcessPoolExecutor(args.workers) as pool:
        codes = list(bar(pool.map(_encode, paths, chunksize=16), desc="encode", total=len(paths)))
    save_codes(
        out / "codes.npz",
        [r["id"] for r in rows],
        [r["split"] for r in rows],
        codes,
        Codec.load(V1_CODEC).cfg.frame_rate,
    )
    log(f"encoded {len(rows)} utterances in {time.monotonic() - t0:.0f} s -> {out / 'codes.npz'}")
    return 0


def cmd_listen(args) -> int:
    """Words recognised on held-out corpus texts (not the evaluation sentences): the probe
    that follows a run while it trains (--export: the current checkpoint into that folder
    first) and that chose the shipped sampling default (--temperature / --top-k)."""
    import codecspec as cs
    from codecspec.codec.data import load_manifest
    from codecspec.evaluation.intelligibility import Recognizer, evaluate
    from codecspec.families.v2.model import V2TTS

    folder = Path(args.model)
    if args.export:
        folder = Path(args.export)
        v2.export_folder(args, folder)
    rows = load_manifest(Path(args.corpus).expanduser())
    texts = [r["text"] for r in rows if r["split"] == "test" and r["id"].endswith("r0")]
    params = cs.SamplingParams(args.temperature, args.top_k, 1.0)
    depth_params = None  # the depth levels drawn as c0 unless --depth-temperature says
    if args.depth_temperature is not None:
        k = args.top_k if args.depth_top_k is None else args.depth_top_k
        depth_params = cs.SamplingParams(args.depth_temperature, k, 1.0)
    tts = V2TTS(
        folder, provider="cpu", threads=1, params=params, depth=args.depth,
        depth_params=depth_params,
    )  # fmt: skip

    ends = []  # per clip: (frames, espeak-ng's frames for the text, max-length guard hit)

    def synthesize(text, seed):
        s = tts.generate(text, seed=seed, speaker="f1", mode="ar", temporal="ar")
        track = tts.phoneme_track(text, "en", "f1")[1]
        ends.append((len(s.codes), len(track), bool(s.hit_max_frames)))
        return s.wav, s.sample_rate

    seeds = list(range(args.seeds))
    rep = evaluate(synthesize, texts[: args.texts], seeds, recognizer=Recognizer(threads=1))
    rep["sampling"] = {"c0": str(params), "depth": str(tts.depth_params)}
    return listen_report(rep, ends, folder, args.json)


def listen_report(rep: dict, ends: list, folder, json_path) -> int:
    """A `listen` run's report (also `fsq.py listen`'s): each clip's length and guard hit
    (`ends`: frames, espeak-ng's frames, guard hit), the length summary, one log line, and
    the per-clip JSON that `compare` pairs (where `json_path` is given)."""
    for clip, (frames, track, runaway) in zip(rep["per_clip"], ends):
        clip.update(frames=frames, espeak_frames=track, runaway=runaway)
    rep |= _length_summary(ends)
    lo, hi = rep["words_recognised_ci"]
    log(
        f"{folder}: {rep['words_recognised']:.1%} of words recognised ({lo:.1%}-{hi:.1%}); "
        f"{rep['runaways']} of {len(ends)} at the max-length guard; "
        f"{rep['length_within_15']:.0%} within 15% of espeak-ng's length"
    )
    if json_path:  # per-clip records: paired comparisons of two folders on the same texts
        Path(json_path).write_text(json.dumps(rep, indent=1, default=float))
    return 0


def _length_summary(ends: list) -> dict:
    """Where utterances end, from (frames, espeak-ng's frames, guard hit) per clip: the
    runaways (ended by the max-length guard, not the stop head) and the share whose length is
    within 15% of espeak-ng's rendering of the text."""
    ratio = np.array([f / max(t, 1) for f, t, _ in ends])
    return {
        "runaways": sum(r for _, _, r in ends),
        "length_within_15": float(np.mean(np.abs(ratio - 1.0) <= 0.15)),
        "length_ratio_median": float(np.median(ratio)),
    }


def cmd_depth(args) -> int:
    """A probe of the depth stage, where v3 loses the words (docs/quality.md): the checkpoint's
    depth decoder trained further on its own, on frozen teacher-forced h_t, into a copy of a
    v3 folder with that decoder (depth.onnx, heads). The folder's offsets and trees were
    calibrated for the old decoder: judge it AR (`bench/v3_word_loss.py --model OUT`).
    `--prev-frames K` adds what the runtime cannot feed yet, the codes of the K frames before
    (`_with_previous_frames`), and writes only the report: does that context lower the
    held-out cross-entropy?"""
    import json
    import shutil

    import torch
    from v2 import _export_positional, frozen_frames, load_checkpoint

    from codecspec.train.depth_train import heldout_cross_entropy, train_depth

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    frontend = None
    if args.from_folder:  # no checkpoint needed: the shipped weights, read back
        model, frontend = _folder_model(Path(args.from_folder).expanduser())
        ck = {"step": f"the folder {_portable_path(args.from_folder)}"}
    else:
        model, ck = load_checkpoint(work / "train" / "ckpt.pt")
    log(f"teacher-forced h_t of checkpoint step {ck.get('step')}")
    train, held = frozen_frames(
        model, corpus, work, args.train_frames, args.frames, args.seed, args.prev_frames,
        frontend, args.phone_context,
    )  # fmt: skip
    depth = model.depth
    if args.prev_frames:
        depth = _with_previous_frames(depth, args.prev_frames)
    if args.phone_context:
        depth = _with_phone_context(depth, args.phone_context)
    if args.grow_layers:
        depth = _with_more_layers(depth, args.grow_layers)
    before = heldout_cross_entropy(depth, *held)
    log(f"held-out depth CE before: {before.mean():.4f} nats; {len(train[0])} training frames")
    info = train_depth(
        depth, *train, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
        val=held, eval_every=max(args.steps // 10, 1), progress=True,
    )  # fmt: skip
    after = heldout_cross_entropy(depth, *held)
    out = Path(args.out)
    if args.prev_frames or args.phone_context or args.grow_layers:
        out.mkdir(parents=True, exist_ok=True)
    else:
        # not the source's report: build.sh takes an OUT holding depth_probe.json as a pass done
        skip = shutil.ignore_patterns("depth_probe.json")
        shutil.copytree(Path(args.model), out, dirs_exist_ok=True, ignore=skip)
        _export_positional(depth.eval(), out)
    report = {
        "checkpoint_step": ck.get("step"), "prev_frames": args.prev_frames,
        "phone_context": args.phone_context, "grow_layers": args.grow_layers,
        "steps": args.steps, "batch": args.batch, "lr": args.lr,
        "train_frames": len(train[0]), "seconds": info["seconds"],
        "ce_before": before.tolist(), "ce_after": after.tolist(), "curve": info["val"],
    }  # fmt: skip
    (out / "depth_probe.json").write_text(json.dumps(report, indent=1))
    log(f"held-out depth CE {before.mean():.4f} -> {after.mean():.4f} nats; report in {out}")
    return 0


def cmd_shared_depth(args) -> int:
    """Seed 002's decoder for v3: one set of depth weights for every RVQ level (level-
    conditioned), trained on the folder's frozen teacher-forced h_t, distilled from the
    folder's own per-position decoder (`--distill`: the KL share of the loss), resumable.
    Writes a report of held-out CE beside the positional decoder's; with `--out`, a copy of
    the folder with depth_shared.* added, calibrated and benched (v2's export)."""
    import dataclasses

    import torch
    from v2 import frozen_frames

    from codecspec.train.depth_train import count_parameters, heldout_cross_entropy, train_depth
    from codecspec.train.networks import SharedDepthModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    folder, cache = Path(args.model).expanduser(), Path(args.cache).expanduser()
    model, frontend = _folder_model(folder)
    train, held = frozen_frames(
        model, corpus, work, args.train_frames, args.frames, args.seed, 0, frontend
    )
    teacher = model.depth.eval()
    del model
    config = dataclasses.replace(teacher.c, num_layers=args.shared_layers)
    if args.tie == "codebook":  # the codec's own vectors per level, two small maps learned
        cb = np.load(folder / "codec.npz")["codebooks"].astype(np.float32)
        shared = SharedDepthModel(config, codebooks=cb, per_level_head=args.per_level_head)
        if args.warm_start:
            shared.warm_start(teacher)
    else:
        shared = SharedDepthModel(config)
    log(f"{len(train[0])} training frames; shared {count_parameters(shared)} parameters")
    probe = (held[0][:1024], held[1][:1024])
    info = train_depth(
        shared, *train, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
        val=probe, eval_every=max(args.steps // 10, 1), progress=True,
        teacher=teacher if args.distill else None, distill=args.distill,
        state=cache / "state.pt",
    )  # fmt: skip
    info["train_loss_last50"] = float(np.mean(info.pop("train_loss")[-50:]))
    torch.save({"state_dict": shared.state_dict(), "train": info}, cache / "shared.pt")
    ce = {
        "shared": heldout_cross_entropy(shared, *held),
        "positional": heldout_cross_entropy(teacher, *held),
    }
    report = {
        "folder": _portable_path(str(folder)),
        "train_frames": len(train[0]), "heldout_frames": len(held[0]),
        "shared_layers": args.shared_layers, "distill": args.distill, "lr": args.lr,
        "tie": args.tie, "per_level_head": args.per_level_head, "warm_start": args.warm_start,
        "parameters": {"shared": count_parameters(shared), "positional": count_parameters(teacher)},
        "train": info,
        "heldout_ce_per_level": {k: v.round(4).tolist() for k, v in ce.items()},
        "heldout_ce_mean": {k: float(v.mean()) for k, v in ce.items()},
    }  # fmt: skip
    (cache / "shared_depth_report.json").write_text(json.dumps(report, indent=1))
    log(f"held-out CE shared {ce['shared'].mean():.4f} vs positional {ce['positional'].mean():.4f}")
    if args.out:
        _ship_shared({"shared": shared, "positional": teacher}, ce, folder, held, report, args)
    return 0


def _ship_shared(models: dict, ce: dict, folder: Path, held, report: dict, args) -> None:
    """A copy of `folder` in args.out with the shared decoder added (v2's export: weights,
    offsets, tree, device profile), both decoders benched on the same frames in this run."""
    import shutil

    from codecspec.decode import DepthDecoder

    out, cache = Path(args.out), Path(args.cache).expanduser()
    if out.resolve() != folder.resolve():
        shutil.copytree(folder, out, dirs_exist_ok=True)
    fields, prof, bench, nbytes = v2.export_shared(models["shared"], out, cache, held, args)
    rows = {"shared": v2._row(models["shared"], report["train"], nbytes, ce["shared"], prof, bench)}
    hiddens = held[0].astype(np.float16).astype(np.float32)

    def open_positional(p):
        return DepthDecoder.from_dir(out, params=p, provider="cpu", threads=args.threads)

    _, bench = v2._measure_decoder(
        "positional", open_positional, None, None, None, hiddens, held[1][:, 0], args
    )
    nbytes = sum((out / f).stat().st_size for f in ("depth.onnx", "depth.heads.npy"))
    prof = json.loads((out / "device_profile.json").read_text())
    note = {"note": "the folder's own, trained with the temporal LM and then alone"}
    rows["positional"] = v2._row(models["positional"], note, nbytes, ce["positional"], prof, bench)
    sh, po = rows["shared"], rows["positional"]
    report |= fields
    report["decoders"] = rows
    report["ratios"] = {
        "parameters_shared_over_positional": sh["parameters"] / po["parameters"],
        "bytes_shared_over_positional": sh["bytes"] / po["bytes"],
        "ce_shared_over_positional": sh["heldout_ce_mean"] / po["heldout_ce_mean"],
        "ar_ms_shared_over_positional": sh["ar_ms_per_frame"] / po["ar_ms_per_frame"],
    }
    (out / "shared_depth_report.json").write_text(json.dumps(report, indent=1))
    log(f"side by side -> {out / 'shared_depth_report.json'}: {report['ratios']}")


def _portable_path(text: str) -> str:
    """`text` with the checkout's paths relative to it and the home directory written as ~
    (reports travel with shipped folders, which name no path of the machine that built them)."""
    return text.replace(str(ROOT) + "/", "").replace(str(Path.home()), "~")


def _folder_model(folder: Path):
    """(V2Model in eval mode with the weights of shipped folder `folder`, its Frontend): what
    `depth --from-folder` trains from when the checkpoint is gone (the folder's frontend
    reads the corpus, so a corpus with more texts maps its phonemes to the folder's ids)."""
    import json

    from codecspec.families.v2.torch_model import V2Model, V2TemporalConfig
    from codecspec.families.v2.train_init import load_folder_weights
    from codecspec.frontend.text import Frontend
    from codecspec.graphs.config import DepthDecoderConfig

    meta = json.loads((folder / "model.json").read_text())
    tcfg = V2TemporalConfig(**{**meta["temporal_config"], "ce_draft": False})
    model = V2Model(tcfg, DepthDecoderConfig.from_dict(meta["depth_config"]))
    frontend = Frontend.from_dict(meta["frontend"])
    load_folder_weights(model, folder, frontend)
    return model.eval(), frontend


def cmd_checkpoint(args) -> int:
    """A training checkpoint of a v3 folder's weights, for `ship --checkpoint`: how a depth
    decoder trained on by `depth --from-folder` becomes the shipped one (the ship step then
    remakes the offsets, trees, calibration, ablation and report for it). The checkpoint
    carries the folder's frontend (its phoneme ids, which a larger corpus would renumber),
    the training record of the folder's report and the reports of the depth passes; it is
    written only when the ship step's export of it reproduces the folder bit for bit."""
    import json

    import torch
    from v2 import _ship_export

    from codecspec.families.v2.train_init import reexport_mismatches

    folder = Path(args.from_folder).expanduser()
    model, frontend = _folder_model(folder)
    bad = reexport_mismatches(model, folder, _ship_export)
    if bad:
        raise SystemExit(f"the export of the weights read from {folder} differs: {bad[:5]}")
    meta = json.loads((folder / "model.json").read_text())
    report = json.loads((folder / "report.json").read_text())["train"]
    passes = [json.loads(Path(r).expanduser().read_text()) for r in args.depth_reports]
    for p in passes:  # a shipped report names no path of the machine that built it
        p["checkpoint_step"] = _portable_path(str(p["checkpoint_step"]))
    # a folder made from a shipped one carries the passes its decoder already had
    passes = [p for p in report.get("depth_passes", []) if p not in passes] + passes
    ck = {k: report[k] for k in ("step", "seconds", "train_args", "stop_refit") if k in report}
    ck |= {
        "state_dict": model.state_dict(),
        "temporal_config": {**meta["temporal_config"], "ce_draft": False},
        "depth_config": meta["depth_config"],
        "frontend": frontend.to_dict(),
        "curves": report["curves"],
        "depth_passes": passes,
    }  # fmt: skip
    out = Path(args.out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ck, out)
    log(f"{folder}: re-export identical; {len(passes)} depth passes recorded -> {out}")
    return 0


def _with_previous_frames(depth, frames: int, rank: int = 64):
    """`depth` reading h_t + P · Σ_kj E[k, j, code of frame t-k at level j] — rows that
    `teacher_forced(prev=frames)` lays after h_t — with P zero at the start, so it begins as
    the trained decoder and any drop in cross-entropy is the context's."""
    import dataclasses

    import torch
    from torch import nn

    H, G, V = depth.c.hidden_size, depth.c.num_codebooks, depth.c.codebook_size

    class PreviousFrames(nn.Module):
        def __init__(self):
            super().__init__()
            self.depth = depth
            # the wider input rows only tell the trainer's shape check what to expect
            self.c = dataclasses.replace(depth.c, input_hidden_size=H + frames * G)
            self.table = nn.Parameter(torch.randn(frames * G, V + 1, rank) * 0.02)
            self.proj = nn.Linear(rank, H, bias=False)
            nn.init.zeros_(self.proj.weight)

        def forward(self, x, codes):
            prev = x[:, H:].long()
            rows = self.table[torch.arange(prev.shape[1]), prev].sum(1)
            return self.depth(x[:, :H] + self.proj(rows), codes)

    return PreviousFrames()


def _with_phone_context(depth, width: int, rank: int = 64):
    """`depth` reading h_t + P · silu(Σ_k E[k, phoneme id at floor(u_t) + k] + F(u_t's
    fraction)) — the columns `teacher_forced(phone=width)` lays after h_t — with P zero at the
    start: does the track's phoneme context, given to the depth decoder directly, tell it more
    than the temporal LM's h_t already carries?"""
    import dataclasses

    import torch
    from torch import nn
    from v2 import PHONE_PAD

    from codecspec.train.networks import fourier

    H, n = depth.c.hidden_size, 2 * width + 1

    class PhoneContext(nn.Module):
        def __init__(self):
            super().__init__()
            self.depth = depth
            self.c = dataclasses.replace(depth.c, input_hidden_size=H + n + 1)
            self.table = nn.Parameter(torch.randn(n, PHONE_PAD + 1, rank) * 0.02)
            self.frac = nn.Linear(8, rank)
            self.proj = nn.Linear(rank, H, bias=False)
            nn.init.zeros_(self.proj.weight)

        def forward(self, x, codes):
            ids = x[:, H : H + n].long()
            rows = self.table[torch.arange(n), ids].sum(1) + self.frac(fourier(x[:, -1], 4))
            return self.depth(x[:, :H] + self.proj(torch.nn.functional.silu(rows)), codes)

    return PhoneContext()


def _with_more_layers(depth, extra: int):
    """`depth` with `extra` decoder layers appended whose output projections start at zero, so
    it begins as the trained decoder: does capacity lower the held-out cross-entropy faster
    than the same steps on the trained size?"""
    import dataclasses

    from torch import nn

    from codecspec.train.networks import DepthLayer

    depth.c = dataclasses.replace(depth.c, num_layers=depth.c.num_layers + extra)
    for _ in range(extra):
        layer = DepthLayer(depth.c)
        nn.init.zeros_(layer.o_proj.weight)
        nn.init.zeros_(layer.down_proj.weight)
        depth.layers.append(layer)
    return depth


def past_end_frames(
    model, ds, utterances: int, extend: int, params: dict, seed: int, free: bool = False
):
    """h_t of `utterances` utterances of `ds`, teacher-forced (`free`: c0 drawn by the model
    from the first frame on), each followed by `extend` frames past its track's end (there
    the track at the closing pause, as the runtime feeds it, `past_end_position`; c0 drawn
    from the model at `params`):
    (h [N, D], stop labels [N], past-end mask [N], lengths [U]). Labels: 1 on an utterance's
    last frame and on every frame past it."""
    import torch

    from codecspec.families.v2.train import to_tensors
    from codecspec.frontend.aligned import past_end_position

    tm, g = model.temporal, torch.Generator().manual_seed(seed)
    hs, labels, past, lengths = [], [], [], []
    with torch.no_grad():
        for b in ds.batches(1, seed=seed):
            if len(lengths) >= utterances:
                break
            t = to_tensors(b)
            n = int(t["frame_mask"][0].sum())
            track = t["track"][0, :n]
            # past the end the runtime's input: the closing pause (phonemes: bos ... eos)
            pause = past_end_position(track.numpy(), int(t["phoneme_lengths"][0]) - 2)
            # free: the model draws every c0 itself, as it does at synthesis (where a run-on
            # starts from the model's own frames, not from a rendering's)
            c0 = t["codes"][0, :0, 0] if free else t["codes"][0, :n, 0].clone()
            for _ in range(n + extend - len(c0) + 1):  # the last pass gives every h_t
                seq = torch.cat([c0, t["codes"][0, :1, 0]])[None]  # its last input is unread
                trk = torch.cat([track, torch.full((extend + 1,), float(pause))])
                trk = trk[: seq.shape[1]][None]
                out = tm(t["phonemes"], t["phoneme_lengths"], t["language"], t["speaker"],
                         seq, t["frames_per_phoneme"], trk)  # fmt: skip
                if len(c0) == n + extend:
                    break
                c0 = torch.cat([c0, _draw(out[1][0, -1], params, g)])
            hs.append(out[0][0, : n + extend])
            labels.append(torch.cat([torch.zeros(n - 1), torch.ones(1 + extend)]))
            past.append(torch.arange(n + extend) >= n)
            lengths.append(n)
    return torch.cat(hs), torch.cat(labels), torch.cat(past), np.asarray(lengths)


def _draw(logits, params: dict, g):
    """One c0 from logits at temperature / top-k (the folder's law, for the past-end frames)."""
    import torch

    v, ix = (logits / params["temperature"]).topk(params["top_k"])
    return ix[torch.multinomial(torch.softmax(v, -1), 1, generator=g)]


def stop_report(p: np.ndarray, lengths: np.ndarray, extend: int) -> dict:
    """What a stop head's per-frame probabilities `p` mean for lengths, averaged over
    utterances: the chance of reaching the last real frame, of stopping more than 5 frames
    early, of stopping at the last frame, and of running past every one of the `extend`
    frames after it (a runaway) — mean and worst utterance."""
    reach, early, last, runon, o = [], [], [], [], 0
    for n in lengths:
        q = p[o : o + n + extend]
        o += n + extend
        reach.append(np.prod(1.0 - q[: n - 1]))
        early.append(1.0 - np.prod(1.0 - q[: max(n - 6, 0)]))
        last.append(q[n - 1])
        runon.append(np.prod(1.0 - q[n - 1 :]))
    return {
        "reach_last_frame": round(float(np.mean(reach)), 4),
        "stop_5_frames_early": round(float(np.mean(early)), 4),
        "stop_at_last_frame": round(float(np.mean(last)), 4),
        "run_past_end": round(float(np.mean(runon)), 4),
        "run_past_end_worst": round(float(np.max(runon)), 4),
    }


def cmd_stop(args) -> int:
    """The stop head fitted again on frozen h_t, on real frames and on frames past the
    track's end, which training never showed it: there the model's c0 can cycle while the
    trained head stays silent, and the utterance runs to the max-length guard
    (docs/reference_model_v3.md). `--hidden 0` refits the linear head from its trained
    weights; `--hidden k` fits a head with one SiLU layer of k units (the config's
    "stop_hidden"). Every other weight, the c0 law and the depth law stay as trained; only
    where utterances end changes. Writes a checkpoint (the training one untouched) and the
    held-out report of both heads."""
    import json

    import torch
    import torch.nn.functional as F
    from ship import V3_SAMPLING
    from v2 import load_checkpoint

    from codecspec.families.v2.torch_model import stop_head
    from codecspec.frontend.text import Frontend
    from codecspec.train.dataset import TTSDataset

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    model, ck = load_checkpoint(Path(args.checkpoint or work / "train" / "ckpt.pt").expanduser())
    codes = work / "codec" / "codes.npz"
    frontend = Frontend.from_dict(ck["frontend"]) if "frontend" in ck else None
    train = TTSDataset(corpus, codes, "train", frontend=frontend)
    held = TTSDataset(corpus, codes, "test", frontend=train.frontend)
    t0 = time.monotonic()

    def frames(ds, utterances, seed, free=False):
        return past_end_frames(model, ds, utterances, args.extend, V3_SAMPLING, seed, free)

    h, y, past, _ = frames(train, args.utterances, 1)
    if args.free:  # beside them, utterances the model speaks itself from the first frame
        hf, yf, pf, _ = frames(train, args.free, 2, free=True)
        h, y, past = torch.cat([h, hf]), torch.cat([y, yf]), torch.cat([past, pf])
    held_sets = {"teacher_forced": frames(held, args.held, 0)}
    if args.free:
        held_sets["free_running"] = frames(held, args.held, 3, free=True)
    log(f"{len(h)} training frames ({int(past.sum())} past the end), held-out {args.held}")
    dec = model.temporal.decoder

    def held_report(head):
        with torch.no_grad():
            return {
                name: stop_report(torch.sigmoid(head(hh)[:, 0]).numpy(), lens, args.extend)
                for name, (hh, _, _, lens) in held_sets.items()
            }

    before = held_report(dec.stop_head)
    if args.hidden < 0:  # the checkpoint's head, fitted further from its weights
        args.hidden = ck["temporal_config"].get("stop_hidden", 0)
        head = dec.stop_head
    else:
        head = dec.stop_head if args.hidden == 0 else stop_head(h.shape[1], args.hidden)
    opt = torch.optim.Adam(head.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed)
    for _ in range(args.steps):
        pick = torch.randint(0, len(h), (args.batch,), generator=gen)
        loss = F.binary_cross_entropy_with_logits(head(h[pick])[:, 0], y[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    dec.stop_head = head.eval()
    after = held_report(head)
    record = {
        "hidden": args.hidden, "utterances": args.utterances, "free_running": args.free,
        "held_out_utterances": args.held,
        "frames_past_end": args.extend, "steps": args.steps, "batch": args.batch, "lr": args.lr,
        "seconds": round(time.monotonic() - t0, 1), "held_out_before": before,
        "held_out_after": after,
    }  # fmt: skip
    out = Path(args.out).expanduser() if args.out else work / "stop" / "ckpt.pt"
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v for k, v in ck["state_dict"].items() if not k.startswith(STOP_KEYS)}
    state.update({STOP_KEYS + k: v.detach().clone() for k, v in head.state_dict().items()})
    ck["state_dict"] = state
    ck["temporal_config"] = {**ck["temporal_config"], "stop_hidden": args.hidden}
    ck["stop_refit"] = record
    torch.save(ck, out)
    (out.parent / "stop_refit.json").write_text(json.dumps(record, indent=1))
    log(f"held-out before {before}")
    log(f"held-out after  {after}; checkpoint {out}")
    return 0


STOP_KEYS = "temporal.decoder.stop_head."


def cmd_compare(args) -> int:
    """Two `listen --json` reports of the same held-out texts, paired: words recognised by
    each, and the difference B - A with a bootstrap 95% interval over texts, for all texts
    and per text source (fortunes, or corpus.py's varied texts)."""
    import corpus

    a, b = (json.loads(Path(p).read_text()) for p in (args.a, args.b))
    fortunes = set(corpus.load_texts("en", 1, 10_000))
    hits = {}
    for name, rep in (("a", a), ("b", b)):
        texts = {s["id"]: s["text"] for s in rep["per_sentence"]}
        for c in rep["per_clip"]:
            key = (texts[c["sentence_id"]], c["seed"])
            hits.setdefault(key, {})[name] = (c["hits"], c["ref_words"])
    for name, rep in (("A", a), ("B", b)):
        if "runaways" in rep:
            log(
                f"{name}: {rep['runaways']} of {len(rep['per_clip'])} clips at the max-length "
                f"guard; {rep['length_within_15']:.0%} within 15% of espeak-ng's length"
            )
    paired = [(k[0], v["a"], v["b"]) for k, v in hits.items() if len(v) == 2]
    rng = np.random.default_rng(0)
    for source in ("all", "fortunes", "varied"):
        rows = [
            r for r in paired if source == "all" or (r[0] in fortunes) == (source == "fortunes")
        ]
        if not rows:
            continue
        # words A recognised, words B recognised, reference words: one entry per text
        ha, hb, n = np.array([(ra[0], rb[0], ra[1]) for _, ra, rb in rows], float).T
        diffs = []
        for _ in range(2000):
            i = rng.integers(len(rows), size=len(rows))
            diffs.append((hb[i].sum() - ha[i].sum()) / n[i].sum())
        lo, hi = np.percentile(diffs, [2.5, 97.5])
        log(
            f"{source}: {len(rows)} texts, {int(n.sum())} words: A {ha.sum() / n.sum():.1%}, "
            f"B {hb.sum() / n.sum():.1%}, B - A {100 * (hb.sum() - ha.sum()) / n.sum():+.1f} "
            f"points ({100 * lo:+.1f} to {100 * hi:+.1f})"
        )
    return 0


def cmd_temporal(args) -> int:
    """model.json's "temporal_speculation_pays" (what `temporal="auto"` runs) from a
    bench/speed_quality.py run on the shipped folder: exact temporal speculation pays if it
    made the whole decode faster than AR in that run."""
    import json

    q = json.loads(Path(args.quality).read_text())
    sd = q["modes"]["SD (exact, temporal)"]
    pays = sd["speedup"] > 1.0
    meta_path = Path(args.model) / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["temporal_speculation_pays"] = pays
    meta["temporal_speculation_measured"] = (
        f"exact temporal speculation {sd['speedup']:.2f}x on the whole decode "
        f"({sd['temporal_speedup']:.2f}x on the temporal loop) at "
        f"{sd['c0_per_target_call']:.2f} c0 per target call ({q['command']})"
    )
    meta_path.write_text(json.dumps(meta, indent=1))
    log(f"temporal speculation pays: {pays} ({meta['temporal_speculation_measured']})")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus_v3")
    ap.add_argument("--work", default="~/.cache/codecspec/v3", help="codes, checkpoints")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus", help="render the timed espeak-ng corpus")
    c.add_argument("--hours", type=float, default=4.0)
    c.add_argument("--overwrite", action="store_true")
    c.add_argument(
        "--skip-texts",
        type=int,
        default=0,
        help="leave out the first N texts of the order (fresh speech beyond a shorter corpus)",
    )
    c.add_argument(
        "--texts",
        choices=("fortunes", "varied", "mixed"),
        default="fortunes",
        help="corpus.py's text source (mixed: fortunes and unpredictable English, half each)",
    )
    c.set_defaults(fn=cmd_corpus)
    e = sub.add_parser("codec", help="encode the corpus with the v1 codec")
    e.add_argument("--workers", type=int, default=2)
    e.set_defaults(fn=cmd_codec)
    t = sub.add_parser("train", help="train (or resume) the aligned temporal LM + draft + depth")
    v2.add_train_args(t)
    t.set_defaults(fn=v2.cmd_train, aligned=True)
    s = sub.add_parser("ship", help="export, calibrate, measure: the shipped model folder")
    v2.add_ship_args(s, SHIP_DIR)
    s.set_defaults(fn=v2.cmd_ship, aligned=True)
    sp = sub.add_parser("stop", help="refit the stop head on frames past the track's end")
    sp.add_argument("--out", default=None, help="default: <work>/stop/ckpt.pt")
    sp.add_argument("--utterances", type=int, default=800, help="training utterances")
    sp.add_argument("--held", type=int, default=120, help="held-out utterances")
    sp.add_argument("--extend", type=int, default=24, help="frames past each track's end")
    sp.add_argument(
        "--checkpoint", default=None, help="the checkpoint to refit (default <work>/train/ckpt.pt)"
    )
    sp.add_argument(
        "--free", type=int, default=0, help="also fit on this many utterances the model speaks"
    )
    sp.add_argument(
        "--hidden",
        type=int,
        default=64,
        help="0: refit the linear head; -1: refit the checkpoint's own head from its weights",
    )
    sp.add_argument("--steps", type=int, default=2000)
    sp.add_argument("--batch", type=int, default=4096, help="frames per step")
    sp.add_argument("--lr", type=float, default=1e-3)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--threads", type=int, default=2)
    sp.set_defaults(fn=cmd_stop)
    cp = sub.add_parser("compare", help="two `listen --json` reports, paired per text")
    cp.add_argument("a", help="the report of the folder compared against")
    cp.add_argument("b", help="the report of the candidate")
    cp.set_defaults(fn=cmd_compare)
    tq = sub.add_parser(
        "temporal", help="record whether temporal speculation pays (after speed_quality.py)"
    )
    tq.add_argument("--model", default=str(SHIP_DIR), help="the shipped v3 folder")
    tq.add_argument("--quality", default=str(ROOT / "docs" / "speed_quality_rounds.json"))
    tq.set_defaults(fn=cmd_temporal)
    dp = sub.add_parser("depth", help="probe: the depth decoder trained further alone")
    dp.add_argument("--model", default=str(SHIP_DIR), help="the v3 folder to copy")
    dp.add_argument("--out", required=True, help="the probe folder")
    dp.add_argument("--steps", type=int, default=2000)
    dp.add_argument("--batch", type=int, default=256, help="frames per step")
    dp.add_argument("--lr", type=float, default=3e-4)
    dp.add_argument("--train-frames", type=int, default=200000)
    dp.add_argument("--frames", type=int, default=4096, help="held-out frames")
    dp.add_argument("--threads", type=int, default=2)
    dp.add_argument("--seed", type=int, default=0)
    dp.add_argument(
        "--from-folder",
        default=None,
        help="start from this shipped v3 folder's weights instead of <work>/train/ckpt.pt",
    )
    dp.add_argument(
        "--prev-frames", type=int, default=0, help="condition on the codes of K frames before"
    )
    dp.add_argument(
        "--phone-context",
        type=int,
        default=0,
        help="condition on the track's phoneme and K either side (a report-only probe)",
    )
    dp.add_argument(
        "--grow-layers",
        type=int,
        default=0,
        help="append N layers that start as the identity (a report-only probe)",
    )
    dp.set_defaults(fn=cmd_depth)
    sd = sub.add_parser(
        "shared-depth", help="seed 002's shared depth decoder for a v3 folder (distilled)"
    )
    sd.add_argument("--model", default=str(SHIP_DIR), help="the v3 folder (and teacher)")
    sd.add_argument("--cache", required=True, help="the run's state, weights and report")
    sd.add_argument("--out", default=None, help="a copy of the folder with depth_shared.*")
    sd.add_argument("--steps", type=int, default=4000)
    sd.add_argument("--batch", type=int, default=256, help="frames per step")
    sd.add_argument("--lr", type=float, default=1.5e-3)
    sd.add_argument("--shared-layers", type=int, default=3)
    sd.add_argument(
        "--tie", choices=("codebook", "table"), default="codebook",
        help="codebook: each level's codes enter and are scored through the codec's own "
        "codebook vectors (two learned maps); table: one learned table and head for all",
    )  # fmt: skip
    sd.add_argument(
        "--per-level-head", action="store_true", help="with --tie codebook: one out map per level"
    )
    sd.add_argument(
        "--warm-start", action=argparse.BooleanOptionalAction, default=True,
        help="with --tie codebook: start from the folder's decoder (its first layers, maps "
        "fitted to its tables and heads)",
    )  # fmt: skip
    sd.add_argument("--distill", type=float, default=0.5, help="KL share of the loss (0: CE)")
    sd.add_argument("--train-frames", type=int, default=620000)
    sd.add_argument("--frames", type=int, default=4096, help="held-out frames")
    sd.add_argument("--calib-frames", type=int, default=1024)
    sd.add_argument("--bench-frames", type=int, default=300)
    sd.add_argument("--threads", type=int, default=2)
    sd.add_argument("--seed", type=int, default=0)
    sd.set_defaults(fn=cmd_shared_depth)
    ck = sub.add_parser("checkpoint", help="a v3 folder's weights as a checkpoint for ship")
    ck.add_argument("--from-folder", required=True, help="a v3 folder (a depth probe's)")
    ck.add_argument("--out", required=True, help="the checkpoint file")
    ck.add_argument(
        "--depth-reports",
        nargs="*",
        default=[],
        help="depth_probe.json of each depth pass, in order (recorded in the report)",
    )
    ck.set_defaults(fn=cmd_checkpoint)
    li = sub.add_parser("listen", help="words recognised on held-out corpus texts (a probe)")
    li.add_argument("--model", default=str(SHIP_DIR), help="a v3 folder")
    li.add_argument("--export", default=None, help="export the current checkpoint here first")
    li.add_argument("--texts", type=int, default=12)
    li.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 per text")
    li.add_argument("--json", default=None, help="write the report (every clip) here")
    li.add_argument("--temperature", type=float, default=0.6)
    li.add_argument("--top-k", type=int, default=20)
    li.add_argument(
        "--depth-temperature",
        type=float,
        default=None,
        help="the depth levels' own temperature (model.json's depth_sampling); default: c0's",
    )
    li.add_argument("--depth-top-k", type=int, default=None, help="with it; default --top-k")
    li.add_argument(
        "--depth",
        choices=["positional", "shared"],
        default="positional",
        help="which depth decoder of the folder runs (shared: `shared-depth --out`'s)",
    )
    li.set_defaults(fn=cmd_listen, aligned=True)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
