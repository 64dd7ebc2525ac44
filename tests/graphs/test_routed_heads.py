"""RouteRows / MergeRows: a grouped-heads graph with attention="placed_op" routes each
(node, offset) pair to its LM head with two codecspec operators instead of ~5 standard nodes
per head. The routing must be invisible: every output the same bits as the standard-ops
routing of the same graph, for any rows, draft offsets and head ids, in every precision; a
head id outside the heads is an error, not zeros or a read out of bounds."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import TINY

from codecspec.calibrate.data import drift_weights
from codecspec.graphs import build_depth_graph, builder
from codecspec.graphs.quantize import quantize_weights
from codecspec.runtime import custom_ops
from codecspec.runtime.session import open_session

pytestmark = [
    pytest.mark.skipif(not custom_ops.available(), reason="no custom-op entry point"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]
pytest.importorskip("onnx_ir", reason="onnxruntime's MatMulNBits quantiser needs onnx_ir")

CFG = TINY
OUTS = ["logits", "draft_logits", "hidden", "new_kv"]


@pytest.fixture(scope="module")
def weights():
    return drift_weights(CFG, seed=5, sharpness=30.0, drift=0.6)


def _model(weights, precision: str, routing):
    """The placed_op graph with `routing` building its heads part."""
    saved = builder._routed_heads_part
    builder._routed_heads_part = routing
    try:
        g = build_depth_graph(CFG, weights, heads="grouped", attention="placed_op")
    finally:
        builder._routed_heads_part = saved
    g = g if precision == "fp32" else quantize_weights(g, precision)
    return open_session(g.SerializeToString(), "cpu", 1, custom_ops=True)


def _feeds(rng, q: int, drafts: int, heads):
    H, past = CFG.hidden_size, 3
    return {
        "input_ids": rng.integers(0, CFG.codebook_size, q).astype(np.int64),
        "input_embeds": rng.standard_normal((q, H)).astype(np.float32),
        "position_ids": (past + np.arange(q)).astype(np.int64),
        "attention_bias": np.zeros((q, past + q), np.float32),
        "past_kv": rng.standard_normal(
            (CFG.num_layers, past, 2 * CFG.num_kv_heads * CFG.head_dim)
        ).astype(np.float32),
        "head_ids": np.asarray(heads, np.int64),
        "draft_offsets": rng.standard_normal((drafts, H)).astype(np.float32),
    }


def _run(sess, feeds):
    names = {i.name for i in sess.get_inputs()}
    return sess.run(OUTS, {k: v for k, v in feeds.items() if k in names})


@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_routed_heads_are_the_standard_routing_bit_for_bit(weights, precision):
    routed = _model(weights, precision, builder._routed_heads_part)
    standard = _model(weights, precision, builder._grouped_heads_part)
    last = CFG.num_lm_heads - 1
    rng = np.random.default_rng(0)
    cases = [
        (1, 0, [0]),
        (1, 0, [last]),
        (1, 2, [last - 1]),
        (3, 1, [0, 4, last]),
        (5, 3, [2] * 5),
    ]
    for q, drafts, heads in cases:
        feeds = _feeds(rng, q, drafts, heads)
        for name, a, b in zip(OUTS, _run(routed, feeds), _run(standard, feeds)):
            assert a.shape == b.shape, (name, q, drafts)
            assert np.array_equal(a, b), (name, q, drafts, heads, float(np.abs(a - b).max()))


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_padded_calls_keep_each_rows_bits_and_padding_rows_score_nothing(weights, precision):
    """row_multiple 2 (graphs.builder.set_row_multiple): each head's rows rounded up to an
    even count inside RouteRows; a padding row (head -1) has zero logits."""
    from codecspec.graphs.builder import set_row_multiple

    g = build_depth_graph(CFG, weights, heads="grouped", attention="placed_op")
    g = g if precision == "fp32" else quantize_weights(g, precision)
    plain = open_session(g.SerializeToString(), "cpu", 1, custom_ops=True)
    paired = open_session(set_row_multiple(g, 2).SerializeToString(), "cpu", 1, custom_ops=True)
    feeds = _feeds(np.random.default_rng(3), 4, 2, [1, 5, -1, 2])
    a, b = _run(plain, feeds), _run(paired, feeds)
    assert np.all(b[0][2] == 0) and np.all(b[1][2] == 0)
    if precision == "fp32":  # float MatMul rows do not depend on the call: the same bits
        for x, y in zip(a, b):
            assert np.array_equal(x, y)
    else:  # the kernels may differ for a lone row: the same function to rounding
        np.testing.assert_allclose(b[0], a[0], rtol=0, atol=1e-3 * np.abs(a[0]).max())


def test_a_routing_that_picks_other_heads_is_caught(weights):
    """The comparison above can fail: heads ids shifted by one give other logits."""
    routed = _model(weights, "fp32", builder._routed_heads_part)
    feeds = _feeds(np.random.default_rng(1), 2, 1, [1, 2])
    shifted = dict(feeds, head_ids=feeds["head_ids"] - 1)
    a, b = _run(routed, feeds), _run(routed, shifted)
    assert not np.array_equal(a[0], b[0])


def test_the_routed_graph_is_smaller(weights):
    routed = build_depth_graph(CFG, weights, heads="grouped", attention="placed_op")
    kinds = [n.op_type for n in routed.graph.node]
    assert kinds.count("RouteRows") == kinds.count("MergeRows") == 1
    assert "NonZero" not in kinds and "ScatterND" not in kinds
    assert "RouteRows" not in {
        n.op_type
        for n in build_depth_graph(CFG, weights, heads="grouped", attention="placed").graph.node
    }


@pytest.mark.parametrize("bad", [-2, CFG.num_lm_heads, 2**40])
def test_a_head_id_outside_the_heads_is_an_error_naming_it(weights, bad):
    routed = _model(weights, "fp32", builder._routed_heads_part)
    feeds = _feeds(np.random.default_rng(2), 2, 1, [0, bad])
    with pytest.raises(Exception, match="head_ids"):
        _run(routed, feeds)


def _frames(n: int):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, CFG.hidden_size)).astype(np.float32), rng.integers(0, 40, n)


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_this_devices_layout_keeps_the_ar_law_bit_for_bit(weights, precision):
    """The code predictor's layout on this CPU (row_probe.row_exact_layout: block, and calls
    padded to even rows where pairs and lone rows differ): every tree node's row is its AR
    step's row, bit for bit, and greedy speculation gives the AR codes. Where the layout pads,
    the same weights unpadded must fail the probe (the padding is what makes it exact)."""
    import codecspec as cs
    from codecspec.decode import DepthDecoder
    from codecspec.families.qwen3_tts.row_exact import probe_tree_rows
    from codecspec.graphs.builder import set_row_multiple
    from codecspec.graphs.row_probe import row_exact_layout

    block, multiple = row_exact_layout(precision, threads=1)
    g = build_depth_graph(CFG, weights, heads="grouped", attention="placed_op")
    g = quantize_weights(g, precision, block)
    tree = cs.DraftTree.from_paths([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)])
    padded = set_row_multiple(g, multiple).SerializeToString()
    dec = DepthDecoder(padded, tree=tree, params=cs.SamplingParams(0.0, 0, 1.0), threads=1)
    rows = probe_tree_rows(dec, *_frames(6))
    assert rows["bitwise"] and rows["exact"], rows
    hiddens, c0s = _frames(8)
    for h, c0 in zip(hiddens, c0s):
        ar = dec.decode_frame(h, int(c0), cs.Generator(0), "ar")
        np.testing.assert_array_equal(dec.decode_frame(h, int(c0), cs.Generator(0), "spec"), ar)
    if multiple > 1:
        lone = DepthDecoder(set_row_multiple(g, 1).SerializeToString(), tree=tree, threads=1)
        assert not probe_tree_rows(lone, *_frames(6))["bitwise"]


def test_a_padded_graph_decodes_as_the_unpadded_one(weights):
    """The runtime's padding (BoundCall and DepthGraph.__call__ for row_multiple 2) on any
    CPU: float32 rows do not depend on their call, so the padded graph's codes and logits are
    the unpadded graph's, in AR and speculative frames, and the pad rows never reach the host
    (nor its K/V cache)."""
    import copy

    import codecspec as cs
    from codecspec.decode import DepthDecoder
    from codecspec.graphs.builder import set_row_multiple
    from codecspec.runtime.depth_graph import DepthGraph

    g = build_depth_graph(CFG, weights, heads="grouped", attention="placed_op")
    padded = set_row_multiple(copy.deepcopy(g), 2)
    tree = cs.DraftTree.from_paths([(0,), (1,), (0, 0)])  # 4 nodes, and AR calls of 1 row
    kw = dict(tree=tree, params=cs.SamplingParams(0.0, 0, 1.0), threads=1)
    plain, pad = (
        DepthDecoder(g.SerializeToString(), **kw),
        DepthDecoder(padded.SerializeToString(), **kw),
    )
    assert pad.graph.row_multiple == 2 and plain.graph.row_multiple == 1
    assert pad._step_call.logits.shape == plain._step_call.logits.shape
    hiddens, c0s = _frames(6)
    for h, c0 in zip(hiddens, c0s):
        for mode in ("ar", "spec"):
            a = plain.decode_frame(h, int(c0), cs.Generator(0), mode)
            b = pad.decode_frame(h, int(c0), cs.Generator(0), mode)
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(
            pad._step_call.logits, plain._step_call.logits, rtol=0, atol=1e-5
        )
    # the unbound path: a call of 3 rows runs 4, the host sees 3
    feeds = _feeds(np.random.default_rng(4), 3, 1, [0, 2, 5])
    c = CFG
    kv = feeds["past_kv"].reshape(c.num_layers, -1, 2, c.num_kv_heads, c.head_dim)
    keys = np.ascontiguousarray(kv[:, :, 0].transpose(0, 2, 1, 3))
    values = np.ascontiguousarray(kv[:, :, 1].transpose(0, 2, 1, 3))
    args = [feeds[k] for k in ("input_ids", "input_embeds", "position_ids", "attention_bias")]
    extra = (feeds["head_ids"], feeds["draft_offsets"])
    outs_plain = DepthGraph(g.SerializeToString(), "cpu", 1)(*args, keys, values, *extra)
    outs_pad = DepthGraph(padded.SerializeToString(), "cpu", 1)(*args, keys, values, *extra)
    for a, b in zip(outs_plain, outs_pad):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
