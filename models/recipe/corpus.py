"""Speech corpus recipe for the reference codec-LM: espeak-ng speaking Debian fortunes.

    python models/recipe/corpus.py --out ~/.cache/codecspec/corpus --hours 3 --seed 0

Texts come from Debian's fortunes packages (English, German, Spanish, Italian), are cleaned
and deduplicated, and every text gets ``--renditions`` renditions by different espeak-ng voice
variants with random pitch, rate and word gap. Audio is resampled to 16 kHz mono 16-bit WAV
with the codec's own windowed-sinc resampler. The output folder holds

    wav/<lang>/<id>.wav      one file per rendition
    manifest.jsonl           one row per rendition (path, text, phonemes, language, voice, ...)
    corpus.json              statistics, tool and package versions, the arguments used

The split is by text: all renditions of a text are in the same split, drawn per text from the
seed. Everything (text choice, voice and parameter draws, file bytes) is a function of the
seed and of the installed package versions, recorded in corpus.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

try:
    from codecspec.codec.audio import read_wav, resample, write_wav
    from codecspec.progress import bar
except ImportError:  # running from a checkout whose package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
    from codecspec.codec.audio import read_wav, resample, write_wav
    from codecspec.progress import bar

SAMPLE_RATE = 16000
FORTUNE_ROOT = Path("/usr/share/games/fortunes")

# language -> espeak-ng voice, Debian packages with its text, fallback folder under FORTUNE_ROOT
LANGUAGES = {
    "en": ("en-us", ("fortunes-min", "fortunes"), "."),
    "de": ("de", ("fortunes-de",), "de"),
    "es": ("es", ("fortunes-es",), "es"),
    "it": ("it", ("fortunes-it",), "it"),
}
# espeak-ng voice variants; each acts as a speaker shared by all languages
VARIANTS = ("m1", "m3", "m5", "m7", "f1", "f2", "f3", "f4")
# files that are pictures, banners or lists rather than sentences
EXCLUDE_FILES = {"ascii-art", "asciiart", "banner", "art", "translate-me", "vornamen", "namen"}
ALLOWED_PUNCT = set(" .,;:!?'\"-()¿¡«»")


def log(msg: str) -> None:
    print(f"[corpus] {msg}", file=sys.stderr, flush=True)


# ---- installation ---------------------------------------------------------------------------
def _dpkg_installed(pkg: str) -> bool:
    if shutil.which("dpkg-query") is None:
        return False
    r = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True, check=False
    )
    return r.returncode == 0 and "install ok installed" in r.stdout


def _apt_install(pkgs: list[str]) -> bool:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *pkgs]
    if subprocess.run(cmd, env=env, capture_output=True, check=False).returncode == 0:
        return True
    # a fresh machine has empty package lists; refresh once and retry
    subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        log(f"apt-get install {' '.join(pkgs)} failed:\n{r.stderr.strip()[-2000:]}")
    return r.returncode == 0


def ensure_tools(languages: list[str], install: bool, extra: tuple = ()) -> None:
    """Install espeak-ng, the fortunes packages and `extra` from Debian when missing (needs
    root)."""
    wanted = ["espeak-ng", *extra] + [p for lang in languages for p in LANGUAGES[lang][1]]
    missing = [p for p in wanted if not _dpkg_installed(p)]
    if shutil.which("espeak-ng") is not None and "espeak-ng" in missing:
        missing.remove("espeak-ng")  # installed outside dpkg: fine
    if not missing:
        return
    if not install:
        log(f"--no-install given; not installing missing packages: {' '.join(missing)}")
    elif shutil.which("apt-get") is None:
        log(f"no apt-get on this machine; install these yourself: {' '.join(missing)}")
    elif hasattr(os, "geteuid") and os.geteuid() != 0:
        log(f"not root; run: sudo apt-get install {' '.join(missing)}  (or use --no-install)")
    else:
        log(f"installing from Debian: {' '.join(missing)}")
        # one by one, so a package absent from this release does not block the others
        for p in missing:
            if not _apt_install([p]):
                log(f"could not install {p}; continuing without it")
    if shutil.which("espeak-ng") is None:
        raise SystemExit(
            "espeak-ng is not installed and could not be installed: "
            "apt-get install espeak-ng (Debian/Ubuntu), then rerun"
        )


def tool_versions(languages: list[str]) -> dict:
    out = {}
    r = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True, check=False)
    out["espeak-ng"] = r.stdout.strip()
    for p in sorted({p for lang in languages for p in LANGUAGES[lang][1]}):
        if shutil.which("dpkg-query"):
            r = subprocess.run(
                ["dpkg-query", "-W", "-f=${Version}", p], capture_output=True, text=True
            )
            out[p] = r.stdout.strip() if r.returncode == 0 else None
    return out


# ---- texts ----------------------------------------------------------------------------------
def _is_text_file(p: Path) -> bool:
    if not p.is_file() or p.is_symlink() or p.suffix in (".dat", ".u8", ".gz"):
        return False
    if "off" in p.parts or p.name.endswith("-pre"):
        return False  # offensive sections, and pre-processed duplicates
    stem = p.name.removesuffix(".fortunes")
    return stem not in EXCLUDE_FILES


def text_files(lang: str) -> list[Path]:
    """Fortune files of the language's Debian packages (dpkg's file list), else its folder."""
    _, pkgs, folder = LANGUAGES[lang]
    files: set[Path] = set()
    for pkg in pkgs:
        if not _dpkg_installed(pkg):
            continue
        r = subprocess.run(["dpkg-query", "-L", pkg], capture_output=True, text=True, check=False)
        for line in r.stdout.splitlines():
            p = Path(line.strip())
            if FORTUNE_ROOT in p.parents and _is_text_file(p):
                files.add(p)
    if not files:
        base = FORTUNE_ROOT / folder
        if base.is_dir():
            files = {p for p in base.iterdir() if _is_text_file(p)}
    return sorted(files)


_IT_ACCENTS = {"a": "à", "e": "è", "i": "ì", "o": "ò", "u": "ù", "E": "È"}


def clean_text(raw: str, lang: str, min_chars: int, max_chars: int) -> str | None:
    """One fortune -> one speakable line, or None when it is not plain prose."""
    lines = []
    for line in raw.splitlines():
        if re.match(r"^\s*--", line):
            break  # attribution: "-- Author"; everything after it is a citation
        lines.append(line)
    t = unicodedata.normalize("NFC", " ".join(lines))
    t = t.replace("\u201c", '"').replace("\u201d", '"').replace("\u2019", "'").replace("`", "'")
    t = t.replace("\u2018", "'").replace("\u2013", "-").replace("\u2014", "-")
    t = t.replace("\u2026", "...")
    t = re.sub(r"\s+", " ", t).strip()
    if lang == "it":
        # Italian fortunes write accented finals as "e'" (ASCII); espeak-ng wants the letter
        t = re.sub(r"([aeiouE])'(?=[\s.,;:!?\"]|$)", lambda m: _IT_ACCENTS[m.group(1)], t)
    if not min_chars <= len(t) <= max_chars:
        return None
    if any(not (ch.isalpha() or ch.isdigit() or ch in ALLOWED_PUNCT) for ch in t):
        return None  # URLs, code, markup, ASCII art, e-mail addresses, brackets
    letters = sum(ch.isalpha() for ch in t)
    if letters < 0.7 * len(t) or re.search(r"(.)\1{3,}", t):
        return None
    upper = sum(ch.isupper() for ch in t)
    if upper > 0.3 * letters:
        return None  # shouting, acronyms, headlines: espeak spells them out
    return t


def load_texts(lang: str, min_chars: int, max_chars: int, source: str = "fortunes") -> list[str]:
    """The language's texts from `source`: "fortunes" (Debian's fortunes), "varied"
    (`varied_text`: dictionary words, names, numbers in unpredictable shapes; English only)
    or "mixed" (both, as many varied texts as fortunes)."""
    if source == "fortunes":
        return _fortune_texts(lang, min_chars, max_chars)
    if lang != "en":
        raise SystemExit(f"--texts {source}: English only (the word list is English), not {lang}")
    import varied_text

    if source == "varied":
        return sorted(varied_text.texts(VARIED_SEED, VARIED_TEXTS, min_chars, max_chars))
    fortunes = _fortune_texts(lang, min_chars, max_chars)
    varied = varied_text.texts(VARIED_SEED, len(fortunes), min_chars, max_chars)
    return sorted(set(fortunes) | set(varied))


# the varied texts' own stream (not --seed, which draws the split and the voices) and count
VARIED_SEED = 11
VARIED_TEXTS = 40000


def _fortune_texts(lang: str, min_chars: int, max_chars: int) -> list[str]:
    texts: set[str] = set()
    for path in text_files(lang):
        raw = path.read_text(encoding="utf-8", errors="replace")
        for entry in re.split(r"^%\s*$", raw, flags=re.M):
            t = clean_text(entry, lang, min_chars, max_chars)
            if t:
                texts.add(t)
    return sorted(texts)


# ---- synthesis ------------------------------------------------------------------------------
def trim_silence(x: np.ndarray, margin: float = 0.1, threshold: float = 1e-3) -> np.ndarray:
    """Cut leading/trailing digital silence down to ``margin`` seconds each side."""
    loud = np.flatnonzero(np.abs(x) > threshold)
    if loud.size == 0:
        return x
    m = int(margin * SAMPLE_RATE)
    return x[max(0, loud[0] - m) : loud[-1] + 1 + m]


def synth(job: dict) -> dict:
    """Render one job with espeak-ng; writes the 16 kHz WAV, returns its manifest row."""
    if job.get("timed"):
        return synth_timed(job)
    out = Path(job["root"]) / job["path"]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="codecspec-espeak-") as tmp:
        raw_path = Path(tmp) / "raw.wav"
        cmd = [
            "espeak-ng",
            "-v",
            job["voice"],
            "-p",
            str(job["pitch"]),
            "-s",
            str(job["rate"]),
            "-g",
            str(job["gap"]),
            "-x",
            "--ipa",
            "-w",
            str(raw_path),
            "--stdin",
        ]
        env = dict(os.environ, LC_ALL="C.UTF-8")
        r = subprocess.run(cmd, input=job["text"].encode("utf-8"), capture_output=True, env=env)
        if r.returncode != 0 or not raw_path.exists():
            raise RuntimeError(f"espeak-ng failed on {job['id']}: {r.stderr.decode()[-500:]}")
        x, sr = read_wav(raw_path)
    y = trim_silence(resample(x, sr, SAMPLE_RATE))
    write_wav(out, y, SAMPLE_RATE)
    # espeak-ng prints one line of phonemes per clause; " | " keeps the clause boundaries
    clauses = [c.strip() for c in r.stdout.decode("utf-8").splitlines() if c.strip()]
    row = {k: job[k] for k in ROW_KEYS if k in job}
    row.update(phonemes=" | ".join(clauses), duration=round(y.size / SAMPLE_RATE, 4))
    row.update(num_samples=int(y.size), sample_rate=SAMPLE_RATE)
    return row


def synth_timed(job: dict) -> dict:
    """Render one job through espeak-ng's library: the WAV plus every phoneme's start time.

    The audio is not trimmed, so the times stay valid: row ``events`` = [[mnemonic, start_ms],
    ...] and ``end_ms`` on the written 16 kHz file's time axis (the aligned model's input)."""
    from codecspec.frontend.espeak import render

    out = Path(job["root"]) / job["path"]
    out.parent.mkdir(parents=True, exist_ok=True)
    r = render(job["text"], job["voice"], job["rate"], job["pitch"], job["gap"])
    y = resample(r.audio, r.sample_rate, SAMPLE_RATE)
    write_wav(out, y, SAMPLE_RATE)
    row = {k: job[k] for k in ROW_KEYS if k in job}
    row.update(phonemes=" ".join(r.phonemes), duration=round(y.size / SAMPLE_RATE, 4))
    row.update(num_samples=int(y.size), sample_rate=SAMPLE_RATE)
    row.update(events=[[p, float(t)] for p, t in zip(r.phonemes, r.starts_ms)])
    row.update(end_ms=round(1000.0 * y.size / SAMPLE_RATE, 3))
    return row


ROW_KEYS = (
    "id",
    "path",
    "text_id",
    "text",
    "language",
    "voice",
    "variant",
    "pitch",
    "rate",
    "gap",
    "split",
)


def plan_text(lang: str, li: int, pos: int, text: str, args, test: bool) -> list[dict]:
    """Renditions of one text. The draws depend only on (seed, language, position), not on
    how many texts end up being used, so a longer run extends a shorter one."""
    rng = np.random.default_rng([args.seed, li, pos, 1])
    espeak_voice = LANGUAGES[lang][0]
    tid = f"{lang}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:10]}"
    variants = rng.choice(len(args.variants), size=args.renditions, replace=False)
    jobs = []
    for r, v in enumerate(variants):
        variant = args.variants[int(v)]
        uid = f"{tid}-r{r}"
        jobs.append(
            dict(
                root=str(args.out),
                id=uid,
                path=f"wav/{lang}/{uid}.wav",
                text_id=tid,
                text=text,
                language=lang,
                voice=f"{espeak_voice}+{variant}",
                variant=variant,
                pitch=int(rng.integers(args.pitch[0], args.pitch[1] + 1)),
                rate=int(rng.integers(args.rate[0], args.rate[1] + 1)),
                gap=int(rng.integers(args.gap[0], args.gap[1] + 1)),
                split="test" if test else "train",
                timed=bool(getattr(args, "timed", False)),
            )
        )
    return jobs


def build(args) -> dict:
    t_start = time.monotonic()
    out = Path(args.out).expanduser()
    args.out = out
    if (out / "manifest.jsonl").exists():
        if not args.overwrite:
            raise SystemExit(f"{out} already holds a corpus; pass --overwrite to rebuild it")
        shutil.rmtree(out / "wav", ignore_errors=True)
        (out / "manifest.jsonl").unlink()
    out.mkdir(parents=True, exist_ok=True)
    extra = () if args.texts == "fortunes" else ("wamerican",)  # varied_text's word list
    ensure_tools(args.languages, install=not args.no_install, extra=extra)

    queues, langs = {}, []
    for li, lang in enumerate(args.languages):
        texts = load_texts(lang, args.min_chars, args.max_chars, args.texts)
        if not texts:
            log(f"no usable {lang} text (is {'/'.join(LANGUAGES[lang][1])} installed?); skipped")
            continue
        rng = np.random.default_rng([args.seed, li, 0])
        order = rng.permutation(len(texts))
        is_test = rng.random(len(texts)) < args.test_fraction
        queue = [(li, pos, texts[int(i)], bool(is_test[pos])) for pos, i in enumerate(order)]
        # skipping keeps every text's position, so its split and renditions are those a run
        # without the skip gives it: a fresh corpus that continues where a shorter one ended
        queues[lang] = queue[args.skip_texts :]
        langs.append(lang)
        log(f"{lang}: {len(texts)} usable texts")
    if not langs:
        raise SystemExit("no text in any language: install the fortunes packages")

    rows: list[dict] = []
    hours = {lang: 0.0 for lang in langs}
    used = {lang: 0 for lang in langs}
    per_lang = args.hours / len(langs)
    executor = ProcessPoolExecutor(args.workers) if args.workers > 1 else None
    rnd = 0
    try:
        # whole rounds of fixed batches: the stop decision is taken between rounds from
        # deterministic durations, so the result does not depend on worker scheduling
        while True:
            total = sum(hours.values())
            avail = [lang for lang in langs if used[lang] < len(queues[lang])]
            active = [lang for lang in avail if hours[lang] < per_lang]
            if not active:
                if total >= args.hours:
                    break
                if not avail:
                    log("ran out of text before reaching --hours")
                    break
                active = avail  # a language ran out of text: the others fill in
            jobs = []
            for lang in active:
                n = args.batch
                if used[lang]:
                    # size the batch to the remaining hours at the language's mean length,
                    # so each language ends close to its share instead of a batch beyond it
                    deficit = max(per_lang - hours[lang], (args.hours - total) / len(active))
                    n = min(n, int(np.ceil(deficit * used[lang] / hours[lang])) + 1)
                for li, pos, text, test in queues[lang][used[lang] : used[lang] + n]:
                    jobs.extend(plan_text(lang, li, pos, text, args, test))
                used[lang] = min(len(queues[lang]), used[lang] + n)
            rnd += 1
            done = sum(hours.values())
            desc = f"round {rnd} ({done:.2f}/{args.hours:g} h)"
            results = executor.map(synth, jobs, chunksize=4) if executor else map(synth, jobs)
            for row in bar(results, desc=desc, total=len(jobs)):
                rows.append(row)
                hours[row["language"]] += row["duration"] / 3600.0
    finally:
        if executor:
            executor.shutdown()

    with open(out / "manifest.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    stats = corpus_stats(rows)
    stats.update(
        seed=args.seed,
        sample_rate=SAMPLE_RATE,
        elapsed_s=round(time.monotonic() - t_start, 1),
        args={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        versions=tool_versions(langs),
        usable_texts={lang: len(queues[lang]) for lang in langs},
    )
    (out / "corpus.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
    return stats


def corpus_stats(rows: list[dict]) -> dict:
    def hours_by(key):
        acc: dict[str, float] = {}
        for r in rows:
            acc[r[key]] = acc.get(r[key], 0.0) + r["duration"] / 3600.0
        return {k: round(v, 4) for k, v in sorted(acc.items())}

    def texts_by(key):
        acc: dict[str, set] = {}
        for r in rows:
            acc.setdefault(r[key], set()).add(r["text_id"])
        return {k: len(v) for k, v in sorted(acc.items())}

    def count_by(key):
        acc: dict[str, int] = {}
        for r in rows:
            acc[r[key]] = acc.get(r[key], 0) + 1
        return dict(sorted(acc.items()))

    durs = np.array([r["duration"] for r in rows]) if rows else np.zeros(1)
    return dict(
        hours=round(float(durs.sum()) / 3600.0, 4),
        utterances=len(rows),
        texts=len({r["text_id"] for r in rows}),
        hours_by_language=hours_by("language"),
        hours_by_variant=hours_by("variant"),
        hours_by_split=hours_by("split"),
        texts_by_language=texts_by("language"),
        texts_by_split=texts_by("split"),
        utterances_by_split=count_by("split"),
        duration_s=dict(
            mean=round(float(durs.mean()), 3),
            min=round(float(durs.min()), 3),
            max=round(float(durs.max()), 3),
        ),
    )


def _range(s: str) -> tuple[int, int]:
    lo, hi = (int(v) for v in s.split(","))
    if lo > hi:
        raise argparse.ArgumentTypeError(f"empty range {s}")
    return lo, hi


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="~/.cache/codecspec/corpus", help="output folder")
    ap.add_argument("--hours", type=float, default=3.0, help="stop once this much audio exists")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="synthesis processes")
    ap.add_argument("--languages", default=",".join(LANGUAGES), help="comma list of languages")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="espeak-ng voice variants")
    ap.add_argument("--renditions", type=int, default=3, help="renditions per text")
    ap.add_argument("--test-fraction", type=float, default=0.05, help="texts held out")
    ap.add_argument("--pitch", type=_range, default=(25, 75), help="espeak -p range, lo,hi")
    ap.add_argument("--rate", type=_range, default=(130, 210), help="espeak -s range (wpm)")
    ap.add_argument("--gap", type=_range, default=(0, 8), help="espeak -g range (10 ms units)")
    ap.add_argument("--min-chars", type=int, default=24)
    ap.add_argument("--max-chars", type=int, default=220)
    ap.add_argument("--batch", type=int, default=32, help="texts per language per round")
    ap.add_argument(
        "--skip-texts",
        type=int,
        default=0,
        help="leave out the first N texts of each language's order (new texts, same split rule)",
    )
    ap.add_argument(
        "--texts",
        choices=("fortunes", "varied", "mixed"),
        default="fortunes",
        help="text source: Debian's fortunes, varied_text.py's unpredictable English "
        "(names, numbers, rare words), or both in equal numbers",
    )
    ap.add_argument("--no-install", action="store_true", help="never call apt-get")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing corpus")
    ap.add_argument(
        "--timed",
        action="store_true",
        help="render through espeak-ng's library and keep each phoneme's start time (v3)",
    )
    args = ap.parse_args(argv)
    args.languages = [s for s in args.languages.split(",") if s]
    args.variants = [s for s in args.variants.split(",") if s]
    bad = [lang for lang in args.languages if lang not in LANGUAGES]
    if bad:
        ap.error(f"--languages: unknown {bad}; known: {sorted(LANGUAGES)}")
    if not 1 <= args.renditions <= len(args.variants):
        ap.error(f"--renditions must be in [1, {len(args.variants)}] (distinct variants per text)")
    if not 0.0 <= args.test_fraction < 1.0:
        ap.error("--test-fraction must be in [0, 1)")
    if args.skip_texts < 0:
        ap.error("--skip-texts must be >= 0")
    if args.hours <= 0 or args.workers < 1 or args.batch < 1:
        ap.error("--hours, --workers and --batch must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    stats = build(args)
    keep = ("hours", "utterances", "texts", "hours_by_language", "hours_by_split", "elapsed_s")
    print(json.dumps({k: stats[k] for k in keep}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
