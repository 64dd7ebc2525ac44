"""The Qwen3-TTS 12 Hz speech tokenizer's encoder on ONNX Runtime: 24 kHz audio -> codes
[frames, 16], without torch (the reference codes of in-context voice cloning).

`SpeechEncoder.load(speech_tokenizer_dir)` builds the encoder graph
(`encoder_graph` in this package) from the folder's safetensors once and caches it under a key
made of the folder's content (config.json and every safetensors file) and the graph version,
as `decoder.SpeechDecoder` does for the decoder.

The official `Qwen3TTSTokenizer.encode` of one clip feeds the samples as they are (its
EncodecFeatureExtractor pads nothing for a single clip and does not normalise) and keeps
ceil(samples / 1920) frames, which is what the graph gives.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Union

import numpy as np

from codecspec.families.qwen3_tts.encoder_graph import (
    ENCODER_GRAPH_VERSION,
    SpeechEncoderConfig,
    build_speech_encoder_graph,
    encoder_tensor_shapes,
    speech_encoder_config,
)

from .tokenizer_cache import (
    build_atomically,
    cached_graph,
    content_key,
    folder_error,
    tensor_index,
)

__all__ = ["SpeechEncoder"]

_GRAPH_FILE = "encoder.onnx"

PathLike = Union[str, os.PathLike]


def _read_config(folder: Path) -> SpeechEncoderConfig:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise folder_error(folder, "no config.json (not a Qwen3-TTS speech tokenizer folder)")
    try:
        return speech_encoder_config(json.loads(cfg_path.read_text(encoding="utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise folder_error(folder, f"config.json is not valid JSON ({e})") from None
    except ValueError as e:
        raise folder_error(folder, str(e)) from None


def _read_folder(folder: Path) -> tuple[SpeechEncoderConfig, list[Path], dict]:
    """(config, safetensors files, tensor name -> SafetensorsFile); ValueError naming the
    folder when the encoder's weights are not all there (the published tokenizer has them;
    a folder written for decoding only may not)."""
    if not folder.is_dir():
        raise folder_error(folder, "not a directory")
    config = _read_config(folder)
    files, where = tensor_index(
        folder,
        encoder_tensor_shapes(config),
        "encoder tensors",
        " (in-context cloning encodes the reference clip with the speech tokenizer's encoder)",
    )
    return config, files, where


def _content_key(folder: Path, files: list[Path]) -> str:
    return content_key(f"qwen3-speech-encoder/{ENCODER_GRAPH_VERSION}", folder, files)


def _build_into_cache(folder: Path, config, where, entry: Path) -> None:
    """Build and write the graph into the cache entry (complete or absent)."""
    from codecspec.graphs.builder import save_model

    def write(tmp: Path) -> None:
        get = lambda name: where[name].get(name).astype(np.float32)  # noqa: E731
        try:
            model = build_speech_encoder_graph(config, get)
        except ValueError as e:
            raise folder_error(folder, str(e)) from None
        save_model(model, tmp / _GRAPH_FILE, external_data=True)
        (tmp / "config.json").write_text(config.to_json())

    build_atomically(entry, _GRAPH_FILE, write)


class SpeechEncoder:
    """24 kHz mono float32 audio -> codes int64 [ceil(samples / 1920), num_quantizers]."""

    def __init__(self, session, config: SpeechEncoderConfig, graph_path: Path) -> None:
        self.session = session
        self.config = config
        self.graph_path = graph_path

    @classmethod
    def load(
        cls,
        speech_tokenizer_dir: PathLike,
        cache_dir: Optional[PathLike] = None,
        provider: str = "cpu",
        *,
        threads: Optional[int] = None,
    ) -> SpeechEncoder:
        """Build (first time) or reuse the cached encoder graph of a speech_tokenizer/ folder;
        ValueError naming `speech_tokenizer_dir` when it has no complete encoder."""
        from codecspec.cache import cache_root
        from codecspec.runtime.session import open_session

        folder = Path(speech_tokenizer_dir)
        config, files, where = _read_folder(folder)
        graph = cached_graph(
            Path(cache_dir if cache_dir is not None else cache_root()),
            f"qwen3-speech-encoder-{_content_key(folder, files)}",
            _GRAPH_FILE,
            lambda entry: _build_into_cache(folder, config, where, entry),
        )
        return cls(open_session(graph, provider=provider, threads=threads), config, graph)

    @property
    def sample_rate(self) -> int:
        return self.config.sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.config.samples_per_frame

    def encode(self, wav) -> np.ndarray:
        """wav float [samples] at `sample_rate` (samples >= 1) -> codes int64 [frames, Q]."""
        a = np.asarray(wav, dtype=np.float32).reshape(-1)
        if a.size == 0:
            raise ValueError("wav: no samples")
        codes = self.session.run(["codes"], {"audio": a})[0]
        return np.asarray(codes, np.int64)
