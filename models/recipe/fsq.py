"""The FSQ model family's recipe: GroupFSQ codec -> temporal LM with 32 channel heads + stop
head (and the AR-over-groups comparison head) -> ONNX export, measurements, model card.

    python models/recipe/fsq.py all            # everything; resumable, ~45 min on 2 cores
    python models/recipe/fsq.py codec          # ~/.cache/codecspec/fsq/codec
    python models/recipe/fsq.py train --minutes 30   # ~/.cache/codecspec/fsq/train (ckpt.pt)
    python models/recipe/fsq.py ship           # python/codecspec/models/fsq

Reads corpus.py's corpus (~/.cache/codecspec/corpus). Checkpoints live outside the repo;
`train` resumes from ckpt.pt when it exists (the wall-clock budget counts across resumes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # fsq_ship.py, beside this file
try:
    import codecspec  # noqa: F401
except ImportError:  # running from a checkout whose package is not installed
    sys.path.insert(0, str(HERE.parents[1] / "python"))

from card import _plt  # noqa: E402  (the v1 recipe's matplotlib setup)

from codecspec.codec import CodecConfig, write_wav  # noqa: E402
from codecspec.codec.data import load_manifest, save_codes  # noqa: E402
from codecspec.codec.features import log_spectral_distance  # noqa: E402
from codecspec.families.fsq.codec import FSQCodec, FSQConfig  # noqa: E402
from codecspec.progress import bar  # noqa: E402


def _v1_recipe():
    """The v1 codec recipe module (feature extraction job, mel distortion, wav loading)."""
    spec = importlib.util.spec_from_file_location("recipe_codec", HERE / "codec.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["recipe_codec"] = mod  # worker processes unpickle its functions by this name
    spec.loader.exec_module(mod)
    return mod


V1 = _v1_recipe()
CACHE = Path(os.environ.get("CODECSPEC_CACHE", "~/.cache/codecspec")).expanduser()
GROUPS_SHOWN = (1, 2, 4, 8)


def log(msg: str) -> None:
    print(f"[fsq] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- codec stage
def _eval_job(a):
    """LSD (dB) after Griffin-Lim of one held-out utterance: PCA only, and FSQ-coded."""
    path, codec_path, n_iter = a
    codec = FSQCodec.load(codec_path)
    x = V1._load(path, codec.sample_rate)
    f = codec.features(x)
    pca = codec.pca.features_to_wav(codec.pca.unproject(codec.pca.project(f)), n_iter)
    y = codec.decode(codec.encode_features(f), n_iter=n_iter)
    return {"pca": log_spectral_distance(x, pca), "fsq": log_spectral_distance(x, y)}, y


def channel_usage(codec: FSQCodec, train_channels: np.ndarray) -> list:
    """Per channel: levels, levels used, entropy (bits) on the training frames vs log2 levels."""
    rows = []
    for c, n in enumerate(codec.cfg.channel_levels):
        p = np.bincount(train_channels[:, c], minlength=n) / len(train_channels)
        h = float(-np.sum(p[p > 0] * np.log2(p[p > 0])))
        rows.append(
            dict(
                channel=c,
                levels=n,
                used=int((p > 0).sum()),
                entropy_bits=round(h, 4),
                ceiling_bits=round(float(np.log2(n)), 4),
            )
        )
    return rows


def _feature_row(name, ft, f_hat, n_mels, var_t, feature_dim) -> dict:
    d, _ = V1.mel_distortion(ft, f_hat, n_mels)
    mse = float(np.mean((ft.astype(np.float64) - f_hat) ** 2))
    return dict(
        name=name, feature_mse=mse, unexplained=mse * feature_dim / var_t, mel_db=float(d.mean())
    )


def recon_table(codec: FSQCodec, ft: np.ndarray, ct: np.ndarray) -> list:
    """Held-out feature-domain reconstruction: PCA only, then the first k groups."""
    s = codec.spectral
    var_t = float(np.var(ft.astype(np.float64), axis=0).sum())
    z = codec.pca.project(ft)
    rows = [
        _feature_row(
            f"PCA-{codec.cfg.channels} only (no quantiser)",
            ft,
            codec.pca.unproject(z),
            s.n_mels,
            var_t,
            s.feature_dim,
        )
    ]
    per = codec.cfg.width
    for k in sorted({g for g in GROUPS_SHOWN if g < codec.cfg.groups} | {codec.cfg.groups}):
        if k <= codec.cfg.groups:
            f_hat = codec.decode_features(ct[:, : k * per])
            rows.append(
                _feature_row(f"{k} group{'s' * (k > 1)}", ft, f_hat, s.n_mels, var_t, s.feature_dim)
            )
    return rows


def _features(rows, corpus: Path, spectral: CodecConfig, pmap) -> list:
    jobs = [(str(corpus / r["path"]), spectral) for r in rows]
    return list(bar(pmap(V1._features_job, jobs), desc="features", total=len(jobs)))


def cmd_codec(args) -> int:
    from fsq_ship import codec_markdown  # the codec's section of the model card

    corpus, out = Path(args.corpus).expanduser(), Path(args.out).expanduser() / "codec"
    out.mkdir(parents=True, exist_ok=True)
    rows = load_manifest(corpus)
    cfg = None if args.bits else FSQConfig(groups=args.groups, levels=tuple(args.levels))
    spectral = CodecConfig()
    pool = ProcessPoolExecutor(args.workers) if args.workers > 1 else None
    pmap = (lambda f, xs: pool.map(f, xs, chunksize=8)) if pool else map
    t0 = time.monotonic()
    feats = _features(rows, corpus, spectral, pmap)
    timings = {"features_s": round(time.monotonic() - t0, 1)}
    is_train = np.array([r["split"] == "train" for r in rows])
    train = np.concatenate([f for f, t in zip(feats, is_train) if t])
    t0 = time.monotonic()
    if args.codec_file:  # another corpus's codec (a model warm-started on this corpus)
        codec = FSQCodec.load(Path(args.codec_file).expanduser())
    else:
        codec = FSQCodec.fit(train, cfg, spectral, bits=args.bits)
    timings["fit_s"] = round(time.monotonic() - t0, 1)
    size = codec.save(out / "fsqcodec.npz")
    codec = FSQCodec.load(out / "fsqcodec.npz")  # measure what ships (float16 PCA basis)
    codes = [codec.encode_features(f) for f in bar(feats, desc="encode")]
    ids, splits = zip(*((r["id"], r["split"]) for r in rows))
    save_codes(out / "codes.npz", ids, splits, codes, codec.frame_rate)
    test_idx = [i for i, r in enumerate(rows) if r["split"] == "test"]
    ft = np.concatenate([feats[i] for i in test_idx])
    ct = np.concatenate([codes[i] for i in test_idx])
    table = recon_table(codec, ft, ct)
    lsd = _lsd(rows, test_idx[: args.eval_wavs], corpus, out, pmap, args.gl_iters)
    table[0]["lsd_db"] = lsd["pca"]
    table[-1]["lsd_db"] = lsd["fsq"]
    if pool:
        pool.shutdown()
    usage = channel_usage(codec, np.concatenate([c for c, t in zip(codes, is_train) if t]))
    report = _codec_report(codec, size, table, usage, lsd, timings, len(test_idx), len(ft))
    (out / "codec.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "codec.md").write_text(codec_markdown(report))
    plot_usage(usage, out / "channel_usage.png")
    print(codec_markdown(report))
    return 0


def cmd_compare(args) -> int:
    """Which codec keeps the words: fsq_codec_compare.py, on this recipe's features."""
    import fsq_codec_compare

    corpus, out = Path(args.corpus).expanduser(), Path(args.out).expanduser() / "compare"
    out.mkdir(parents=True, exist_ok=True)
    rows = load_manifest(corpus)
    if args.max_utterances and len(rows) > args.max_utterances:
        keep = np.random.default_rng(0).choice(len(rows), args.max_utterances, replace=False)
        test = [i for i, r in enumerate(rows) if r["split"] == "test"]
        rows = [rows[i] for i in sorted(set(keep.tolist()) | set(test))]
    with ProcessPoolExecutor(args.workers) as pool:
        feats = _features(rows, corpus, CodecConfig(), lambda f, xs: pool.map(f, xs, chunksize=8))
    fsq_codec_compare.compare(args, rows, feats, corpus, out, V1.mel_distortion)
    return 0


