"""The depth graph's format: what `codecspec.graphs` writes and the runtime reads.

A built depth graph carries its shape (`DepthDecoderConfig`), the format version and a few
layout facts in its ONNX metadata. Both sides need them: the builder writes them, and
`runtime.depth_graph.DepthGraph` checks them before it opens a session. They live here, below
both, so that the runtime does not import the graph builder (which itself opens runtime
sessions to probe and profile its graphs); `codecspec.graphs` re-exports every name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Optional, Union

import numpy as np
import onnx

__all__ = [
    "GRAPH_VERSION",
    "IN_PLACE_KV",
    "DepthDecoderConfig",
    "load_model",
    "read_graph_config",
    "read_graph_metadata",
]

GRAPH_VERSION = "1"

_META_VERSION = "codecspec.graph_version"
_META_CONFIG = "codecspec.config"
_META_LAYOUT = "codecspec.table_layout"
_META_VARIANT = "codecspec.variant"
_META_HEADS = "codecspec.heads"
_META_IO = "codecspec.io"
_META_ATTENTION = "codecspec.attention"
# every call padded to a multiple of this many rows (graphs.builder.set_row_multiple)
_META_ROW_MULTIPLE = "codecspec.row_multiple"
# attention="in_place" graphs (variant="cpu"): per layer i a past input and a present output
# that the caller binds to the same buffer, the host cache's layer i [1, kvh, capacity, hd];
# GroupQueryAttention writes the call's keys at their positions and attends over the filled
# rows only, so no past is copied and nothing past the cache's length is read.
IN_PLACE_KV = ("past_key.{}", "past_value.{}", "present_key.{}", "present_value.{}")

_INT_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "num_codebooks",
    "codebook_size",
    "c0_vocab_size",
    "num_draft_offsets",
    "max_positions",
)


@dataclasses.dataclass(frozen=True)
class DepthDecoderConfig:
    """Sizes of a Qwen3-style depth decoder.

    The model predicts codes c1..c_{G-1} of one frame: position 0 holds an external embedding
    (Qwen3-TTS: the talker's final hidden state), position 1 the embedding of c0, position k+1
    the embedding of c_k. LM head j predicts c_{j+1} and embedding table j embeds c_{j+1}.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    num_codebooks: int = 16
    codebook_size: int = 2048
    c0_vocab_size: int = 3072
    input_hidden_size: Optional[int] = None
    num_draft_offsets: int = 3
    max_positions: int = 32

    def __post_init__(self) -> None:
        self.validate()
        # Plain Python numbers, so that equality, hashing and JSON do not depend on how the
        # values were given (numpy ints, ints for floats).
        for name in _INT_FIELDS:
            object.__setattr__(self, name, int(getattr(self, name)))
        if self.input_hidden_size is not None:
            object.__setattr__(self, "input_hidden_size", int(self.input_hidden_size))
        for name in ("rms_norm_eps", "rope_theta"):
            object.__setattr__(self, name, float(getattr(self, name)))

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise ValueError naming the first offending field."""
        for name in _INT_FIELDS:
            _check_positive_int(name, getattr(self, name))
        if self.input_hidden_size is not None:
            _check_positive_int("input_hidden_size", self.input_hidden_size)
        for name in ("rms_norm_eps", "rope_theta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(f"DepthDecoderConfig.{name} must be a number, got {v!r}")
            if not math.isfinite(float(v)) or float(v) <= 0.0:
                raise ValueError(f"DepthDecoderConfig.{name} must be finite and > 0, got {v!r}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                "DepthDecoderConfig.num_kv_heads must divide num_heads "
                f"(got num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"DepthDecoderConfig.head_dim must be even, got {self.head_dim}")
        if self.num_codebooks < 2:
            raise ValueError(
                f"DepthDecoderConfig.num_codebooks must be >= 2, got {self.num_codebooks}"
            )

    # ------------------------------------------------------------------ derived sizes
    @property
    def input_width(self) -> int:
        """Width of embedding rows and of `input_embeds` (H_in)."""
        return self.hidden_size if self.input_hidden_size is None else self.input_hidden_size

    @property
    def has_input_proj(self) -> bool:
        return self.input_hidden_size is not None

    @property
    def num_lm_heads(self) -> int:
        """G - 1: one head and one embedding table per code c1..c_{G-1}."""
        return self.num_codebooks - 1

    @property
    def kv_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def table_rows(self) -> int:
        """Rows of the concatenated input table: c0 table, G-1 code tables, one zero row."""
        return self.c0_vocab_size + self.num_lm_heads * self.codebook_size + 1

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> DepthDecoderConfig:
        if not isinstance(d, dict):
            raise ValueError(f"DepthDecoderConfig.from_dict expects a dict, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        for key in d:
            if key not in known:
                raise ValueError(f"DepthDecoderConfig: unknown field {key!r}")
        required = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        for key in required:
            if key not in d:
                raise ValueError(f"DepthDecoderConfig: missing field {key!r}")
        return cls(**d)

    @classmethod
    def from_json(cls, s: Union[str, bytes]) -> DepthDecoderConfig:
        try:
            d = json.loads(s)
        except json.JSONDecodeError as e:
            raise ValueError(f"DepthDecoderConfig.from_json: invalid JSON ({e})") from None
        return cls.from_dict(d)


def _check_positive_int(name: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"DepthDecoderConfig.{name} must be an int, got {v!r}")
    if v <= 0:
        raise ValueError(f"DepthDecoderConfig.{name} must be > 0, got {v!r}")


def load_model(path: Union[str, os.PathLike], load_weights: bool = True) -> onnx.ModelProto:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such ONNX file: {path!r}")
    return onnx.load(path, load_external_data=load_weights)


def _as_model(path_or_model) -> onnx.ModelProto:
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model
    if isinstance(path_or_model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(path_or_model))
    return load_model(path_or_model, load_weights=False)


def read_graph_metadata(path_or_model) -> dict:
    """codecspec metadata of a built graph: version, config (dict), table_layout, variant, heads."""
    m = _as_model(path_or_model)
    props = {p.key: p.value for p in m.metadata_props}
    if _META_VERSION not in props or _META_CONFIG not in props:
        raise ValueError("not a codecspec depth graph: codecspec metadata is missing")
    return {
        "graph_version": props[_META_VERSION],
        "config": json.loads(props[_META_CONFIG]),
        "table_layout": json.loads(props.get(_META_LAYOUT, "null")),
        "variant": props.get(_META_VARIANT),
        "heads": props.get(_META_HEADS),
        "io": json.loads(props.get(_META_IO, "null")),
        # Graphs built before the option existed attend over the call's columns.
        "attention": props.get(_META_ATTENTION, "call"),
        "row_multiple": int(props.get(_META_ROW_MULTIPLE, "1")),
    }


def read_graph_config(path_or_model) -> DepthDecoderConfig:
    """The DepthDecoderConfig a graph was built from (reads metadata only, not the weights)."""
    meta = read_graph_metadata(path_or_model)
    if meta["graph_version"] != GRAPH_VERSION:
        raise ValueError(
            f"unsupported codecspec graph version {meta['graph_version']!r} "
            f"(this library reads {GRAPH_VERSION!r})"
        )
    return DepthDecoderConfig.from_dict(meta["config"])
