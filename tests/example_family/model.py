"""The example family's model: a toy autoregressive code model and a toy codec, numpy only.

Frame t of an utterance is G codes, one per codebook, drawn with the sampling core
(`codecspec.sample`) from logits that depend on the text, the speaker, the previous frame's
codes and t. The logits are integer arithmetic (exact in any order), so a row computed alone
and the same row inside a batch are the same bits: that is what lets the engine's batched step
equal `generate`. A real family owes the same property to its graphs and has to test it
(tests/families/fsq/test_serve_fsq.py); the toy has it by construction, so its tests check
the plumbing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.pipeline.family import resolve_params

from . import FORMAT

G, V = 4, 16  # codebooks per frame, codes per codebook
H = 8  # width of the text, speaker and code embeddings
CHARS = 64  # input ids: a character's code point modulo CHARS


def write_folder(path, seed: int = 0) -> Path:
    """A model folder of this family: model.json (its format: what the registry reads) and
    weights.npz (small integers, drawn from `seed`)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    weights = {
        "text": rng.integers(-3, 4, (CHARS, H)),
        "speaker": rng.integers(-3, 4, (2, H)),
        "codes": rng.integers(-3, 4, (G * V, H)),
        "out": rng.integers(-3, 4, (3 * H + 1, G * V)),
    }
    np.savez(path / "weights.npz", **weights)
    meta = {
        "format": FORMAT,
        "speakers": ["ada", "bo"],
        "languages": ["en"],
        "sampling": {"temperature": 0.8, "top_k": 8, "top_p": 1.0},
        "frames_per_char": 0.5,
        "sample_rate": 8000,
        "frame_rate": 20,
    }
    (path / "model.json").write_text(json.dumps(meta), encoding="utf-8")
    return path


class ToyCodec:
    """codes [T, G] -> float32 waveform, `hop` samples per frame: each frame a chord of G tones
    whose pitches are its codes. A frame's samples depend on its own codes only, so the
    server's chunked vocoding (a few frames of context per chunk) gives the same samples as
    one call over the whole utterance."""

    def __init__(self, sample_rate: int, frame_rate: int):
        self.sample_rate, self.frame_rate = int(sample_rate), float(frame_rate)
        self.hop = int(sample_rate // frame_rate)

    def decode(self, codes, n_iter: int = 0, seed: int = 0) -> np.ndarray:
        codes = np.asarray(codes, np.int64).reshape(-1, G)
        hz = 200.0 + 50.0 * codes[:, :, None]  # [T, G, 1]
        n = np.arange(self.hop)[None, None, :]
        tones = np.sin(2.0 * np.pi * hz * n / self.sample_rate)
        return (0.2 * tones.mean(axis=1)).reshape(-1).astype(np.float32)


@dataclass
class ToySynthesis:
    codes: np.ndarray  # int64 [T, G]
    wav: Optional[np.ndarray]  # float32, None with decode_audio=False
    sample_rate: int


class ToyTTS:
    """The single-stream model of a folder (`write_folder`): `generate` is its own loop, one
    frame after another, and the reference the engine's streams must equal."""

    def __init__(self, folder, provider: str = "cpu", threads=None, params=None):
        self.dir = Path(folder)
        self.meta = json.loads((self.dir / "model.json").read_text(encoding="utf-8"))
        with np.load(self.dir / "weights.npz") as w:
            self.w = {k: w[k].astype(np.int64) for k in w.files}
        self.speakers = list(self.meta["speakers"])
        self.languages = list(self.meta["languages"])
        params = resolve_params(params, self.meta)  # the CLI's sampling flags: over its law
        self.params = params or cs.SamplingParams(**self.meta["sampling"])
        self.codec = ToyCodec(self.meta["sample_rate"], self.meta["frame_rate"])

    # ------------------------------------------------------------------ the front end
    def ids(self, text: str, max_ids: Optional[int] = None) -> np.ndarray:
        ids = np.array([ord(c) % CHARS for c in text.strip()], np.int64)
        if len(ids) == 0:
            raise ValueError("input: expected some text")
        if max_ids is not None and len(ids) > max_ids:
            raise ValueError(f"input: {len(ids)} characters, more than {max_ids}")
        return ids

    def speaker_id(self, speaker: Optional[str]) -> int:
        if speaker is None:
            return 0
        if speaker not in self.speakers:
            raise ValueError(f"voice: expected one of {self.speakers}, got {speaker!r}")
        return self.speakers.index(speaker)

    def frames_for(self, n_ids: int, speed: float = 1.0) -> int:
        return max(1, int(np.ceil(n_ids * self.meta["frames_per_char"] / speed)))

    def text_vector(self, ids: np.ndarray) -> np.ndarray:
        return self.w["text"][ids].sum(axis=0)  # int64 [H]

    # ------------------------------------------------------------------ one frame
    def logits(self, text, speaker, prev, t) -> np.ndarray:
        """float32 [B, G, V] logits of B rows: text [B, H] (`text_vector`), speaker [B] ids,
        prev [B, G] the previous frame's codes (-1 before the first), t [B] frame indices."""
        rows = np.arange(G) * V + np.clip(prev, 0, None)  # [B, G] rows of the code table
        seen = (prev >= 0)[..., None]
        codes = np.where(seen, self.w["codes"][rows], 0).sum(axis=1)  # [B, H]
        x = np.concatenate([text, self.w["speaker"][speaker], codes, t[:, None]], axis=1)
        z = x @ self.w["out"]  # int64: exact, whatever the batch
        return ((z % 29 - 14) / 4).astype(np.float32).reshape(-1, G, V)

    @staticmethod
    def sample(logits, params: cs.SamplingParams, generator: cs.Generator) -> np.ndarray:
        """One frame's codes (int64 [G]) from its logits [G, V]: one draw per codebook."""
        return cs.sample(logits, params, generator).astype(np.int64)

    # ------------------------------------------------------------------ the loop
    def generate(
        self,
        text: str,
        speaker: Optional[str] = None,
        speed: float = 1.0,
        seed: int = 0,
        params: Optional[cs.SamplingParams] = None,
        decode_audio: bool = True,
    ) -> ToySynthesis:
        ids = self.ids(text)
        frames = self.frames_for(len(ids), speed)
        gen, params = cs.Generator(seed), params or self.params
        text_vec, spk = self.text_vector(ids)[None], np.array([self.speaker_id(speaker)])
        prev = np.full((1, G), -1, np.int64)
        codes = np.empty((frames, G), np.int64)
        for t in range(frames):
            codes[t] = self.sample(self.logits(text_vec, spk, prev, np.array([t]))[0], params, gen)
            prev = codes[t][None]
        wav = self.codec.decode(codes) if decode_audio else None
        return ToySynthesis(codes, wav, self.codec.sample_rate)
