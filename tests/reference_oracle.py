"""The reference (v1) family's frame loop as `generate` ran it before it became the engine's
loop with one slot: the oracle of tests/families/reference/test_reference_one_loop.py and
tests/pipeline/test_streaming.py (a helper at tests/, so both folders import it alike)."""

from __future__ import annotations

import numpy as np

from codecspec.families.reference.model import RVQFrameDecoder, RVQStepper
from codecspec.families.reference.temporal_batch import SlotStepper
from codecspec.tts.text import BOS, EOS


def old_parts(tts, phonemes, mode, speaker=None) -> tuple:
    """(stepper, frame decoder) of the old frame loop: the utterance's encoder call, its
    planned length."""
    lang, spk = tts.ids("en", speaker)
    ids = tts.frontend.vocab.encode(phonemes)
    frames = tts.num_frames(len(ids), "en", 1.0)
    ids = np.concatenate([[BOS], ids, [EOS]]).astype(np.int64)[None]
    feeds = {"phonemes": ids, "language": np.array([lang]), "speaker": np.array([spk])}
    ck, cv = tts.encoder.run(["cross_keys", "cross_values"], feeds)
    stepper = RVQStepper(tts, SlotStepper(tts.temporal_batch, ck, cv, spk, frames))
    return stepper, RVQFrameDecoder(tts, frames, mode)
