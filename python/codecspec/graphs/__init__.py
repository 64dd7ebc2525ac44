"""ONNX graphs of RVQ depth decoders (Qwen3-TTS-style code predictors) for tree verification.

    from codecspec.graphs import qwen3_tts_0_6b, DepthDecoderWeights, build_depth_graph
    cfg = qwen3_tts_0_6b()
    model = build_depth_graph(cfg, DepthDecoderWeights.random(cfg, seed=0), variant="cpu")

See docs/graphs.md for the graph I/O contract and measured costs.
"""

from codecspec.runtime.graph_format import (
    GRAPH_VERSION,
    load_model,
    read_graph_config,
    read_graph_metadata,
)

from .builder import (
    INPUT_NAMES,
    OUTPUT_NAMES,
    build_depth_graph,
    count_nodes,
    cpu_variant_supported,
    graph_io_names,
    save_model,
    set_row_multiple,
)
from .config import (
    DepthDecoderConfig,
    embedding_row,
    qwen3_tts_0_6b,
    small_depth,
    table_layout,
    zero_row,
)
from .reference import (
    ReferenceOutput,
    compute_head_logits,
    example_feeds,
    forward_hidden,
    input_hidden,
    reference_run,
    tree_attention_bias,
)
from .safetensors_io import SafetensorsFile, write_safetensors
from .weights import DepthDecoderWeights, expected_shapes, load_npz_config

__all__ = [
    "GRAPH_VERSION",
    "INPUT_NAMES",
    "OUTPUT_NAMES",
    "DepthDecoderConfig",
    "DepthDecoderWeights",
    "ReferenceOutput",
    "SafetensorsFile",
    "build_depth_graph",
    "compute_head_logits",
    "count_nodes",
    "cpu_variant_supported",
    "embedding_row",
    "example_feeds",
    "expected_shapes",
    "forward_hidden",
    "graph_io_names",
    "input_hidden",
    "load_model",
    "load_npz_config",
    "qwen3_tts_0_6b",
    "read_graph_config",
    "read_graph_metadata",
    "reference_run",
    "save_model",
    "set_row_multiple",
    "small_depth",
    "table_layout",
    "tree_attention_bias",
    "write_safetensors",
    "zero_row",
]
