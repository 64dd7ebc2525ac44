"""Phoneme text frontend for the reference codec-LM TTS.

The corpus manifest (``models/recipe/corpus.py``) stores, per utterance, the IPA string espeak-ng
prints with ``-x --ipa``: one line per clause, joined with ``" | "``, and language-switch tags
such as ``(en)`` / ``(de)`` where a text quotes a foreign word. Tokenisation
(:func:`tokenize`):

* a whole ``(xx)`` tag is one token;
* ``|`` (with any whitespace around it) is one clause-separator token ``"|"``;
* any other run of whitespace is one word-boundary token ``" "``; leading and trailing
  whitespace is dropped;
* every other character (IPA letter, stress mark, length mark, combining diacritic,
  punctuation) is its own token.

:class:`PhonemeVocab` maps tokens to ids: four reserved ids first (``pad=0``, ``bos=1``,
``eos=2``, ``unk=3``), then the symbols sorted by code point, so the same set of strings always
gives the same table. :class:`IdTable` does the same (sorted, no reserved ids) for languages and
speakers (espeak-ng voice variants, shared by all languages). :class:`Frontend` bundles the
three and saves them as one JSON file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "UNK",
    "RESERVED",
    "WORD",
    "CLAUSE",
    "tokenize",
    "normalize",
    "split_sentences",
    "PhonemeVocab",
    "IdTable",
    "Frontend",
    "PhonemeModel",
]

PAD, BOS, EOS, UNK = 0, 1, 2, 3
RESERVED = ("<pad>", "<bos>", "<eos>", "<unk>")
WORD = " "
CLAUSE = "|"
UNK_TEXT = "\ufffd"  # what decode() writes for <unk>: not a symbol espeak-ng prints

# one token per match: a language tag, a clause separator with its surrounding whitespace, a run
# of whitespace, or any single other character
_TOKEN = re.compile(r"\([a-z]{2,3}(?:-[a-z0-9]+)?\)|\s*\|\s*|\s+|.", re.DOTALL)


def tokenize(phonemes: str) -> list[str]:
    """Split an espeak-ng IPA string into tokens (see the module docstring)."""
    if not isinstance(phonemes, str):
        raise ValueError(f"phonemes: expected a str, got {type(phonemes).__name__}")
    out: list[str] = []
    for m in _TOKEN.finditer(phonemes.strip()):
        tok = m.group(0)
        if "|" in tok and tok.strip() == "|":
            tok = CLAUSE
        elif tok.isspace():
            tok = WORD
        out.append(tok)
    return out


def tokenize_mnemonics(phonemes: str) -> list[str]:
    """espeak-ng phoneme mnemonics separated by whitespace (a timed corpus's ``phonemes``)."""
    if not isinstance(phonemes, str):
        raise ValueError(f"phonemes: expected a str, got {type(phonemes).__name__}")
    return phonemes.split()


# how each vocabulary kind splits a phoneme string: IPA characters (espeak-ng -x --ipa), or
# espeak-ng's own mnemonics as its phoneme events name them (the aligned model)
VOCAB_KINDS = ("ipa", "mnemonic")
_TOKENIZERS = {"ipa": tokenize, "mnemonic": tokenize_mnemonics}


def _detokenize(tokens: Iterable[str]) -> str:
    return "".join(f" {CLAUSE} " if t == CLAUSE else t for t in tokens)


def normalize(phonemes: str) -> str:
    """The canonical form of a phoneme string: what ``decode(encode(s))`` gives back."""
    return _detokenize(tokenize(phonemes))


# a sentence ends at . ! ? or … (with any closing quotes or brackets) before whitespace
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]*\s+")


def split_sentences(text: str) -> list[str]:
    """The sentences of a text, in order, whitespace-normalised: a sentence ends at ".", "!",
    "?" or "…" (and any closing quotes/brackets) followed by whitespace. Abbreviations such as
    "Dr." also end one (a pause there is harmless for speech)."""
    if not isinstance(text, str):
        raise ValueError(f"text: expected a str, got {type(text).__name__}")
    parts, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        parts.append(text[start : m.start() + len(m.group().rstrip())])
        start = m.end()
    parts.append(text[start:])
    return [" ".join(p.split()) for p in parts if p.strip()]


