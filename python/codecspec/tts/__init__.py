"""Reference codec-LM TTS: text frontend, training data, and the shipped model's runtime.

`ReferenceTTS` (text -> codes -> audio on ONNX Runtime) and `bench_depth_loop` live in
`codecspec.tts.model` / `codecspec.tts.bench` and are imported lazily (they load onnxruntime).
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
