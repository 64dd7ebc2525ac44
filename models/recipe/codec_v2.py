"""Fit codec v2 (grid levels over PCA, issue 12) on the reference corpus and measure it beside
v1's RVQ codec, per level, as docs/codec_v2.md section 0 does.

    OMP_NUM_THREADS=1 nice -n 10 python models/recipe/codec_v2.py \
        --corpus ~/.cache/codecspec/corpus --out ~/.cache/codecspec/codec_v2
    python models/recipe/codec_v2.py --sweep      # short run: what each lever buys

Writes to --out:
    features.npz     stacked log-mel of every corpus utterance (a cache; delete to rebuild)
    renders/         held-out texts re-rendered by espeak-ng: as in the corpus, pitch +1, rate +2
    codec_v2.npz     the codec (codecspec.families.v2.codec.CodecV2.load)
    report.json/.md  per level, v2 and v1: stability, group sizes, reconstruction, kNN depth
                     predictor, within-group swap distortion
    sweep.json/.md   (--sweep) the same figures, cheaper, for several v2 configurations
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
try:
    import codecspec  # noqa: F401
except ImportError:  # running from a checkout whose package is not installed
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "models" / "recipe"))

from codec import mel_distortion, read_manifest  # noqa: E402  (the v1 recipe's helpers)
from corpus import synth  # noqa: E402

from codecspec.codec import Codec, frame_features, read_wav  # noqa: E402
from codecspec.codec.features import log_spectral_distance  # noqa: E402
from codecspec.codec.rvq import rvq_decode, rvq_encode  # noqa: E402
from codecspec.families.v2.codec import CodecV2, V2Config, mean_group_size, stability  # noqa: E402
from codecspec.progress import bar  # noqa: E402

LEVELS = (1, 2, 4, 8, 16)
# the brief's θ grid is 0.9..0.6; the tighter ones show where within-group swaps stay inaudible
THETAS = (0.99, 0.98, 0.95, 0.9, 0.8, 0.7, 0.6)
BUDGETS = (0.02, 0.05)  # dB of added mel distortion per level allowed by a per-level θ schedule
V1_PATH = ROOT / "models" / "reference" / "codec.npz"
PERTURB = {"pitch+1": ("pitch", 1), "rate+2": ("rate", 2)}


def log(msg: str) -> None:
    print(f"[codec_v2] {msg}", file=sys.stderr, flush=True)


def ints(s: str) -> tuple:
    return tuple(int(v) for v in s.split(","))


# ---- codec adapters: v1 and v2 measured by the same code ------------------------------------
class Groups:
    """Each level's cs.AcousticGroups at a θ and its dense membership matrix, built once."""

    def groups(self, k: int, theta: float):
        import codecspec as cs

        cache = self.__dict__.setdefault("_groups", {})
        if (k, theta) not in cache:
            g = cs.AcousticGroups.from_embeddings(self.embeddings(k), theta)
            m = np.zeros((g.vocab_size, g.vocab_size), bool)
            for a in range(g.num_groups):
                m[a, g.members(a)] = True
            cache[k, theta] = (g, m)
        return cache[k, theta]


class V1(Groups):
    """The shipped RVQ codec behind the interface the measurements use."""

    name = "v1 RVQ 16x1024"

    def __init__(self, codec: Codec):
        self.c = codec
        self.books = codec.codebooks.astype(np.float32)
        self.n_levels = codec.cfg.n_codebooks

    def project(self, f):
        return self.c.project(f)

    def encode_features(self, f):
        return self.c.encode_features(f)

    def latent(self, codes):
        return rvq_decode(codes, self.books)

    def unproject(self, z):
        return self.c.unproject(z)

    def decode(self, codes, n_iter):
        return self.c.decode(codes, n_iter=n_iter)

    def requantise(self, z_rest):
        """Codes of levels 1.. for a residual (what is left after c0)."""
        return rvq_encode(z_rest, self.books[1:])

    def embeddings(self, k):
        return self.books[k]


