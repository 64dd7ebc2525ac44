"""Unpredictable English text for the speech corpus: the phoneme inventory in contexts that
everyday prose (the fortunes) rarely gives.

A model conditioned on espeak-ng's phoneme track learns which codes each phoneme context
makes; trained on fortunes alone it meets the same few thousand words again and again and
fails on what a user actually types (names, numbers, rare words, odd word orders). These
texts are drawn from a dictionary word list (Debian's `wamerican`, /usr/share/dict/words)
through a handful of sentence shapes:

- word-salad sentences with function words in plausible places ("The ferrule mortgages a
  bleak quatrain.") — grammatical-looking, meaningless, so nothing is predictable from context;
- names, numbers, dates, times, amounts, ordinals and spelled-out abbreviations in short
  frames ("Ingrid paid $41.07 on March 3rd, 1987.");
- plain word lists and numbers read out.

Every text is a function of (seed, index) alone, so a longer corpus extends a shorter one.
None of these shapes or words is tied to the project's evaluation sets: those are written
by hand and checked against the corpus text sources by their own test.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np

WORDS_FILE = Path("/usr/share/dict/words")
PACKAGE = "wamerican"  # Debian package that provides WORDS_FILE

DETERMINERS = ("the", "a", "this", "that", "each", "every", "some", "no", "my", "your", "our")
PREPOSITIONS = ("on", "in", "under", "over", "near", "beside", "behind", "with", "without",
                "through", "across", "against", "between", "toward", "after", "before")  # fmt: skip
AUXILIARIES = ("will", "can", "must", "should", "might", "does", "did", "would")
WH = ("how", "why", "where", "when", "what")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")  # fmt: skip
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
UNITS = ("meters", "miles", "kilograms", "liters", "degrees", "percent", "volts", "bytes",
         "hours", "minutes", "seconds", "pounds", "feet", "inches", "dollars", "euros")  # fmt: skip
LETTERS = "BCDFGHJKLMNPQRSTVWXZ"


@lru_cache(maxsize=1)
def lexicon() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(common words, names) from the word list: lower-case alphabetic entries of 2-14
    letters, and capitalised alphabetic ones (names of people and places); possessives and
    other forms with an apostrophe are left out."""
    if not WORDS_FILE.is_file():
        raise SystemExit(f"{WORDS_FILE} is missing: apt-get install {PACKAGE}")
    words, names = [], []
    for line in WORDS_FILE.read_text(encoding="utf-8", errors="replace").splitlines():
        w = line.strip()
        if re.fullmatch(r"[a-z]{2,14}", w):
            words.append(w)
        elif re.fullmatch(r"[A-Z][a-z]{2,11}", w):
            names.append(w)
    return tuple(sorted(set(words))), tuple(sorted(set(names)))


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _number(rng) -> str:
    """A number as people write it: small or large integers, decimals, with separators."""
    kind = int(rng.integers(6))
    if kind == 0:
        return str(int(rng.integers(0, 20)))
    if kind == 1:
        return str(int(rng.integers(20, 1000)))
    if kind == 2:
        return f"{int(rng.integers(1000, 10_000_000)):,}"
    if kind == 3:
        return f"{rng.uniform(0, 100):.{int(rng.integers(1, 4))}f}"
    if kind == 4:
        return _ordinal(int(rng.integers(1, 100)))
    return str(int(rng.integers(1100, 2100)))  # a year


def _ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


def _date(rng) -> str:
    day = int(rng.integers(1, 29))
    year = int(rng.integers(1100, 2100))
    kind = int(rng.integers(3))
    if kind == 0:
        return f"{_pick(rng, MONTHS)} {_ordinal(day)}, {year}"
    if kind == 1:
        return f"{_pick(rng, DAYS)}, {_pick(rng, MONTHS)} {day}"
    return f"{day} {_pick(rng, MONTHS)} {year}"


def _amount(rng) -> str:
    kind = int(rng.integers(4))
    if kind == 0:
        return f"${rng.uniform(0, 1000):.2f}"
    if kind == 1:
        return f"{int(rng.integers(1, 100))}%"
    if kind == 2:
        return f"{int(rng.integers(1, 13))}:{int(rng.integers(0, 60)):02d}"
    return f"{_number(rng)} {_pick(rng, UNITS)}"


