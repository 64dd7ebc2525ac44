"""Depth-loop benchmarks on the shipped reference TTS (issue: reference codec-LM TTS).

    pytest bench/test_bench_reference.py --benchmark-enable --benchmark-group-by=group
    codecspec bench --frames 300        # AR vs speculative interleaved, medians, fidelity

Both modes decode the same shipped frames (h_t, c0 of held-out utterances); compare the
ratio of the two medians inside one run.
"""

from __future__ import annotations

import pytest

cs = pytest.importorskip("codecspec")

from codecspec.decode import DepthDecoder  # noqa: E402
from codecspec.families.reference.model import default_model_dir  # noqa: E402
from codecspec.pipeline.depth_bench import load_frames  # noqa: E402

GROUP = "depth frame, reference model"
FRAMES = 32


@pytest.fixture(scope="module")
def reference():
    model = default_model_dir()
    if not (model / "depth.onnx").is_file():
        pytest.skip("no shipped reference model")
    dec = DepthDecoder.from_dir(model, provider="cpu", threads=2)
    h, c0 = load_frames(model)
    return dec, h[:FRAMES], c0[:FRAMES]


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_reference_frames(benchmark, reference, mode):
    dec, h, c0 = reference
    benchmark.group = GROUP
    g = cs.Generator(0).fork(1 if mode == "ar" else 2)
    dec.stats.reset()
    benchmark(dec.decode_frames, h, c0, g, mode)
    benchmark.extra_info["calls_per_frame"] = dec.stats.calls_per_frame
    benchmark.extra_info["tokens_per_call"] = dec.stats.tokens_per_call


@pytest.fixture(scope="module")
def head_banks():
    """The reference depth decoder's head shape, raw float32 vs rounded to bf16-exact values."""
    import numpy as np

    from codecspec.graphs.storage import round_bf16_exact

    w = np.random.default_rng(0).standard_normal((15, 1024, 256)).astype(np.float32) * 0.05
    z = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    return {"f32": cs.HeadBank(w), "bf16_exact": cs.HeadBank(round_bf16_exact(w))}, z


@pytest.mark.parametrize("kind", ["f32", "bf16_exact"])
def test_target_head_row(benchmark, head_banks, kind):
    banks, z = head_banks
    bank = banks[kind]
    assert bank.targets_bf16 == (kind == "bf16_exact")
    benchmark.group = "target head row, 1024 x 256"
    heads = iter(range(10**9))

    # cycle the 15 heads, as a frame does, so no row is served from L1 twice in a row
    benchmark(lambda: bank.logits(next(heads) % 15, z))
