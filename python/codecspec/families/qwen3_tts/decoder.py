"""The Qwen3-TTS 12 Hz speech tokenizer's decoder on ONNX Runtime: codes [frames, 16] -> 24 kHz
audio, whole or streamed, without torch.

`SpeechDecoder.load(speech_tokenizer_dir)` builds the stateful decoder graph
(`decoder_graph` in this package) from the folder's safetensors once and caches it under a key
made of the folder's content (config.json and every safetensors file) and the graph version.

Output law: the official `Qwen3TTSTokenizerV2Model.decode` runs `chunked_decode` — segments
of `chunk_size` = 300 frames, each decoded from scratch with up to `left_context` = 25 frames of
the previous codes in front, whose audio is dropped. Inside a segment the decoder is causal, so
the stateful graph reproduces the segment's whole forward exactly (up to float summation
order) whatever the call sizes; at every segment start the state is reset and the context
frames are replayed, as the official code does. `decode` and `stream` therefore give the same
audio, and the official audio, to float32 rounding.

`DecoderStream.calls` hands out a feed's graph calls one at a time, so that decoder_batch.py
can run several streams' calls together, each on its own cursor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple, Optional, Union

import numpy as np

from codecspec.cache import cache_root
from codecspec.families.qwen3_tts.decoder_graph import (
    DECODER_GRAPH_VERSION,
    SpeechDecoderConfig,
    build_speech_decoder_graph,
    decoder_tensor_shapes,
    speech_decoder_config,
    state_io_names,
)
from codecspec.runtime.session import open_session

from .tokenizer_cache import (
    build_atomically,
    cached_graph,
    content_key,
    folder_error,
    tensor_index,
)

__all__ = [
    "SpeechDecoder",
    "DecoderStream",
    "OFFICIAL_CHUNK_SIZE",
    "OFFICIAL_LEFT_CONTEXT",
]

# Qwen3TTSTokenizerV2Decoder.chunked_decode defaults, used by the official decode().
OFFICIAL_CHUNK_SIZE = 300
OFFICIAL_LEFT_CONTEXT = 25
# Frames per graph call in decode(): bounds the activations (~ frames * 1920 * channels). At
# 4 frames (the streamed chunk's size) a 24-frame `synth` int8 of the 0.6B folder peaks at
# 1.48 GiB resident instead of 1.77 GiB at 50 (each call's activations are ~75 MB a frame);
# the whole decode was ~6% slower in an interleaved run.
DECODE_BLOCK_FRAMES = 4
_GRAPH_FILE = "decoder.onnx"
# The same graph with every SnakeBeta chain fused into codecspec's own operator (CPU only),
# written beside it once and reading the same weights file.
_FUSED_FILE = "decoder.fused.onnx"

PathLike = Union[str, os.PathLike]


# ---------------------------------------------------------------------- folder reading
def _read_folder(folder: Path) -> tuple[SpeechDecoderConfig, list[Path], dict]:
    """(config, safetensors files, tensor name -> SafetensorsFile); ValueError naming the
    folder for anything that is not a complete 12 Hz speech tokenizer."""
    if not folder.is_dir():
        raise folder_error(folder, "not a directory")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise folder_error(folder, "no config.json (not a Qwen3-TTS speech tokenizer folder)")
    try:
        root = json.loads(cfg_path.read_text(encoding="utf-8"))
        config = speech_decoder_config(root)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise folder_error(folder, f"config.json is not valid JSON ({e})") from None
    except ValueError as e:
        raise folder_error(folder, str(e)) from None
    if not any(folder.glob("*.safetensors")):
        raise folder_error(folder, "no *.safetensors file")
    files, where = tensor_index(folder, decoder_tensor_shapes(config), "decoder tensors")
    return config, files, where


def _content_key(folder: Path, files: list[Path]) -> str:
    # "/external": entries keep the weights in decoder.onnx.data (older entries are inline)
    return content_key(f"qwen3-speech-decoder/{DECODER_GRAPH_VERSION}/external", folder, files)


def _build_into_cache(folder: Path, config, where, entry: Path) -> None:
    """Build and write the graph into the cache entry (complete or absent)."""
    from codecspec.graphs.builder import save_model

    def write(tmp: Path) -> None:
        try:
            model = build_speech_decoder_graph(config, lambda name: where[name].get(name))
        except ValueError as e:
            raise folder_error(folder, str(e)) from None
        # Weights beside the graph: onnxruntime then keeps no copy of them inside the model
        # proto (652 -> 352 MB resident for the published decoder's session).
        save_model(model, tmp / _GRAPH_FILE, external_data=True)
        (tmp / "config.json").write_text(config.to_json())

    build_atomically(entry, _GRAPH_FILE, write)


def _wants_fused(fused: Optional[bool], provider: str) -> bool:
    """Whether to run the fused graph: asked for, or (None) on the CPU provider where this
    build serves the operator. An accelerator provider keeps the standard graph: a CPU-only
    node in the middle of it would copy every activation to the host and back."""
    from codecspec.runtime import custom_ops
    from codecspec.runtime.providers import resolve

    if fused is not None and not isinstance(fused, bool):
        raise ValueError(f"fused: expected True, False or None, got {fused!r}")
    on_cpu = resolve(provider)[0] == "CPUExecutionProvider"
    if fused and not custom_ops.available():
        raise ValueError("fused: this build of codecspec._core serves no operators")
    return bool(fused) if fused is not None else on_cpu and custom_ops.available()


def _fused_graph(graph: Path) -> Optional[Path]:
    """The cache entry's graph with its SnakeBeta chains fused, written beside `graph` on
    first use (sharing its weights file); None for a graph with no chain to fuse."""
    import onnx

    from codecspec.runtime.custom_ops import fuse_snake

    path = graph.with_name(_FUSED_FILE)
    if path.is_file():
        return path
    model = onnx.load(str(graph), load_external_data=False)
    if fuse_snake(model) == 0:
        return None
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        onnx.save(model, str(tmp))
        os.replace(tmp, path)
    except OSError:  # a cache this process may read but not write: the standard graph
        tmp.unlink(missing_ok=True)
        return None
    return path


# ---------------------------------------------------------------------- the decoder
class _Cursor:
    """Where one decode/stream is: frames done, the current segment's state and position."""

    def __init__(self, decoder: SpeechDecoder) -> None:
        self.frame = 0
        self.position = 0
        self.states = decoder._zero_states()
        self.history = np.zeros((0, decoder.num_quantizers), dtype=np.int64)