def _lsd(rows, sub, corpus, out, pmap, n_iter) -> dict:
    jobs = [(str(corpus / rows[i]["path"]), str(out / "fsqcodec.npz"), n_iter) for i in sub]
    acc = {"pca": [], "fsq": []}
    ex = out / "examples"
    ex.mkdir(exist_ok=True)
    for j, (res, y) in enumerate(bar(pmap(_eval_job, jobs), desc="griffin-lim", total=len(jobs))):
        for k, v in res.items():
            acc[k].append(v)
        if j < 3:
            write_wav(
                ex / f"{rows[sub[j]]['id']}_fsq.wav", 0.9 * y / max(1e-9, np.abs(y).max()), 16000
            )
    return {k: float(np.mean(v)) for k, v in acc.items()} | {"utterances": len(sub)}


def _codec_report(codec, size, table, usage, lsd, timings, n_test, n_frames) -> dict:
    ent = sum(u["entropy_bits"] for u in usage)
    return dict(
        **codec.cfg.to_meta(),  # groups, levels, packed_range (per group where they differ)
        channels=codec.cfg.channels,
        frame_rate=codec.frame_rate,
        bits_per_frame=round(codec.cfg.bits_per_frame, 3),
        bits_per_second=round(codec.bits_per_second, 1),
        entropy_bits_per_frame=round(ent, 3),
        entropy_bits_per_second=round(ent * codec.frame_rate, 1),
        codec_npz_bytes=size,
        test_utterances=n_test,
        test_frames=n_frames,
        lsd_utterances=lsd["utterances"],
        table=table,
        channel_usage=usage,
        timings=timings,
    )


