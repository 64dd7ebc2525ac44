"""One result type for every family's `generate`: an utterance's codes and what each stage
of the pipeline cost.

`Result` holds what all families share (`codes` int64 [T, G]) and derives the figures
`codecspec synth` and `bench` report from one method, `stage_seconds()` ({stage: seconds},
in pipeline order). A family's result subclasses it and adds its own fields (audio,
phonemes, graph calls, `hit_max_frames`: whether the length guard, not the model, ended the
utterance, its loop's statistics), so existing attribute names stay as they are. (No
property here shares a name with a subclass's field: a dataclass would take the inherited
property as that field's default.) `Synthesis` is the depth-loop families' (reference v1,
v2/v3): both return it and the commands report it, so it lives outside either family.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["Result", "Synthesis"]


@dataclass
class Result:
    codes: np.ndarray  # int64 [T, G]: one row per frame
    # a temporal speculation loop's figures (`codecspec.decode.temporal.TemporalStats`)
    # where one ran; a class attribute, not a field (a subclass may make it one)
    temporal_stats = None

    @property
    def frames(self) -> int:
        return len(self.codes)

    def stage_seconds(self) -> dict:
        """{stage: seconds} of the pipeline's stages, in order (frontend, temporal, ...)."""
        raise NotImplementedError

    @property
    def total_seconds(self) -> float:
        return sum(self.stage_seconds().values())

    def stage_ms_per_frame(self) -> dict:
        """Milliseconds per frame of each stage."""
        n = max(self.frames, 1)
        return {k: 1e3 * v / n for k, v in self.stage_seconds().items()}


@dataclass
class Synthesis(Result):
    """One utterance: codes, audio and what the depth loop cost (`Result`, the families'
    one result type, with the depth-loop families' fields)."""

    codes: np.ndarray  # int64 [T, 16]
    wav: Optional[np.ndarray]
    sample_rate: int
    phonemes: str
    mode: str
    depth_calls: int
    depth_codes: int
    depth_seconds: float  # inner loop only (depth graph calls + their host work)
    temporal_seconds: float  # temporal step graph calls, c0 sampling, latent feedback
    decode_seconds: float  # vocoder: codes -> waveform
    frame_rate: float = 12.5
    frontend_seconds: float = 0.0  # phonemes -> ids -> encoder graph
    hit_max_frames: bool = False  # a stop head never fired: the length guard ended it
    max_frames: Optional[int] = None  # that guard (families with a stop head)
    temporal_stats: Optional[object] = None  # v2: `codecspec.decode.temporal.TemporalStats`

    @property
    def audio_seconds(self) -> float:
        if self.wav is None:
            return len(self.codes) / self.frame_rate
        return len(self.wav) / self.sample_rate

    @property
    def tokens_per_call(self) -> float:
        return self.depth_codes / max(self.depth_calls, 1)

    @property
    def calls_per_audio_second(self) -> float:
        return self.depth_calls / max(self.audio_seconds, 1e-9)

    @property
    def real_time_factor(self) -> float:
        return self.total_seconds / max(self.audio_seconds, 1e-9)

    def stage_seconds(self) -> dict:
        """Seconds of each pipeline stage (frontend, temporal, depth, vocoder)."""
        return {
            "frontend": self.frontend_seconds,
            "temporal": self.temporal_seconds,
            "depth": self.depth_seconds,
            "vocoder": self.decode_seconds,
        }