class PhonemeVocab:
    """Token <-> id table with reserved ids ``pad=0, bos=1, eos=2, unk=3``.

    Symbols are sorted by code point, so the table depends only on the set of symbols.
    """

    def __init__(self, symbols: Iterable[str], kind: str = "ipa"):
        if kind not in VOCAB_KINDS:
            raise ValueError(f"kind: expected one of {VOCAB_KINDS}, got {kind!r}")
        self.kind = kind
        syms = sorted(set(symbols))
        for s in syms:
            if not isinstance(s, str) or not s:
                raise ValueError(f"symbols: every symbol must be a non-empty str, got {s!r}")
            if s in RESERVED:
                raise ValueError(f"symbols: {s!r} is a reserved token name")
        self.symbols: tuple[str, ...] = tuple(syms)
        self.tokens: tuple[str, ...] = RESERVED + self.symbols
        self._index = {t: i for i, t in enumerate(self.tokens)}

    pad_id, bos_id, eos_id, unk_id = PAD, BOS, EOS, UNK

    @classmethod
    def from_strings(cls, strings: Iterable[str], kind: str = "ipa") -> PhonemeVocab:
        """Every token of the given phoneme strings."""
        symbols: set[str] = set()
        for s in strings:
            symbols.update(_TOKENIZERS[kind](s) if kind in _TOKENIZERS else tokenize(s))
        return cls(symbols, kind)

    @classmethod
    def from_manifest(cls, rows: Sequence[Mapping], split: str | None = "train") -> PhonemeVocab:
        """Built from the ``phonemes`` of the manifest rows of ``split`` (None: every row).
        A corpus rendered with phoneme timing (rows with ``events``) holds espeak-ng's
        mnemonics, space-separated: its vocabulary is of kind ``"mnemonic"``."""
        rows = _rows_of_split(rows, split)
        kind = "mnemonic" if all("events" in r for r in rows) else "ipa"
        return cls.from_strings((_field(r, "phonemes", "rows") for r in rows), kind)

    def tokenize(self, phonemes: str) -> list[str]:
        """The tokens of a phoneme string, as this vocabulary's kind splits it."""
        return _TOKENIZERS[self.kind](phonemes)

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self._index and token not in RESERVED

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, PhonemeVocab)
            and self.tokens == other.tokens
            and self.kind == other.kind
        )

    def __repr__(self) -> str:
        return f"PhonemeVocab({len(self)} tokens: {len(RESERVED)} reserved + {len(self.symbols)})"

    def token_id(self, token: str) -> int:
        """Id of one token, reserved names included (``unk`` when it is not in the table)."""
        return self._index.get(token, UNK)

    def encode(
        self, phonemes: str, *, bos: bool = False, eos: bool = False, strict: bool = False
    ) -> np.ndarray:
        """int32 ids of ``phonemes``; unknown tokens become ``unk`` (ValueError when ``strict``)."""
        toks = self.tokenize(phonemes)
        if strict:
            unknown = sorted({t for t in toks if t not in self._index or t in RESERVED})
            if unknown:
                raise ValueError(f"phonemes: tokens not in the vocabulary: {unknown}")
        ids = [self._index.get(t, UNK) if t not in RESERVED else UNK for t in toks]
        if bos:
            ids.insert(0, BOS)
        if eos:
            ids.append(EOS)
        return np.asarray(ids, dtype=np.int32)

    def decode(self, ids) -> str:
        """Phoneme string of ``ids``; pad/bos/eos are skipped, unk is written as U+FFFD."""
        arr = np.asarray(ids)
        if arr.ndim != 1:
            raise ValueError(f"ids: expected a 1-D sequence, got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"ids: expected integers, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= len(self.tokens)):
            raise ValueError(f"ids: values must lie in [0, {len(self.tokens)}), got {arr.min()}..")
        toks = []
        for i in arr.tolist():
            if i in (PAD, BOS, EOS):
                continue
            toks.append(UNK_TEXT if i == UNK else self.tokens[i])
        return " ".join(toks) if self.kind == "mnemonic" else _detokenize(toks)

    def to_dict(self) -> dict:
        d = {"reserved": list(RESERVED), "symbols": list(self.symbols)}
        if self.kind != "ipa":  # older files have no kind: they are IPA
            d["kind"] = self.kind
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> PhonemeVocab:
        if not isinstance(d, Mapping) or "symbols" not in d:
            raise ValueError("d: expected a mapping with a 'symbols' list")
        if list(d.get("reserved", RESERVED)) != list(RESERVED):
            raise ValueError(f"d: reserved tokens {d.get('reserved')} differ from {RESERVED}")
        return cls(d["symbols"], d.get("kind", "ipa"))

    def save(self, path) -> None:
        _write_json(path, self.to_dict())

    @classmethod
    def load(cls, path) -> PhonemeVocab:
        return cls.from_dict(_read_json(path))