def plot_usage(usage: list, path: Path) -> None:
    try:
        plt = _plt()
    except ImportError:  # matplotlib is optional: no plot
        return
    c = [r["channel"] for r in usage]
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.bar(c, [r["ceiling_bits"] for r in usage], color="#ddd", label="ceiling log2(levels)")
    ax.bar(c, [r["entropy_bits"] for r in usage], color="#3a7", label="entropy (train)")
    ax.set_xlabel("channel (= PCA component; group = channel // 4)")
    ax.set_ylabel("bits")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------- train stage
def datasets(corpus: Path, out: Path, frontend=None):
    """(codec, train, held-out) of an encoded corpus; `frontend`: tables to keep (a warm
    start's phoneme and language ids), else the ones the model in `out` trained with
    (train/frontend.json), else the corpus's own."""
    from codecspec.frontend.text import Frontend
    from codecspec.train.dataset import TTSDataset

    trained = out / "train" / "frontend.json"
    if frontend is None and trained.is_file():
        frontend = Frontend.from_dict(json.loads(trained.read_text()))

    codes = out / "codec" / "codes.npz"
    if not codes.is_file():
        raise SystemExit(f"no {codes}: run `fsq.py codec` first")
    codec = FSQCodec.load(out / "codec" / "fsqcodec.npz")
    kw = dict(levels=codec.cfg.channels, frontend=frontend)
    train = TTSDataset(corpus, codes, "train", **kw)
    val = TTSDataset(corpus, codes, "test", frontend=train.frontend, levels=codec.cfg.channels)
    return codec, train, val


def model_config(codec: FSQCodec, train, **overrides):
    from codecspec.families.fsq.torch_model import FSQModelConfig
    from codecspec.families.fsq.train import frames_per_phoneme_token

    f = train.frontend
    # a timed corpus (corpus.py --timed, v3's) trains the v3 way: told espeak-ng's phoneme
    # track; levels per group have code ranges too wide for the AR-over-groups head
    kw = dict(aligned=train.utterances[0].track is not None)
    kw["ar_layers"] = 2 if codec.cfg.shared else 0
    kw["num_speakers"] = len(f.speakers)
    kw["frames_per_phoneme"] = round(frames_per_phoneme_token(train), 5)
    return FSQModelConfig(
        vocab_size=len(f.vocab),
        num_languages=len(f.languages),
        levels=codec.cfg.levels,
        groups=codec.cfg.groups,
        **(kw | overrides),
    )


def voice_frontend(init: Path, corpus: Path):
    """The warm start's phoneme and language tables, and this corpus's voices as speakers
    (a voice-prefix model reads them only to pair each utterance with a reference)."""
    from codecspec.frontend.text import Frontend, IdTable

    meta = json.loads((init.parent / "train.json").read_text())["frontend"]
    old = Frontend.from_dict(meta)
    voices = IdTable.from_manifest(load_manifest(corpus), "variant")
    return Frontend(old.vocab, old.languages, voices)


