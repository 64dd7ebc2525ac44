"""Reference codec-LM TTS: text frontend and training data (issue 4). Numpy only."""

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
    "PhonemeVocab",
    "TTSDataset",
    "Utterance",
    "normalize",
    "tokenize",
]