class V2(Groups):
    def __init__(self, codec: CodecV2, name: str):
        self.c = codec
        self.name = name
        self.n_levels = codec.n_levels

    def project(self, f):
        return self.c.pca.project(f)

    def encode_features(self, f):
        return self.c.encode_features(f)

    def latent(self, codes):
        return self.c.latent(codes)

    def unproject(self, z):
        return self.c.pca.unproject(z)

    def decode(self, codes, n_iter):
        return self.c.decode(codes, n_iter=n_iter)

    def requantise(self, z_rest, c0_latent):
        return self.c.encode_latent(c0_latent + z_rest, first_level=1, start=c0_latent)

    def embeddings(self, k):
        return self.c.embeddings(k)


# ---- data -----------------------------------------------------------------------------------
def load_features(rows, corpus: Path, cache: Path, cfg) -> list[np.ndarray]:
    if cache.exists():
        with np.load(cache) as z:
            if list(z["ids"]) == [r["id"] for r in rows]:
                off, f = z["offsets"], z["f"]  # one read: every z[...] access re-reads
                return [f[a:b] for a, b in zip(off[:-1], off[1:])]
    t0 = time.monotonic()
    feats = [
        frame_features(read_wav(str(corpus / r["path"]))[0], cfg)
        for r in bar(rows, desc="features")
    ]
    off = np.concatenate([[0], np.cumsum([f.shape[0] for f in feats])])
    np.savez(cache, f=np.concatenate(feats), offsets=off, ids=np.array([r["id"] for r in rows]))
    log(f"features of {len(rows)} utterances in {time.monotonic() - t0:.0f}s (cached)")
    return feats


def render_perturbed(rows, out: Path) -> dict:
    """{kind: [wav]} for 'base' (the corpus parameters) and each PERTURB kind."""
    res = {"base": []} | {k: [] for k in PERTURB}
    for r in bar(rows, desc="espeak-ng"):
        for kind in res:
            job = dict(r, root=str(out / "renders"), path=f"{kind}/{r['id']}.wav")
            if kind != "base":
                key, d = PERTURB[kind]
                job[key] = min(99, r[key] + d) if key == "pitch" else r[key] + d
            p = out / "renders" / job["path"]
            if not p.exists():
                synth(job)
            res[kind].append(read_wav(str(p))[0])
    return res


def dtw_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Frame pairs (i, j) on the DTW path between feature rows a [Ta, D] and b [Tb, D], one
    pair per frame of a (its first match): re-renders at another rate are not frame-aligned."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cost = (a64**2).sum(1)[:, None] + (b64**2).sum(1)[None, :] - 2.0 * a64 @ b64.T
    ta, tb = cost.shape
    acc = np.full((ta + 1, tb + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, ta + 1):
        row = acc[i]
        up = np.minimum(acc[i - 1, 1:], acc[i - 1, :-1])
        for j in range(1, tb + 1):
            row[j] = cost[i - 1, j - 1] + min(up[j - 1], row[j - 1])
    i, j, path = ta, tb, []
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        step = np.argmin([acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]])
        i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
    path = np.array(path[::-1])
    _, first = np.unique(path[:, 0], return_index=True)
    return path[first]


def stability_figures(codecs, renders, cfg) -> dict:
    """{codec: {kind: {identical: [L], within_one: [L]}}} over all frames of the clips."""
    out = {}
    base_f = [frame_features(x, cfg) for x in renders["base"]]
    for kind in PERTURB:
        pert_f = [frame_features(x, cfg) for x in renders[kind]]
        pairs = []
        for fa, fb in zip(base_f, pert_f):
            if fa.shape == fb.shape and kind.startswith("pitch"):
                pairs.append(np.stack([np.arange(fa.shape[0])] * 2, 1))
            else:
                pairs.append(dtw_pairs(fa, fb))
        for name, c in codecs.items():
            ca = np.concatenate([c.encode_features(f)[p[:, 0]] for f, p in zip(base_f, pairs)])
            cb = np.concatenate([c.encode_features(f)[p[:, 1]] for f, p in zip(pert_f, pairs)])
            out.setdefault(name, {})[kind] = stability(getattr(c, "c", None), ca, cb)
    return out


def group_figures(codecs) -> dict:
    """{codec: [[mean group size per θ] per level]} over each level's embeddings."""
    return {
        name: [[mean_group_size(c.groups(k, t)[0]) for t in THETAS] for k in range(c.n_levels)]
        for name, c in codecs.items()
    }


