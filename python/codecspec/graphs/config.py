"""Shape configuration of an RVQ depth decoder ("code predictor") and its input-table layout."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Optional, Union

import numpy as np

__all__ = [
    "DepthDecoderConfig",
    "qwen3_tts_0_6b",
    "small_depth",
    "embedding_row",
    "zero_row",
    "table_layout",
]

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


def qwen3_tts_0_6b(**overrides: Any) -> DepthDecoderConfig:
    """Qwen3-TTS-12Hz-0.6B code predictor (talker hidden = predictor hidden, no input proj)."""
    base = dict(
        num_layers=5,
        hidden_size=1024,
        num_heads=16,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=3072,
        rms_norm_eps=1e-6,
        rope_theta=1_000_000.0,
        num_codebooks=16,
        codebook_size=2048,
        c0_vocab_size=3072,
        input_hidden_size=None,
        num_draft_offsets=3,
        max_positions=32,
    )
    base.update(overrides)
    return DepthDecoderConfig(**base)


def small_depth(**overrides: Any) -> DepthDecoderConfig:
    """The Qwen3-TTS code-predictor layout at a size a 2-core CPU runs fast: 5 layers, hidden
    256, GQA 4/2 heads of 64. The demo's synthetic model (these defaults) and the shipped
    reference TTS (intermediate 512, 1024 codes, 4 offsets) are both this shape."""
    base = dict(
        num_layers=5,
        hidden_size=256,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        intermediate_size=768,
        num_codebooks=16,
        codebook_size=512,
        c0_vocab_size=512,
        num_draft_offsets=3,
    )
    base.update(overrides)
    return DepthDecoderConfig(**base)


# ---------------------------------------------------------------------- input table layout
def zero_row(config: DepthDecoderConfig) -> int:
    """Row id of the all-zero row: use it where the input is only `input_embeds`."""
    return config.table_rows - 1


def embedding_row(config: DepthDecoderConfig, level, code):
    """Row of the concatenated input table that embeds `code` at RVQ `level`.

    level 0 is c0 (talker codec vocabulary, `c0_vocab_size` ids); level l in 1..G-1 is c_l,
    embedded by code table l-1. `level` and `code` may be ints or integer arrays (broadcast);
    ints give an int, arrays an int64 array.
    """
    scalar = np.ndim(level) == 0 and np.ndim(code) == 0
    lv = np.asarray(level)
    cd = np.asarray(code)
    if not np.issubdtype(lv.dtype, np.integer) or isinstance(level, bool):
        raise ValueError(f"embedding_row: level must be an integer, got {level!r}")
    if not np.issubdtype(cd.dtype, np.integer) or isinstance(code, bool):
        raise ValueError(f"embedding_row: code must be an integer, got {code!r}")
    lv = lv.astype(np.int64)
    cd = cd.astype(np.int64)
    if np.any(lv < 0) or np.any(lv >= config.num_codebooks):
        raise ValueError(
            f"embedding_row: level must be in [0, {config.num_codebooks}), got {level}"
        )
    limit = np.where(lv == 0, config.c0_vocab_size, config.codebook_size)
    lv, cd, limit = np.broadcast_arrays(lv, cd, limit)
    if np.any(cd < 0) or np.any(cd >= limit):
        raise ValueError(
            "embedding_row: code out of range (c0 < "
            f"{config.c0_vocab_size}, c1.. < {config.codebook_size}), got {code}"
        )
    rows = np.where(
        lv == 0, cd, config.c0_vocab_size + (lv - 1) * config.codebook_size + cd
    ).astype(np.int64)
    return int(rows) if scalar else rows


def table_layout(config: DepthDecoderConfig) -> dict:
    """Self-description of the concatenated input table, stored in graph metadata."""
    return {
        "rows": config.table_rows,
        "width": config.input_width,
        "c0": {"start": 0, "size": config.c0_vocab_size},
        "codes": {
            "start": config.c0_vocab_size,
            "tables": config.num_lm_heads,
            "size": config.codebook_size,
            "row_of_level_l_code_c": "c0_size + (l - 1) * size + c",
        },
        "zero_row": zero_row(config),
    }
