"""Where v3 loses the words: words recognised (Whisper base, as `codecspec quality`) of the
default model under controlled decodings, each beside the codec's own ceiling.

    python bench/v3_word_loss.py --sentences 30 --seeds 1 --threads 1 --out docs/v3_word_loss
    python bench/v3_word_loss.py --conditions shipped greedy c0=0.3/20,depth=0.6/20 ...
    python bench/v3_word_loss.py --corpus-texts 24 --conditions ...   # held-out corpus texts
    python bench/v3_word_loss.py --pool A.json B.json   # runs on other texts, pooled

Conditions (names on the command line; `--conditions` picks a subset, default all):

* ``espeak``: espeak-ng's own rendering (the library, the voice and rate the model follows:
  en-us+f1, 170 wpm, pitch 50), as the corpus renders it;
* ``codec``: that rendering through the v1 codec, all 16 levels (the ceiling of any model that
  speaks through it); ``codec-L4`` / ``codec-L1``: its levels 0-3 / level 0 alone (what the
  depth levels are worth);
* ``shipped-Lk``: the same codes, only their first k levels decoded (what the depth decoder's
  later levels add or cost);
* ``shipped``: `tts.generate` as shipped (AR in both loops, model.json's sampling: "sampling"
  for c0, "depth_sampling" (if any) for the depth levels);
* ``c0=T/K,depth=T/K``: the AR loop with the c0 stage and the depth stage sampled at their own
  temperature / top-k (T 0 = greedy), e.g. ``c0=0/0,depth=0/0`` (greedy everywhere),
  ``c0=0.6/20,depth=0/0`` (sampled c0, greedy depth); ``greedy`` is short for the former;
* ``tf-c0,depth=T/K``: teacher-forced c0: the c0 codes of espeak-ng's rendering encoded by the v1
  codec (as the training targets are made) fed to the temporal LM and emitted as c0, the depth
  levels sampled by the model at depth=T/K;
* ``c0=T/K,tf-depth``: the model's own c0 (free running, AR) with the depth levels of
  espeak-ng's rendering at the same frame (the track aligns the two: frame t of the model and
  of the rendering speak the same phoneme);
* ``lookup``: the aligned-lookup floor (phoneme at the frame's centre with its neighbours and
  the third of it -> the mean v1 latent of timed espeak-ng frames, then the codec's RVQ),
  built from `--lookup-texts` training-split corpus texts, if asked for.

Teacher-forced runs also report the model's cross-entropy and top-1 accuracy of the reference
codes per stage (c0; depth levels 1..15 with the reference fed at every level), a check
without the recognizer. CIs: the two-level bootstrap of `codecspec quality`; differences
against ``shipped``: a paired bootstrap over sentences (same sentences, same resamples).
Progress goes to stderr; the JSON (per condition: report summary, per-sentence counts,
transcripts) is rewritten after every condition, so a rerun with ``--resume`` skips the
conditions already done.
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

import codecspec as cs  # noqa: E402

VOICE_RATE_PITCH = ("en-us+f1", 170, 50)
DEFAULT_CONDITIONS = (
    "espeak",
    "codec",
    "codec-L4",
    "codec-L1",
    "shipped",
    "greedy",
    "c0=0.6/20,depth=0/0",
    "c0=0/0,depth=0.6/20",
    "c0=0.3/20,depth=0.6/20",
    "c0=0.6/20,depth=0.3/20",
    "c0=0.3/20,depth=0.3/20",
    "c0=0.6/5,depth=0.6/5",
    "tf-c0,depth=0.6/20",
    "tf-c0,depth=0/0",
    "c0=0.6/20,tf-depth",
)
CORPUS_ARGS = [
    "--languages",
    "en",
    "--variants",
    "f1,f2,m1,m3",
    "--renditions",
    "2",
    "--timed",
    "--seed",
    "3",
]  # fmt: skip  (models/recipe/v3.py's corpus)


def log(msg: str) -> None:
    print(f"[v3-word-loss] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ conditions
def parse_params(spec: str) -> cs.SamplingParams:
    """ "T/K" -> SamplingParams(T, K, 1.0) (T 0 = greedy, K 0 = no top-k)."""
    t, _, k = spec.partition("/")
    return cs.SamplingParams(float(t), int(k or 0), 1.0)


def parse_condition(name: str) -> dict:
    """{"kind": ..., "c0": params | "tf" | None, "depth": params | "tf" | None}."""
    if name in ("espeak", "codec", "codec-L4", "codec-L1", "shipped", "lookup"):
        return {"kind": name}
    if name.startswith("shipped-L") and name[9:].isdigit():
        return {"kind": "shipped", "levels": int(name[9:])}
    if name == "greedy":
        name = "c0=0/0,depth=0/0"
    parts = dict(p.split("=", 1) if "=" in p else (p, "") for p in name.split(","))
    c0 = "tf" if "tf-c0" in parts else parse_params(parts["c0"])
    depth = "tf" if "tf-depth" in parts else parse_params(parts["depth"])
    if c0 == "tf" and depth == "tf":
        raise ValueError(f"{name}: teacher-forcing both stages is the `codec` condition")
    return {"kind": "model", "c0": c0, "depth": depth}


# ------------------------------------------------------------------------------ reference
class Reference:
    """espeak-ng's rendering of a text (audio, timing) and its v1 codes, cached per text."""

    def __init__(self, tts):
        self.tts, self.cache = tts, {}

    def __call__(self, text: str) -> dict:
        if text not in self.cache:
            from codecspec.codec.audio import resample
            from codecspec.frontend.aligned import phoneme_track
            from codecspec.frontend.espeak import render

            voice, rate, pitch = VOICE_RATE_PITCH
            r = render(text, voice, rate, pitch)
            sr = self.tts.codec.sample_rate
            y = resample(r.audio, r.sample_rate, sr).astype(np.float32)
            codes = self.tts.codec.encode(y, sr).astype(np.int64)
            frame_ms = 1000.0 / self.tts.codec.frame_rate
            track = phoneme_track(r.starts_ms, 1000.0 * y.size / sr, frame_ms, len(codes))
            self.cache[text] = dict(
                audio=y, sr=sr, codes=codes, track=track, phonemes=" ".join(r.phonemes)
            )
        return self.cache[text]


