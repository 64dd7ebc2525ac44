"""The Qwen3-TTS 12 Hz speech tokenizer's encoder on ONNX Runtime: 24 kHz audio -> codes
[frames, 16], without torch (the reference codes of in-context voice cloning).

`SpeechEncoder.load(speech_tokenizer_dir)` builds the encoder graph
(`codecspec.graphs.qwen3_encoder`) from the folder's safetensors once and caches it under a key
made of the folder's content (config.json and every safetensors file) and the graph version,
as `decoder.SpeechDecoder` does for the decoder.

The official `Qwen3TTSTokenizer.encode` of one clip feeds the samples as they are (its
EncodecFeatureExtractor pads nothing for a single clip and does not normalise) and keeps
ceil(samples / 1920) frames, which is what the graph gives.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Union

import numpy as np

from codecspec.graphs.qwen3_encoder import (
    ENCODER_GRAPH_VERSION,
    SpeechEncoderConfig,
    build_speech_encoder_graph,
    encoder_tensor_shapes,
    speech_encoder_config,
)
from codecspec.graphs.safetensors_io import SafetensorsFile

__all__ = ["SpeechEncoder"]

_GRAPH_FILE = "encoder.onnx"
_HASH_BLOCK = 1 << 23

PathLike = Union[str, os.PathLike]


def _folder_error(folder: Path, msg: str) -> ValueError:
    return ValueError(f"speech_tokenizer_dir: {folder}: {msg}")


def _read_config(folder: Path) -> SpeechEncoderConfig:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise _folder_error(folder, "no config.json (not a Qwen3-TTS speech tokenizer folder)")
    try:
        return speech_encoder_config(json.loads(cfg_path.read_text(encoding="utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _folder_error(folder, f"config.json is not valid JSON ({e})") from None
    except ValueError as e:
        raise _folder_error(folder, str(e)) from None


def _read_folder(folder: Path) -> tuple[SpeechEncoderConfig, list[Path], dict]:
    """(config, safetensors files, tensor name -> SafetensorsFile); ValueError naming the
    folder when the encoder's weights are not all there (the published tokenizer has them;
    a folder written for decoding only may not)."""
    if not folder.is_dir():
        raise _folder_error(folder, "not a directory")
    config = _read_config(folder)
    files = sorted(folder.glob("*.safetensors"))
    where: dict[str, SafetensorsFile] = {}
    for f in files:
        try:
            st = SafetensorsFile(f)
        except ValueError as e:
            raise _folder_error(folder, f"{f.name}: {e}") from None
        for name in st.keys():
            where[name] = st
    missing = [n for n in encoder_tensor_shapes(config) if n not in where]
    if missing:
        raise _folder_error(
            folder,
            f"{len(missing)} encoder tensors missing, e.g. {missing[0]} (in-context cloning "
            "encodes the reference clip with the speech tokenizer's encoder)",
        )
    return config, files, where


def _content_key(folder: Path, files: list[Path]) -> str:
    h = hashlib.sha256(f"qwen3-speech-encoder/{ENCODER_GRAPH_VERSION}\n".encode())
    for path in [folder / "config.json", *files]:
        h.update(f"{path.name}\n{path.stat().st_size}\n".encode())
        with open(path, "rb") as f:
            while block := f.read(_HASH_BLOCK):
                h.update(block)
    return h.hexdigest()[:32]


def _build_into_cache(folder: Path, config, where, entry: Path) -> None:
    """Build into a temporary folder, then rename it into place: an entry is complete or
    absent."""
    from codecspec.graphs.builder import save_model

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=entry.parent))
    try:
        get = lambda name: where[name].get(name).astype(np.float32)  # noqa: E731
        try:
            model = build_speech_encoder_graph(config, get)
        except ValueError as e:
            raise _folder_error(folder, str(e)) from None
        save_model(model, tmp / _GRAPH_FILE, external_data=True)
        (tmp / "config.json").write_text(config.to_json())
        try:
            os.rename(tmp, entry)
        except OSError:
            if not (entry / _GRAPH_FILE).is_file():  # not a concurrent builder's entry
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
        from codecspec.runtime.session import open_session

        from .decoder import default_cache_dir

        folder = Path(speech_tokenizer_dir)
        config, files, where = _read_folder(folder)
        key = _content_key(folder, files)
        root = Path(cache_dir if cache_dir is not None else default_cache_dir())
        entry = root / f"qwen3-speech-encoder-{key}"
        if not (entry / _GRAPH_FILE).is_file():
            _build_into_cache(folder, config, where, entry)
        session = open_session(entry / _GRAPH_FILE, provider=provider, threads=threads)
        return cls(session, config, entry / _GRAPH_FILE)

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
