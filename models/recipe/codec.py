"""Train the reference codec on a corpus from corpus.py, encode the corpus, measure it.

    python models/recipe/codec.py --corpus ~/.cache/codecspec/corpus \
        --out ~/.cache/codecspec/codec --seed 0

Writes to --out:
    codec.npz        the codec tables (codecspec.codec.Codec.load)
    codes.npz        codes of every corpus utterance: codes int16 [N, 16] (all utterances
                     concatenated in manifest order), offsets int64 [U + 1], ids, splits
    recon.md/.json   reconstruction error on held-out text after 1, 2, 4, 8, 16 levels
    recon.png        the same as a plot (when matplotlib is importable)
    examples/        a few held-out utterances decoded with 1, 4 and 16 levels, to listen to
    train.json       configuration, timings, sizes, code usage per level
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

try:
    from codecspec.codec import Codec, CodecConfig, frame_features, read_wav, write_wav
    from codecspec.codec.data import load_manifest, save_codes
    from codecspec.codec.features import griffin_lim, log_spectral_distance, stft
    from codecspec.progress import bar
except ImportError:  # running from a checkout whose package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from codecspec.codec import Codec, CodecConfig, frame_features, read_wav, write_wav
    from codecspec.codec.data import load_manifest, save_codes
    from codecspec.codec.features import griffin_lim, log_spectral_distance, stft
    from codecspec.progress import bar

LEVELS = (1, 2, 4, 8, 16)
DB = 20.0 / np.log(10.0)  # natural-log magnitude difference -> dB


def log(msg: str) -> None:
    print(f"[codec] {msg}", file=sys.stderr, flush=True)


def read_manifest(corpus: Path) -> list[dict]:
    try:
        return load_manifest(corpus)
    except ValueError:
        raise SystemExit(f"--corpus: no manifest.jsonl in {corpus}; run corpus.py first") from None


def _load(path: str, sample_rate: int) -> np.ndarray:
    x, sr = read_wav(path)
    if sr != sample_rate:
        raise ValueError(f"{path}: sample rate {sr}, the codec expects {sample_rate}")
    return x


def _features_job(a):
    path, cfg = a
    return frame_features(_load(path, cfg.sample_rate), cfg)


def _eval_job(a):
    """Waveform-domain figures for one held-out utterance: LSD after Griffin-Lim from the true
    STFT magnitude, from the true log-mel, and from the codes truncated to each level count."""
    path, codec_path, codes, n_iter = a
    codec = Codec.load(codec_path)
    c = codec.cfg
    x = _load(path, c.sample_rate)
    n = codes.shape[0] * c.frame_hop
    mag = np.abs(stft(x, c.n_fft, c.stft_hop, c.win_length, codes.shape[0] * c.subframes))
    out = {
        "stft": log_spectral_distance(
            x, griffin_lim(mag, c.n_fft, c.stft_hop, c.win_length, n, n_iter=n_iter)
        )
    }
    f = codec.features(x)
    out["mel"] = log_spectral_distance(x, codec.features_to_wav(f, n_iter))
    out["pca"] = log_spectral_distance(
        x, codec.features_to_wav(codec.unproject(codec.project(f)), n_iter)
    )
    wavs = {}
    for lv in LEVELS:
        y = codec.decode(codes[:, :lv], n_iter=n_iter)
        out[lv] = log_spectral_distance(x, y)
        wavs[lv] = y
    return out, wavs


def mel_distortion(f_ref: np.ndarray, f_est: np.ndarray, n_mels: int, floor_db=60.0):
    """Mean over active sub-frames of the RMS over mel bands of the dB difference.

    Active: sub-frame mel energy within ``floor_db`` of the utterance's loudest sub-frame, so
    the silence every codec reproduces trivially does not dilute the figure."""
    r = f_ref.reshape(-1, n_mels).astype(np.float64)
    e = f_est.reshape(-1, n_mels).astype(np.float64)
    energy = 10.0 * np.log10(np.exp(2.0 * r).sum(axis=1))
    active = energy > energy.max() - floor_db
    d = np.sqrt(np.mean((DB * (r - e)) ** 2, axis=1))
    return d[active], active


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus")
    ap.add_argument("--out", default="~/.cache/codecspec/codec")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--codebook-size", type=int, default=1024)
    ap.add_argument("--codebooks", type=int, default=16)
    ap.add_argument("--pca-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=10, help="Lloyd iterations per level")
    ap.add_argument("--max-train-frames", type=int, default=0, help="subsample (0 = all)")
    ap.add_argument("--eval-wavs", type=int, default=24, help="held-out utterances for LSD")
    ap.add_argument("--gl-iters", type=int, default=32, help="Griffin-Lim iterations")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    corpus, out = Path(args.corpus).expanduser(), Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    rows = read_manifest(corpus)
    cfg = CodecConfig(
        pca_dim=args.pca_dim, n_codebooks=args.codebooks, codebook_size=args.codebook_size
    )
    timings = {}
    pool = ProcessPoolExecutor(args.workers) if args.workers > 1 else None
    pmap = (lambda f, xs: pool.map(f, xs, chunksize=8)) if pool else map

    t0 = time.monotonic()
    jobs = [(str(corpus / r["path"]), cfg) for r in rows]
    feats = list(bar(pmap(_features_job, jobs), desc="features", total=len(jobs)))
    timings["features_s"] = round(time.monotonic() - t0, 1)
    is_train = np.array([r["split"] == "train" for r in rows])
    train = np.concatenate([f for f, t in zip(feats, is_train) if t])
    if args.max_train_frames and train.shape[0] > args.max_train_frames:
        rng = np.random.default_rng(args.seed)
        keep = np.sort(rng.choice(train.shape[0], args.max_train_frames, replace=False))
        train = train[keep]
    log(f"{len(rows)} utterances, {train.shape[0]} training frames of {cfg.feature_dim} dims")

    t0 = time.monotonic()
    level_mse = []

    def on_level(lvl, mse):
        level_mse.append(mse)
        log(
            f"level {lvl + 1:2d}/{cfg.n_codebooks}: train MSE {mse:.4f} "
            f"({time.monotonic() - t0:.0f}s)"
        )

    codec = Codec.fit(train, cfg, iters=args.iters, seed=args.seed, progress=on_level)
    timings["train_s"] = round(time.monotonic() - t0, 1)
    size = codec.save(out / "codec.npz")
    codec = Codec.load(out / "codec.npz")  # measure what ships (float16 tables)
    log(f"codec.npz: {size / 1e6:.2f} MB, trained in {timings['train_s']} s")

    # PCA spectrum on the training frames: how much the truncation alone loses
    tot_var = float(np.var(train.astype(np.float64), axis=0).sum())
    z_train = codec.project(train)
    pca_var = float(np.var(z_train.astype(np.float64), axis=0).sum())

    t0 = time.monotonic()
    codes = [codec.encode_features(f) for f in bar(feats, desc="encode")]
    timings["encode_s"] = round(time.monotonic() - t0, 1)
    save_codes(
        out / "codes.npz",
        [r["id"] for r in rows],
        [r["split"] for r in rows],
        codes,
        cfg.frame_rate,
    )
    allc = np.concatenate(codes)
    offsets = np.concatenate([[0], np.cumsum([c.shape[0] for c in codes])])
    tr = allc[np.repeat(is_train, np.diff(offsets))]
    usage = []
    for lvl in range(cfg.n_codebooks):
        p = np.bincount(tr[:, lvl], minlength=cfg.codebook_size) / tr.shape[0]
        h = -np.sum(p[p > 0] * np.log2(p[p > 0]))
        usage.append(dict(level=lvl, used=int((p > 0).sum()), entropy_bits=round(float(h), 3)))

    # ---- feature-domain reconstruction on held-out text --------------------------------
    test_idx = [i for i, r in enumerate(rows) if r["split"] == "test"]
    if not test_idx:
        raise SystemExit("the corpus has no test split (was --test-fraction 0?)")
    ft = np.concatenate([feats[i] for i in test_idx])
    ct = np.concatenate([codes[i] for i in test_idx])
    zt = codec.project(ft)
    var_t = float(np.var(ft.astype(np.float64), axis=0).sum())
    table = []

    def feature_row(name, f_hat):
        d, _ = mel_distortion(ft, f_hat, cfg.n_mels)
        mse = float(np.mean((ft.astype(np.float64) - f_hat) ** 2))
        return dict(
            name=name,
            feature_mse=mse,
            unexplained=mse * cfg.feature_dim / var_t,
            mel_db=float(d.mean()),
        )

    table.append(feature_row("PCA only", codec.unproject(zt)))
    for lv in LEVELS:
        table.append(
            feature_row(f"{lv} level{'s' if lv > 1 else ''}", codec.decode_features(ct[:, :lv]))
        )

    # every single level, not just 1/2/4/8/16: each must lower the held-out error
    curve = [
        float(np.mean((codec.decode_features(ct[:, :k]).astype(np.float64) - ft) ** 2))
        for k in range(1, cfg.n_codebooks + 1)
    ]

    # ---- waveform domain: Griffin-Lim on a subset of held-out utterances --------------------
    t0 = time.monotonic()
    sub = test_idx[: args.eval_wavs]
    ejobs = [
        (str(corpus / rows[i]["path"]), str(out / "codec.npz"), codes[i], args.gl_iters)
        for i in sub
    ]
    lsd = {k: [] for k in ("stft", "mel", "pca", *LEVELS)}
    ex = out / "examples"
    ex.mkdir(exist_ok=True)
    for j, (res, wavs) in enumerate(
        bar(pmap(_eval_job, ejobs), desc="griffin-lim", total=len(ejobs))
    ):
        for k, v in res.items():
            lsd[k].append(v)
        if j < 3:
            rid = rows[sub[j]]["id"]
            x = _load(str(corpus / rows[sub[j]]["path"]), cfg.sample_rate)
            write_wav(ex / f"{rid}_orig.wav", x, cfg.sample_rate)
            for lv in (1, 4, 16):
                write_wav(
                    ex / f"{rid}_L{lv:02d}.wav",
                    0.9 * wavs[lv] / max(1e-9, np.abs(wavs[lv]).max()),
                    cfg.sample_rate,
                )
    timings["eval_s"] = round(time.monotonic() - t0, 1)
    if pool:
        pool.shutdown()
    table[0]["lsd_db"] = float(np.mean(lsd["pca"]))
    for row, lv in zip(table[1:], LEVELS):
        row["lsd_db"] = float(np.mean(lsd[lv]))
    decreasing = all(
        a["mel_db"] > b["mel_db"]
        and a["feature_mse"] > b["feature_mse"]
        and a["lsd_db"] > b["lsd_db"]
        for a, b in zip(table[1:], table[2:])
    ) and all(a > b for a, b in zip(curve, curve[1:]))
    if not decreasing:
        log("WARNING: reconstruction error is not strictly decreasing with levels")

    hours = sum(r["duration"] for r in rows) / 3600.0
    test_hours = sum(rows[i]["duration"] for i in test_idx) / 3600.0
    report = dict(
        config=dict(cfg.__dict__),
        seed=args.seed,
        iters=args.iters,
        corpus=str(corpus),
        corpus_hours=round(hours, 3),
        train_frames=int(train.shape[0]),
        test_utterances=len(test_idx),
        test_frames=int(ft.shape[0]),
        test_hours=round(test_hours, 3),
        eval_wavs=len(sub),
        gl_iters=args.gl_iters,
        codec_npz_bytes=size,
        codec_table_bytes=codec.nbytes,
        codes_npz_bytes=(out / "codes.npz").stat().st_size,
        pca_explained=round(pca_var / tot_var, 5),
        train_mse_per_level=[round(v, 5) for v in level_mse],
        code_usage=usage,
        lsd_reference=dict(stft_gl=float(np.mean(lsd["stft"])), mel_gl=float(np.mean(lsd["mel"]))),
        table=table,
        test_mse_per_level=[round(v, 5) for v in curve],
        strictly_decreasing=decreasing,
        timings=timings,
        cpu_count=os.cpu_count(),
    )
    (out / "train.json").write_text(json.dumps(report, indent=2) + "\n")
    md = render_markdown(report)
    (out / "recon.md").write_text(md)
    (out / "recon.json").write_text(json.dumps(table, indent=2) + "\n")
    plot(report, out / "recon.png")
    print(md)
    return 0


def render_markdown(rep: dict) -> str:
    c = rep["config"]
    lines = [
        f"Codec reconstruction on held-out text ({rep['test_utterances']} utterances, "
        f"{rep['test_hours']:.2f} h, {rep['test_frames']} frames; LSD on "
        f"{rep['eval_wavs']} of them, Griffin-Lim {rep['gl_iters']} iterations). "
        f"{c['n_codebooks']} x {c['codebook_size']} codebooks over PCA-{c['pca_dim']} of "
        f"{c['frame_hop'] // c['stft_hop']} x {c['n_mels']} log-mel; PCA keeps "
        f"{100 * rep['pca_explained']:.2f}% of the training variance.",
        "",
        "| levels | feature MSE | unexplained var. | mel distortion (dB) | LSD after GL (dB) |",
        "|---|---|---|---|---|",
    ]
    for r in rep["table"]:
        lines.append(
            f"| {r['name']} | {r['feature_mse']:.4f} | {100 * r['unexplained']:.1f}% | "
            f"{r['mel_db']:.2f} | {r['lsd_db']:.2f} |"
        )
    ref = rep["lsd_reference"]
    lines += [
        "",
        f"Floors: LSD of Griffin-Lim from the true STFT magnitude {ref['stft_gl']:.2f} dB, from "
        f"the true log-mel (no PCA, no VQ) {ref['mel_gl']:.2f} dB.",
        "Held-out feature MSE after each of the 16 levels: "
        + ", ".join(f"{v:.3f}" for v in rep["test_mse_per_level"]),
        "Strictly decreasing with every added level: "
        + ("yes" if rep["strictly_decreasing"] else "NO"),
        "",
    ]
    return "\n".join(lines)


def plot(rep: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not importable; no plot")
        return
    rows = rep["table"][1:]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    keys = (
        ("feature_mse", "feature MSE (log-mel)"),
        ("mel_db", "mel distortion (dB)"),
        ("lsd_db", "LSD after Griffin-Lim (dB)"),
    )
    for ax, (k, title) in zip(axes, keys):
        ax.plot(LEVELS, [r[k] for r in rows], "o-", label="RVQ levels")
        ax.axhline(rep["table"][0][k], color="gray", ls="--", label="PCA only (no VQ)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(LEVELS, [str(v) for v in LEVELS])
        ax.set_xlabel("levels used")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
