"""One utterance's result for the depth-loop families (reference v1, v2/v3): codes, audio and
what each stage cost. Shared code: both families return it and `codecspec synth` / `bench`
report it, so it lives outside either family's package."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from codecspec.pipeline.result import Result

__all__ = ["Synthesis"]


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
