"""codecspec: lossless speculative decoding for codec-language-model TTS.

The sampling, tree and verification engine is the Rust extension ``codecspec._core``; ONNX
Runtime graphs, decoders, training and calibration live in the Python subpackages.
"""

from codecspec._core import (
    DraftTree,
    Generator,
    SamplingParams,
    VerifyResult,
    __version__,
    sample,
    topk,
    verify_chain,
    verify_tree,
    verify_tree_batch,
    warp,
)

__all__ = [
    "DraftTree",
    "Generator",
    "SamplingParams",
    "VerifyResult",
    "__version__",
    "sample",
    "topk",
    "verify_chain",
    "verify_tree",
    "verify_tree_batch",
    "warp",
]
