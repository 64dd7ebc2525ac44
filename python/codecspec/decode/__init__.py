"""Decode loops around the verify step."""

from codecspec.decode.depth import DecodeStats, DepthDecoder

__all__ = ["DecodeStats", "DepthDecoder"]
