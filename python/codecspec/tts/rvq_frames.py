"""The RVQ reference family through the shared frame loop (`codecspec.decode.frames`).

`RVQStepper` wraps the reference model's `TemporalStepper` (it feeds back a frame's codes
as the codec latent the step graph reads); `RVQFrameDecoder` samples c0 from the step's
logits, runs the depth loop (`DepthDecoder`, AR or speculative) and stops at the planned
frame count. `run_frame_loop(RVQStepper(...), RVQFrameDecoder(...), g, frames)` gives the
same codes as `ReferenceTTS.generate` for the same seed (tests/test_frame_loop_rvq.py), so
both families share one decode loop; `ReferenceTTS` itself can move onto it unchanged.
"""

from __future__ import annotations

import numpy as np

import codecspec as cs
from codecspec.tts.model import ReferenceTTS, TemporalStepper

__all__ = ["RVQStepper", "RVQFrameDecoder", "rvq_frame_loop_parts"]


class RVQStepper:
    """One stream: step(prev_codes [1, 16] or None) -> (h_t [D], c0 logits [V])."""

    def __init__(self, tts: ReferenceTTS, stepper: TemporalStepper):
        self.tts, self.stepper = tts, stepper

    def step(self, prev_codes=None):
        latent = None if prev_codes is None else self.tts._latent(np.asarray(prev_codes)[0])
        return self.stepper.step(latent)


class RVQFrameDecoder:
    """c0 by `cs.sample`, c1.. by the depth loop; stop after `frames` frames (the reference
    family's length rule: frames per phoneme, no stop head)."""

    def __init__(self, tts: ReferenceTTS, frames: int, mode: str = "ar"):
        self.tts, self.frames, self.mode, self.t = tts, int(frames), mode, 0

    def decode(self, step_output, generator: cs.Generator):
        h, logits = step_output
        c0 = cs.sample(logits, self.tts.params, generator)
        codes = self.tts.depth.decode_frame(h, c0, generator, self.mode)
        self.t += 1
        return codes[None].astype(np.int64), np.array([self.t >= self.frames])


def rvq_frame_loop_parts(
    tts: ReferenceTTS, phonemes: str, language: str, speaker: str, frames: int, mode: str = "ar"
):
    """(stepper, frame decoder) for one utterance given as IPA."""
    from codecspec.tts.text import BOS, EOS

    lang_id, spk_id = tts._ids(language, speaker)
    ids = np.concatenate([[BOS], tts.frontend.vocab.encode(phonemes), [EOS]]).astype(np.int64)
    ck, cv = tts.encoder.run(
        ["cross_keys", "cross_values"],
        {
            "phonemes": ids[None],
            "language": np.array([lang_id], np.int64),
            "speaker": np.array([spk_id], np.int64),
        },
    )
    stepper = RVQStepper(tts, TemporalStepper(tts.temporal, ck, cv, spk_id, frames))
    return stepper, RVQFrameDecoder(tts, frames, mode)