class SpeechDecoder:
    """Codes -> audio with the stateful decoder graph (see the module docstring)."""

    def __init__(
        self,
        session,
        config: SpeechDecoderConfig,
        graph_path: Path,
        chunk_size: int = OFFICIAL_CHUNK_SIZE,
        left_context: int = OFFICIAL_LEFT_CONTEXT,
    ) -> None:
        for name, v, low in (("chunk_size", chunk_size, 1), ("left_context", left_context, 0)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name}: expected an int >= {low}, got {v!r}")
        self.session = session
        self.config = config
        self.graph_path = graph_path
        self.chunk_size = chunk_size
        self.left_context = left_context
        self._states = state_io_names(session.get_inputs())
        self._out_names = ["audio"] + [s[1] for s in self._states]
        self.source: Optional[DecoderSource] = None  # set by `load`
        self.precision = "fp32"  # "int8": the twin `load(precision="int8")` returns

    # -------------------------------------------------------------- construction
    @classmethod
    def load(
        cls,
        speech_tokenizer_dir: PathLike,
        cache_dir: Optional[PathLike] = None,
        provider: str = "cpu",
        *,
        threads: Optional[int] = None,
        chunk_size: int = OFFICIAL_CHUNK_SIZE,
        left_context: int = OFFICIAL_LEFT_CONTEXT,
        fused: Optional[bool] = None,
        precision: Optional[str] = None,
    ) -> SpeechDecoder:
        """Build (first time) or reuse the cached graph of a speech_tokenizer/ folder.

        ValueError names `speech_tokenizer_dir` for a folder that is not a complete 12 Hz
        speech tokenizer (25 Hz config, missing or truncated safetensors, wrong shapes); nothing
        is left in the cache then. chunk_size / left_context default to the official decode().
        `fused`: SnakeBeta as one codecspec operator (`runtime.custom_ops`; the same audio to
        float32 rounding, ~3x less time in the activations); None = on the CPU provider when
        this build serves it, False = the standard operators only. `precision`: "fp32"
        (None, the default: the official decoder's numbers) or "int8", the residual units'
        convolutions in int8 on the CPU provider (`decoder_int8`; its error against float32
        in `int8_error`).
        """
        from .decoder_int8 import check_precision

        precision = check_precision(precision)
        folder = Path(speech_tokenizer_dir)
        config, files, where = _read_folder(folder)
        graph = cached_graph(
            Path(cache_dir if cache_dir is not None else cache_root()),
            f"qwen3-speech-decoder-{_content_key(folder, files)}",
            _GRAPH_FILE,
            lambda entry: _build_into_cache(folder, config, where, entry),
        )
        # No arena: its blocks grew with every decode (768 -> 1065 MB resident after a
        # second 24-frame decode at the published shape); without it the resident size
        # stays at ~730 MB and the decode takes the same time.
        fused_graph = _fused_graph(graph) if _wants_fused(fused, provider) else None
        # what the batched twin (decoder_batch.py) is built from and opened with, on demand
        source = DecoderSource(folder, graph, provider, threads, fused_graph is not None)

        def opened(path: Path, precision: str = "fp32") -> SpeechDecoder:
            session = open_session(
                path, provider, threads, arena=False, custom_ops=fused_graph is not None
            )
            decoder = cls(session, config, path, chunk_size, left_context)
            decoder.source, decoder.precision = source, precision
            return decoder

        if precision == "fp32":
            return opened(fused_graph or graph)
        from codecspec.runtime.providers import resolve

        from .decoder_int8 import int8_graph

        if resolve(provider)[0] != "CPUExecutionProvider":
            raise ValueError(f"decoder_precision: int8 runs on the CPU, not {provider!r}")
        # the float32 decoder is opened only to build the int8 graph (calibration, check)
        return opened(
            int8_graph(fused_graph or graph, lambda: opened(fused_graph or graph)), "int8"
        )

    # -------------------------------------------------------------- properties
    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.config.samples_per_frame

    @property
    def num_quantizers(self) -> int:
        return self.config.num_quantizers

    @property
    def codebook_size(self) -> int:
        return self.config.codebook_size

    # -------------------------------------------------------------- decoding
    def decode(self, codes) -> np.ndarray:
        """codes int [frames, num_quantizers] -> float32 [frames * samples_per_frame]."""
        codes = self._check_codes(codes, "codes")
        cur = _Cursor(self)
        parts = list(self._advance(cur, codes, DECODE_BLOCK_FRAMES))
        if not parts:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(parts)

    def stream(
        self, code_iter: Iterable, chunk_frames: int = 4, first_chunk_frames: Optional[int] = None
    ) -> Iterator[np.ndarray]:
        """Decode blocks of codes (int [n, num_quantizers], n >= 0) as they arrive; yields the
        audio of every `chunk_frames` frames (the last chunk may be shorter). With
        `first_chunk_frames` the chunks start at that size and double up to `chunk_frames`
        (1, 2, 4, ...): the first audio leaves after one frame, later calls stay large. The
        chunks concatenated equal `decode()` of all the codes to float32 rounding, whatever
        their sizes (the decoder is causal and carries its state)."""
        steady = _check_frames(chunk_frames, "chunk_frames")
        first = steady if first_chunk_frames is None else first_chunk_frames
        first = min(_check_frames(first, "first_chunk_frames"), steady)
        return self._stream(code_iter, chunk_sizes(first, steady))

    def _stream(self, code_iter: Iterable, sizes: Iterator[int]) -> Iterator[np.ndarray]:
        cur = _Cursor(self)
        pending: list[np.ndarray] = []
        n_pending = 0
        want = next(sizes)
        for i, block in enumerate(code_iter):
            block = self._check_codes(block, f"code_iter block {i}: codes")
            pending.append(block)
            n_pending += len(block)
            while n_pending >= want:
                allc = np.concatenate(pending)
                yield np.concatenate(list(self._advance(cur, allc[:want], want)))
                pending, n_pending = [allc[want:]], n_pending - want
                want = next(sizes)
        if n_pending:
            yield np.concatenate(list(self._advance(cur, np.concatenate(pending), want)))

    def open_stream(self, context=None) -> DecoderStream:
        """A stream fed by its caller, one block at a time (`feed(codes)` returns exactly the
        audio of those frames): for a server that vocodes each utterance in chunks as its
        frames come. Many may be open at once; each keeps its own state. `context`: codes
        decoded first, on the first feed, as left context whose audio is dropped (a cloned
        voice's reference codes)."""
        return DecoderStream(self, context)

    # -------------------------------------------------------------- internals
    def _check_codes(self, codes, name: str) -> np.ndarray:
        a = np.asarray(codes)
        Q, K = self.num_quantizers, self.codebook_size
        if a.ndim != 2 or a.shape[1] != Q:
            raise ValueError(f"{name}: expected shape [frames, {Q}], got {list(a.shape)}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{name}: expected integer codes, got dtype {a.dtype}")
        if a.size and (a.min() < 0 or a.max() >= K):
            raise ValueError(f"{name}: values must be in [0, {K}), got {a.min()}..{a.max()}")
        return a.astype(np.int64, copy=False)

    def _zero_states(self) -> dict[str, np.ndarray]:
        return {s_in: np.zeros(shape, dtype=np.float32) for s_in, _, shape in self._states}

    def _run(self, cur: _Cursor, codes: np.ndarray) -> np.ndarray:
        feeds = {"codes": codes, "position": np.array([cur.position], dtype=np.int64)}
        feeds.update(cur.states)
        out = self.session.run(self._out_names, feeds)
        cur.states = {s_in: v for (s_in, _, _), v in zip(self._states, out[1:])}
        cur.position += len(codes)
        return out[0]

    def _start_segment(self, cur: _Cursor) -> Iterator[tuple[np.ndarray, bool]]:
        """Fresh state, then the context frames (their audio dropped), as chunked_decode."""
        cur.states = self._zero_states()
        cur.position = 0
        ctx = cur.history[len(cur.history) - min(self.left_context, cur.frame) :]
        for i in range(0, len(ctx), DECODE_BLOCK_FRAMES):
            yield ctx[i : i + DECODE_BLOCK_FRAMES], False

    def _calls(
        self, cur: _Cursor, codes: np.ndarray, max_frames: int
    ) -> Iterator[tuple[np.ndarray, bool]]:
        """The graph calls that advance `cur` by `codes`, as (frames, audio kept): calls of at
        most max_frames frames, a segment's context replayed where one starts. The caller
        runs each call on `cur` before asking for the next (`_advance` one by one,
        `feed_many` beside other streams' calls): both run the same calls."""
        i = 0
        while i < len(codes):
            if cur.frame and cur.frame % self.chunk_size == 0 and cur.position != 0:
                yield from self._start_segment(cur)
            to_boundary = self.chunk_size - cur.frame % self.chunk_size
            m = min(len(codes) - i, max_frames, to_boundary)
            block = codes[i : i + m]
            yield block, True
            cur.history = np.concatenate([cur.history, block])[-max(self.left_context, 1) :]
            cur.frame += m
            i += m

    def _advance(self, cur: _Cursor, codes: np.ndarray, max_frames: int) -> Iterator[np.ndarray]:
        """Audio of `codes`, continuing `cur`, in graph calls of at most max_frames frames."""
        for block, keep in self._calls(cur, codes, max_frames):
            audio = self._run(cur, block)
            if keep:
                yield audio


