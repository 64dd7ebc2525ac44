"""A Qwen3-TTS 12 Hz checkpoint folder as published: config, generation defaults, tensors.

Config keys and class defaults follow qwen_tts/core/models/configuration_qwen3_tts.py
(Qwen3TTSConfig, Qwen3TTSTalkerConfig); generation defaults follow the hard defaults of
Qwen3TTSModel._merge_generate_kwargs and the fixed talker arguments of
Qwen3TTSForConditionalGeneration.generate (min_new_tokens 2, the top 1024 codec ids suppressed
except eos). Every error is a ValueError whose message starts with "model:".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["Qwen3Checkpoint", "TalkerSpec", "GenerationDefaults", "CACHE_FORMAT"]

# Bump when the built graphs or tables change meaning, so old cache entries are not reused.
# 2: the code predictor graph scores its 15 heads itself (heads="grouped")
# 3: a head_dim that is not a multiple of 8 gets the standard-ops attention graph
# 5: K/V joined, bf16 table; 6: int8 block 128; 7: talker in place; 8: predictor placed_op
# 9: the predictor's heads routed by codecspec's RouteRows / MergeRows
CACHE_FORMAT = "qwen3-tts-9"

# Qwen3TTSTalkerConfig defaults for keys a config.json may omit.
_TALKER_DEFAULTS = {
    "vocab_size": 3072,
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "num_hidden_layers": 20,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 32768,
    "num_code_groups": 32,
    "text_hidden_size": 2048,
    "text_vocab_size": 151936,
    "codec_eos_token_id": 4198,
    "codec_think_id": 4202,
    "codec_nothink_id": 4203,
    "codec_think_bos_id": 4204,
    "codec_think_eos_id": 4205,
    "codec_pad_id": 4196,
    "codec_bos_id": 4197,
}
_ROOT_DEFAULTS = {
    "im_start_token_id": 151644,
    "im_end_token_id": 151645,
    "tts_pad_token_id": 151671,
    "tts_bos_token_id": 151672,
    "tts_eos_token_id": 151673,
}
# Qwen3TTSModel._merge_generate_kwargs: used where generation_config.json lacks a key.
_GENERATION_DEFAULTS = {
    "do_sample": True,
    "top_k": 50,
    "top_p": 1.0,
    "temperature": 0.9,
    "repetition_penalty": 1.05,
    "subtalker_dosample": True,
    "subtalker_top_k": 50,
    "subtalker_top_p": 1.0,
    "subtalker_temperature": 0.9,
    "max_new_tokens": 2048,
}
MODEL_TYPES = ("custom_voice", "voice_design", "base")


def _err(msg: str) -> ValueError:
    return ValueError(f"model: {msg}")


@dataclasses.dataclass(frozen=True)
class TalkerSpec:
    """What the runtime needs to know about the talker and the prompt tokens."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    max_positions: int
    vocab_size: int
    num_code_groups: int
    text_hidden_size: int
    text_vocab_size: int
    codec: dict  # pad, bos, eos, think, nothink, think_bos, think_eos -> id
    text: dict  # im_start, im_end, tts_pad, tts_bos, tts_eos -> id
    speakers: dict  # lower-case name -> codec id
    speaker_dialect: dict  # lower-case name -> dialect language name or False
    languages: dict  # lower-case name -> codec id (dialects included)

    @property
    def supported_languages(self) -> list[str]:
        """As the official model lists them: "auto" and every non-dialect language."""
        return ["auto"] + sorted(k for k in self.languages if "dialect" not in k)

    @property
    def suppressed_ids(self) -> np.ndarray:
        """Codec ids the talker never emits: the top 1024 of its vocabulary except eos."""
        ids = np.arange(max(self.vocab_size - 1024, 0), self.vocab_size)
        return ids[ids != self.codec["eos"]].astype(np.int64)


@dataclasses.dataclass(frozen=True)
class GenerationDefaults:
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float
    subtalker_dosample: bool
    subtalker_temperature: float
    subtalker_top_k: int
    subtalker_top_p: float
    max_new_tokens: int
    min_new_tokens: int = 2


def _int(d: dict, key: str, defaults: dict, where: str) -> int:
    v = d.get(key)
    v = defaults[key] if v is None else v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v:
        raise _err(f"config.json: {where}.{key} must be an integer, got {v!r}")
    return int(v)


def _float(d: dict, key: str, defaults: dict, where: str) -> float:
    v = d.get(key)
    v = defaults[key] if v is None else v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _err(f"config.json: {where}.{key} must be a number, got {v!r}")
    return float(v)


def _name_map(d, where: str) -> dict:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise _err(f"config.json: {where} must be an object, got {type(d).__name__}")
    return {str(k).lower(): v for k, v in d.items()}