# ------------------------------------------------------------------------------ decoding
def depth_frame(dd, hidden, c0: int, g, params, force=None, tf_stats=None) -> np.ndarray:
    """The depth decoder's AR loop (`DepthDecoder._frame_ar`) with its own sampling
    parameters, or fed the reference codes `force` [G] (teacher forcing; `tf_stats` collects
    each level's log-probability and whether the reference was the argmax)."""
    G = dd.G
    codes = np.empty(G, np.int64)
    codes[0] = c0
    hidden = dd._check_frame(hidden, c0)
    pc = dd._prefill(hidden, int(c0), False)

    def emit(level, row):
        if force is None:
            return cs.sample(row, params, g)
        if tf_stats is not None:
            r = np.asarray(row, np.float64)
            lse = np.log(np.exp(r - r.max()).sum()) + r.max()
            tf_stats.setdefault(level, []).append(
                (float(r[force[level]] - lse), bool(np.argmax(r) == force[level]))
            )
        return int(force[level])

    codes[1] = emit(1, dd._target_row(pc, 1, 0))
    sc = dd._step_call
    for m in range(1, G - 1):
        past = m + 1
        sc.ids[0] = dd._level_base + m * dd.V + codes[m]
        sc.pos[0] = past
        sc.bias[...] = dd._step_bias[past]
        sc.heads[0] = m
        dd._run(sc)
        dd.cache.commit(sc.new_keys, sc.new_values, dd._first_row)
        codes[m + 1] = emit(m + 1, dd._target_row(sc, 0, m))
    return codes


def model_codes(tts, ref, text: str, seed: int, cond: dict, tf_stats: dict) -> tuple:
    """(codes [T, G], stopped) of one AR decoding under `cond` (see the module docstring)."""
    tf_c0 = cond["c0"] == "tf"
    if tf_c0:  # the reference's own phonemes and track, so frame t is the reference's frame t
        rf = ref(text)
        _, _, _, spk, enc = tts.encode_text(None, rf["phonemes"], "en", None)
        track, guard = rf["track"], len(rf["codes"])
    else:
        _, _, _, spk, enc, track = tts.prepare_text(text, None, "en", None)
        guard = tts.max_frames_for(track)
    st = tts.stepper(enc, spk, track)
    g = cs.Generator(seed)
    depth_params = None if cond["depth"] == "tf" else cond["depth"]
    frames, prev, stopped = [], tts.start_token, False
    for t in range(guard):
        out = st.score([prev])
        st.commit(out, 1)
        h, logits, stop_logit = out[0][0], out[1][0], out[2][:1]
        if tf_c0:
            c0 = int(rf["codes"][t, 0])
            r = np.asarray(logits, np.float64)
            lse = np.log(np.exp(r - r.max()).sum()) + r.max()
            tf_stats.setdefault(0, []).append((float(r[c0] - lse), bool(np.argmax(r) == c0)))
        else:
            c0 = int(cs.sample(logits, cond["c0"], g))
        if depth_params is None:  # reference depth: filled in after the loop
            codes = np.zeros(tts.depth.G, np.int64)
            codes[0] = c0
        else:
            codes = depth_frame(tts.depth, h, c0, g.fork(t), depth_params)
        frames.append(codes)
        prev = c0
        stop = bool(cs.sample_stop(np.asarray(stop_logit, np.float32), g)[0])
        if stop and not tf_c0:
            stopped = True
            break
    codes = np.stack(frames)
    if tf_c0:
        stopped = True  # the reference's length, the stop head unused
    if depth_params is None:
        rc = ref(text)["codes"]
        n = min(len(codes), len(rc))
        codes[:n, 1:] = rc[:n, 1:]
        if len(codes) > n:  # past the reference's end: the reference's last frame's depth
            codes[n:, 1:] = rc[-1, 1:]
    return codes, stopped


