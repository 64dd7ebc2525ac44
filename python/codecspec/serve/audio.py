"""Audio encodings of the speech endpoint: OpenAI's `response_format`s, chunk by chunk.

Every format but `wav` is produced at OpenAI's 24 kHz: `pcm` is raw 16-bit little-endian mono
samples (what OpenAI's clients play), `mp3`, `opus` (in Ogg), `aac` (ADTS) and `flac` are
encoded by FFmpeg's encoders through PyAV (`av`, whose wheels bundle libmp3lame, libopus and
the native aac and flac encoders). The model's 16 kHz waveform is resampled by FFmpeg's
libswresample (a windowed-sinc polyphase filter) as a stream, so the chunks join without
seams. `wav` keeps the model's own rate, which its header states, and is sent as it is
decoded with exact sizes when the length is known in advance.

Every encoder here is fed float32 chunks (`feed`) and flushed once (`close`); each returns
the bytes that are ready, so the concatenation of all returned bytes is one valid file.
"""

from __future__ import annotations

import struct

import numpy as np

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MEDIA_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
OPENAI_RATE = 24000  # OpenAI's pcm (and encoded formats) sample rate
# format -> (FFmpeg encoder, container, container options)
_CODECS = {
    "mp3": ("libmp3lame", "mp3", {}),
    # Ogg pages are flushed every 20 ms of audio, not every second, so chunks stream.
    "opus": ("libopus", "ogg", {"page_duration": "20000"}),
    "aac": ("aac", "adts", {}),
    "flac": ("flac", "flac", {}),
}


class EncoderUnavailable(RuntimeError):
    """This server has no encoder for a format (PyAV missing, or built without it)."""


def wav_header(num_samples: int, sample_rate: int) -> bytes:
    data = 2 * num_samples
    return b"RIFF" + struct.pack(
        "<I4s4sIHHIIHH4sI",
        36 + data,
        b"WAVE",
        b"fmt ",
        16,
        1,
        1,
        sample_rate,
        2 * sample_rate,
        2,
        16,
        b"data",
        data,
    )


def pcm16(wav: np.ndarray) -> bytes:
    return (np.clip(wav, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def _av():
    try:
        import av
    except ImportError as e:  # the serve extra installs it
        raise EncoderUnavailable(
            "this server has no audio encoders: pip install 'codecspec[serve]' (PyAV)"
        ) from e
    return av


def _frame(av, wav: np.ndarray, rate: int):
    x = np.ascontiguousarray(np.clip(wav, -1.0, 1.0), np.float32)[None, :]
    f = av.AudioFrame.from_ndarray(x, format="flt", layout="mono")
    f.sample_rate = rate
    return f


class _Sink:
    """A write-only file for PyAV: with no `seek`, muxers write a streamable file (FLAC
    does not go back to patch its header) and the bytes can be sent as they come."""

    def __init__(self):
        self.buf = bytearray()

    def write(self, b) -> int:
        self.buf += bytes(b)
        return len(b)

    def take(self) -> bytes:
        out = bytes(self.buf)
        self.buf.clear()
        return out


class RawEncoder:
    """16-bit mono samples: at the model's rate (`wav` body) or resampled to 24 kHz (`pcm`)."""

    def __init__(self, in_rate: int, out_rate: int):
        self.in_rate, self.out_rate = in_rate, out_rate
        self._av = None
        self._rs = None
        if in_rate != out_rate:
            self._av = _av()
            self._rs = self._av.AudioResampler(format="s16", layout="mono", rate=out_rate)

    def _resampled(self, frame) -> bytes:
        return b"".join(f.to_ndarray().astype("<i2").tobytes() for f in self._rs.resample(frame))

    def feed(self, wav: np.ndarray) -> bytes:
        if self._rs is None:
            return pcm16(wav)
        return self._resampled(_frame(self._av, wav, self.in_rate))

    def close(self) -> bytes:
        return b"" if self._rs is None else self._resampled(None)


class ContainerEncoder:
    """mp3 / opus / aac / flac at 24 kHz through FFmpeg (PyAV): PyAV resamples each frame to
    the encoder's rate and sample format and cuts the encoder's frame size."""

    def __init__(self, fmt: str, in_rate: int):
        av = _av()
        codec, container, options = _CODECS[fmt]
        self._av, self.in_rate, self._sink = av, in_rate, _Sink()
        try:
            self._out = av.open(self._sink, "w", format=container, options=options)
            self._stream = self._out.add_stream(codec, rate=OPENAI_RATE, layout="mono")
        except Exception as e:  # an FFmpeg build without this encoder
            raise EncoderUnavailable(f"response_format: no {fmt} encoder here ({e})") from e

    def feed(self, wav: np.ndarray) -> bytes:
        for packet in self._stream.encode(_frame(self._av, wav, self.in_rate)):
            self._out.mux(packet)
        return self._sink.take()

    def close(self) -> bytes:
        for packet in self._stream.encode(None):
            self._out.mux(packet)
        self._out.close()
        return self._sink.take()


def encoder(fmt: str, in_rate: int):
    """The chunk encoder of `response_format` fmt for a waveform at `in_rate` Hz."""
    if fmt == "wav":
        return RawEncoder(in_rate, in_rate)
    if fmt == "pcm":
        return RawEncoder(in_rate, OPENAI_RATE)
    if fmt in _CODECS:
        return ContainerEncoder(fmt, in_rate)
    raise ValueError(f"response_format: expected one of {FORMATS}, got {fmt!r}")


def available_formats() -> tuple:
    """The formats this installation can encode (wav always; the rest need PyAV)."""
    try:
        av = _av()
    except EncoderUnavailable:
        return ("wav",)
    out = ["wav", "pcm"]
    for fmt, (codec, _, _) in _CODECS.items():
        try:
            av.codec.Codec(codec, "w")
        except Exception:  # an FFmpeg build without this encoder
            continue
        out.append(fmt)
    return tuple(f for f in FORMATS if f in out)
