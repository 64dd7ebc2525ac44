"""One result type for every family's `generate`: an utterance's codes and what each stage
of the pipeline cost.

`Result` holds what all families share (`codes` int64 [T, G]) and derives the figures
`codecspec synth` and `bench` report from one method, `stage_seconds()` ({stage: seconds},
in pipeline order). A family's result subclasses it and adds its own fields (audio,
phonemes, graph calls, `hit_max_frames`: whether the length guard, not the model, ended the
utterance, its loop's statistics), so existing attribute names stay as they are. (No
property here shares a name with a subclass's field: a dataclass would take the inherited
property as that field's default.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Result"]


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
