"""One ONNX Runtime session over a depth-decoder graph built by `codecspec.graphs`.

Knows the graph's I/O contract (docs/graphs.md) and nothing about trees or sampling. Two kinds
of graph exist: heads="graph" returns verify and draft logits for every query node;
heads="hidden" returns final-norm hidden states and leaves the heads to the host
(`codecspec.HeadBank`), which on a CPU is much cheaper (see docs/graphs.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np
import onnx

from codecspec.graphs.builder import read_graph_config
from codecspec.graphs.config import DepthDecoderConfig
from codecspec.runtime.session import ModelSource, open_session

_GRAPH_OUT = ("logits", "draft_logits", "new_keys", "new_values")
_HIDDEN_OUT = ("hidden", "new_keys", "new_values")


def heads_sidecar(model_path: Union[str, Path]) -> Path:
    """Where the LM heads of a heads="hidden" graph are stored: beside the .onnx file."""
    p = Path(model_path)
    return p.with_name(p.stem + ".heads.npy")


class DepthGraph:
    """A loaded verifier graph. `heads_in_graph` says which kind it is."""

    def __init__(
        self,
        model: Union[ModelSource, onnx.ModelProto],
        provider: str = "auto",
        threads: int | None = None,
    ):
        self.path = None
        if isinstance(model, onnx.ModelProto):
            source = model.SerializeToString()
            self.config: DepthDecoderConfig = read_graph_config(model)
        else:
            source = model
            if not isinstance(model, (bytes, bytearray)):
                self.path = Path(model)
                if not self.path.is_file():
                    raise FileNotFoundError(f"model: no such ONNX file: {model}")
            try:
                self.config = read_graph_config(model)
            except Exception as e:
                raise ValueError(f"model: not a codecspec depth graph ({e})") from e
        self.session = open_session(source, provider=provider, threads=threads)
        outputs = {o.name for o in self.session.get_outputs()}
        self.heads_in_graph = "logits" in outputs
        want = _GRAPH_OUT if self.heads_in_graph else _HIDDEN_OUT
        missing = [n for n in want if n not in outputs]
        if missing:
            raise ValueError(f"model: graph lacks outputs {missing}")
        self.outputs = want
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
        head_ids: np.ndarray | None = None,
        draft_offsets: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """heads="graph": [logits, draft_logits, new_keys, new_values];
        heads="hidden": [hidden, new_keys, new_values]."""
        self.calls += 1
        feeds = {
            "input_ids": input_ids,
            "input_embeds": input_embeds,
            "position_ids": position_ids,
            "attention_bias": attention_bias,
            "past_keys": past_keys,
            "past_values": past_values,
        }
        if self.heads_in_graph:
            feeds["head_ids"] = head_ids
            feeds["draft_offsets"] = draft_offsets
        return self.session.run(self.outputs, feeds)
