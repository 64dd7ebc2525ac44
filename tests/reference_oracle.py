"""The reference (v1) family's frame loop as `generate` ran it before it became the engine's
loop with one slot: the oracle of tests/families/reference/test_reference_one_loop.py (a
helper at tests/, so every folder imports it alike). Its parts moved here, as they were, from
the package: `SlotStepper` (from `families/reference/temporal_batch.py`), `RVQStepper` and
`RVQFrameDecoder` (from `families/reference/model.py`); the loop is
tests/frame_loop_oracle.py's `run_frame_loop`."""

from __future__ import annotations

import time

import numpy as np

import codecspec as cs
from codecspec.families.reference.temporal_batch import BatchedTemporal
from codecspec.frontend.text import BOS, EOS


class SlotStepper:
    """One utterance as slot 0 of a `BatchedTemporal`, stepped a frame at a time (the
    single-stream form of the engine's stepper). step(prev_latent or None) -> (h_t, c0
    logits) of the next frame; `frames`: the utterance's planned length (its progress)."""

    def __init__(self, session, cross_keys, cross_values, speaker: int, frames: int):
        self.batch = BatchedTemporal(session, 1, frames, cross_keys.shape[3])
        self.batch.load(0, cross_keys, cross_values)
        self.speaker, self.frames, self.t = int(speaker), int(frames), 0
        self._zero = np.zeros(self.batch.latent_dim, np.float32)

    def step(self, prev_latent=None) -> tuple[np.ndarray, np.ndarray]:
        latent = self._zero if prev_latent is None else np.asarray(prev_latent, np.float32)
        progress = (self.t + 0.5) / self.frames
        h, logits = self.batch.step([0], latent[None], [progress], [self.speaker])
        self.t += 1
        return h[0], logits[0]


class RVQStepper:
    """The reference family's stepper for the old frame loop: feeds a frame's codes back as
    the codec latent the step graph reads. step(prev_codes [1, G] or None) -> (h_t, c0
    logits)."""

    def __init__(self, tts, stepper):
        self.tts, self.stepper = tts, stepper

    def step(self, prev_codes=None):
        latent = None if prev_codes is None else self.tts._latent(np.asarray(prev_codes)[0])
        return self.stepper.step(latent)


class RVQFrameDecoder:
    """c0 by `cs.sample`, c1.. by the depth loop (`DepthDecoder`, AR or speculative); stops
    after `frames` frames (this family's length rule: frames per phoneme, no stop head)."""

    def __init__(self, tts, frames: int, mode: str = "ar"):
        self.tts, self.frames, self.mode, self.t = tts, int(frames), mode, 0
        self.depth_seconds = 0.0  # the depth loop alone, for Synthesis.depth_seconds

    def decode(self, step_output, generator: cs.Generator):
        h, logits = step_output
        c0 = cs.sample(logits, self.tts.params, generator)
        t0 = time.perf_counter()
        codes = self.tts.depth.decode_frame(h, c0, generator, self.mode)
        self.depth_seconds += time.perf_counter() - t0
        self.t += 1
        return codes[None].astype(np.int64), np.array([self.t >= self.frames])


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
