"""Reference speech codec for the shipped codec-LM: 12.5 frames/s, 16 RVQ codebooks.

Stacked log-mel frames (8 x 10 ms sub-frames x 80 mel bands per 80 ms frame) are reduced by
PCA and quantised by a 16-level residual VQ trained with k-means; decoding inverts PCA and the
mel filterbank and recovers phase with Griffin-Lim. numpy only.
"""

from codecspec.codec.audio import read_wav, resample, write_wav
from codecspec.codec.codec import Codec, CodecConfig, frame_features
from codecspec.codec.data import load_codes, load_manifest, save_codes
from codecspec.codec.features import griffin_lim, log_spectral_distance
from codecspec.codec.rvq import kmeans, rvq_decode, rvq_encode, rvq_fit

__all__ = [
    "Codec",
    "CodecConfig",
    "frame_features",
    "griffin_lim",
    "kmeans",
    "load_codes",
    "load_manifest",
    "log_spectral_distance",
    "read_wav",
    "resample",
    "rvq_decode",
    "rvq_encode",
    "rvq_fit",
    "save_codes",
    "write_wav",
]