class IdTable:
    """Sorted name <-> id table (languages, speakers); ids are 0..n-1, no reserved entries."""

    def __init__(self, names: Iterable[str], kind: str = "name"):
        names = sorted(set(names))
        for n in names:
            if not isinstance(n, str) or not n:
                raise ValueError(f"names: every {kind} must be a non-empty str, got {n!r}")
        self.kind = kind
        self.names: tuple[str, ...] = tuple(names)
        self._index = {n: i for i, n in enumerate(self.names)}

    @classmethod
    def from_manifest(cls, rows: Sequence[Mapping], field: str) -> IdTable:
        """Every distinct value of ``field`` in the manifest rows."""
        return cls((_field(r, field, "rows") for r in rows), kind=field)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def __eq__(self, other) -> bool:
        return isinstance(other, IdTable) and (self.kind, self.names) == (other.kind, other.names)

    def __repr__(self) -> str:
        return f"IdTable({self.kind}: {list(self.names)})"

    def id(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise ValueError(f"name: unknown {self.kind} {name!r} (known: {self.names})") from None

    def name(self, i: int) -> str:
        if not 0 <= int(i) < len(self.names):
            raise ValueError(f"i: {self.kind} id must lie in [0, {len(self.names)}), got {i}")
        return self.names[int(i)]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "names": list(self.names)}

    @classmethod
    def from_dict(cls, d: Mapping) -> IdTable:
        if not isinstance(d, Mapping) or "names" not in d:
            raise ValueError("d: expected a mapping with a 'names' list")
        return cls(d["names"], kind=d.get("kind", "name"))