def recon_figures(c, test_f, codes_t, n_mels) -> dict:
    ft = np.concatenate(test_f)
    ct = np.concatenate(codes_t)
    var_t = float(np.var(ft.astype(np.float64), axis=0).sum())
    dim = ft.shape[1]
    curve, table = [], []
    for k in range(1, c.n_levels + 1):
        fh = c.unproject(c.latent(ct[:, :k]))
        mse = float(np.mean((ft.astype(np.float64) - fh) ** 2))
        curve.append(mse)
        if k in LEVELS:
            d, _ = mel_distortion(ft, fh, n_mels)
            table.append(
                dict(
                    levels=k, feature_mse=mse, unexplained=mse * dim / var_t, mel_db=float(d.mean())
                )
            )
    fh = c.unproject(c.project(ft))
    d, _ = mel_distortion(ft, fh, n_mels)
    mse = float(np.mean((ft.astype(np.float64) - fh) ** 2))
    pca = dict(levels=0, feature_mse=mse, unexplained=mse * dim / var_t, mel_db=float(d.mean()))
    return dict(table=table, curve=curve, pca=pca)


def lsd_figures(c, wavs, codes, n_iter) -> list:
    """Mean LSD (dB) after the vocoder for each of LEVELS, over the clips."""
    res = {lv: [] for lv in LEVELS}
    for x, cc in bar(list(zip(wavs, codes)), desc=f"griffin-lim {c.name}"):
        for lv in LEVELS:
            res[lv].append(log_spectral_distance(x, c.decode(cc[:, :lv], n_iter)))
    return [float(np.mean(res[lv])) for lv in LEVELS]


def knn_figures(c, train_codes, test_codes, k_nn: int, max_train: int, seed: int) -> dict:
    """The note's crude depth predictor: from c0's latent and the previous frame's full latent,
    average the levels-1.. latent of the k nearest training frames, quantise it with the codec
    (c0 given); per level 1..L-1, exact and within-one-step accuracy against the true codes."""

    def xy(codes_list):
        xs, ys, c0s, cs_ = [], [], [], []
        for cc in codes_list:
            if cc.shape[0] < 2:
                continue
            full = c.latent(cc)
            c0 = c.latent(cc[:, :1])
            xs.append(np.concatenate([c0[1:], full[:-1]], 1))
            ys.append(full[1:] - c0[1:])
            c0s.append(c0[1:])
            cs_.append(cc[1:])
        return np.concatenate(xs), np.concatenate(ys), np.concatenate(c0s), np.concatenate(cs_)

    xtr, ytr, _, ctr = xy(train_codes)
    if xtr.shape[0] > max_train:
        keep = np.sort(np.random.default_rng(seed).choice(xtr.shape[0], max_train, replace=False))
        xtr, ytr, ctr = xtr[keep], ytr[keep], ctr[keep]
    xte, _, c0te, cte = xy(test_codes)
    n2 = (xtr.astype(np.float64) ** 2).sum(1)
    pred = np.empty((xte.shape[0], ytr.shape[1]), np.float32)
    vote = np.empty((xte.shape[0], ctr.shape[1] - 1), np.int64)
    for s in range(0, xte.shape[0], 256):
        d = n2[None, :] - 2.0 * (xte[s : s + 256] @ xtr.T)
        nn = np.argpartition(d, k_nn, axis=1)[:, :k_nn]
        nn = np.take_along_axis(nn, np.argsort(np.take_along_axis(d, nn, 1), 1), 1)
        pred[s : s + 256] = ytr[nn].mean(1)
        # the most frequent code among the neighbours per level (ties: the nearest's): the
        # top-1 a classifier trained on these frames would approach
        nc = ctr[nn][:, :, 1:]  # [b, k, L-1]
        same = (nc[:, :, None, :] == nc[:, None, :, :]).sum(2)
        vote[s : s + 256] = np.take_along_axis(nc, same.argmax(1)[:, None, :], 1)[:, 0]
    got = c.requantise(pred, c0te) if isinstance(c, V2) else c.requantise(pred)
    out = dict(frames=int(xte.shape[0]), k=k_nn, train_frames=int(xtr.shape[0]))
    for name, p in (("mean", got), ("vote", vote)):
        r = dict(exact=(p == cte[:, 1:]).mean(0).tolist())
        if isinstance(c, V2):
            r["within_one"] = [
                float(c.c.within_one_step(k, p[:, k - 1], cte[:, k]).mean())
                for k in range(1, c.n_levels)
            ]
        # group level: the true code's group at θ holds the prediction (groups are symmetric)
        r["group"] = {
            str(t): [
                float(c.groups(k, t)[1][cte[:, k], p[:, k - 1]].mean())
                for k in range(1, c.n_levels)
            ]
            for t in THETAS
        }
        out[name] = r
    return out


