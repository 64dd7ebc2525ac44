"""Voices of an FSQ voice-prefix model (GEPARD's voice prefix, docs/fsq_model.md).

A voice-prefix folder has `voice.onnx` (a reference clip's FSQ channels -> K prefix
vectors, the Q-Former) and `voices.npz` (the prefixes of its named voices, and `neutral`:
the learned null prefix, the model's voice when no reference is given). A clip becomes a
voice once, at load or at `VoiceBank.add`: read (`codecspec.codec.clips.read_clip`),
resampled to the codec's rate, encoded by the folder's own FSQ codec, read by the Q-Former.
Every request then feeds its voice's prefix to the encoder graph at prefill; the step graph
never sees it (the voice reaches the frames through the encoder's memory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from codecspec.codec.audio import resample
from codecspec.codec.clips import read_clip
from codecspec.runtime.session import open_session

__all__ = ["VoiceBank", "NEUTRAL", "VOICE_FILES", "MAX_REFERENCE_SECONDS"]

VOICE_FILES = ("voice.onnx", "voices.npz")
NEUTRAL = "neutral"  # the null prefix's name
MIN_REFERENCE_SECONDS = 0.5  # a few phonemes: less holds no voice to read
MAX_REFERENCE_SECONDS = 20.0  # longer clips are cut: the prefix reads what frames share
SILENCE = 1e-4  # peak below -80 dBFS


class VoiceBank:
    """The named prefixes [K, D] of a voice-prefix folder, and the graph that adds more."""

    def __init__(self, folder: Path, codec, provider="auto", threads=None):
        self.codec = codec
        self.graph = open_session(str(folder / "voice.onnx"), provider=provider, threads=threads)
        with np.load(folder / "voices.npz") as z:
            self.prefixes = {k: z[k].astype(np.float32) for k in z.files}
        if NEUTRAL not in self.prefixes:
            raise ValueError(f"model: {folder / 'voices.npz'} has no {NEUTRAL!r} prefix")

    @property
    def names(self) -> list:
        return list(self.prefixes)

    def clone(self, ref_audio) -> np.ndarray:
        """The prefix [K, D] of a reference clip (a path, or (samples, sample_rate))."""
        wav, rate = read_clip(ref_audio)
        x = resample(wav, rate, self.codec.sample_rate)
        seconds = x.size / self.codec.sample_rate
        if seconds < MIN_REFERENCE_SECONDS:
            raise ValueError(
                f"ref_audio: {seconds:.2f} s is too short to hold a voice "
                f"(>= {MIN_REFERENCE_SECONDS} s)"
            )
        if float(np.max(np.abs(x))) < SILENCE:
            raise ValueError("ref_audio: the clip is silent (peak below -80 dBFS)")
        x = x[: int(MAX_REFERENCE_SECONDS * self.codec.sample_rate)]
        channels = self.codec.encode_features(self.codec.features(x)).astype(np.int64)
        return self.graph.run(None, {"ref_channels": channels[None]})[0][0]

    def add(self, name: str, ref_audio) -> None:
        """`ref_audio` as the voice `name` (replacing a named voice of that name)."""
        if not isinstance(name, str) or not name or name == NEUTRAL:
            raise ValueError(f"name: expected a voice name other than {NEUTRAL!r}, got {name!r}")
        self.prefixes[name] = self.clone(ref_audio)

    def add_dir(self, voices_dir) -> list:
        """Every NAME.wav (or .flac, .mp3, .ogg) in `voices_dir` as the voice NAME."""
        d = Path(voices_dir).expanduser()
        if not d.is_dir():
            raise ValueError(f"voices_dir: {d} is not a folder")
        clips = sorted(p for p in d.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
        if not clips:
            raise ValueError(f"voices_dir: {d} holds no clip (NAME.wav, .flac, .mp3, .ogg)")
        for p in clips:
            self.add(p.stem, p)
        return [p.stem for p in clips]

    def prefix(self, names: list) -> np.ndarray:
        """[B, K, D] prefixes of voice `names` (known: `names` of the bank)."""
        return np.stack([self.prefixes[self.check(n)] for n in names])

    def check(self, name: Optional[str]) -> str:
        if name not in self.prefixes:
            raise ValueError(f"speaker: expected one of {self.names}, got {name!r}")
        return name


AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".m4a")