def talker_spec(root: dict) -> TalkerSpec:
    t = root.get("talker_config")
    if not isinstance(t, dict):
        raise _err("config.json has no 'talker_config' (not a Qwen3-TTS checkpoint?)")
    if t.get("hidden_act", "silu") not in ("silu", "swish"):
        raise _err(f"config.json: talker_config.hidden_act={t['hidden_act']!r} is not supported")
    if t.get("attention_bias"):
        raise _err("config.json: talker_config.attention_bias=true is not supported")
    if t.get("use_sliding_window"):
        raise _err("config.json: talker_config.use_sliding_window=true is not supported")
    rope = t.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) not in (None, "default"):
        raise _err(f"config.json: talker rope type {rope.get('rope_type')!r} is not supported")
    w = "talker_config"
    hidden = _int(t, "hidden_size", _TALKER_DEFAULTS, w)
    heads = _int(t, "num_attention_heads", _TALKER_DEFAULTS, w)
    # Qwen3TTSTalkerAttention: head_dim from the config if present, else hidden / heads.
    head_dim = t.get("head_dim") or hidden // heads
    codec = {
        "pad": "codec_pad_id",
        "bos": "codec_bos_id",
        "eos": "codec_eos_token_id",
        "think": "codec_think_id",
        "nothink": "codec_nothink_id",
        "think_bos": "codec_think_bos_id",
        "think_eos": "codec_think_eos_id",
    }
    text = {
        "im_start": "im_start_token_id",
        "im_end": "im_end_token_id",
        "tts_pad": "tts_pad_token_id",
        "tts_bos": "tts_bos_token_id",
        "tts_eos": "tts_eos_token_id",
    }
    spec = TalkerSpec(
        hidden_size=hidden,
        num_layers=_int(t, "num_hidden_layers", _TALKER_DEFAULTS, w),
        num_heads=heads,
        num_kv_heads=_int(t, "num_key_value_heads", _TALKER_DEFAULTS, w),
        head_dim=int(head_dim),
        intermediate_size=_int(t, "intermediate_size", _TALKER_DEFAULTS, w),
        rms_norm_eps=_float(t, "rms_norm_eps", _TALKER_DEFAULTS, w),
        rope_theta=_float(t, "rope_theta", _TALKER_DEFAULTS, w),
        max_positions=_int(t, "max_position_embeddings", _TALKER_DEFAULTS, w),
        vocab_size=_int(t, "vocab_size", _TALKER_DEFAULTS, w),
        num_code_groups=_int(t, "num_code_groups", _TALKER_DEFAULTS, w),
        text_hidden_size=_int(t, "text_hidden_size", _TALKER_DEFAULTS, w),
        text_vocab_size=_int(t, "text_vocab_size", _TALKER_DEFAULTS, w),
        codec={k: _int(t, v, _TALKER_DEFAULTS, w) for k, v in codec.items()},
        text={k: _int(root, v, _ROOT_DEFAULTS, "config") for k, v in text.items()},
        speakers=_name_map(t.get("spk_id"), "talker_config.spk_id"),
        speaker_dialect=_name_map(t.get("spk_is_dialect"), "talker_config.spk_is_dialect"),
        languages=_name_map(t.get("codec_language_id"), "talker_config.codec_language_id"),
    )
    if spec.num_heads % spec.num_kv_heads:
        raise _err("config.json: talker num_key_value_heads must divide num_attention_heads")
    for name, i in list(spec.codec.items()) + list(spec.speakers.items()):
        if not 0 <= int(i) < spec.vocab_size:
            raise _err(f"config.json: codec id {name}={i} outside [0, {spec.vocab_size})")
    for name, i in spec.languages.items():
        if not 0 <= int(i) < spec.vocab_size:
            raise _err(f"config.json: language id {name}={i} outside [0, {spec.vocab_size})")
    for name, i in spec.text.items():
        if not 0 <= i < spec.text_vocab_size:
            raise _err(f"config.json: {name} token id {i} outside the text vocabulary")
    return spec


