"""codecspec: lossless speculative decoding for codec-language-model TTS.

The sampling, tree and verification engine is the Rust extension ``codecspec._core``; ONNX
Runtime graphs, decoders, training and calibration live in the Python subpackages.
"""

from codecspec._core import (
    AcousticGroups,
    DraftTree,
    Generator,
    HeadBank,
    Projection,
    SamplingParams,
    VerifyResult,
    __version__,
    fsq_pack,
    fsq_unpack,
    kv_commit,
    sample,
    sample_factorized,
    sample_stop,
    topk,
    verify_chain,
    verify_chain_coarse,
    verify_tree,
    verify_tree_batch,
    verify_tree_coarse,
    verify_tree_hidden,
    warp,
)

__all__ = [
    "AcousticGroups",
    "DraftTree",
    "HeadBank",
    "Generator",
    "Projection",
    "SamplingParams",
    "VerifyResult",
    "__version__",
    "fsq_pack",
    "fsq_unpack",
    "kv_commit",
    "sample",
    "sample_factorized",
    "sample_stop",
    "topk",
    "verify_chain",
    "verify_chain_coarse",
    "verify_tree",
    "verify_tree_batch",
    "verify_tree_coarse",
    "verify_tree_hidden",
    "warp",
]