def depth_teacher_forced(tts, ref, text: str, tf_stats: dict) -> None:
    """Per-level log-probability / top-1 of the reference depth codes given the reference c0
    (the temporal LM teacher-forced too): where the depth stage stands without sampling."""
    rf = ref(text)
    _, _, _, spk, enc = tts.encode_text(None, rf["phonemes"], "en", None)
    st = tts.stepper(enc, spk, rf["track"])
    prev = tts.start_token
    for t in range(len(rf["codes"])):
        out = st.score([prev])
        st.commit(out, 1)
        c = rf["codes"][t]
        depth_frame(tts.depth, out[0][0], int(c[0]), None, None, force=c, tf_stats=tf_stats)
        prev = int(c[0])


# ------------------------------------------------------------------------------ lookup floor
# The aligned-lookup floor is `codecspec quality`'s `lookup` row; here it is built from the
# v3 corpus's own training-split texts (`corpus_texts`) instead of fortunes drawn at random.
from codecspec.evaluation.floors import Lookup  # noqa: E402


def corpus_texts(split: str, n: int) -> list:
    """The first n texts of the v3 corpus's `split` ("test": held out; "train") in the corpus
    recipe's order (models/recipe/corpus.py with v3's arguments), without rendering it."""
    sys.path.insert(0, str(ROOT / "models" / "recipe"))
    import corpus

    args = corpus.parse_args(CORPUS_ARGS + ["--out", "unused"])
    texts = corpus.load_texts("en", args.min_chars, args.max_chars)
    rng = np.random.default_rng([args.seed, 0, 0])
    order = rng.permutation(len(texts))
    is_test = rng.random(len(texts)) < args.test_fraction
    want = split == "test"
    picked = [texts[int(i)] for pos, i in enumerate(order) if bool(is_test[pos]) == want]
    return picked[:n]


# ------------------------------------------------------------------------------ scoring
def paired_diff(a: dict, b: dict, resamples: int = 2000, seed: int = 1) -> dict:
    """Words recognised of a minus b, pooled, with a percentile CI over sentences resampled
    together (the same sentences in both)."""
    ids = sorted(set(a) & set(b))
    sa = np.array([a[i][0] for i in ids], np.float64)
    sb = np.array([b[i][0] for i in ids], np.float64)
    n = np.array([a[i][1] for i in ids], np.float64)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(ids), (resamples, len(ids)))
    # sa, sb count the words lost (substitutions + deletions): b recognises sa - sb more
    d = (sa[pick].sum(1) - sb[pick].sum(1)) / n[pick].sum(1)
    point = float((sa.sum() - sb.sum()) / n.sum())
    lo, hi = np.percentile(d, [2.5, 97.5])
    return {"diff": point, "ci": [float(lo), float(hi)]}


def per_sentence_counts(report: dict) -> dict:
    """{sentence id: (substitutions + deletions, reference words)} pooled over seeds."""
    out: dict = {}
    for c in report["per_clip"]:
        s = out.setdefault(c["sentence_id"], [0, 0])
        s[0] += c["substitutions"] + c["deletions"]
        s[1] += c["ref_words"]
    return {k: tuple(v) for k, v in out.items()}


