"""Float32 weight container for a depth decoder, with the names the graph builder reads.

Names and shapes (H = hidden_size, H_in = input width, nh/kvh = query/kv heads, hd = head_dim,
I = intermediate_size, G = num_codebooks, V = codebook_size, K = num_draft_offsets):

    c0_embedding              [c0_vocab_size, H_in]   embeds c0 (the talker's codec table)
    code_embeddings           [G-1, V, H_in]          table j embeds c_{j+1}
    input_proj.weight         [H, H_in]               only when config.input_hidden_size is set
    input_proj.bias           [H]
    layers.{i}.input_norm     [H]
    layers.{i}.q_proj         [nh*hd, H]              (torch Linear layout: [out, in])
    layers.{i}.k_proj         [kvh*hd, H]
    layers.{i}.v_proj         [kvh*hd, H]
    layers.{i}.o_proj         [H, nh*hd]
    layers.{i}.q_norm         [hd]
    layers.{i}.k_norm         [hd]
    layers.{i}.post_norm      [H]
    layers.{i}.gate_proj      [I, H]
    layers.{i}.up_proj        [I, H]
    layers.{i}.down_proj      [H, I]
    final_norm                [H]
    heads                     [G-1, V, H]             head j predicts c_{j+1}; no bias
    draft_offsets             [K, H]                  b_1..b_K; zeros = plain head reuse
"""

from __future__ import annotations

import os
from collections.abc import Iterator, MutableMapping
from typing import Optional, Union

import numpy as np

from .config import DepthDecoderConfig

__all__ = ["DepthDecoderWeights", "expected_shapes", "load_npz_config"]

_LAYER_TENSORS = (
    "input_norm",
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "q_norm",
    "k_norm",
    "post_norm",
    "gate_proj",
    "up_proj",
    "down_proj",
)

_CONFIG_KEY = "__codecspec_config__"