def _check_frames(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name}: expected an int >= 1, got {n!r}")
    return n


def chunk_sizes(first: int, steady: int) -> Iterator[int]:
    """Frames per streamed chunk: `first`, doubling up to `steady`, then `steady` on."""
    n = first
    while True:
        yield n
        n = min(2 * n, steady)


class DecoderSource(NamedTuple):
    """Where a loaded decoder came from: the speech_tokenizer folder, the cache entry's
    graph, and the provider, threads and fused operators its session runs with."""

    folder: Path
    graph: Path
    provider: str
    threads: Optional[int]
    fused: bool


class DecoderStream:
    """One utterance's decoder state (see `SpeechDecoder.open_stream`). The audio of every
    block fed, concatenated, equals `decode()` of all the codes to float32 rounding."""

    def __init__(self, decoder: SpeechDecoder, context=None) -> None:
        self.decoder = decoder
        self._cur = _Cursor(decoder)
        self._context = None if context is None else decoder._check_codes(context, "context")

    @property
    def frames(self) -> int:
        return self._cur.frame

    def calls(self, codes: np.ndarray) -> Iterator[tuple[np.ndarray, bool]]:
        """The graph calls of feeding checked `codes` (`SpeechDecoder._calls`), after the
        context's on the first feed; each runs on this stream's cursor before the next."""
        d = self.decoder
        if self._context is not None:
            context, self._context = self._context, None
            for block, _ in d._calls(self._cur, context, DECODE_BLOCK_FRAMES):
                yield block, False
        yield from d._calls(self._cur, codes, DECODE_BLOCK_FRAMES)

    def feed(self, codes) -> np.ndarray:
        """codes int [n, num_quantizers] (n >= 0) -> float32 [n * samples_per_frame]."""
        d = self.decoder
        parts = []
        for block, keep in self.calls(d._check_codes(codes, "codes")):
            audio = d._run(self._cur, block)
            if keep:
                parts.append(audio)
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)
