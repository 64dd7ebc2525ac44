"""Phonemes recognised: intelligibility that a predictable sentence cannot flatter.

Whisper's language model fills in the words of a predictable sentence from fragments
(docs/quality.md: the same model scored 56% of the words of everyday sentences and 30% of
less predictable ones). A phoneme recognizer has no word-level language model to lean on, so
its figure measures the sounds alone. This module scores speech against espeak-ng's IPA of
the text with a CTC phoneme recognizer that ships its own weights on PyPI:
`hama` (Apache-2.0; its English phoneme ASR is a 4.7 MB asset inside a 22.6 MB wheel that
also carries a G2P model and native engines for four platforms; greedy CTC decoding, no
language model, nothing downloaded), part of the `[quality]` extra.

Both sides are mapped onto one English inventory (`INVENTORY`: 24 consonants, 15 vowels)
before they are compared, because the two speak different IPA dialects: espeak-ng writes
length and stress marks (``ˈiː``), reduced vowels (``ᵻ``, ``ɐ``) and the flap (``ɾ``);
the recognizer writes ``ɝ``, tied affricates (``d͡ʒ``) and symbols of other languages it was
trained on. Stress and length are dropped (neither side's figure should hinge on them), ʌ
and ə are one phoneme (they differ by stress alone), the flap is d (what the recognizer hears
in "better"), and NORTH/FORCE's ``oː`` before ɹ is ɔ. The phoneme sequences are aligned by
minimum edit distance like the words (`intelligibility.word_errors`): per clip of N reference
phonemes, phonemes recognised = 1 - (S + D) / N and PER = (S + D + I) / N, pooled over clips
with the same two-level bootstrap interval as the words.
"""

from __future__ import annotations

import unicodedata
from typing import Sequence

import numpy as np

from codecspec.evaluation.intelligibility import (
    RecognizerUnavailable,
    WordErrors,
    _as_16k,
    word_errors,
)

__all__ = [
    "INVENTORY",
    "CLASSES",
    "REFERENCE_VOICE",
    "english_phonemes",
    "reference_phonemes",
    "align",
    "phoneme_errors",
    "PhonemeRecognizer",
]

# The English inventory both sides are mapped onto, by class (the per-class breakdown's keys).
CLASSES = {
    "stop": ("p", "b", "t", "d", "k", "ɡ"),
    "affricate": ("tʃ", "dʒ"),
    "fricative": ("f", "v", "θ", "ð", "s", "z", "ʃ", "ʒ", "h"),
    "nasal": ("m", "n", "ŋ"),
    "liquid": ("l", "ɹ"),
    "glide": ("w", "j"),
    "vowel": ("i", "ɪ", "ɛ", "æ", "ɑ", "ɔ", "ʊ", "u", "ə", "ɚ"),
    "diphthong": ("eɪ", "aɪ", "aʊ", "ɔɪ", "oʊ"),
}
INVENTORY = tuple(p for members in CLASSES.values() for p in members)
CLASS_OF = {p: c for c, members in CLASSES.items() for p in members}
REFERENCE_VOICE = "en-us"  # the IPA the evaluation sets store (espeak-ng en-us)

# Multi-letter units, longest first: diphthongs and affricates are one phoneme each, and the
# centring diphthongs of other accents become a vowel and r-coloured schwa.
_UNITS = {
    "eɪ": ["eɪ"],
    "aɪ": ["aɪ"],
    "aʊ": ["aʊ"],
    "ɔɪ": ["ɔɪ"],
    "oʊ": ["oʊ"],
    "əʊ": ["oʊ"],
    "tʃ": ["tʃ"],
    "dʒ": ["dʒ"],
    "tɕ": ["tʃ"],
    "dʑ": ["dʒ"],
    "ɪə": ["ɪ", "ɚ"],
    "eə": ["ɛ", "ɚ"],
    "ʊə": ["ʊ", "ɚ"],
}
# One letter -> its phoneme of INVENTORY ("" drops it: a glottal stop, a pause).
_LETTERS = {
    **{p: p for p in INVENTORY if len(p) == 1},
    "g": "ɡ",
    "ʌ": "ə",  # STRUT and schwa differ by stress, which neither side keeps
    "ɐ": "ə",
    "ᵊ": "ə",
    "ɘ": "ə",
    "ɵ": "ə",
    "ø": "ə",
    "œ": "ə",
    "ᵻ": "ɪ",
    "ɨ": "ɪ",
    "y": "u",
    "ʉ": "u",
    "ɯ": "u",
    "ɤ": "ə",
    "e": "ɛ",
    "a": "ɑ",
    "ä": "ɑ",
    "ɒ": "ɑ",
    "o": "oʊ",
    "ɝ": "ɚ",
    "ɜ": "ɚ",
    "r": "ɹ",
    "ɻ": "ɹ",
    "ʁ": "ɹ",
    "ɽ": "ɹ",
    "ɾ": "d",  # the flap of "better": the recognizer hears d
    "ɫ": "l",
    "ɬ": "l",
    "ʎ": "l",
    "c": "k",
    "x": "k",
    "q": "k",
    "ɟ": "ɡ",
    "ɣ": "ɡ",
    "ç": "h",
    "χ": "h",
    "ħ": "h",
    "ɦ": "h",
    "ʋ": "v",
    "β": "v",
    "ɸ": "f",
    "ɕ": "ʃ",
    "ʂ": "ʃ",
    "ʑ": "ʒ",
    "ʐ": "ʒ",
    "ɲ": "n",
    "ɴ": "n",
    "ɱ": "m",
    "ʔ": "",
    "ɥ": "j",
    "ʍ": "w",
}
# Marks that carry no phoneme of their own: stress, length, tie bars, syllabicity, aspiration.
_MARKS = set("ˈˌːˑ˞ʰʱʲʷˀˤ‿͜͡") | {"̃", "̩", "̯", "̥", "̬", "̪", "̚", "͈"}
_SEPARATORS = set(" |_-,.;:!?'\"")