def cmd_train(args) -> int:
    import torch

    from codecspec.families.fsq.train import train_fsq

    torch.set_num_threads(args.threads)
    corpus, out = Path(args.corpus).expanduser(), Path(args.out).expanduser()
    init = Path(args.init).expanduser() if args.init else None
    frontend = voice_frontend(init, corpus) if init and args.voice_queries else None
    codec, train, val = datasets(corpus, out, frontend)
    voice = dict(voice_queries=args.voice_queries, num_speakers=1) if args.voice_queries else {}
    if init is not None:  # the warm start's own pace unit and structure
        voice["frames_per_phoneme"] = json.loads((init.parent / "train.json").read_text())[
            "config"
        ]["frames_per_phoneme"]
    cfg = model_config(codec, train, **voice)
    tdir = out / "train"
    tdir.mkdir(parents=True, exist_ok=True)
    (tdir / "frontend.json").write_text(json.dumps(train.frontend.to_dict()))
    log(f"train {train.stats()['frames']} frames, held-out {val.stats()['frames']} frames")
    model, curves = train_fsq(
        train,
        val,
        cfg,
        minutes=args.minutes,
        max_steps=args.max_steps,
        lr=args.lr,
        ar_frames=args.ar_frames,
        seed=args.seed,
        ckpt=tdir / "ckpt.pt",
        init=init,
    )
    summary = {
        "config": cfg.to_dict(),
        "frontend": train.frontend.to_dict(),
        "threads": args.threads,
        "steps": curves.steps[-1] if curves.steps else 0,
        "seconds": curves.seconds[-1] if curves.seconds else 0.0,
        "parameters": {
            "temporal": sum(p.numel() for p in model.temporal.parameters()),
            "ar_head": sum(p.numel() for p in model.ar.parameters()) if model.ar else 0,
        },
        "curves": curves.to_dict(),
        "train_stats": train.stats(),
        "heldout_stats": val.stats(),
    }
    (tdir / "train.json").write_text(json.dumps(summary))
    log(f"done: {summary['steps']} steps in {summary['seconds'] / 60:.1f} min; {curves.val[-1]}")
    return 0


# ---------------------------------------------------------------------------- folder
def export_folder(corpus: Path, cache: Path, dest: Path, data=None, sampling=None):
    """The trained checkpoint as a model folder at `dest` (graphs, codec, model.json,
    bench.json): (model, graph sizes, bench utterances). `data`: `datasets`' output."""
    import fsq_ship as sh

    codec, train, val = data or datasets(corpus, cache)
    model, ck = sh.load_trained(cache / "train" / "ckpt.pt")
    dest.mkdir(parents=True, exist_ok=True)
    sizes = sh.export(model, dest)
    sh.copy_codec(cache / "codec", dest)
    texts = sh.bench_texts(val, load_manifest(corpus))
    (dest / "bench.json").write_text(json.dumps({"utterances": texts}, indent=1) + "\n")
    meta = sh.model_json(ck, codec, train.frontend, sampling)
    (dest / "model.json").write_text(json.dumps(meta, indent=1) + "\n")
    if model.cfg.voice_queries:
        sh.write_voices(model, dest, list(train.frontend.speakers.names))
    return model, sizes, texts


def cmd_listen(args) -> int:
    """Words recognised on held-out corpus texts (not the evaluation sentences), in the
    report format of `v3.py listen --json`, so that `v3.py compare A B` pairs it with v3 on
    the same texts and seeds. --export: the current checkpoint into that folder first."""
    from v3 import listen_report

    import codecspec as cs
    from codecspec.evaluation.intelligibility import Recognizer, evaluate
    from codecspec.families.fsq.model import FSQTTS

    corpus, cache = Path(args.corpus).expanduser(), Path(args.out).expanduser()
    folder = Path(args.model)
    if args.export:
        folder = Path(args.export)
        export_folder(corpus, cache, folder)
    rows = load_manifest(corpus)
    texts = [r["text"] for r in rows if r["split"] == "test" and r["id"].endswith("r0")]
    for other in args.exclude_corpus:  # texts another compared model trained on
        seen = {r["text"] for r in load_manifest(Path(other).expanduser()) if r["split"] == "train"}
        texts = [t for t in texts if t not in seen]
    params = None  # the folder's own law unless --temperature says
    if args.temperature is not None:
        params = cs.SamplingParams(args.temperature, args.top_k, 1.0)
    tts = FSQTTS(folder, provider="cpu", threads=1, params=params)
    ends = []  # per clip: (frames, espeak-ng's frames for the text, max-length guard hit)

    def synthesize(text, seed):
        s = tts.generate(text, seed=seed, speaker=args.speaker)
        track = tts.phoneme_track(text, "en", args.speaker)[1] if tts.aligned else []
        ends.append((len(s.codes), len(track), not s.stopped))
        return s.wav, s.sample_rate

    seeds = list(range(args.seeds))
    rep = evaluate(synthesize, texts[: args.texts], seeds, recognizer=Recognizer(threads=1))
    rep["sampling"] = str(tts.params)
    return listen_report(rep, ends, folder, args.json)