def run_condition(name, tts, ref, rows, seeds, rec, lookup=None) -> dict:
    from codecspec.evaluation.intelligibility import score
    from codecspec.progress import bar

    cond = parse_condition(name)
    kind = cond["kind"]
    clips, tf_stats, frames, stopped = [], {}, [], []
    t0 = time.monotonic()
    jobs = [(r, s) for r in rows for s in seeds]
    for row, seed in bar(jobs, desc=name, total=len(jobs)):
        text = row["text"]
        if kind == "espeak":
            rf = ref(text)
            wav, sr = rf["audio"], rf["sr"]
        elif kind.startswith("codec") or kind == "lookup":
            levels = {"codec": None, "codec-L4": 4, "codec-L1": 1, "lookup": None}[kind]
            codes = lookup.codes(text) if kind == "lookup" else ref(text)["codes"]
            codes = codes if levels is None else codes[:, :levels]
            wav, sr = tts.codec.decode(codes, seed=seed), tts.codec.sample_rate
        elif kind == "shipped":
            s = tts.generate(text, seed=seed, language="en", mode="ar", temporal="ar")
            wav, sr = s.wav, s.sample_rate
            if "levels" in cond:  # the model's codes, only its first levels spoken
                wav = tts.codec.decode(s.codes[:, : cond["levels"]], seed=seed)
            frames.append(len(s.codes))
            stopped.append(not s.hit_max_frames)
        else:
            codes, stop = model_codes(tts, ref, text, seed, cond, tf_stats)
            if cond["c0"] == "tf" and not tf_stats.get("depth_done", {}).get(text):
                depth_teacher_forced(tts, ref, text, tf_stats.setdefault("depth", {}))
                tf_stats.setdefault("depth_done", {})[text] = True
            wav, sr = tts.codec.decode(codes, seed=seed), tts.codec.sample_rate
            frames.append(len(codes))
            stopped.append(stop)
        clips.append((row["id"], seed, wav, sr))
    synth_s = time.monotonic() - t0
    rep = score(clips, rows, recognizer=rec, progress=False)
    out = {k: rep[k] for k in ("words_recognised", "words_recognised_ci", "wer", "wer_ci")}
    out.update(
        wer_capped=rep["wer_capped"],
        clips=rep["clips"],
        reference_words=rep["reference_words"],
        per_sentence=per_sentence_counts(rep),
        transcripts=[(c["sentence_id"], c["seed"], c["transcript"]) for c in rep["per_clip"]],
        synth_seconds=round(synth_s, 1),
        seconds=round(time.monotonic() - t0, 1),
    )
    if frames:
        out["frames"] = int(sum(frames))
        out["runaway"] = float(1.0 - np.mean(stopped))
    if 0 in tf_stats:
        lp = np.array([x[0] for x in tf_stats[0]])
        out["tf_c0"] = {
            "ce": float(-lp.mean()),
            "top1": float(np.mean([x[1] for x in tf_stats[0]])),
        }
    if "depth" in tf_stats:
        d = tf_stats["depth"]
        out["tf_depth"] = {
            str(k): {
                "ce": float(-np.mean([x[0] for x in v])),
                "top1": float(np.mean([x[1] for x in v])),
            }
            for k, v in sorted(d.items())
        }
    return out


def table(res: dict) -> str:
    lines = [
        "| condition | words recognised % (95% CI) | vs shipped, points (paired 95% CI) "
        "| WER % | runaway |",
        "|---|---:|---:|---:|---:|",
    ]
    base = res["conditions"].get("shipped")
    for name, m in res["conditions"].items():
        lo, hi = m["words_recognised_ci"]
        diff = "—"
        if base is not None and name != "shipped":
            d = paired_diff(base["per_sentence"], m["per_sentence"])
            diff = f"{100 * d['diff']:+.1f} ({100 * d['ci'][0]:+.1f} to {100 * d['ci'][1]:+.1f})"
        run = f"{100 * m['runaway']:.0f}%" if "runaway" in m else ""
        lines.append(
            f"| {name} | {100 * m['words_recognised']:.1f} ({100 * lo:.1f}–{100 * hi:.1f}) "
            f"| {diff} | {100 * m['wer']:.0f} | {run} |"
        )
    return "\n".join(lines) + "\n"