def generation_defaults(path: Path) -> GenerationDefaults:
    cfg: dict = {}
    if path.is_file():
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _err(f"{path} is not valid JSON ({e})") from None
        if not isinstance(cfg, dict):
            raise _err(f"{path} is not a JSON object")
    v = {k: cfg.get(k, d) for k, d in _GENERATION_DEFAULTS.items()}
    try:
        return GenerationDefaults(
            do_sample=bool(v["do_sample"]),
            temperature=float(v["temperature"]),
            top_k=int(v["top_k"]),
            top_p=float(v["top_p"]),
            repetition_penalty=float(v["repetition_penalty"]),
            subtalker_dosample=bool(v["subtalker_dosample"]),
            subtalker_temperature=float(v["subtalker_temperature"]),
            subtalker_top_k=int(v["subtalker_top_k"]),
            subtalker_top_p=float(v["subtalker_top_p"]),
            max_new_tokens=int(v["max_new_tokens"]),
        )
    except (TypeError, ValueError) as e:
        raise _err(f"{path}: bad value ({e})") from None


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise _err(f"no {path.name} in {path.parent} ({what})")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _err(f"{path} is not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise _err(f"{path} is not a JSON object")
    return d


class Qwen3Checkpoint:
    """A checked Qwen3-TTS 12 Hz folder. Reads JSON eagerly, tensors lazily."""

    def __init__(self, directory) -> None:
        d = Path(os.fspath(directory)).expanduser()
        if not d.is_dir():
            raise _err(f"{d} is not a directory")
        self.dir = d
        self.root = _read_json(d / "config.json", "not a Qwen3-TTS checkpoint folder")
        mt = self.root.get("model_type")
        if mt != "qwen3_tts" and "talker_config" not in self.root:
            raise _err(f"{d} is not a Qwen3-TTS checkpoint (config.json model_type={mt!r})")
        self.tokenizer_type = str(self.root.get("tokenizer_type") or "")
        st = d / "speech_tokenizer" / "config.json"
        st_type = None
        if st.is_file():
            st_type = _read_json(st, "speech tokenizer").get("model_type")
        if "25hz" in self.tokenizer_type or (st_type and "25hz" in str(st_type)):
            raise _err(
                f"{d} uses the 25 Hz speech tokenizer ({self.tokenizer_type or st_type}); "
                "only 12 Hz checkpoints are supported"
            )
        self.model_type = str(self.root.get("tts_model_type") or "")
        if self.model_type not in MODEL_TYPES:
            raise _err(
                f"config.json: tts_model_type={self.model_type!r} is not one of {MODEL_TYPES}"
            )
        self.model_size = str(self.root.get("tts_model_size") or "")
        self.spec = talker_spec(self.root)
        self.generation = generation_defaults(d / "generation_config.json")
        self._shards = self._find_shards()

    # ------------------------------------------------------------------ variants
    @property
    def speech_tokenizer_dir(self) -> Path:
        return self.dir / "speech_tokenizer"

    @property
    def accepts_instruct(self) -> bool:
        """The official wrapper drops instruct for CustomVoice checkpoints whose size string
        is contained in "0b6" (the 0.6B ones); VoiceDesign always reads it."""
        if self.model_type == "voice_design":
            return True
        return self.model_type == "custom_voice" and self.model_size not in "0b6"

    # ------------------------------------------------------------------ files
    def _find_shards(self) -> list[Path]:
        index = self.dir / "model.safetensors.index.json"
        if index.is_file():
            wm = _read_json(index, "shard index").get("weight_map")
            if not isinstance(wm, dict) or not wm:
                raise _err(f"{index} has no weight_map")
            shards = sorted({self.dir / str(f) for f in wm.values()})
        else:
            shards = sorted(self.dir.glob("*.safetensors"))
        if not shards:
            raise _err(f"no model.safetensors (or shards) in {self.dir}")
        for s in shards:
            if not s.is_file():
                raise _err(f"missing checkpoint shard {s.name} in {self.dir}")
        return shards

    def tensors(self):
        """A name -> float32 array reader over the shards (predictor_import's checkpoint reader)."""
        from .predictor_import import ShardedCheckpoint

        try:
            return ShardedCheckpoint(str(self.dir))
        except (ValueError, FileNotFoundError) as e:
            raise _err(str(e)) from None

    def hashed_files(self) -> list[Path]:
        """The files the built graphs depend on: config, generation defaults, shard index and
        every shard."""
        names = ["config.json", "generation_config.json", "model.safetensors.index.json"]
        return [f for f in [self.dir / n for n in names] + list(self._shards) if f.is_file()]

    def content_hash(self, memo: Optional[Path] = None) -> str:
        """sha256 over the `hashed_files` bytes and the cache format: the graph cache key.

        `memo`: a JSON file remembering the hash of a folder whose files kept their sizes and
        modification times, so a second run does not read gigabytes again."""
        files = self.hashed_files()
        stamp = [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]
        key = str(self.dir.resolve())
        memos = _read_memo(memo)
        hit = memos.get(key)
        if hit and hit.get("stamp") == stamp and hit.get("format") == CACHE_FORMAT:
            return hit["hash"]
        h = hashlib.sha256(CACHE_FORMAT.encode())
        for f in files:
            h.update(f.name.encode() + b"\0" + str(f.stat().st_size).encode() + b"\0")
            with open(f, "rb") as fh:
                while True:
                    block = fh.read(1 << 22)
                    if not block:
                        break
                    h.update(block)
        digest = h.hexdigest()[:32]
        if memo is not None:
            memos[key] = {"stamp": stamp, "format": CACHE_FORMAT, "hash": digest}
            _write_memo(memo, memos)
        return digest


def _read_memo(memo: Optional[Path]) -> dict:
    if memo is None or not memo.is_file():
        return {}
    try:
        d = json.loads(memo.read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def _write_memo(memo: Path, memos: dict) -> None:
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f".{memo.name}.{os.getpid()}")
        tmp.write_text(json.dumps(memos))
        tmp.replace(memo)
    except OSError:
        pass  # a read-only cache only costs the next run a re-hash


def is_qwen3_folder(path: Optional[str]) -> bool:
    """Whether `path` looks like a Qwen3-TTS checkpoint folder (config.json says so)."""
    if not path:
        return False
    cfg = Path(path).expanduser() / "config.json"
    if not cfg.is_file():
        return False
    try:
        d = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and (d.get("model_type") == "qwen3_tts" or "talker_config" in d)