# ---------------------------------------------------------------------------- ship stage
def cmd_ship(args) -> int:
    import fsq_ship as sh

    from codecspec.families.fsq.bench import bench_fsq

    corpus, cache = Path(args.corpus).expanduser(), Path(args.out).expanduser()
    dest = Path(args.model)
    dest.mkdir(parents=True, exist_ok=True)
    codec, train, val = datasets(corpus, cache)
    t0 = time.monotonic()
    law = {"temperature": args.temperature, "top_k": args.top_k, "top_p": 1.0}
    model, sizes, texts = export_folder(corpus, cache, dest, (codec, train, val), law)
    rep = {"sizes": sizes}
    log("exported; measuring")
    refs = None
    if model.cfg.voice_queries:  # held-out clips read with training clips of their voice
        from codecspec.families.fsq.train import VoiceReferences

        refs = VoiceReferences(val, pool=train, null_prob=0.0)
        rep["nll_null_prefix"] = sh.heldout_nll(model, val, refs=refs, null=True)
    rep["onnx_parity"] = sh.onnx_parity(dest, model, val, refs=refs)
    rep["nll"] = sh.heldout_nll(model, val, refs=refs)
    tr = np.concatenate([u.codes for u in train]).astype(np.int64)
    rep["marginal_multi_information"] = sh.marginal_multi_information(codec, tr)
    if model.ar is not None:  # the AR-over-groups comparison head (levels shared by groups)
        rep["ar_head_cost"] = sh.ar_head_cost(model, dest)
        rep["gap_breakdown"] = sh.gap_breakdown(model, codec, val)
    rep["stop_teacher_forced"] = sh.stop_teacher_forced(model, val, refs)
    rep["bench"] = bench_fsq(dest, args.bench_utterances, batch=8, provider="cpu")
    if refs is None:  # (a voice-prefix model's voices are not v3's speakers)
        rep["rtf_vs_reference"] = sh.compare_rtf(dest, texts[: args.bench_utterances])
    rep["sample"] = sh.write_sample(dest, texts[0])
    summary = json.loads((cache / "train" / "train.json").read_text())
    sh.plot_curves(summary["curves"], dest / "training_curves.png")
    rep["training"] = {k: summary[k] for k in ("steps", "seconds", "threads", "parameters")}
    rep["training"]["final_heldout"] = summary["curves"]["val"][-1]
    rep["codec"] = json.loads((cache / "codec" / "codec.json").read_text())
    rep["shipped_bytes"] = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    rep["ship_seconds"] = round(time.monotonic() - t0, 1)
    (dest / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
    if refs is not None:
        rep["listen"] = _listen_summary(args.listen_json)
        rep["voice_prefix"] = _voice_summary(args.voice_json)
        rep["config"], rep["voices"] = model.cfg.to_dict(), list(train.frontend.speakers.names)
        words = sh.words_lines(rep["listen"], sh.VOICE_WORDS_NOTE)
        card = sh.voice_card(rep, words, sh.voice_lines(rep["voice_prefix"]))
    elif model.cfg.aligned:
        rep["listen"] = _listen_summary(args.listen_json)
        card = sh.aligned_card(rep, sh.words_lines(rep["listen"]))
    else:
        card = sh.card(rep)
    (dest / "MODEL_CARD.md").write_text(card)
    rep["shipped_bytes"] = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    (dest / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
    log(f"shipped {rep['shipped_bytes'] / 1e6:.2f} MB to {dest}")
    return 0


def _listen_summary(path) -> dict:
    """The figures of a `listen --json` report (None: not measured)."""
    if not path:
        return {}
    rep = json.loads(Path(path).read_text())
    keys = ("words_recognised", "words_recognised_ci", "clips", "sentences", "runaways")
    return {k: rep[k] for k in keys} | {"length_within_15": rep.get("length_within_15")}


def _voice_summary(path) -> dict:
    """`bench/voice_prefix.py --out`'s summary and arguments (None: not measured)."""
    if not path:
        return {}
    rep = json.loads(Path(path).read_text())
    return {"summary": rep["summary"], "args": rep["args"]}


def cmd_all(args) -> int:
    if not (Path(args.out).expanduser() / "codec" / "codes.npz").is_file():
        cmd_codec(args)
    cmd_train(args)
    return cmd_ship(args)


# ---------------------------------------------------------------------------- CLI
CODEC_OPTS = [
    ("--groups", dict(type=int, default=8)),
    ("--levels", dict(type=int, nargs="+", default=[8, 7, 6, 6])),
    ("--bits", dict(type=float, default=None, help="levels follow the variances (not --levels)")),
    ("--eval-wavs", dict(type=int, default=16, help="held-out utterances for LSD")),
    ("--gl-iters", dict(type=int, default=32)),
    ("--workers", dict(type=int, default=2)),
    ("--codec-file", dict(default=None, help="encode with this fsqcodec.npz (no fitting)")),
]
TRAIN_OPTS = [
    ("--minutes", dict(type=float, default=32.0, help="wall-clock budget, resumes included")),
    ("--max-steps", dict(type=int, default=None)),
    ("--threads", dict(type=int, default=1)),
    ("--lr", dict(type=float, default=1.5e-3)),
    ("--ar-frames", dict(type=int, default=512, help="AR-head frames per step")),
    ("--seed", dict(type=int, default=0)),
    ("--voice-queries", dict(type=int, default=0, help="K of a voice prefix (0: speaker ids)")),
    ("--init", dict(default=None, help="warm start from this ckpt.pt (beside its train.json)")),
]
COMPARE_OPTS = [
    ("--bits", dict(type=float, nargs="*", default=[120, 160, 200], help="budgets to allocate")),
    ("--codec", dict(nargs="*", default=[], help="built fsqcodec.npz files to judge too")),
    ("--texts", dict(type=int, default=100, help="held-out corpus texts (r0 renditions)")),
    ("--seeds", dict(type=int, default=1, help="decoder (Griffin-Lim) seeds per text")),
    ("--sets", dict(nargs="*", default=[], help="evaluation sets too, report only")),
    ("--max-utterances", dict(type=int, default=0, help="fit on a sample (0: all)")),
    ("--v1-codec", dict(default=str(HERE.parents[1] / "python/codecspec/models/v3/codec.npz"))),
    ("--workers", dict(type=int, default=2)),
]
LISTEN_OPTS = [
    ("--texts", dict(type=int, default=120, help="held-out corpus texts (r0 renditions)")),
    ("--seeds", dict(type=int, default=2)),
    ("--export", dict(default=None, help="export the checkpoint into this folder first")),
    ("--json", dict(default=None, help="write the report (per clip) here")),
    ("--temperature", dict(type=float, default=None, help="judge another sampling law")),
    ("--top-k", dict(type=int, default=0)),
    ("--speaker", dict(default="f1", help="the voice (a voice-prefix model: one of its voices)")),
    (
        "--exclude-corpus",
        dict(nargs="*", default=[], help="leave out texts these corpora trained on"),
    ),
]
SHIP_OPTS = [
    ("--bench-utterances", dict(type=int, default=8)),
    ("--listen-json", dict(default=None, help="a `listen --json` report for the card")),
    ("--voice-json", dict(default=None, help="a bench/voice_prefix.py report (voice models)")),
    ("--temperature", dict(type=float, default=0.9, help="the folder's sampling law")),
    ("--top-k", dict(type=int, default=0)),
]
COMMON_OPTS = [
    ("--corpus", dict(default=str(CACHE / "corpus"))),
    ("--out", dict(default=str(CACHE / "fsq"), help="cache: codec/, train/ckpt.pt")),
    ("--model", dict(default=str(HERE.parents[1] / "python/codecspec/models/fsq"))),
]
STAGES = {
    "codec": (cmd_codec, CODEC_OPTS, "fit the GroupFSQ codec, encode the corpus, measure it"),
    "compare": (cmd_compare, COMPARE_OPTS, "which codec keeps the words (Whisper, held-out)"),
    "listen": (cmd_listen, LISTEN_OPTS, "words recognised on held-out corpus texts"),
    "train": (cmd_train, TRAIN_OPTS, "train the model (+ AR head); resumes from ckpt.pt"),
    "ship": (cmd_ship, SHIP_OPTS, "export, measure, write the model folder and card"),
    "all": (cmd_all, CODEC_OPTS + TRAIN_OPTS + SHIP_OPTS, "codec (unless done), train, ship"),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, (fn, opts, help_) in STAGES.items():
        p = sub.add_parser(name, help=help_)
        for flag, kw in opts + COMMON_OPTS:
            p.add_argument(flag, **kw)
        p.set_defaults(fn=fn)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
