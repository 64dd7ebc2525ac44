"""The phoneme track of the aligned reference model (v3): which phoneme each frame speaks.

v2 learned where in the text each frame is from an expected progress (t + 0.5) / (r * P) and
cross-attention, and that alignment never formed at the training budget here (its speech was
babble to a recognizer, docs/quality.md). v3 is told instead, as
Qwen3-TTS feeds one text token per frame and Kyutai's delayed-streams TTS aligns a text stream
with the audio: espeak-ng's own phoneme timing (`codecspec.frontend.espeak`) gives every frame t a
*phoneme position*

    u_t = i + (c_t - start_i) / duration_i,   c_t = (t + 0.5) * frame_ms,

where phoneme i (encoder index i, after the BOS token at 0) is the one sounding at the frame's
centre c_t. The temporal LM reads u_t as its per-frame conditioning (the step graphs' `progress`
input): its cross-attention gets a prior centred on phoneme floor(u_t) and its input the
position inside the phoneme. The track is known before decoding starts, so the next input of
the temporal LM still depends only on c0 tokens a draft LM proposes: temporal speculation stays
exact.
"""

from __future__ import annotations

import numpy as np

__all__ = ["phoneme_track", "track_frames", "past_end_position", "FIRST_PHONEME"]

FIRST_PHONEME = 1  # encoder index of the first phoneme (index 0 is BOS)


def track_frames(end_ms: float, frame_ms: float) -> int:
    """Frames a codec of `frame_ms` gives for audio of `end_ms` (the last one partial)."""
    return max(1, int(np.ceil(end_ms / frame_ms - 1e-9)))


def phoneme_track(starts_ms, end_ms: float, frame_ms: float, frames: int | None = None):
    """float32 [frames] phoneme positions u_t (see the module docstring) for phonemes that
    start at `starts_ms` (non-decreasing, ms) and end at `end_ms`. Frames past the end stay
    inside the last phoneme (u < P + 1)."""
    starts = np.asarray(starts_ms, dtype=np.float64)
    if starts.ndim != 1 or starts.size == 0 or not np.all(np.isfinite(starts)):
        raise ValueError("starts_ms: expected a non-empty 1-D array of finite times")
    if np.any(np.diff(starts) < 0):
        raise ValueError("starts_ms: phoneme start times must not decrease")
    if not np.isfinite(end_ms) or end_ms < starts[-1]:
        raise ValueError(f"end_ms: {end_ms} lies before the last phoneme's start")
    if not frame_ms > 0:
        raise ValueError(f"frame_ms: expected > 0, got {frame_ms}")
    n = track_frames(end_ms, frame_ms) if frames is None else int(frames)
    if n < 1:
        raise ValueError(f"frames: expected >= 1, got {frames}")
    centre = (np.arange(n) + 0.5) * frame_ms
    ends = np.append(starts[1:], max(end_ms, starts[-1]))
    i = np.clip(np.searchsorted(starts, centre, side="right") - 1, 0, starts.size - 1)
    dur = np.maximum(ends[i] - starts[i], 1e-3)
    frac = np.clip((centre - starts[i]) / dur, 0.0, 0.999)
    return (FIRST_PHONEME + i + frac).astype(np.float32)


def past_end_position(track, phonemes: int) -> np.float32:
    """The position u of every frame past the track's end: the start of the last phoneme
    (espeak-ng's closing pause "_"), or the track's last value where it is already there.

    Held at the track's last value instead, a frame can sit inside the last spoken phoneme:
    espeak-ng's closing pause lasts ~7 ms, so when its audio ends right after the last sound
    the last frame's centre falls in that sound. The model is then told it still says it,
    its stop head stays silent and the utterance runs to the max-length guard (8 of 240
    clips of held-out corpus texts: five texts, three at both seeds; reference_model_v3.md)."""
    last = np.float32(np.asarray(track, np.float32)[-1])
    if phonemes < 1:
        raise ValueError(f"phonemes: expected >= 1, got {phonemes}")
    return max(last, np.float32(FIRST_PHONEME + phonemes - 1))