def english_phonemes(ipa) -> list:
    """Phonemes of INVENTORY in an IPA string (espeak-ng's, clauses and words separated by
    " | " and spaces) or a sequence of recognizer tokens. Symbols outside the mapping are kept
    as they are (they count as substitutions, never as hits)."""
    if isinstance(ipa, str):
        text = ipa
    elif isinstance(ipa, (list, tuple)) and all(isinstance(t, str) for t in ipa):
        text = " ".join(t for t in ipa if not (t.startswith("<") and t.endswith(">")))
    else:
        raise ValueError(f"ipa: expected an IPA string or a list of tokens, got {ipa!r}")
    text = unicodedata.normalize("NFC", text)
    # NORTH/FORCE: espeak-ng en-us writes oː(ɹ), which is ɔ, not the GOAT diphthong
    text = text.replace("oːɹ", "ɔɹ").replace("oː", "ɔ")
    letters = [ch for ch in text if ch not in _MARKS and not unicodedata.combining(ch)]
    out, i = [], 0
    while i < len(letters):
        ch = letters[i]
        if ch in _SEPARATORS or ch.isdigit() or ch in "%~" or ch.isspace():
            i += 1
            continue
        pair = "".join(letters[i : i + 2])
        if pair in _UNITS:
            out += _UNITS[pair]
            i += 2
            continue
        mapped = _LETTERS.get(ch, ch)
        if mapped:
            out.append(mapped)
        i += 1
    return out


def reference_phonemes(row: dict) -> list:
    """The phonemes a clip of `row` ({"text", optional "phonemes"}) should say: its stored
    espeak-ng en-us IPA (the evaluation sets carry it, so every machine scores against the
    same reference), else espeak-ng's IPA of its text now."""
    ipa = row.get("phonemes")
    if not ipa:
        from codecspec.frontend.phonemes import phonemize

        ipa = phonemize(row["text"], REFERENCE_VOICE)
    return english_phonemes(ipa)


def align(reference: Sequence[str], hypothesis: Sequence[str]) -> list:
    """The minimum-edit alignment of two phoneme sequences as (ref, hyp) pairs: (r, h) a hit
    (r == h) or a substitution, (r, None) a deletion, (None, h) an insertion. Among the
    alignments with fewest edits it takes one with the most hits, as `word_errors` counts."""
    ref, hyp = list(reference), list(hypothesis)
    n, m = len(ref), len(hyp)
    # cost[i][j] = (edits, -hits) of aligning ref[:i] with hyp[:j]
    cost = np.zeros((n + 1, m + 1, 2), np.int64)
    cost[:, 0, 0] = np.arange(n + 1)
    cost[0, :, 0] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            same = ref[i - 1] == hyp[j - 1]
            d = cost[i - 1, j - 1] + ((0, -1) if same else (1, 0))
            u = cost[i - 1, j] + (1, 0)
            left = cost[i, j - 1] + (1, 0)
            cost[i, j] = min((tuple(d), tuple(u), tuple(left)))
    pairs, i, j = [], n, m
    while i > 0 or j > 0:
        here = tuple(cost[i, j])
        if i > 0 and j > 0:
            same = ref[i - 1] == hyp[j - 1]
            step = (0, -1) if same else (1, 0)
            if tuple(cost[i - 1, j - 1] + step) == here:
                pairs.append((ref[i - 1], hyp[j - 1]))
                i, j = i - 1, j - 1
                continue
        if i > 0 and tuple(cost[i - 1, j] + (1, 0)) == here:
            pairs.append((ref[i - 1], None))
            i -= 1
        else:
            pairs.append((None, hyp[j - 1]))
            j -= 1
    return pairs[::-1]


def phoneme_errors(reference: Sequence[str], hypothesis: Sequence[str]) -> WordErrors:
    """Counts of the phoneme alignment (hits, S, D, I against the N reference phonemes)."""
    return word_errors(list(reference), list(hypothesis))


class PhonemeRecognizer:
    """hama's English phoneme CTC recognizer (the `[quality]` extra): waveform -> phonemes of
    INVENTORY. Greedy CTC decoding at the package's default settings: one clip, one output."""

    def __init__(self):
        try:
            import hama
        except ImportError:
            from codecspec.evaluation.intelligibility import EXTRA_HINT

            raise RecognizerUnavailable(
                f"phonemes: the phoneme recognizer (hama) is not installed: {EXTRA_HINT}"
            ) from None
        from importlib.metadata import version

        self.model = hama.ASRModel()
        self.version = version("hama")
        self.name = f"hama {self.version} phoneme CTC (greedy)"

    def transcribe(self, wav, sample_rate: int) -> list:
        """Phonemes of INVENTORY heard in a mono waveform at any sample rate (resampled to
        16 kHz with codecspec's band-limited resampler, not the package's linear one)."""
        x = _as_16k(wav, sample_rate)  # ValueError naming `wav` / `sample_rate` as Whisper's
        return english_phonemes(self.model.transcribe_waveform(x, 16000).phonemes)

    # what `intelligibility.score` asks of the phoneme recognizer it is given, besides
    # `transcribe` and `name`: a sentence's reference phonemes and a clip's alignment
    reference = staticmethod(reference_phonemes)
    errors = staticmethod(phoneme_errors)
