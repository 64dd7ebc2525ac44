"""The phoneme-input families' shared text side: the text front end (`text`), espeak-ng
(`phonemes`, `espeak`), training data (`dataset`), the streaming loop (`stream`), the
depth-loop families' result type (`synthesis`), and the bench / synth / quality commands.

The models themselves are packages under `codecspec.families` (the reference v1 model is
`codecspec.families.reference.model.ReferenceTTS`); nothing here imports them.
"""

from codecspec.tts.dataset import Batch, TTSDataset, Utterance
from codecspec.tts.text import (
    BOS,
    CLAUSE,
    EOS,
    PAD,
    RESERVED,
    UNK,
    WORD,
    Frontend,
    IdTable,
    PhonemeModel,
    PhonemeVocab,
    normalize,
    tokenize,
)

__all__ = [
    "BOS",
    "CLAUSE",
    "EOS",
    "PAD",
    "RESERVED",
    "UNK",
    "WORD",
    "Batch",
    "Frontend",
    "IdTable",
    "PhonemeModel",
    "PhonemeVocab",
    "TTSDataset",
    "Utterance",
    "normalize",
    "tokenize",
]