def _abbreviation(rng) -> str:
    return "".join(_pick(rng, LETTERS) for _ in range(int(rng.integers(2, 5))))


def _np(rng, words) -> str:
    """A noun phrase: determiner, sometimes a modifier, a head word."""
    parts = [_pick(rng, DETERMINERS)]
    if rng.random() < 0.5:
        parts.append(_pick(rng, words))
    parts.append(_pick(rng, words))
    return " ".join(parts)


def _salad(rng, words, names) -> str:
    """A meaningless sentence of dictionary words in one of five shapes."""
    shape = int(rng.integers(5))
    w = lambda: _pick(rng, words)  # noqa: E731
    if shape == 0:
        s = f"{_np(rng, words)} {w()} {_pick(rng, PREPOSITIONS)} {_np(rng, words)}."
    elif shape == 1:
        s = f"{_np(rng, words)} {w()} {_np(rng, words)}."
    elif shape == 2:
        s = f"{w()} {_np(rng, words)} and {_np(rng, words)}."
    elif shape == 3:
        s = f"{_pick(rng, WH)} {_pick(rng, AUXILIARIES)} {_np(rng, words)} {w()}?"
    else:
        s = f"{_np(rng, words)} that {w()} {_np(rng, words)} is {w()}."
    return s[0].upper() + s[1:]


def _facts(rng, words, names) -> str:
    """Names, numbers, dates, amounts and abbreviations in a short frame."""
    shape = int(rng.integers(5))
    name, other = _pick(rng, names), _pick(rng, names)
    if shape == 0:
        return f"{name} {_pick(rng, words)} {_amount(rng)} on {_date(rng)}."
    if shape == 1:
        return f"{name} and {other} met at {_amount(rng)} near {_pick(rng, names)}."
    if shape == 2:
        return f"The {_abbreviation(rng)} {_pick(rng, words)} {_number(rng)} {_pick(rng, words)}."
    if shape == 3:
        return f"On {_date(rng)}, {name} {_pick(rng, words)} {_number(rng)} {_pick(rng, UNITS)}."
    return (
        f"{name} {other}, {_number(rng)} {_pick(rng, words)} {_pick(rng, PREPOSITIONS)} "
        f"{_pick(rng, names)}."
    )


def _word_list(rng, words, names) -> str:
    items = [_pick(rng, words if rng.random() < 0.8 else names) for _ in range(rng.integers(4, 9))]
    s = ", ".join(items[:-1]) + f" and {items[-1]}."
    return s[0].upper() + s[1:]


def _numbers(rng, words, names) -> str:
    items = [
        _number(rng) if rng.random() < 0.6 else _amount(rng) for _ in range(rng.integers(3, 6))
    ]
    return ", ".join(items) + "."


# shape -> share of the texts
KINDS = ((_salad, 0.45), (_facts, 0.30), (_word_list, 0.15), (_numbers, 0.10))


def text(seed: int, index: int, max_chars: int = 220) -> str:
    """Text number `index` of stream `seed` (deterministic, independent of other indices)."""
    words, names = lexicon()
    rng = np.random.default_rng([seed, index, 7])
    shares = np.array([s for _, s in KINDS])
    make = KINDS[int(rng.choice(len(KINDS), p=shares / shares.sum()))][0]
    t = make(rng, words, names)
    if rng.random() < 0.35:  # two sentences now and then: longer utterances, sentence joins
        t = f"{t} {_salad(rng, words, names)}"
    return t[:max_chars].rsplit(" ", 1)[0] + "." if len(t) > max_chars else t


def texts(seed: int, n: int, min_chars: int = 24, max_chars: int = 220) -> list[str]:
    """n distinct texts of at least `min_chars` characters."""
    out, seen, i = [], set(), 0
    while len(out) < n:
        t = text(seed, i, max_chars)
        i += 1
        if len(t) >= min_chars and t not in seen:
            seen.add(t)
            out.append(t)
    return out


if __name__ == "__main__":
    for t in texts(0, 20):
        print(t)
