"""A fully shared-parameter depth decoder, stored once and expanded into the positional layout.

The seed system's depth decoder (Apple's decoupled temporal/depth decoder) shares every
parameter across RVQ levels and tells the level by RoPE. codecspec's graph builder, depth
loop, offsets and calibration all speak the Qwen3-TTS per-position layout (one input table and
one LM head per level, `DepthDecoderWeights`), so the shared decoder is *tied* weights of that
layout:

    code_embeddings[k - 1] = table + level_embeddings[k]     (table j embeds c_{j+1})
    c0_embedding           = table + level_embeddings[0]     (share_c0; else its own table)
    heads[j]               = head                            (for every j)

plus `num_layers` transformer layers and the final norm. The level reaches the network twice:
RoPE at the level's position inside attention (the layout's, unchanged) and, optionally, a
learned level vector added to the code embedding (`level_embeddings`, G x H values: the
explicit absolute level signal the seed gets from rotating h_t at the level index). Both fold
into the expanded input table, so the graph builder needs no change; the expanded graph costs
the same per call as a positional graph of the same depth.

Tied to the codec instead (`codebooks=`, the v3 recipe's choice): the RVQ codebooks the codec
ships already give every level its own 1,024 vectors, so the decoder learns two small maps
instead of one table and one head for all levels. With phi_k = `codebook_features` of level
k's codebook ([V, D + 1]: the vectors over the level's RMS value and their mean square, the
term a Gaussian residual's log-density needs),

    code_embeddings[k - 1] = phi_k @ in_proj + level_embeddings[k]
    c0_embedding           = phi_0 @ in_proj + level_embeddings[0]
    heads[j]               = phi_{j+1} @ out_proj[j]      (out_proj [D + 1, H] for every j
                                                          without per_level_head)

The spec names the codebooks by their SHA-256, and the expansion refuses any others.

File `depth_shared.npz` holds the shared tensors once (large ones as float16) and a JSON spec
(`spec`): the expanded `DepthDecoderConfig`, `share_c0`, `level_embeddings`. `load_shared`
reads it, `expand_shared` gives the positional `DepthDecoderWeights`, `build_shared_graph` the
ONNX graph (heads="hidden": the heads go to the host, as in the shipped positional decoder);
a codebook-tied file needs the folder's codebooks for both (`needs_codebooks`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Union

import numpy as np

from .config import DepthDecoderConfig
from .weights import _LAYER_TENSORS, DepthDecoderWeights

__all__ = [
    "SHARED_FORMAT",
    "SHARED_FILE",
    "shared_shapes",
    "save_shared",
    "load_shared",
    "expand_shared",
    "build_shared_graph",
    "shared_parameter_count",
    "codebook_features",
    "needs_codebooks",
]

SHARED_FORMAT = "codecspec-shared-depth/1"
SHARED_FILE = "depth_shared.npz"
_SPEC_KEY = "__spec__"
_F16_MIN = 4096  # arrays with at least this many values are stored as float16


def shared_shapes(
    config: DepthDecoderConfig,
    share_c0: bool,
    level_embeddings: bool,
    *,
    codebook_features: int = 0,
    per_level_head: bool = False,
) -> dict:
    """Every shared tensor the spec needs, with its shape (the file's contents).
    codebook_features: the width D + 1 of `codebook_features` for a decoder tied to the
    codec's codebooks (0: one learned table and head)."""
    c = config
    if c.has_input_proj:
        raise ValueError("config: a shared depth decoder feeds h_t directly (no input_proj)")
    if share_c0 and c.c0_vocab_size != c.codebook_size:
        raise ValueError(
            f"share_c0: c0 has {c.c0_vocab_size} codes, the other levels {c.codebook_size}; "
            "one table cannot embed both"
        )
    if codebook_features and not share_c0:
        raise ValueError("share_c0: a codebook-tied decoder embeds c0 by its codebook too")
    if per_level_head and not codebook_features:
        raise ValueError("per_level_head: only a codebook-tied decoder has head projections")
    H, hd, inter = c.hidden_size, c.head_dim, c.intermediate_size
    F, G = int(codebook_features), c.num_codebooks
    s = {"in_proj": (F, H)} if F else {"table": (c.codebook_size, H)}
    if not share_c0:
        s["c0_embedding"] = (c.c0_vocab_size, H)
    if level_embeddings:
        s["level_embeddings"] = (c.num_codebooks - 1, H)  # levels 0..G-2 are ever inputs
    for i in range(c.num_layers):
        p = f"layers.{i}."
        s[p + "input_norm"] = (H,)
        s[p + "q_proj"] = (c.num_heads * hd, H)
        s[p + "k_proj"] = (c.num_kv_heads * hd, H)
        s[p + "v_proj"] = (c.num_kv_heads * hd, H)
        s[p + "o_proj"] = (H, c.num_heads * hd)
        s[p + "q_norm"] = (hd,)
        s[p + "k_norm"] = (hd,)
        s[p + "post_norm"] = (H,)
        s[p + "gate_proj"] = (inter, H)
        s[p + "up_proj"] = (inter, H)
        s[p + "down_proj"] = (H, inter)
    s["final_norm"] = (H,)
    if F:
        s["out_proj"] = (G - 1, F, H) if per_level_head else (F, H)
    else:
        s["head"] = (c.codebook_size, H)
    return s


def _shape_options(spec: dict) -> dict:
    return {
        "codebook_features": spec.get("codebook_features", 0),
        "per_level_head": spec.get("per_level_head", False),
    }


def shared_parameter_count(
    config: DepthDecoderConfig, share_c0: bool, level_embeddings: bool, **tie
) -> int:
    """Parameters of the shared decoder, each counted once (draft offsets excluded; a
    codebook-tied decoder's codebooks are the codec's, not counted)."""
    shapes = shared_shapes(config, share_c0, level_embeddings, **tie)
    return int(sum(np.prod(s) for s in shapes.values()))


def codebook_features(codebooks) -> np.ndarray:
    """phi [G, V, D + 1] float32 of RVQ codebooks [G, V, D]: each level's vectors over that
    level's RMS value (the deep levels' small residuals at the scale of the first), then the
    mean square of each scaled vector (with it a linear head can score distance, not only
    direction). Computed in float64 and rounded once to float32, so a machine's own summation
    order stays far below the float32 rounding (the same values everywhere but at ties)."""
    cb = np.asarray(codebooks, np.float64)
    if cb.ndim != 3 or min(cb.shape) < 1 or not np.all(np.isfinite(cb)):
        raise ValueError(f"codebooks: expected finite [levels, codes, dim], got {cb.shape}")
    rms = np.sqrt(np.mean(cb * cb, axis=(1, 2), keepdims=True))
    if np.any(rms == 0):
        raise ValueError("codebooks: a level is all zeros")
    cb = cb / rms
    return np.concatenate([cb, np.mean(cb * cb, axis=-1, keepdims=True)], -1).astype(np.float32)


def _codebooks_digest(codebooks) -> str:
    return hashlib.sha256(np.ascontiguousarray(codebooks, np.float32).tobytes()).hexdigest()


def needs_codebooks(spec: dict) -> bool:
    """Whether expanding this file needs the codec's codebooks (a codebook-tied decoder)."""
    return bool(spec.get("codebook_features", 0))


def _spec(
    config: DepthDecoderConfig,
    share_c0: bool,
    level_embeddings: bool,
    codebooks=None,
    per_level_head: bool = False,
) -> dict:
    spec = {
        "format": SHARED_FORMAT,
        "config": config.to_dict(),
        "share_c0": bool(share_c0),
        "level_embeddings": bool(level_embeddings),
    }
    if codebooks is not None:
        spec["codebook_features"] = int(codebook_features(codebooks).shape[-1])
        spec["per_level_head"] = bool(per_level_head)
        spec["codebooks_sha256"] = _codebooks_digest(codebooks)
    elif per_level_head:
        raise ValueError("per_level_head: only a codebook-tied decoder has head projections")
    return spec


def _check(arrays: dict, spec: dict) -> tuple[DepthDecoderConfig, dict]:
    if not isinstance(spec, dict) or spec.get("format") != SHARED_FORMAT:
        raise ValueError(f"spec: not a shared depth decoder ({SHARED_FORMAT} expected)")
    for key in ("share_c0", "level_embeddings"):
        if not isinstance(spec.get(key), bool):
            raise ValueError(f"spec: {key} must be true or false, got {spec.get(key)!r}")
    tie = _shape_options(spec)
    f = tie["codebook_features"]
    if isinstance(f, bool) or not isinstance(f, int) or f < 0:
        raise ValueError(f"spec: codebook_features must be a count, got {f!r}")
    if not isinstance(tie["per_level_head"], bool):
        raise ValueError(f"spec: per_level_head must be true or false, got {tie['per_level_head']}")
    if f and not isinstance(spec.get("codebooks_sha256"), str):
        raise ValueError("spec: a codebook-tied decoder names its codebooks (codebooks_sha256)")
    config = DepthDecoderConfig.from_dict(spec["config"])
    want = shared_shapes(config, spec["share_c0"], spec["level_embeddings"], **tie)
    out = {}
    for name, shape in want.items():
        if name not in arrays:
            raise ValueError(f"shared weights: missing tensor {name!r} (shape {shape})")
        a = np.ascontiguousarray(arrays[name], dtype=np.float32)
        if a.shape != shape:
            raise ValueError(f"shared weights: tensor {name!r} has shape {a.shape}, want {shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"shared weights: tensor {name!r} holds NaN or inf")
        out[name] = a
    extra = sorted(set(arrays) - set(want))
    if extra:
        raise ValueError(f"shared weights: unexpected tensors {extra}")
    return config, out


def save_shared(
    path: Union[str, os.PathLike],
    config: DepthDecoderConfig,
    arrays: dict,
    *,
    share_c0: bool,
    level_embeddings: bool,
    codebooks=None,
    per_level_head: bool = False,
) -> dict:
    """Write `arrays` (the names of `shared_shapes`) to `path`; large tensors as float16.
    codebooks: the codec's [G, V, D] for a codebook-tied decoder (named in the spec by hash,
    not stored: the folder's codec.npz holds them).

    Returns the arrays as stored (float16-rounded, float32): what `load_shared` gives back and
    what every expansion of this file computes with."""
    spec = _spec(config, share_c0, level_embeddings, codebooks, per_level_head)
    _, arrays = _check(arrays, spec)
    stored = {}
    for name, a in arrays.items():
        if a.size >= _F16_MIN:
            from .storage import round_bf16_exact, round_float16

            # the head goes to a HeadBank: bf16-exact values keep one array for all levels
            a = round_bf16_exact(a, name) if name == "head" else round_float16(a, name)
            stored[name] = a.astype(np.float16)
        else:
            stored[name] = a
    stored[_SPEC_KEY] = np.frombuffer(json.dumps(spec, sort_keys=True).encode(), np.uint8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(f, **stored)
    return {k: v.astype(np.float32) for k, v in stored.items() if k != _SPEC_KEY}


def load_shared(path: Union[str, os.PathLike]) -> tuple[dict, dict]:
    """(spec, float32 arrays) of a `depth_shared.npz` file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model_dir: no {path.name} in {path.parent}")
    with np.load(path, allow_pickle=False) as z:
        if _SPEC_KEY not in z.files:
            raise ValueError(f"{path}: not a shared depth decoder (no spec)")
        try:
            spec = json.loads(z[_SPEC_KEY].tobytes().decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: unreadable spec ({e})") from None
        arrays = {k: z[k] for k in z.files if k != _SPEC_KEY}
    _, arrays = _check(arrays, spec)
    return spec, arrays


def expand_shared(
    spec: dict, arrays: dict, offsets=None, codebooks=None
) -> tuple[DepthDecoderConfig, DepthDecoderWeights]:
    """The positional layout's config and weights (per-level tables and heads from the shared
    ones), draft offsets zero unless given; `codebooks` [G, V, D]: the codec's, for a
    codebook-tied decoder (`needs_codebooks`)."""
    config, a = _check(arrays, spec)
    G, V, H = config.num_codebooks, config.codebook_size, config.hidden_size
    level = a.get("level_embeddings", np.zeros((G - 1, H), np.float32))
    # c_{G-1} is never an input: its table (the layout has one) gets no level vector
    tail = np.concatenate([level[1:], np.zeros((1, H), np.float32)])
    w = DepthDecoderWeights()
    if needs_codebooks(spec):
        c0, tables, w["heads"] = _codebook_tables(spec, a, codebooks, config)
        w["c0_embedding"] = (c0 + level[0]).astype(np.float32)
        w["code_embeddings"] = (tables + tail[:, None, :]).astype(np.float32)
    else:
        w["c0_embedding"] = (a["table"] if spec["share_c0"] else a["c0_embedding"]) + level[0]
        w["code_embeddings"] = a["table"][None] + tail[:, None, :]
        w["heads"] = np.broadcast_to(a["head"], (G - 1, V, H))
    for i in range(config.num_layers):
        for name in _LAYER_TENSORS:
            w[f"layers.{i}.{name}"] = a[f"layers.{i}.{name}"]
    w["final_norm"] = a["final_norm"]
    w["draft_offsets"] = (
        np.zeros((config.num_draft_offsets, H), np.float32) if offsets is None else offsets
    )
    w.validate(config)
    return config, w


def _codebook_tables(spec: dict, a: dict, codebooks, config: DepthDecoderConfig):
    """(c0 table [V, H], tables of c1..c_{G-1} [G-1, V, H], heads [G-1, V, H] float32) of a
    codebook-tied decoder; the products in float64, rounded once (as `codebook_features`)."""
    G, V = config.num_codebooks, config.codebook_size
    if codebooks is None:
        raise ValueError("codebooks: this shared depth decoder is tied to the codec's codebooks")
    cb = np.asarray(codebooks)
    if cb.ndim != 3 or cb.shape[0] < G or cb.shape[1] != V:
        raise ValueError(f"codebooks: expected [>= {G}, {V}, dim], got {cb.shape}")
    if _codebooks_digest(cb) != spec["codebooks_sha256"]:
        raise ValueError("codebooks: not the codebooks this shared depth decoder was trained on")
    phi = codebook_features(cb)[:G].astype(np.float64)
    if phi.shape[-1] != spec["codebook_features"]:
        raise ValueError(f"codebooks: {phi.shape[-1]} features, want {spec['codebook_features']}")
    embed = phi @ a["in_proj"].astype(np.float64)  # [G, V, H]
    out = a["out_proj"].astype(np.float64)
    heads = phi[1:] @ out  # [G-1, V, H], one projection per level or one for all
    return embed[0], embed[1:], heads.astype(np.float32)


def build_shared_graph(spec: dict, arrays: dict, *, variant: str = "cpu", codebooks=None):
    """(onnx.ModelProto heads="hidden", heads [G-1, V, H] float32) of the expanded decoder."""
    from .builder import build_depth_graph

    config, w = expand_shared(spec, arrays, codebooks=codebooks)
    return build_depth_graph(config, w, variant=variant, heads="hidden"), w["heads"]
