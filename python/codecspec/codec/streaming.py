"""Chunk-wise vocoding: codes -> waveform chunks as frames arrive, for any codec family.

`ChunkVocoder` takes a block decoder (an object with `.decode(codes, seed=...)`, such as the
v1 `Codec`, `FSQCodec` or `CodecV2`, or a plain function `f(codes, seed) -> wav`) whose
output is exactly `frame_hop` samples per frame, and renders a stream of frames in chunks of
`chunk_frames` frames:

- chunk k owns frames [k*N, (k+1)*N) and is decoded together with `context_frames` frames
  on either side (fewer at the ends of the stream), so Griffin-Lim's edge effects fall on
  context samples that are thrown away;
- neighbouring chunks are joined by a raised-cosine cross-fade of `crossfade` frames
  centred on the boundary (fade-in sin^2, fade-out cos^2, summing to one), taken from the
  two chunks' context;
- chunk k is decoded with the seed `chunk_seed(seed, k)`, so a stream is deterministic for
  a seed however its frames are pushed (one at a time, or all at once).

A chunk can be rendered once its right context exists (N + context frames after its
start), or when the stream ends. The chunks concatenate to exactly T * frame_hop samples,
as a whole-utterance `decode` would. docs/streaming.md has the measured seam difference.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["ChunkVocoder", "chunk_seed", "stream_decode", "block_decoder", "codec_sample_rate"]


def chunk_seed(seed: int, index: int) -> int:
    """The Griffin-Lim seed of chunk `index` of a stream seeded `seed` (a 32-bit int)."""
    return int(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(index)]).generate_state(1)[0])


def block_decoder(decoder):
    """`f(codes, seed) -> wav` from a codec object (`.decode(codes, seed=...)`) or a function."""
    if hasattr(decoder, "decode") and callable(decoder.decode):
        return lambda codes, seed: decoder.decode(codes, seed=seed)
    if callable(decoder):
        return decoder
    raise ValueError(
        f"decoder: expected a codec with .decode(codes, seed=...) or a function "
        f"f(codes, seed) -> wav, got {type(decoder).__name__}"
    )


def codec_sample_rate(codec) -> int:
    """A codec's output rate: `codec.sample_rate` (FSQCodec, CodecV2) or `codec.cfg.sample_rate`
    (the v1 Codec)."""
    sr = getattr(codec, "sample_rate", None)
    if sr is None:
        sr = getattr(getattr(codec, "cfg", None), "sample_rate", None)
    if sr is None:
        raise ValueError(f"codec: {type(codec).__name__} has no sample_rate (nor cfg.sample_rate)")
    return int(sr)


def _int_arg(name: str, v, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name}: expected an integer >= {lo}, got {v!r}")
    return int(v)


class ChunkVocoder:
    """Push frames in (`push`), take waveform chunks out; `finish` flushes the end.

    `chunk_frames` >= 1, `context_frames` >= 0, `crossfade` in frames, 0 <= crossfade <=
    min(1, context_frames) (a cross-fade needs context on both sides of the boundary).
    `frame_hop`: samples per frame; None = learnt from the first decoded block."""

    def __init__(
        self,
        decoder,
        *,
        chunk_frames: int = 8,
        context_frames: int = 2,
        crossfade: float = 0.25,
        seed: int = 0,
        frame_hop: int | None = None,
    ):
        self.decode = block_decoder(decoder)
        self.chunk_frames = _int_arg("chunk_frames", chunk_frames, 1)
        self.context_frames = _int_arg("context_frames", context_frames, 0)
        if not isinstance(crossfade, numbers.Real) or isinstance(crossfade, bool):
            raise ValueError(f"crossfade: expected a number of frames, got {crossfade!r}")
        if not 0.0 <= crossfade <= min(1.0, self.context_frames):
            raise ValueError(
                f"crossfade: expected 0 <= crossfade <= min(1, context_frames="
                f"{self.context_frames}) frames, got {crossfade!r}"
            )
        self.crossfade = float(crossfade)
        self.seed = int(seed)
        self.frame_hop = None if frame_hop is None else _int_arg("frame_hop", frame_hop, 1)
        self._codes: list = []  # frames from self._base on
        self._base = 0  # index of self._codes[0] in the stream
        self._pushed = 0  # frames pushed so far
        self._next = 0  # first frame of the next chunk to render
        self._chunks = 0  # chunks rendered
        self._tail = None  # the previous chunk's samples around the next boundary
        self._done = False
        self.samples = 0  # samples emitted so far
        self.decode_calls = 0

    @property
    def xfade(self) -> int:
        """Cross-fade length in samples (even), once `frame_hop` is known."""
        return 2 * int(round(self.crossfade * self.frame_hop / 2))

    def push(self, frames) -> list:
        """Add frames ([n, C], or one frame [C]); returns the chunks now ready (float32)."""
        if self._done:
            raise ValueError("frames: the stream has finished; start a new ChunkVocoder")
        f = np.asarray(frames)
        if f.ndim == 1:
            f = f[None]
        if f.ndim != 2:
            raise ValueError(f"frames: expected shape [n, C] or [C], got {f.shape}")
        if f.dtype.kind not in "iu":
            raise ValueError(f"frames: expected integer codes, got dtype {f.dtype}")
        self._codes.extend(f)
        self._pushed += len(f)
        out = []
        need = self.chunk_frames + self.context_frames
        while self._pushed >= self._next + need:
            out.append(self._render(self._next + self.chunk_frames))
        return out

    def finish(self) -> list:
        """The remaining chunks: the last chunk(s) with what right context exists."""
        if self._done:
            return []
        out = []
        while self._next < self._pushed:
            out.append(self._render(min(self._pushed, self._next + self.chunk_frames)))
        if self._tail is not None:  # the last chunk's own end, no neighbour to fade into
            end = self._tail[: self.xfade // 2]
            out = out[:-1] + [np.concatenate([out[-1], end])] if out else [end]
            self.samples += len(end)
            self._tail = None
        self._done = True
        return [c for c in out if len(c)]

    def _render(self, end: int) -> np.ndarray:
        s, L, R = self._next, self.context_frames, self.context_frames
        a, b = max(0, s - L), min(self._pushed, end + R)
        block = np.stack(self._codes[a - self._base : b - self._base])
        y = np.asarray(self.decode(block, chunk_seed(self.seed, self._chunks)), np.float32)
        self.decode_calls += 1
        if self.frame_hop is None:
            if y.ndim != 1 or len(y) % len(block):
                raise ValueError(
                    f"decoder: expected a 1-D waveform of a whole number of samples per frame, "
                    f"got shape {y.shape} for {len(block)} frames"
                )
            self.frame_hop = len(y) // len(block)
        hop, x = self.frame_hop, self.xfade
        if y.shape != ((b - a) * hop,):
            raise ValueError(
                f"decoder: expected {(b - a) * hop} samples for {b - a} frames, got {y.shape}"
            )
        h = x // 2
        lo, hi = (s - a) * hop, (end - a) * hop  # the chunk's own samples within y
        parts = []
        if self._tail is not None:  # fade the previous chunk out and this one in
            w = np.sin(0.5 * np.pi * (np.arange(x) + 0.5) / x) ** 2
            parts.append((1.0 - w) * self._tail + w * y[lo - h : lo + h])
            lo += h
        parts.append(y[lo : hi - h])
        self._tail = y[hi - h : hi + h].copy() if h else None
        chunk = np.concatenate(parts).astype(np.float32)
        self.samples += len(chunk)
        self._chunks += 1
        self._next = end
        keep = max(0, end - L)  # frames still needed as left context
        del self._codes[: keep - self._base]
        self._base = keep
        return chunk


def stream_decode(decoder, codes, **kwargs) -> np.ndarray:
    """The streamed rendering of a whole code array [T, C] at once (all chunks, joined):
    what a stream of these frames plays, for comparison with `decoder.decode(codes)`."""
    v = ChunkVocoder(decoder, **kwargs)
    chunks = v.push(codes) + v.finish()
    return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
