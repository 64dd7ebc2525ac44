"""Latency measured from the text (issue 49 item 4): a text fed to `Qwen3TTS.stream_text` at
an LLM's pace, the time from its first piece to the first audio sample, and whether the
audio then keeps up with playback (no underrun).

The pieces are the text's own tokens (each decoded alone, as an LLM streams them), pushed
by a producer thread at `rate` tokens a second. Audio chunk i is ready at `ready[i]`;
played from the first chunk on, it is due at first + (samples before it) / 24000. An
underrun is a chunk ready after it is due; `late_ms` the worst by how much.
"""

from __future__ import annotations

import threading
import time

import numpy as np

__all__ = ["llm_pieces", "text_stream_latency"]


def llm_pieces(tok, text: str) -> list:
    """`text` as an LLM streams it: one piece per token of its own tokenizer, as the bytes
    of that token (a character split over two tokens is split over two pieces too)."""
    from .text import encode

    inv = {i: t for t, i in tok.get_vocab().items()}
    table = _unicode_to_byte()
    pieces = [bytes(table[ch] for ch in inv[int(i)]) for i in encode(tok, text)]
    if b"".join(pieces) != text.encode("utf-8"):
        raise ValueError("text: its tokens do not spell it back (NFC changed it?)")
    return pieces


def _unicode_to_byte() -> dict:
    """The byte-level BPE alphabet (GPT-2's bytes_to_unicode), character -> byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def text_stream_latency(tts, text: str, rate: float = 30.0, **kw) -> dict:
    """Speaks `text` fed at `rate` tokens a second through `tts.stream_text` (keywords as
    `stream`'s); returns the first-audio latency from the first piece, the underruns and
    the frames made."""
    pieces = llm_pieces(tts.tok, text)
    stream = tts.text_stream()
    started = threading.Event()

    def produce() -> None:
        started.wait()
        for i, piece in enumerate(pieces):
            due = t0 + i / rate
            time.sleep(max(0.0, due - time.perf_counter()))
            stream.push(piece)
        stream.end()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    info: dict = {}
    ready, sizes = [], []
    t0 = time.perf_counter()
    started.set()
    for audio in tts.stream(stream, info=info, **kw):
        ready.append(time.perf_counter())
        sizes.append(int(np.asarray(audio).size))
    producer.join()
    return _report(stream.first_text_at, ready, sizes, len(pieces), rate, info)


def _report(first_text: float, ready: list, sizes: list, tokens: int, rate: float, info) -> dict:
    if not ready:
        return {"first_audio_ms": None, "frames": 0}
    start = np.cumsum([0] + sizes[:-1]) / 24000.0
    due = ready[0] + start
    late = np.asarray(ready) - due
    return {
        "text_tokens": tokens,
        "tokens_per_second": rate,
        "text_seconds": round(tokens / rate, 3),
        "first_audio_ms": round(1e3 * (ready[0] - first_text), 1),
        "audio_seconds": round(sum(sizes) / 24000.0, 3),
        "chunks": len(ready),
        "underruns": int((late > 0).sum()),
        "late_ms": round(1e3 * float(max(late.max(), 0.0)), 1),
        "done_after_text_ms": round(1e3 * (ready[-1] - first_text), 1),
        "hit_max_frames": info.get("hit_max_frames"),
    }
