"""A tiny depth-decoder configuration shared by the training and calibration tests."""

from codecspec.graphs import DepthDecoderConfig, cpu_variant_supported

TINY = DepthDecoderConfig(
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    num_codebooks=8,
    codebook_size=128,
    c0_vocab_size=128,
    num_draft_offsets=3,
    max_positions=16,
)
VARIANT = "cpu" if cpu_variant_supported() else "plain"
