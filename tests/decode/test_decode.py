"""DepthDecoder end to end on small random-weight graphs: losslessness, KV commit, errors."""

from __future__ import annotations

import numpy as np
import pytest
from broken_variants import OffsetShiftedVerifier

import codecspec as cs
from codecspec.calibrate.data import drift_weights
from codecspec.decode import DepthDecoder
from codecspec.fidelity import per_position_pvalues
from codecspec.graphs import (
    DepthDecoderConfig,
    build_depth_graph,
    embedding_row,
    reference_run,
    zero_row,
)
from codecspec.runtime import ProviderUnavailable

CFG = DepthDecoderConfig(
    num_layers=2,
    hidden_size=32,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    intermediate_size=64,
    num_codebooks=6,
    codebook_size=64,
    c0_vocab_size=40,
    num_draft_offsets=3,
    max_positions=16,
)
TREE = cs.DraftTree.from_paths([(r,) for r in range(8)] + [(0, 0), (0, 1), (1, 0), (0, 0, 0)])
SAMPLED = cs.SamplingParams(0.9, 50, 1.0)  # the Qwen3-TTS default


@pytest.fixture(scope="module")
def weights():
    # Codes that drift smoothly across levels: drafts are accepted often, so the speculative
    # path (acceptances, residual corrections, bonus tokens) is exercised, not just rejections.
    return drift_weights(CFG, seed=3, sharpness=30.0, drift=0.6)


@pytest.fixture(scope="module", params=["hidden", "graph", "grouped"])
def decoder(request, weights):
    model = build_depth_graph(CFG, weights, heads=request.param)
    return DepthDecoder(
        model, tree=TREE, params=SAMPLED, provider="cpu", threads=1, heads=weights["heads"]
    )


def frames(n, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((n, CFG.input_width)).astype(np.float32),
        rng.integers(0, CFG.c0_vocab_size, n),
    )


def test_greedy_speculation_reproduces_autoregressive_codes(decoder):
    decoder.params = cs.SamplingParams(0.0)
    h, c0 = frames(40)
    ar = decoder.decode_frames(h, c0, cs.Generator(0), "ar")
    decoder.stats.reset()
    spec = decoder.decode_frames(h, c0, cs.Generator(0), "spec")
    decoder.params = SAMPLED
    np.testing.assert_array_equal(ar, spec)
    assert decoder.stats.calls_per_frame < CFG.num_codebooks - 1


def test_committed_cache_equals_a_teacher_forced_pass(decoder, weights):
    """After speculative rounds the host cache holds exactly the rows a single causal pass
    over the emitted codes produces (accepted paths moved into place, rejected rows gone)."""
    h, c0 = frames(3, seed=1)
    for i in range(3):
        codes = decoder.decode_frame(h[i], c0[i], cs.Generator(5).fork(i), "spec")
        G = CFG.num_codebooks
        ids = np.concatenate(
            ([zero_row(CFG)], [embedding_row(CFG, lv, int(codes[lv])) for lv in range(G - 1)])
        )
        embeds = np.zeros((G, CFG.input_width), np.float32)
        embeds[0] = h[i]
        feeds = {
            "input_ids": ids.astype(np.int64),
            "input_embeds": embeds,
            "position_ids": np.arange(G, dtype=np.int64),
            "attention_bias": np.triu(np.full((G, G), -np.inf, np.float32), 1),
            "past_keys": np.zeros((CFG.num_layers, CFG.num_kv_heads, 0, CFG.head_dim), np.float32),
            "past_values": np.zeros(
                (CFG.num_layers, CFG.num_kv_heads, 0, CFG.head_dim), np.float32
            ),
        }
        ref = reference_run(CFG, weights, feeds, heads="hidden")
        assert decoder.cache.length >= G
        np.testing.assert_allclose(decoder.cache.keys[:, :, :G], ref["new_keys"], atol=1e-4)
        np.testing.assert_allclose(decoder.cache.values[:, :, :G], ref["new_values"], atol=1e-4)


def fidelity(dec, n, seed):
    h, c0 = frames(n, seed)
    ar = dec.decode_frames(h, c0, cs.Generator(seed, stream=1), "ar")
    dec.stats.reset()
    spec = dec.decode_frames(h, c0, cs.Generator(seed, stream=2), "spec")
    return per_position_pvalues(ar[:, 1:], spec[:, 1:], CFG.codebook_size), dec.stats


@pytest.mark.slow
def test_speculative_histograms_match_autoregressive(weights):
    model = build_depth_graph(CFG, weights, heads="hidden")
    offsets = np.random.default_rng(0).standard_normal((3, CFG.hidden_size)).astype(np.float32)
    good = DepthDecoder(
        model,
        tree=TREE,
        params=SAMPLED,
        offsets=offsets,
        provider="cpu",
        threads=1,
        heads=weights["heads"],
    )
    p, stats = fidelity(good, 20_000, seed=11)
    assert stats.accepted_per_round > 0.8, "the speculative path must actually be exercised"
    assert p.min() > 1e-4, f"per-position p-values {p}"

    broken = OffsetShiftedVerifier(
        model,
        tree=TREE,
        params=SAMPLED,
        offsets=offsets * 4,
        provider="cpu",
        threads=1,
        heads=weights["heads"],
    )
    p_bad, _ = fidelity(broken, 5_000, seed=12)
    assert p_bad.min() < 1e-4, "the broken verifier must be caught"


def test_provider_and_model_errors(tmp_path, weights):
    model = build_depth_graph(CFG, weights, heads="hidden")
    missing = [p for p in ("cuda", "coreml") if p not in cs_providers()]
    for p in missing:
        with pytest.raises(ProviderUnavailable, match=p):
            DepthDecoder(model, provider=p, heads=weights["heads"])
    with pytest.raises(ValueError, match="provider"):
        DepthDecoder(model, provider="tpu", heads=weights["heads"])
    with pytest.raises(FileNotFoundError, match="model"):
        DepthDecoder(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(ValueError, match="model"):
        DepthDecoder(bad)
    with pytest.raises(ValueError, match="heads"):
        DepthDecoder(model, provider="cpu")
    dec = DepthDecoder(model, provider="cpu", heads=weights["heads"])
    with pytest.raises(ValueError, match="c0"):
        dec.decode_frame(np.zeros(CFG.input_width), CFG.c0_vocab_size, cs.Generator(0))
    with pytest.raises(ValueError, match="hidden"):
        dec.decode_frame(np.zeros(3), 0, cs.Generator(0))
    with pytest.raises(ValueError, match="tree"):
        dec.set_tree(cs.DraftTree.chain(4))
    with pytest.raises(ValueError, match="offsets"):
        DepthDecoder(model, provider="cpu", heads=weights["heads"], offsets=np.zeros((2, 2)))


def cs_providers():
    from codecspec.runtime import available

    return available()
