"""Shape configuration of an RVQ depth decoder ("code predictor") and its input-table layout.

`DepthDecoderConfig` itself is part of the graph format (`codecspec.runtime.graph_format`,
which the runtime reads without importing the builder); it is re-exported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from codecspec.runtime.graph_format import DepthDecoderConfig

__all__ = [
    "DepthDecoderConfig",
    "qwen3_tts_0_6b",
    "small_depth",
    "embedding_row",
    "zero_row",
    "table_layout",
]


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
