"""One ONNX Runtime session over a depth-decoder graph built by `codecspec.graphs`.

Knows the graph's I/O contract (docs/graphs.md) and nothing about trees or sampling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np
import onnx

from codecspec.graphs.config import DepthDecoderConfig
from codecspec.graphs.builder import read_graph_config
from codecspec.runtime.session import ModelSource, open_session

_OUTPUTS = ("logits", "draft_logits", "new_keys", "new_values")


class DepthGraph:
    """A loaded verifier graph (heads="graph": verify and draft logits come out of the call)."""

    def __init__(
        self,
        model: Union[ModelSource, onnx.ModelProto],
        provider: str = "auto",
        threads: int | None = None,
    ):
        if isinstance(model, onnx.ModelProto):
            source = model.SerializeToString()
            self.config: DepthDecoderConfig = read_graph_config(model)
        else:
            source = model
            if not isinstance(model, (bytes, bytearray)) and not Path(model).is_file():
                raise FileNotFoundError(f"model: no such ONNX file: {model}")
            try:
                self.config = read_graph_config(model)
            except Exception as e:
                raise ValueError(f"model: not a codecspec depth graph ({e})") from e
        self.session = open_session(source, provider=provider, threads=threads)
        outputs = {o.name for o in self.session.get_outputs()}
        missing = [n for n in _OUTPUTS if n not in outputs]
        if missing:
            raise ValueError(
                f"model: graph lacks outputs {missing}; build it with heads='graph'"
            )
        self.provider = self.session.get_providers()[0]
        self.calls = 0

    def __call__(
        self,
        input_ids: np.ndarray,
        input_embeds: np.ndarray,
        position_ids: np.ndarray,
        attention_bias: np.ndarray,
        past_keys: np.ndarray,
        past_values: np.ndarray,
        head_ids: np.ndarray,
        draft_offsets: np.ndarray,
    ) -> list[np.ndarray]:
        """Returns [logits [Q,V], draft_logits [Q,K,V], new_keys, new_values]."""
        self.calls += 1
        return self.session.run(
            _OUTPUTS,
            {
                "input_ids": input_ids,
                "input_embeds": input_embeds,
                "position_ids": position_ids,
                "attention_bias": attention_bias,
                "past_keys": past_keys,
                "past_values": past_values,
                "head_ids": head_ids,
                "draft_offsets": draft_offsets,
            },
        )
