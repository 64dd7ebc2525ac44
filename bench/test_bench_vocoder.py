"""The vocoder, v1 (float64, momentum 0.99) vs current (float32 overlap-add plan, 0.9).

    pytest bench/test_bench_vocoder.py --benchmark-enable --benchmark-group-by=group
    python models/recipe/vocoder.py      # 24 held-out utterances: LSD and ms per audio second

Both decode the same codec magnitude of the shipped listening sample (3.5 s of speech).
"""

from __future__ import annotations

import pytest

cs = pytest.importorskip("codecspec")

from codecspec.codec.audio import read_wav  # noqa: E402
from codecspec.codec.codec import Codec  # noqa: E402
from codecspec.codec.features import griffin_lim, griffin_lim_reference  # noqa: E402
from codecspec.families.reference.model import default_model_dir  # noqa: E402

GROUP = "vocoder, 3.5 s clip, 32 iterations"


@pytest.fixture(scope="module")
def magnitude():
    model = default_model_dir()
    codec = Codec.load(model / "codec.npz")
    wav, _ = read_wav(model / "sample.wav")
    feats = codec.decode_features(codec.encode(wav))
    c = codec.cfg
    return (
        codec.features_to_magnitude(feats),
        (c.n_fft, c.stft_hop, c.win_length),
        len(feats) * c.frame_hop,
    )


@pytest.mark.parametrize("vocoder", [griffin_lim_reference, griffin_lim], ids=["v1", "current"])
def test_vocoder(benchmark, magnitude, vocoder):
    mag, args, n = magnitude
    benchmark.group = GROUP
    wav = benchmark(vocoder, mag, *args, n)
    assert wav.shape == (n,)
