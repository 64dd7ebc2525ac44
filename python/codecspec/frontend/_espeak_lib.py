"""espeak-ng's C library through ctypes.

Where it comes from (`locate`): the `espeakng-loader` wheel first (a PyPI dependency that
carries the library and its `espeak-ng-data`, so `pip install codecspec` needs no system
package), then a system library (Debian's ``libespeak-ng1``) as the fallback. The corpus recipe
and the runtime both load it through here, so the phoneme track at synthesis comes from the
library the model's corpus was timed with.

`codecspec.frontend.espeak` builds on this; run as a script (``python -I _espeak_lib.py`` with a
JSON request on stdin) it answers with the phoneme timing of one text from a freshly
initialised library. The library keeps state from one synthesis to the next (its waveform
generator's phase), which moves phoneme times by a few ms from call to call; a fresh process
per request makes the timing a function of the request alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys

# espeak_EVENT_TYPE values and API constants (speak_lib.h)
_EV_END_OF_LIST, _EV_PHONEME = 0, 7
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_OPTION_PHONEME_EVENTS = 0x0001
_CHARS_UTF8 = 1
_POS_CHARACTER = 1
_RATE, _PITCH, _WORDGAP = 1, 3, 7
_PHONEMES_IPA = 0x02


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


def _c_text(text: str) -> bytes:
    """`text` as the NUL-terminated UTF-8 the library reads. The library stops at the first
    NUL, so a NUL inside would cut the text silently: refused here, at the boundary, as is
    a lone surrogate (no UTF-8 form). `codecspec.frontend.textcheck` refuses both earlier, with
    the caller's argument name; this module must also work alone (the timing worker)."""
    nul = text.find("\0")
    if nul >= 0:
        raise ValueError(f"text: contains the control character U+0000 at index {nul}")
    try:
        return text.encode("utf-8") + b"\0"
    except UnicodeEncodeError as e:
        raise ValueError(f"text: contains a lone surrogate at index {e.start}") from None


def locate() -> tuple:
    """(library file, data folder or None): CODECSPEC_ESPEAK_LIBRARY (with
    CODECSPEC_ESPEAK_DATA, else the library's built-in data folder) where set, else the
    `espeakng-loader` wheel's, else the system's (its data folder compiled into it: None)."""
    if os.environ.get("CODECSPEC_ESPEAK_LIBRARY"):
        return os.environ["CODECSPEC_ESPEAK_LIBRARY"], os.environ.get("CODECSPEC_ESPEAK_DATA")
    try:
        import espeakng_loader

        return espeakng_loader.get_library_path(), espeakng_loader.get_data_path()
    except (ImportError, RuntimeError):
        pass
    return ctypes.util.find_library("espeak-ng") or "libespeak-ng.so.1", None


class Library:
    """The loaded library, initialised once per process with phoneme events on.

    `path` / `data` default to `locate()`; a worker process is handed the parent's choice so
    that both load the same library."""

    def __init__(self, path: str | None = None, data: str | None = None):
        if path is None:
            path, data = locate()
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            raise EspeakError(
                f"espeak-ng's library could not be loaded ({path}): "
                "pip install espeakng-loader (or apt-get install espeak-ng)"
            ) from e
        self.path, self.data = path, data
        # espeak_Initialize's path is the folder that holds espeak-ng-data (None: built-in)
        home = None if data is None else os.path.dirname(os.path.abspath(data)).encode()
        rate = self.lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, home, _OPTION_PHONEME_EVENTS
        )
        if rate <= 0:
            raise EspeakError(f"espeak_Initialize failed ({rate}; data {data})")
        self.sample_rate = int(rate)
        self.pcm: list = []
        self.events: list = []
        self._cb = _CALLBACK(self._collect)  # keep a reference: the library holds a raw pointer
        self.lib.espeak_SetSynthCallback(self._cb)
        self.lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self.lib.espeak_Info.restype = ctypes.c_char_p
        self.lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        self.lib.espeak_TextToPhonemes.argtypes = [
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_int,
            ctypes.c_int,
        ]

    @property
    def version(self) -> str:
        """The library's own version string, e.g. "1.52.0"."""
        return self.lib.espeak_Info(None).decode()

    def _collect(self, wav, n, events) -> int:
        if n > 0:
            self.pcm.append(ctypes.string_at(wav, 2 * n))
        i = 0
        while events[i].type != _EV_END_OF_LIST:
            e = events[i]
            if e.type == _EV_PHONEME:
                self.events.append((e.id.string.decode("utf-8", "replace"), e.audio_position))
            i += 1
        return 0

    def synthesize(self, text: str, voice: str, rate: int, pitch: int, gap: int):
        """(int16 PCM bytes, [(mnemonic, start ms)]); ValueError naming a bad voice."""
        if self.lib.espeak_SetVoiceByName(voice.encode("utf-8")) != 0:
            raise ValueError(f"voice: espeak-ng has no voice {voice!r}")
        self.lib.espeak_SetParameter(_RATE, int(rate), 0)
        self.lib.espeak_SetParameter(_PITCH, int(pitch), 0)
        self.lib.espeak_SetParameter(_WORDGAP, int(gap), 0)
        self.pcm, self.events = [], []
        data = _c_text(text)
        err = self.lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        if err != 0:
            raise EspeakError(f"espeak_Synth failed ({err})")
        pcm, events = b"".join(self.pcm), self.events
        self.pcm, self.events = [], []
        return pcm, events

    def ipa_clauses(self, text: str, voice: str) -> list:
        """IPA of `text`, one string per clause: what `espeak-ng -q -x --ipa` prints, line by
        line (the same library gives the same strings); ValueError naming a bad voice."""
        if self.lib.espeak_SetVoiceByName(voice.encode("utf-8")) != 0:
            raise ValueError(f"voice: espeak-ng has no voice {voice!r}")
        buf = ctypes.c_char_p(_c_text(text))
        cursor = ctypes.pointer(buf)
        clauses = []
        while cursor.contents.value:  # the library advances the pointer clause by clause
            out = self.lib.espeak_TextToPhonemes(cursor, _CHARS_UTF8, _PHONEMES_IPA)
            if out:
                clauses.append(out.decode("utf-8", "replace"))
        return clauses


def _serve() -> int:
    """One request on stdin -> the timing (no audio) as JSON on stdout."""
    req = json.loads(sys.stdin.read())
    try:
        lib = Library(req.get("library"), req.get("data"))
        pcm, events = lib.synthesize(
            req["text"], req["voice"], req["rate"], req["pitch"], req["gap"]
        )
    except (ValueError, EspeakError) as e:
        json.dump({"error": str(e), "type": type(e).__name__}, sys.stdout)
        return 0
    json.dump(
        {"sample_rate": lib.sample_rate, "num_samples": len(pcm) // 2, "events": events},
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