def swap_figures(c: V2, test_f, codes_t, n_mels, seed: int) -> dict:
    """Log-mel distortion added when codes are replaced by a random other member of their
    group at θ (what a group-level accepted draft can change): per level alone and all
    levels 1.. at once; Δ dB against the true codes' distortion."""
    ft = np.concatenate(test_f)
    ct = np.concatenate(codes_t).astype(np.int64)
    rng = np.random.default_rng(seed)
    base, _ = mel_distortion(ft, c.unproject(c.latent(ct)), n_mels)
    out, news = {}, {}
    for t in THETAS:
        per, swapped = [], ct.copy()
        for k in range(c.n_levels):
            g = c.groups(k, t)[0]
            new = ct[:, k].copy()
            for i, code in enumerate(ct[:, k]):
                m = g.members(int(code))
                if len(m) > 1:
                    m = m[m != code]
                    new[i] = m[rng.integers(len(m))]
            news[k, t] = new
            one = ct.copy()
            one[:, k] = new
            d, _ = mel_distortion(ft, c.unproject(c.latent(one)), n_mels)
            per.append(float(d.mean() - base.mean()))
            if k > 0:
                swapped[:, k] = new
        d, _ = mel_distortion(ft, c.unproject(c.latent(swapped)), n_mels)
        out[str(t)] = dict(per_level=per, levels_1_up=float(d.mean() - base.mean()))
    # per-level θ: the loosest θ whose swaps at that level alone stay within the budget
    # (None: exact acceptance there), then every level 1.. swapped at once under it
    sched = {}
    for b in BUDGETS:
        thetas, swapped = [], ct.copy()
        for k in range(1, c.n_levels):
            ok = [t for t in THETAS if out[str(t)]["per_level"][k] <= b]
            t = min(ok) if ok else None
            thetas.append(t)
            if t is not None:
                swapped[:, k] = news[k, t]
        d, _ = mel_distortion(ft, c.unproject(c.latent(swapped)), n_mels)
        sched[str(b)] = dict(theta=thetas, levels_1_up=float(d.mean() - base.mean()))
    out["schedule"] = sched
    return out


# ---- main -----------------------------------------------------------------------------------
def config_from(args) -> V2Config:
    return V2Config.blocks(
        grid=ints(args.grid),
        n_levels=16,
        refine=args.refine,
        refine_grid=ints(args.refine_grid) if args.refine_grid else None,
        bins=args.bins,
        interleave=args.order == "interleave",
    )