class Frontend:
    """Phoneme vocabulary + language and speaker tables, saved together as one JSON file."""

    def __init__(self, vocab: PhonemeVocab, languages: IdTable, speakers: IdTable):
        if not isinstance(vocab, PhonemeVocab):
            raise ValueError(f"vocab: expected a PhonemeVocab, got {type(vocab).__name__}")
        for arg, t in (("languages", languages), ("speakers", speakers)):
            if not isinstance(t, IdTable):
                raise ValueError(f"{arg}: expected an IdTable, got {type(t).__name__}")
        self.vocab, self.languages, self.speakers = vocab, languages, speakers

    @classmethod
    def from_manifest(
        cls,
        rows: Sequence[Mapping],
        vocab_split: str | None = "train",
        speaker_field: str = "variant",
    ) -> Frontend:
        """Vocabulary from the ``vocab_split`` rows; languages and speakers from every row."""
        rows = list(rows)
        if not rows:
            raise ValueError("rows: the manifest is empty")
        return cls(
            PhonemeVocab.from_manifest(rows, vocab_split),
            IdTable.from_manifest(rows, "language"),
            IdTable.from_manifest(rows, speaker_field),
        )

    def ids(self, language: str, speaker: str) -> tuple[int, int]:
        """(language id, speaker id) of names in the tables; ValueError naming `language` or
        `speaker` (with the known names) otherwise. The phoneme families' models share it."""
        if language not in self.languages:
            names = list(self.languages.names)
            raise ValueError(f"language: expected one of {names}, got {language!r}")
        if speaker not in self.speakers:
            names = list(self.speakers.names)
            raise ValueError(f"speaker: expected one of {names}, got {speaker!r}")
        return self.languages.id(language), self.speakers.id(speaker)

    def __eq__(self, other) -> bool:
        return isinstance(other, Frontend) and (
            (self.vocab, self.languages, self.speakers)
            == (other.vocab, other.languages, other.speakers)
        )

    def __repr__(self) -> str:
        return f"Frontend({self.vocab!r}, {self.languages!r}, {self.speakers!r})"

    def to_dict(self) -> dict:
        return {
            "format": "codecspec-tts-frontend/1",
            "vocab": self.vocab.to_dict(),
            "languages": self.languages.to_dict(),
            "speakers": self.speakers.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> Frontend:
        if not isinstance(d, Mapping) or not {"vocab", "languages", "speakers"} <= set(d):
            raise ValueError("d: expected a mapping with 'vocab', 'languages' and 'speakers'")
        return cls(
            PhonemeVocab.from_dict(d["vocab"]),
            IdTable.from_dict(d["languages"]),
            IdTable.from_dict(d["speakers"]),
        )

    def save(self, path) -> None:
        _write_json(path, self.to_dict())

    @classmethod
    def load(cls, path) -> Frontend:
        return cls.from_dict(_read_json(path))


class PhonemeModel:
    """What every phoneme-input family's model shows of its text side, from its `frontend`
    (a `Frontend`) and `meta` (model.json, with "default_speaker"): the language and speaker
    names and the ids of a (language, speaker) pair. The reference, v2/v3 and FSQ models
    derive from it, so that none borrows another family's members for it."""

    frontend: Frontend
    meta: dict
    codec: object  # the family's codec: its frame_rate times the phoneme track
    # A voice-prefix model's voices (an FSQ `VoiceBank`: `names`, `check`): its speakers are
    # those names, and its graphs' one speaker row is id 0.
    voices = None
    default_voice: str | None = None

    @property
    def languages(self) -> list:
        return list(self.frontend.languages.names)

    @property
    def speakers(self) -> list:
        if self.voices is not None:
            return self.voices.names
        return list(self.frontend.speakers.names)

    def ids(self, language: str, speaker: str | None = None) -> tuple[int, int]:
        """(language id, speaker id); `speaker` None or "" = the model's default speaker.
        ValueError naming `language` or `speaker` (with the known names) for unknown names."""
        if self.voices is not None:
            self.voices.check(speaker or self.default_voice)
            return self.frontend.ids(language, self.meta["default_speaker"])[0], 0
        return self.frontend.ids(language, speaker or self.meta["default_speaker"])

    @property
    def aligned(self) -> bool:
        """True for a model told espeak-ng's phoneme timing (model.json "conditioning":
        "phoneme_track"): v3, and an FSQ model trained the v3 way."""
        return self.meta.get("conditioning") == "phoneme_track"

    def espeak_voice(self, language: str, speaker: str | None) -> str:
        """The espeak-ng voice whose timing an aligned model follows (language + variant;
        a voice-prefix model's clip or neutral voice: the model.json default's)."""
        if self.voices is not None and speaker not in self.frontend.speakers:
            speaker = None
        return f"{self.meta['voices'][language]}+{speaker or self.meta['default_speaker']}"

    def phoneme_track(self, text: str, language: str, speaker, rate: float = 1.0):
        """(mnemonics, track u_t) of `text` as espeak-ng times it for this voice; `rate`
        scales the words per minute the model was trained around."""
        from codecspec.frontend.aligned import phoneme_track
        from codecspec.frontend.espeak import RATE_RANGE, timing

        if not (isinstance(rate, (int, float)) and 0.25 <= rate <= 4.0):
            raise ValueError(f"rate: expected a number in [0.25, 4], got {rate!r}")
        wpm = int(np.clip(round(self.meta["espeak_rate"] * rate), *RATE_RANGE))
        r = timing(text, self.espeak_voice(language, speaker), wpm, self.meta["espeak_pitch"])
        track = phoneme_track(r.starts_ms, r.end_ms, 1000.0 / self.codec.frame_rate)
        return " ".join(r.phonemes), track


def _rows_of_split(rows: Sequence[Mapping], split: str | None) -> list[Mapping]:
    rows = list(rows)
    if split is None:
        return rows
    out = [r for r in rows if _field(r, "split", "rows") == split]
    if not out:
        known = sorted({r.get("split") for r in rows})
        raise ValueError(f"split: no manifest rows in split {split!r} (splits: {known})")
    return out


def _field(row: Mapping, field: str, arg: str):
    try:
        return row[field]
    except (KeyError, TypeError):
        rid = row.get("id", "?") if isinstance(row, Mapping) else "?"
        raise ValueError(f"{arg}: manifest row {rid!r} has no {field!r} field") from None


def _write_json(path, obj) -> None:
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def _read_json(path):
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"path: {p} does not exist")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"path: {p} is not valid JSON ({e})") from None
