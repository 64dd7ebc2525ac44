"""espeak-ng's library: speech and the time at which each phoneme starts.

The aligned reference model (v3) conditions its temporal LM frame by frame on which phoneme
is being spoken. espeak-ng knows that: initialised with phoneme events, its synthesis callback
reports every phoneme's mnemonic with its position in the audio (ms). The command-line tool
cannot print those timings without an MBROLA voice, so `codecspec.frontend._espeak_lib` talks to
the library directly: the one the `espeakng-loader` wheel carries (a dependency of codecspec),
or a system ``libespeak-ng.so.1`` where that wheel is absent.

* :func:`render` — audio and timing in this process (the corpus recipe: fast, but the library
  carries state between calls, so times move by a few ms from call to call);
* :func:`timing` — the timing alone from a fresh process, so that it depends on the request
  only (the runtime: the same text and seed give the same codes in any process), cached.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codecspec.frontend._espeak_lib import EspeakError, Library, locate
from codecspec.frontend.textcheck import check_text

__all__ = [
    "Rendering",
    "render",
    "timing",
    "available",
    "library_info",
    "ipa",
    "EspeakError",
    "RATE_RANGE",
]

RATE_RANGE = (80, 450)  # words per minute the library accepts
# espeak-ng 1.52 prefixes a stressed vowel's phoneme event with its stress mark ("'i:", ",o@");
# 1.51, which the shipped corpus was timed with, does not. The marks are stripped, so both
# versions give the same mnemonics (checked on the 30 evaluation sentences: identical phoneme
# sequences, times within 50 ms) and the model sees the vocabulary it was trained on.
_STRESS = "',%"
_WORKER = Path(__file__).with_name("_espeak_lib.py")


@dataclass(frozen=True)
class Rendering:
    """One text as espeak-ng speaks it.

    ``phonemes[i]`` (espeak-ng's mnemonic, e.g. ``"oU"``; pauses are ``"_"``/``"_:"``) starts
    at ``starts_ms[i]`` and lasts until the next one starts (the last one until ``end_ms``).
    ``audio`` is empty when only the timing was asked for.
    """

    audio: np.ndarray  # float32 [n] in [-1, 1]
    sample_rate: int
    phonemes: tuple
    starts_ms: np.ndarray  # float64 [P], non-decreasing
    end_ms: float


_LOCK = threading.Lock()  # the library is a process-wide singleton and not reentrant
_LIB: Library | None = None


def _library() -> Library:
    global _LIB
    if _LIB is None:
        _LIB = Library()
    return _LIB


def library_info() -> dict:
    """{"path", "data", "version"} of the library this process uses (EspeakError if none)."""
    with _LOCK:
        lib = _library()
        return {"path": lib.path, "data": lib.data, "version": lib.version}


def ipa(text: str, voice: str) -> str:
    """IPA of `text` by the library, clauses joined with " | " (the corpus format of the
    IPA-input models; the command-line tool's output when both are the same version)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: expected a non-empty string")
    check_text(text)  # a NUL would end the library's C string early: refused, not cut
    with _LOCK:
        clauses = _library().ipa_clauses(text, voice)
    return " | ".join(c.strip() for c in clauses if c.strip())


def available() -> bool:
    """Whether the library can be loaded here."""
    try:
        with _LOCK:
            _library()
        return True
    except EspeakError:
        return False


def _check(text, voice, rate, pitch, gap) -> None:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: expected a non-empty string")
    check_text(text)  # a NUL would end the library's C string early: refused, not cut
    if not isinstance(voice, str) or not voice:
        raise ValueError(f"voice: expected an espeak-ng voice name, got {voice!r}")
    for name, v, lo, hi in (
        ("rate", rate, *RATE_RANGE),
        ("pitch", pitch, 0, 100),
        ("gap", gap, 0, 100),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise ValueError(f"{name}: expected an int in [{lo}, {hi}], got {v!r}")


def _rendering(text, audio, sr, num_samples, events) -> Rendering:
    if not events:
        raise ValueError(f"text: espeak-ng spoke no phoneme for {text[:40]!r}")
    phonemes = tuple(p.lstrip(_STRESS) for p, _ in events)
    starts = np.maximum.accumulate(np.array([t for _, t in events], dtype=np.float64))
    end_ms = max(float(starts[-1]), 1000.0 * num_samples / sr)
    return Rendering(audio, sr, phonemes, starts, end_ms)


def render(text: str, voice: str, rate: int = 170, pitch: int = 50, gap: int = 0) -> Rendering:
    """Speak ``text`` with espeak-ng voice ``voice`` (e.g. ``"en-us+f1"``) at ``rate`` words
    per minute, base ``pitch`` (0-100) and ``gap`` (extra pause between words, 10 ms units)."""
    _check(text, voice, rate, pitch, gap)
    with _LOCK:
        lib = _library()
        pcm, events = lib.synthesize(text, voice, int(rate), int(pitch), int(gap))
        sr = lib.sample_rate
    audio = (np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0).astype(np.float32)
    return _rendering(text, audio, sr, audio.size, events)


def timing(text: str, voice: str, rate: int = 170, pitch: int = 50, gap: int = 0) -> Rendering:
    """The phoneme timing of `render` (no audio) from a freshly initialised library."""
    _check(text, voice, rate, pitch, gap)
    return _timing(text, voice, int(rate), int(pitch), int(gap))


@functools.lru_cache(maxsize=1)
def _source() -> tuple:
    """The library the worker processes load: the same one as `render` in this process."""
    return locate()


@functools.lru_cache(maxsize=256)
def _timing(text: str, voice: str, rate: int, pitch: int, gap: int) -> Rendering:
    library, data = _source()
    req = json.dumps(
        dict(text=text, voice=voice, rate=rate, pitch=pitch, gap=gap, library=library, data=data)
    )
    r = subprocess.run(
        [sys.executable, "-I", str(_WORKER)], input=req.encode(), capture_output=True, check=False
    )
    if r.returncode != 0:
        raise EspeakError(f"espeak-ng timing failed: {r.stderr.decode(errors='replace')[-300:]}")
    out = json.loads(r.stdout)
    if "error" in out:
        raise (ValueError if out["type"] == "ValueError" else EspeakError)(out["error"])
    events = [(p, t) for p, t in out["events"]]
    empty = np.zeros(0, np.float32)
    return _rendering(text, empty, out["sample_rate"], out["num_samples"], events)