SWEEP = [
    ("grid 8,8,4,4 uniform", dict(grid=(8, 8, 4, 4), bins="uniform")),
    ("grid 8,8,4,4 quantile", dict(grid=(8, 8, 4, 4), bins="quantile")),
    ("grid 8,8,4,4 lloyd", dict(grid=(8, 8, 4, 4), bins="lloyd")),
    ("grid 6,6,6,6 lloyd", dict(grid=(6, 6, 6, 6), bins="lloyd")),
    ("grid 32,32 lloyd", dict(grid=(32, 32), bins="lloyd")),
    ("grid 4x6 (4096) lloyd", dict(grid=(4,) * 6, bins="lloyd")),
    (
        "grid 8,8,4,4 lloyd + 4 refine 4,4,4,4",
        dict(grid=(8, 8, 4, 4), bins="lloyd", refine=4, refine_grid=(4, 4, 4, 4)),
    ),
    ("grid 4x6 uniform + 4 refine 4x6", dict(grid=(4,) * 6, bins="uniform", refine=4)),
    ("grid 4x6 lloyd + 4 refine 4x6", dict(grid=(4,) * 6, bins="lloyd", refine=4)),
    ("grid 4x6 lloyd + 6 refine 4x6", dict(grid=(4,) * 6, bins="lloyd", refine=6)),
    ("grid 4x6 lloyd + 8 refine 4x6", dict(grid=(4,) * 6, bins="lloyd", refine=8)),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus")
    ap.add_argument("--out", default="~/.cache/codecspec/codec_v2")
    ap.add_argument("--v1", default=str(V1_PATH), help="the v1 codec.npz to compare with")
    ap.add_argument("--grid", default="4,4,4,4,4,4", help="bins per component of each level")
    ap.add_argument("--refine", type=int, default=4, help="levels that refine residuals")
    ap.add_argument("--refine-grid", default="4,4,4,4,4,4", help="bins of a refinement level")
    ap.add_argument("--bins", default="lloyd", choices=("uniform", "quantile", "lloyd"))
    ap.add_argument(
        "--order",
        default="interleave",
        choices=("interleave", "tail"),
        help="refinement levels right after the level they refine, or after all first passes",
    )
    ap.add_argument("--iters", type=int, default=30, help="Lloyd-Max iterations")
    ap.add_argument("--stability-utts", type=int, default=24, help="held-out clips re-rendered")
    ap.add_argument("--eval-wavs", type=int, default=24, help="held-out clips for LSD")
    ap.add_argument("--knn-utts", type=int, default=25, help="held-out clips for the kNN")
    ap.add_argument("--knn-k", type=int, default=8)
    ap.add_argument("--knn-train", type=int, default=60000, help="training frames searched")
    ap.add_argument("--gl-iters", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sweep", action="store_true", help="short run over SWEEP configurations")
    ap.add_argument("--sweep-train", type=int, default=40000, help="training frames per config")
    args = ap.parse_args(argv)
    for name in ("stability_utts", "eval_wavs", "knn_utts", "knn_k", "knn_train", "gl_iters"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')}: expected a positive integer")
    corpus, out = Path(args.corpus).expanduser(), Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    rows = read_manifest(corpus)
    v1 = V1(Codec.load(args.v1))
    spectral = v1.c.cfg
    timings = {}
    t0 = time.monotonic()
    feats = load_features(rows, corpus, out / "features.npz", spectral)
    timings["features_s"] = round(time.monotonic() - t0, 1)
    is_train = [r["split"] == "train" for r in rows]
    train_f = [f for f, t in zip(feats, is_train) if t]
    test_rows = [r for r, t in zip(rows, is_train) if not t]
    test_f = [f for f, t in zip(feats, is_train) if not t]
    train = np.concatenate(train_f)
    # one rendition per held-out text first, so the clips cover as many texts as possible
    order = sorted(range(len(test_rows)), key=lambda i: (test_rows[i]["id"][-2:], i))
    t0 = time.monotonic()
    renders = render_perturbed([test_rows[i] for i in order[: args.stability_utts]], out)
    timings["render_s"] = round(time.monotonic() - t0, 1)

    if args.sweep:
        return sweep(args, out, train, train_f, test_f, renders, spectral, v1)

    cfg = config_from(args)
    t0 = time.monotonic()
    codec = CodecV2.fit(train, cfg, spectral, iters=args.iters)
    timings["fit_s"] = round(time.monotonic() - t0, 1)
    size = codec.save(out / "codec_v2.npz")
    codec = CodecV2.load(out / "codec_v2.npz")  # measure what ships (float16 PCA basis)
    v2 = V2(
        codec,
        f"v2 {args.grid} {args.bins}"
        + (f" + {args.refine} refine {args.refine_grid} ({args.order})" if args.refine else ""),
    )
    codecs = {"v2": v2, "v1": v1}
    log(f"fitted {v2.name} in {timings['fit_s']}s, {size / 1e6:.2f} MB")
    rep = dict(
        v2_config=cfg.to_json(),
        v2_level_sizes=list(cfg.level_sizes),
        v2_bits_per_frame=cfg.bits_per_frame,
        v2_npz_bytes=size,
        names={k: c.name for k, c in codecs.items()},
        train_frames=int(train.shape[0]),
        test_utterances=len(test_f),
        test_frames=int(sum(f.shape[0] for f in test_f)),
        args=vars(args),
    )
    t0 = time.monotonic()
    rep["stability"] = stability_figures(codecs, renders, spectral)
    rep["stability_clips"] = len(renders["base"])
    timings["stability_s"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    rep["groups"] = group_figures(codecs)
    timings["groups_s"] = round(time.monotonic() - t0, 1)
    codes_test = {k: [c.encode_features(f) for f in test_f] for k, c in codecs.items()}
    rep["recon"] = {
        k: recon_figures(c, test_f, codes_test[k], spectral.n_mels) for k, c in codecs.items()
    }
    t0 = time.monotonic()
    rep["swap"] = swap_figures(v2, test_f, codes_test["v2"], spectral.n_mels, args.seed)
    timings["swap_s"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    rep["knn"] = {}
    for k, c in codecs.items():
        tr_codes = [c.encode_features(f) for f in bar(train_f, desc=f"encode {k}")]
        rep["knn"][k] = knn_figures(
            c, tr_codes, codes_test[k][: args.knn_utts], args.knn_k, args.knn_train, args.seed
        )
    timings["knn_s"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    wavs = [read_wav(str(corpus / r["path"]))[0] for r in test_rows[: args.eval_wavs]]
    for k, c in codecs.items():
        rep["recon"][k]["lsd_db"] = lsd_figures(
            c, wavs, codes_test[k][: args.eval_wavs], args.gl_iters
        )
    rep["eval_wavs"] = len(wavs)
    pca_lsd = [
        log_spectral_distance(
            x, v2.c.pca.features_to_wav(v2.unproject(v2.project(f)), args.gl_iters)
        )
        for x, f in zip(wavs, test_f)
    ]
    rep["recon"]["v2"]["pca"]["lsd_db"] = float(np.mean(pca_lsd))
    timings["lsd_s"] = round(time.monotonic() - t0, 1)
    for k in codecs:
        r = rep["recon"][k]
        r["strictly_decreasing"] = bool(
            all(a > b for a, b in zip(r["curve"], r["curve"][1:]))
            and all(a["mel_db"] > b["mel_db"] for a, b in zip(r["table"], r["table"][1:]))
            and all(a > b for a, b in zip(r["lsd_db"], r["lsd_db"][1:]))
        )
    rep["timings"] = timings
    rep["cpu_count"] = os.cpu_count()
    (out / "report.json").write_text(json.dumps(rep, indent=2) + "\n")
    md = render(rep)
    (out / "report.md").write_text(md)
    print(md)
    return 0


def sweep(args, out, train, train_f, test_f, renders, spectral, v1) -> int:
    """Feature-domain figures only (no Griffin-Lim) for each SWEEP configuration, fitted on a
    seeded subsample, with v1 beside them."""
    rng = np.random.default_rng(args.seed)
    sub = train[
        np.sort(rng.choice(train.shape[0], min(args.sweep_train, train.shape[0]), replace=False))
    ]
    utts = max(1, args.knn_utts)
    rows = []
    cands = [("v1 RVQ 16x1024", v1)]
    for name, kw in SWEEP:
        t0 = time.monotonic()
        cfg = V2Config.blocks(n_levels=16, **kw)
        cands.append((name, V2(CodecV2.fit(sub, cfg, spectral, iters=args.iters), name)))
        log(f"{name}: fitted in {time.monotonic() - t0:.0f}s")
    for name, c in cands:
        t0 = time.monotonic()
        codes_t = [c.encode_features(f) for f in test_f]
        rec = recon_figures(c, test_f, codes_t, spectral.n_mels)
        st = stability_figures({name: c}, renders, spectral)[name]
        tr_codes = [c.encode_features(f) for f in train_f[::4]]
        kn = knn_figures(c, tr_codes, codes_t[:utts], args.knn_k, 20000, args.seed)
        sw = swap_figures(c, test_f[:utts], codes_t[:utts], spectral.n_mels, args.seed)
        grp = [[mean_group_size(c.groups(k, t)[0]) for t in THETAS] for k in range(c.n_levels)]
        row = dict(
            name=name,
            unexplained={str(t["levels"]): t["unexplained"] for t in rec["table"]},
            mel_db_16=rec["table"][-1]["mel_db"],
            decreasing=all(a > b for a, b in zip(rec["curve"], rec["curve"][1:])),
            stability=st,
            knn=kn,
            groups=grp,
            swap=sw,
        )
        rows.append(row)
        c.__dict__.pop("_groups", None)  # dense membership: 1 GB for a 4096-code codec
        log(f"{name}: measured in {time.monotonic() - t0:.0f}s")
    (out / "sweep.json").write_text(json.dumps(rows, indent=2) + "\n")

    def deep(v):
        return f"{100 * float(np.mean(v[1:])):.0f}%" if v is not None else "-"

    th = "0.8"
    lines = [
        f"Sweep: each v2 configuration fitted on {sub.shape[0]} training frames; held-out "
        f"reconstruction on {len(test_f)} utterances; stability over {len(renders['base'])} "
        f"re-rendered clips; kNN (k={args.knn_k}, 20000 training frames) and within-group swaps "
        f"on {utts} clips. Deep = mean over levels 1-15; groups, group-level kNN accuracy and "
        f"swap distortion at θ {th}.",
        "",
        "| codec | unexpl. 1 / 4 / 16 | mel dB @16 | pitch+1 same / ±1 | rate+2 same / ±1 | "
        "kNN exact (vote / mean) | kNN ±1 (mean) | kNN in group (vote) | group size | "
        "swap +dB (all 1-15) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        u, s, k = r["unexplained"], r["stability"], r["knn"]
        lines.append(
            f"| {r['name']} | {100 * u['1']:.1f}% / {100 * u['4']:.1f}% / {100 * u['16']:.1f}% | "
            f"{r['mel_db_16']:.2f} | "
            + " | ".join(
                f"{deep(s[p]['identical'])} / {deep(s[p].get('within_one'))}" for p in PERTURB
            )
            + f" | {100 * np.mean(k['vote']['exact']):.0f}% / "
            f"{100 * np.mean(k['mean']['exact']):.0f}% | "
            + (
                f"{100 * np.mean(k['mean']['within_one']):.0f}%"
                if "within_one" in k["mean"]
                else "-"
            )
            + f" | {100 * np.mean(k['vote']['group'][th]):.0f}% | "
            f"{np.mean([g[THETAS.index(float(th))] for g in r['groups'][1:]]):.1f} | "
            f"{r['swap'][th]['levels_1_up']:.2f} |"
        )
    md = "\n".join(lines) + "\n"
    (out / "sweep.md").write_text(md)
    print(md)
    return 0


def pct(v) -> str:
    return f"{100 * v:.0f}%"


def render(rep: dict) -> str:
    names = rep["names"]
    L = len(rep["groups"]["v2"])
    lines = [
        f"# Codec v2 vs v1 ({names['v2']} vs {names['v1']})",
        "",
        f"v2 spec: level sizes {rep['v2_level_sizes']}, {rep['v2_bits_per_frame']:.1f} bits/frame, "
        f"codec_v2.npz {rep['v2_npz_bytes'] / 1e6:.2f} MB. Train {rep['train_frames']} frames; "
        f"held-out {rep['test_utterances']} utterances ({rep['test_frames']} frames).",
        "",
        f"## Stability ({rep['stability_clips']} held-out clips re-rendered by espeak-ng)",
        "",
        "| level | "
        + " | ".join(f"v2 {p} same / ±1" for p in PERTURB)
        + " | "
        + " | ".join(f"v1 {p} same" for p in PERTURB)
        + " |",
        "|---|" + "---|" * (2 * len(PERTURB)),
    ]
    st = rep["stability"]
    for k in range(L):
        cells = [
            f"{pct(st['v2'][p]['identical'][k])} / {pct(st['v2'][p]['within_one'][k])}"
            for p in PERTURB
        ] + [pct(st["v1"][p]["identical"][k]) for p in PERTURB]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Mean AcousticGroups size (v2: arc embeddings; v1: codebook vectors, as the note)",
        "",
        "| level | "
        + " | ".join(f"v2 θ {t}" for t in THETAS)
        + " | "
        + " | ".join(f"v1 θ {t}" for t in THETAS)
        + " |",
        "|---|" + "---|" * (2 * len(THETAS)),
    ]
    for k in range(L):
        cells = [f"{v:.1f}" for v in rep["groups"]["v2"][k]] + [
            f"{v:.1f}" for v in rep["groups"]["v1"][k]
        ]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"## Held-out reconstruction (LSD after Griffin-Lim on {rep['eval_wavs']} utterances)",
        "",
        "| levels | v2 feature MSE | v2 unexpl. | v2 mel dB | v2 LSD dB | v1 feature MSE | "
        "v1 unexpl. | v1 mel dB | v1 LSD dB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, lv in enumerate(LEVELS):
        cells = []
        for k in ("v2", "v1"):
            t = rep["recon"][k]["table"][i]
            cells += [
                f"{t['feature_mse']:.4f}",
                f"{100 * t['unexplained']:.1f}%",
                f"{t['mel_db']:.2f}",
                f"{rep['recon'][k]['lsd_db'][i]:.2f}",
            ]
        lines.append(f"| {lv} | " + " | ".join(cells) + " |")
    p = rep["recon"]["v2"]["pca"]
    lines += [
        "",
        f"v2 PCA only (no quantiser): unexplained {100 * p['unexplained']:.1f}%, mel "
        f"{p['mel_db']:.2f} dB, LSD {p['lsd_db']:.2f} dB.",
    ]
    for k in ("v2", "v1"):
        r = rep["recon"][k]
        lines.append(
            f"{k} held-out feature MSE after each level: "
            + ", ".join(f"{v:.3f}" for v in r["curve"])
            + f"; every level lowers every error: {'yes' if r['strictly_decreasing'] else 'NO'}."
        )
    kn = rep["knn"]
    lines += [
        "",
        f"## kNN depth predictor (c0 + previous frame -> levels 1-{L - 1}; k={kn['v2']['k']}, "
        f"{kn['v2']['train_frames']} training frames, {kn['v2']['frames']} held-out frames)",
        "",
        "Exact = the predicted code is the true one; ±1 = within one grid step; group θ = the "
        "true code's group at θ holds the prediction. vote = the neighbours' most frequent "
        "code, mean = their mean latent quantised by the codec (c0 given).",
        "",
        "| level | v2 exact vote / mean | v2 ±1 mean | v2 group (vote) θ "
        + " / ".join(str(t) for t in THETAS)
        + " | v1 exact vote / mean | v1 group (vote) θ "
        + " / ".join(str(t) for t in THETAS)
        + " |",
        "|---|---|---|---|---|---|",
    ]
    for k in range(1, L):
        v2, v1 = kn["v2"], kn["v1"]
        lines.append(
            f"| {k} | {pct(v2['vote']['exact'][k - 1])} / {pct(v2['mean']['exact'][k - 1])} | "
            f"{pct(v2['mean']['within_one'][k - 1])} | "
            + " / ".join(pct(v2["vote"]["group"][str(t)][k - 1]) for t in THETAS)
            + f" | {pct(v1['vote']['exact'][k - 1])} / {pct(v1['mean']['exact'][k - 1])} | "
            + " / ".join(pct(v1["vote"]["group"][str(t)][k - 1]) for t in THETAS)
            + " |"
        )
    mean_row = []
    for name in ("v2", "v1"):
        for pr in ("vote", "mean"):
            mean_row.append(f"{name} {pr} exact {100 * np.mean(kn[name][pr]['exact']):.1f}%")
    lines.append("")
    lines.append("Means over levels 1-15: " + ", ".join(mean_row) + ".")
    lines += [
        "",
        "## Within-group swap: added mel distortion (dB) on held-out frames (v2)",
        "",
        "| θ | all levels 1-15 at once | per level 0..15 alone |",
        "|---|---|---|",
    ]
    for t, v in rep["swap"].items():
        if t == "schedule":
            continue
        lines.append(
            f"| {t} | {v['levels_1_up']:.2f} | "
            + ", ".join(f"{x:.2f}" for x in v["per_level"])
            + " |"
        )
    lines += [
        "",
        "## Per-level θ schedule (v2): loosest θ whose swaps at that level alone add at most "
        "the budget; kNN (vote) hit rate of the true code's group under it (exact where None)",
        "",
        "| budget per level (dB) | all levels 1-15 swapped at once (+dB) | θ per level 1-15 | "
        "kNN group hit per level 1-15 | mean hit | mean exact |",
        "|---|---|---|---|---|---|",
    ]
    kv = rep["knn"]["v2"]["vote"]
    for b, v in rep["swap"]["schedule"].items():
        hits = [
            kv["exact"][i] if t is None else kv["group"][str(t)][i]
            for i, t in enumerate(v["theta"])
        ]
        lines.append(
            f"| {b} | {v['levels_1_up']:.2f} | "
            + ", ".join("-" if t is None else str(t) for t in v["theta"])
            + " | "
            + ", ".join(pct(h) for h in hits)
            + f" | {pct(np.mean(hits))} | {pct(np.mean(kv['exact']))} |"
        )
    lines += ["", "Timings (s): " + ", ".join(f"{k} {v}" for k, v in rep["timings"].items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
