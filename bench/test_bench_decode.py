"""End-to-end depth-loop benchmarks (issue: depth-loop speculative decoding on ONNX Runtime).

    pytest bench/test_bench_decode.py --benchmark-enable --benchmark-group-by=group
    python bench/decode_report.py        # the same figures as one table + JSON

What is measured, all inside one run so that the machine's noise cancels in the ratios:
* ms per frame and calls per frame, autoregressive vs speculative, on a small (5 x 256)
  synthetic depth model calibrated on the spot;
* host-side time per speculative round (everything but the ONNX Runtime call), measured by
  running the same frames with the graph call stubbed out, against the verify call alone;
* verify latency vs query length for a Qwen3-TTS-size depth graph (5 x 1024, 16/8 heads,
  intermediate 3072, 2048 codes) on this CPU (`slow`: building it takes ~30 s).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

cs = pytest.importorskip("codecspec")

from codecspec.calibrate.data import drift_weights  # noqa: E402
from codecspec.calibrate.device import calibrate  # noqa: E402
from codecspec.decode import DepthDecoder  # noqa: E402
from codecspec.graphs import build_depth_graph, qwen3_tts_0_6b, save_model, small_depth  # noqa: E402
from codecspec.graphs.weights import DepthDecoderWeights  # noqa: E402
from codecspec.runtime.depth_graph import BoundCall, DepthGraph, heads_sidecar  # noqa: E402

G_FRAME = "depth frame, small model"
FRAMES = 24
THREADS = 2


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """(decoder, hiddens, c0s): synthetic small model with a calibrated tree and offsets."""
    d = tmp_path_factory.mktemp("small")
    c = small_depth()
    w = drift_weights(c, seed=0, sharpness=30.0, drift=0.6)
    path = d / "depth.onnx"
    save_model(build_depth_graph(c, w, heads="hidden"), path)
    np.save(heads_sidecar(path), w["heads"])
    res = calibrate(
        path,
        d / "calib",
        frames=128,
        budgets=(2, 4, 8),
        threads=THREADS,
        plots=False,
        progress=False,
        end_to_end_frames=4,
        overhead_frames=4,
    )
    dec = DepthDecoder(path, tree=res.tree, offsets=res.offsets, provider="cpu", threads=THREADS)
    rng = np.random.default_rng(1)
    h = rng.standard_normal((FRAMES, c.input_width)).astype(np.float32)
    return dec, h, rng.integers(0, c.c0_vocab_size, FRAMES)


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_depth_frame(benchmark, small, mode):
    dec, h, c0 = small
    benchmark.group = G_FRAME
    dec.stats.reset()
    g = cs.Generator(0)
    benchmark.pedantic(dec.decode_frames, args=(h, c0, g, mode), rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(
        mode=mode,
        frames=FRAMES,
        calls_per_frame=dec.stats.calls_per_frame,
        tokens_per_call=dec.stats.tokens_per_call,
        tree_nodes=dec.tree.num_nodes,
    )
    assert dec.stats.calls_per_frame <= dec.G - 1


def host_round_share(dec, h, c0, repeats=3):
    """(host µs per round, verify-call µs, ratio): the decoder's own work per speculative
    round, measured by stubbing the graph call, against the bound tree call alone."""
    g = cs.Generator(0)
    real_run = BoundCall.run
    host = []
    try:
        BoundCall.run = lambda self: None
        for _ in range(repeats):
            dec.stats.reset()
            t0 = time.perf_counter()
            dec.decode_frames(h, c0, g, "spec")
            host.append((time.perf_counter() - t0) / dec.stats.calls)
    finally:
        BoundCall.run = real_run
    tc = dec._tree_call
    call = []
    for _ in range(repeats * 20):
        t0 = time.perf_counter()
        tc.run()
        call.append(time.perf_counter() - t0)
    h_us, c_us = np.median(host) * 1e6, np.median(call) * 1e6
    return h_us, c_us, h_us / c_us


def test_host_share_of_a_round(benchmark, small):
    dec, h, c0 = small
    benchmark.group = "host time per speculative round"
    h_us, c_us, ratio = benchmark.pedantic(host_round_share, args=(dec, h, c0), rounds=1)
    benchmark.extra_info.update(host_us=h_us, verify_call_us=c_us, ratio=ratio, target=0.05)
    assert h_us > 0 and c_us > 0


QS = (1, 2, 4, 8, 12, 16, 24, 32)


@pytest.fixture(scope="module")
def qwen_graph():
    c = qwen3_tts_0_6b()
    w = DepthDecoderWeights.random(c, seed=0)
    return DepthGraph(build_depth_graph(c, w, heads="hidden"), provider="cpu", threads=THREADS)


@pytest.mark.slow
@pytest.mark.parametrize("q", QS)
def test_verify_latency_qwen_size(benchmark, qwen_graph, q):
    benchmark.group = "verify latency, Qwen3-TTS-size depth graph"
    c = qwen_graph.config
    cap = 17
    keys = np.zeros((c.num_layers, c.num_kv_heads, cap, c.head_dim), np.float32)
    call = qwen_graph.bind(q, keys, keys.copy())
    call.bias[:, :8] = 0.0  # 8 valid past rows
    call.bias[:, 8:cap] = -np.inf
    call.bias[:, cap:] = np.triu(np.full((q, q), -np.inf, np.float32), 1)
    call.pos[:] = 8 + np.arange(q)
    benchmark.pedantic(call.run, rounds=15, warmup_rounds=2)
    benchmark.extra_info.update(q=q)