def expected_shapes(config: DepthDecoderConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name the config needs, with its shape, in a stable order."""
    c = config
    H, Hin, hd, inter = c.hidden_size, c.input_width, c.head_dim, c.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "c0_embedding": (c.c0_vocab_size, Hin),
        "code_embeddings": (c.num_lm_heads, c.codebook_size, Hin),
    }
    if c.has_input_proj:
        shapes["input_proj.weight"] = (H, Hin)
        shapes["input_proj.bias"] = (H,)
    for i in range(c.num_layers):
        p = f"layers.{i}."
        shapes[p + "input_norm"] = (H,)
        shapes[p + "q_proj"] = (c.num_heads * hd, H)
        shapes[p + "k_proj"] = (c.num_kv_heads * hd, H)
        shapes[p + "v_proj"] = (c.num_kv_heads * hd, H)
        shapes[p + "o_proj"] = (H, c.num_heads * hd)
        shapes[p + "q_norm"] = (hd,)
        shapes[p + "k_norm"] = (hd,)
        shapes[p + "post_norm"] = (H,)
        shapes[p + "gate_proj"] = (inter, H)
        shapes[p + "up_proj"] = (inter, H)
        shapes[p + "down_proj"] = (H, inter)
    shapes["final_norm"] = (H,)
    shapes["heads"] = (c.num_lm_heads, c.codebook_size, H)
    shapes["draft_offsets"] = (c.num_draft_offsets, H)
    return shapes


class DepthDecoderWeights(MutableMapping):
    """A dict of name -> C-contiguous float32 numpy array (values are converted on assignment)."""

    def __init__(self, arrays: Optional[dict] = None, **kwargs: np.ndarray) -> None:
        self._arrays: dict[str, np.ndarray] = {}
        if arrays:
            self.update(arrays)
        if kwargs:
            self.update(kwargs)

    # ------------------------------------------------------------------ mapping protocol
    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._arrays[name]
        except KeyError:
            raise KeyError(f"DepthDecoderWeights has no tensor {name!r}") from None

    def __setitem__(self, name: str, value) -> None:
        if not isinstance(name, str):
            raise ValueError(f"DepthDecoderWeights: tensor names must be str, got {name!r}")
        arr = np.asarray(value)
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(
                f"DepthDecoderWeights[{name!r}]: expected a float array, got {arr.dtype}"
            )
        self._arrays[name] = np.ascontiguousarray(arr, dtype=np.float32)

    def __delitem__(self, name: str) -> None:
        del self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def __repr__(self) -> str:
        n = sum(a.size for a in self._arrays.values())
        return f"DepthDecoderWeights({len(self)} tensors, {n:,} floats)"

    def layer(self, i: int, name: str) -> np.ndarray:
        return self[f"layers.{i}.{name}"]

    @property
    def num_parameters(self) -> int:
        return int(sum(a.size for a in self._arrays.values()))

    # ------------------------------------------------------------------ checks
    def validate(self, config: DepthDecoderConfig) -> None:
        """Raise ValueError naming the first missing, unexpected, misshapen or non-finite tensor."""
        shapes = expected_shapes(config)
        for name, shape in shapes.items():
            if name not in self._arrays:
                raise ValueError(f"DepthDecoderWeights: missing tensor {name!r} (shape {shape})")
            arr = self._arrays[name]
            if arr.shape != shape:
                raise ValueError(
                    f"DepthDecoderWeights: tensor {name!r} has shape {arr.shape}, expected {shape}"
                )
            if not np.isfinite(arr).all():
                raise ValueError(f"DepthDecoderWeights: tensor {name!r} holds NaN or inf")
        for name in self._arrays:
            if name not in shapes:
                raise ValueError(f"DepthDecoderWeights: unexpected tensor {name!r} for this config")

    # ------------------------------------------------------------------ construction
    @classmethod
    def random(cls, config: DepthDecoderConfig, seed: int = 0) -> DepthDecoderWeights:
        """Random weights whose output distributions look like a trained model's.

        Scales are chosen so that the residual stream stays O(1) through the layers and the
        head logits have a standard deviation of ~2-3: per-position entropies of a few nats,
        neither uniform nor one-hot. Draft offsets are small and non-zero.
        """
        c = config
        rng = np.random.default_rng(seed)
        H, Hin, hd, inter = c.hidden_size, c.input_width, c.head_dim, c.intermediate_size

        def lin(out_f: int, in_f: int, gain: float = 1.0) -> np.ndarray:
            return rng.standard_normal((out_f, in_f), dtype=np.float32) * np.float32(
                gain / np.sqrt(in_f)
            )

        def norm_w(n: int, mean: float = 1.0, spread: float = 0.1) -> np.ndarray:
            return (mean + spread * rng.standard_normal(n)).astype(np.float32)

        w = cls()
        w["c0_embedding"] = rng.standard_normal((c.c0_vocab_size, Hin), dtype=np.float32)
        w["code_embeddings"] = rng.standard_normal(
            (c.num_lm_heads, c.codebook_size, Hin), dtype=np.float32
        )
        if c.has_input_proj:
            w["input_proj.weight"] = lin(H, Hin)
            w["input_proj.bias"] = 0.1 * rng.standard_normal(H)
        for i in range(c.num_layers):
            p = f"layers.{i}."
            w[p + "input_norm"] = norm_w(H)
            w[p + "q_proj"] = lin(c.num_heads * hd, H)
            w[p + "k_proj"] = lin(c.num_kv_heads * hd, H)
            w[p + "v_proj"] = lin(c.num_kv_heads * hd, H)
            w[p + "o_proj"] = lin(H, c.num_heads * hd, gain=0.7)
            # q/k norm weights above 1 sharpen attention, as in trained Qwen3 checkpoints.
            w[p + "q_norm"] = norm_w(hd, mean=1.5, spread=0.3)
            w[p + "k_norm"] = norm_w(hd, mean=1.2, spread=0.3)
            w[p + "post_norm"] = norm_w(H)
            w[p + "gate_proj"] = lin(inter, H)
            w[p + "up_proj"] = lin(inter, H)
            w[p + "down_proj"] = lin(H, inter, gain=0.7)
        w["final_norm"] = norm_w(H)
        w["heads"] = rng.standard_normal((c.num_lm_heads, c.codebook_size, H), dtype=np.float32) * (
            np.float32(3.0 / np.sqrt(H))
        )
        w["draft_offsets"] = 0.3 * rng.standard_normal((c.num_draft_offsets, H))
        return w

    # ------------------------------------------------------------------ persistence
    def save_npz(
        self, path: Union[str, os.PathLike], config: Optional[DepthDecoderConfig] = None
    ) -> None:
        """Write an uncompressed .npz; with `config`, its JSON is stored alongside."""
        arrays = dict(self._arrays)
        if config is not None:
            self.validate(config)
            arrays[_CONFIG_KEY] = np.frombuffer(config.to_json().encode(), dtype=np.uint8)
        np.savez(path, **arrays)

    @classmethod
    def load_npz(
        cls, path: Union[str, os.PathLike], config: Optional[DepthDecoderConfig] = None
    ) -> DepthDecoderWeights:
        """Read a .npz written by save_npz; validates against `config` or the stored one."""
        if not os.path.exists(path):
            raise FileNotFoundError(f"DepthDecoderWeights.load_npz: no such file {str(path)!r}")
        stored = None
        w = cls()
        with np.load(path, allow_pickle=False) as z:
            for name in z.files:
                if name == _CONFIG_KEY:
                    stored = DepthDecoderConfig.from_json(z[name].tobytes().decode())
                else:
                    w[name] = z[name]
        check = config if config is not None else stored
        if check is not None:
            w.validate(check)
        return w


def load_npz_config(path: Union[str, os.PathLike]) -> Optional[DepthDecoderConfig]:
    """The config stored by `save_npz(path, config)`, or None."""
    with np.load(path, allow_pickle=False) as z:
        if _CONFIG_KEY not in z.files:
            return None
        return DepthDecoderConfig.from_json(z[_CONFIG_KEY].tobytes().decode())
