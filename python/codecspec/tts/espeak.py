"""espeak-ng's library through ctypes: speech and the time at which each phoneme starts.

The aligned reference model (v3) conditions its temporal LM frame by frame on which phoneme
is being spoken. espeak-ng knows that: initialised with phoneme events, its synthesis callback
reports every phoneme's mnemonic with its position in the audio (ms). The command-line tool
cannot print those timings without an MBROLA voice, so this module talks to
``libespeak-ng.so.1`` directly (Debian's ``libespeak-ng1``, installed with ``espeak-ng``).

:func:`render` returns the audio and the phoneme timing of one text; the corpus recipe keeps
both, the runtime keeps the timing. The library is a process-wide singleton and not
reentrant, so every call holds one lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["Rendering", "render", "available", "EspeakError"]

# espeak_EVENT_TYPE values and API constants (speak_lib.h)
_EV_END_OF_LIST, _EV_PHONEME, _EV_MSG_TERMINATED = 0, 7, 6
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_OPTION_PHONEME_EVENTS = 0x0001
_CHARS_UTF8 = 1
_POS_CHARACTER = 1
_RATE, _PITCH, _WORDGAP = 1, 3, 7
RATE_RANGE = (80, 450)  # words per minute the library accepts


class EspeakError(RuntimeError):
    """The espeak-ng library is missing or refused a request."""


class _Id(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _Id),
    ]


_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)


@dataclass(frozen=True)
class Rendering:
    """One text as espeak-ng speaks it.

    ``phonemes[i]`` (espeak-ng's mnemonic, e.g. ``"oU"``; pauses are ``"_"``/``"_:"``) starts
    at ``starts_ms[i]`` and lasts until the next one starts (the last one until ``end_ms``).
    """

    audio: np.ndarray  # float32 [n] in [-1, 1]
    sample_rate: int
    phonemes: tuple
    starts_ms: np.ndarray  # float64 [P], non-decreasing
    end_ms: float

    @property
    def durations_ms(self) -> np.ndarray:
        ends = np.append(self.starts_ms[1:], self.end_ms)
        return ends - self.starts_ms


class _Library:
    """The loaded library, initialised once per process with phoneme events on."""

    def __init__(self):
        name = ctypes.util.find_library("espeak-ng") or "libespeak-ng.so.1"
        try:
            self.lib = ctypes.CDLL(name)
        except OSError as e:
            raise EspeakError(
                "espeak-ng's library (libespeak-ng.so.1) is not installed: "
                "apt-get install espeak-ng"
            ) from e
        rate = self.lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, None, _OPTION_PHONEME_EVENTS
        )
        if rate <= 0:
            raise EspeakError(f"espeak_Initialize failed ({rate})")
        self.sample_rate = int(rate)
        self.chunks: list = []
        self.events: list = []
        self._cb = _CALLBACK(self._collect)  # keep a reference: the library holds a raw pointer
        self.lib.espeak_SetSynthCallback(self._cb)
        self.lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]

    def _collect(self, wav, n, events) -> int:
        if n > 0:
            self.chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
        i = 0
        while events[i].type != _EV_END_OF_LIST:
            e = events[i]
            if e.type == _EV_PHONEME:
                self.events.append((e.id.string.decode("utf-8", "replace"), e.audio_position))
            i += 1
        return 0


_LOCK = threading.Lock()
_LIB: _Library | None = None


def _library() -> _Library:
    global _LIB
    if _LIB is None:
        _LIB = _Library()
    return _LIB


def available() -> bool:
    """Whether the library can be loaded here."""
    try:
        with _LOCK:
            _library()
        return True
    except EspeakError:
        return False


def render(text: str, voice: str, rate: int = 170, pitch: int = 50, gap: int = 0) -> Rendering:
    """Speak ``text`` with espeak-ng voice ``voice`` (e.g. ``"en-us+f1"``) at ``rate`` words
    per minute, base ``pitch`` (0-100) and ``gap`` (extra pause between words, 10 ms units)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: expected a non-empty string")
    if not isinstance(voice, str) or not voice:
        raise ValueError(f"voice: expected an espeak-ng voice name, got {voice!r}")
    for name, v, lo, hi in (
        ("rate", rate, *RATE_RANGE),
        ("pitch", pitch, 0, 100),
        ("gap", gap, 0, 100),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
            raise ValueError(f"{name}: expected an int in [{lo}, {hi}], got {v!r}")
    data = text.encode("utf-8") + b"\0"
    with _LOCK:
        lib = _library()
        if lib.lib.espeak_SetVoiceByName(voice.encode("utf-8")) != 0:
            raise ValueError(f"voice: espeak-ng has no voice {voice!r}")
        lib.lib.espeak_SetParameter(_RATE, int(rate), 0)
        lib.lib.espeak_SetParameter(_PITCH, int(pitch), 0)
        lib.lib.espeak_SetParameter(_WORDGAP, int(gap), 0)
        lib.chunks, lib.events = [], []
        err = lib.lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        if err != 0:
            raise EspeakError(f"espeak_Synth failed ({err})")
        chunks, events, sr = lib.chunks, lib.events, lib.sample_rate
        lib.chunks, lib.events = [], []
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
    audio = (audio.astype(np.float32) / 32768.0).astype(np.float32)
    if not events:
        raise ValueError(f"text: espeak-ng spoke no phoneme for {text[:40]!r}")
    phonemes = tuple(p for p, _ in events)
    starts = np.maximum.accumulate(np.array([t for _, t in events], dtype=np.float64))
    end_ms = max(float(starts[-1]), 1000.0 * audio.size / sr)
    return Rendering(audio, sr, phonemes, starts, end_ms)