def pooled_table(paths: list) -> str:
    """Runs of other texts pooled (`--pool`): per condition that every run has, the words
    recognised over all their texts and the paired difference against ``shipped``."""
    runs = [json.loads(Path(p).read_text())["conditions"] for p in paths]
    names = [n for n in runs[0] if all(n in r for r in runs)]
    pooled = {n: {k: v for r in runs for k, v in r[n]["per_sentence"].items()} for n in names}
    lines = [
        f"| condition ({len(pooled[names[0]])} texts) | words recognised % "
        "| vs shipped, points (paired 95% CI) |",
        "|---|---:|---:|",
    ]
    for n, d in pooled.items():
        words = 1 - sum(v[0] for v in d.values()) / sum(v[1] for v in d.values())
        diff = "—"
        if n != "shipped" and "shipped" in pooled:
            pd = paired_diff(pooled["shipped"], d)
            diff = f"{100 * pd['diff']:+.1f} ({100 * pd['ci'][0]:+.1f} to {100 * pd['ci'][1]:+.1f})"
        lines.append(f"| {n} | {100 * words:.1f} | {diff} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="v3")
    ap.add_argument("--sentences", type=int, default=None, help="first n (default all 30)")
    ap.add_argument(
        "--corpus-texts",
        type=int,
        default=None,
        help="use the first n held-out (test split) texts of the v3 corpus instead of the "
        "evaluation sentences (for choosing defaults)",
    )
    ap.add_argument(
        "--corpus-offset", type=int, default=0, help="skip the first k held-out corpus texts"
    )
    ap.add_argument(
        "--set",
        default="everyday",
        help="evaluation set of `codecspec quality --set` (everyday, sus, hard): where the "
        "words go on text the recognizer cannot guess",
    )
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--recognizer", default="base", choices=["base", "tiny.en"])
    ap.add_argument("--conditions", nargs="+", default=list(DEFAULT_CONDITIONS))
    ap.add_argument("--lookup-texts", type=int, default=600, help="training texts of `lookup`")
    ap.add_argument(
        "--out",
        default=None,
        help="where the table goes (default docs/v3_word_loss for the shipped v3 only: the "
        "docs describe the shipped model, so another --model needs its own --out)",
    )
    ap.add_argument("--resume", action="store_true", help="keep conditions already in --out")
    ap.add_argument(
        "--pool", nargs="+", default=None, help="print the table of these runs' JSONs pooled"
    )
    args = ap.parse_args(argv)
    if args.pool:
        print(pooled_table(args.pool))
        return 0
    if args.out is None:
        if args.model != "v3":
            ap.error("--out: required with a --model other than the shipped v3")
        args.out = str(ROOT / "docs" / "v3_word_loss")
    for c in args.conditions:
        parse_condition(c)  # fail before loading anything

    from codecspec.evaluation.intelligibility import Recognizer, load_sentences
    from codecspec.pipeline.registry import load_model

    if args.corpus_texts:
        k = args.corpus_offset
        texts = corpus_texts("test", k + args.corpus_texts)[k:]
        rows = [{"id": f"c{k + i + 1:02d}", "text": t} for i, t in enumerate(texts)]
    else:
        rows = load_sentences(args.sentences, set=args.set)
    seeds = list(range(args.seeds))
    out = Path(args.out).with_suffix(".json")
    res = {"conditions": {}}
    if args.resume and out.is_file():
        res = json.loads(out.read_text())
    res.update(
        model=args.model,
        sentences=(
            f"held-out corpus texts {args.corpus_offset + 1}-"
            f"{args.corpus_offset + args.corpus_texts}"
            if args.corpus_texts
            else f"evaluation ({args.set})"
        ),
        texts=[r["text"] for r in rows],
        seeds=seeds,
        command="python bench/v3_word_loss.py " + " ".join(argv if argv else sys.argv[1:]),
    )
    rec = Recognizer(args.recognizer, threads=args.threads)
    tts = load_model(args.model, provider="cpu", threads=args.threads)
    res["shipped_sampling"] = dict(tts.meta["sampling"])
    if "depth_sampling" in tts.meta:  # the folder samples its depth levels by their own law
        res["shipped_depth_sampling"] = dict(tts.meta["depth_sampling"])
    ref = Reference(tts)
    lookup = None
    if "lookup" in args.conditions and "lookup" not in res["conditions"]:
        lookup = Lookup(tts, corpus_texts("train", args.lookup_texts))
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.conditions:
        if name in res["conditions"]:
            log(f"{name}: kept from {out}")
            continue
        m = run_condition(name, tts, ref, rows, seeds, rec, lookup)
        res["conditions"][name] = m
        lo, hi = m["words_recognised_ci"]
        log(f"{name}: {100 * m['words_recognised']:.1f}% ({100 * lo:.1f}-{100 * hi:.1f}) "
            f"in {m['seconds']:.0f} s")  # fmt: skip
        out.write_text(json.dumps(res, indent=1))
    out.with_suffix(".md").write_text(table(res))
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
