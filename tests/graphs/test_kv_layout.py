"""The K/V layouts a depth graph can take (runtime.kv) and the bfloat16 input table.

attention="placed" graphs read and write K/V joined and position-major (past_kv / new_kv);
the runtime keeps its cache in whichever layout the graph has, and a decode gives the same
codes and cache rows either way.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from tiny_models import TINY

import codecspec as cs
from codecspec.calibrate.data import drift_weights
from codecspec.decode import DepthDecoder
from codecspec.graphs import DepthDecoderWeights, build_depth_graph, graph_io_names
from codecspec.runtime.depth_graph import DepthGraph
from codecspec.runtime.kv import KVCache, join_kv, split_kv

CFG = TINY
TREE = cs.DraftTree.from_paths([(0,), (1,), (0, 0)])


@pytest.fixture(scope="module")
def weights():
    return drift_weights(CFG, seed=5, sharpness=30.0, drift=0.6)


def _graph(weights, attention: str, variant: str = "cpu") -> DepthGraph:
    g = build_depth_graph(CFG, weights, heads="grouped", variant=variant, attention=attention)
    return DepthGraph(g.SerializeToString(), provider="cpu", threads=1)


def test_join_and_split_are_inverse_and_split_gives_views():
    rng = np.random.default_rng(0)
    keys, values = rng.standard_normal((2, 3, 2, 5, 4)).astype(np.float32)
    kv = join_kv(keys, values)
    assert kv.shape == (3, 5, 2 * 2 * 4) and kv.flags.c_contiguous
    np.testing.assert_array_equal(kv[1, 3, :4], keys[1, 0, 3])  # position 3: head 0's key,
    np.testing.assert_array_equal(kv[1, 3, 8:12], values[1, 0, 3])  # then the values
    k, v = split_kv(kv, 2)
    np.testing.assert_array_equal(k, keys)
    np.testing.assert_array_equal(v, values)
    k[0, 1, 2] = 7.0  # a view: writes reach the joined array
    assert np.all(kv[0, 2, 4:8] == 7.0)


def test_placed_graphs_name_the_joined_io(weights):
    ins, outs = graph_io_names("grouped", "placed")
    assert "past_kv" in ins and "past_keys" not in ins and "past_values" not in ins
    assert outs[-1] == "new_kv" and "new_keys" not in outs
    assert graph_io_names("grouped") == graph_io_names("grouped", "call")
    placed, default = _graph(weights, "placed"), _graph(weights, "call")
    assert placed.kv_joined and not default.kv_joined
    assert [i.name for i in placed.session.get_inputs()] == list(ins)
    with pytest.raises(ValueError, match="^attention must be one of"):
        graph_io_names("grouped", "sorted")


@pytest.mark.parametrize("variant", ["cpu", "plain"])
def test_both_layouts_decode_the_same_codes_and_rows(weights, variant):
    """Greedy AR and speculative frames of a placed (joined) graph against the default
    (split) graph of the same weights: the same codes, and the same cache rows to float
    rounding (another attention's summation order)."""
    rng = np.random.default_rng(1)
    hiddens = rng.standard_normal((4, CFG.hidden_size)).astype(np.float32)
    greedy = cs.SamplingParams(0.0, 0, 1.0)
    decs = {
        a: DepthDecoder(_graph(weights, a, variant), tree=TREE, params=greedy, threads=1)
        for a in ("call", "placed")
    }
    assert decs["placed"].cache.joined and not decs["call"].cache.joined
    for i, h in enumerate(hiddens):
        for mode in ("ar", "spec"):
            codes = {a: d.decode_frame(h, i, cs.Generator(i), mode) for a, d in decs.items()}
            np.testing.assert_array_equal(codes["placed"], codes["call"])
            n = decs["call"].cache.length
            assert decs["placed"].cache.length == n
            for part in ("keys", "values"):
                got = getattr(decs["placed"].cache, part)[:, :, :n]
                want = getattr(decs["call"].cache, part)[:, :, :n]
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_unbound_calls_convert_the_layout(weights):
    """DepthGraph.__call__ takes and returns split K/V whatever the graph's layout."""
    rng = np.random.default_rng(2)
    P, Q = 3, 2
    L, kvh, hd = CFG.num_layers, CFG.num_kv_heads, CFG.head_dim
    keys, values = rng.standard_normal((2, L, kvh, P, hd)).astype(np.float32)
    feeds = (
        np.array([5, 9], np.int64),
        np.zeros((Q, CFG.input_width), np.float32),
        np.array([3, 4], np.int64),
        np.triu(np.full((Q, P + Q), -np.inf, np.float32), P + 1),
        keys,
        values,
        np.array([1, 2], np.int64),
        np.zeros((CFG.num_draft_offsets, CFG.hidden_size), np.float32),
    )
    out = {a: _graph(weights, a)(*feeds) for a in ("call", "placed")}
    for got, want in zip(out["placed"], out["call"]):
        assert got.shape == want.shape and got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_a_bound_call_refuses_the_other_layout(weights):
    placed, default = _graph(weights, "placed"), _graph(weights, "call")
    split = KVCache.for_graph(default, 4)
    joined = KVCache.for_graph(placed, 4)
    with pytest.raises(ValueError, match="^past_keys: this graph reads K/V joined"):
        placed.bind(1, *split.past, 0)
    with pytest.raises(ValueError, match="^past_keys"):
        default.bind(1, joined.kv, joined.kv, 0)
    with pytest.raises(ValueError, match="^new_keys: a joined cache"):
        joined.commit(np.zeros(1), np.zeros(1), np.zeros(1, np.int32))


def test_a_joined_cache_commits_what_a_split_one_does(weights):
    rng = np.random.default_rng(3)
    placed = _graph(weights, "placed")
    call = placed.bind(3, *KVCache.for_graph(placed, 5).past, 0)
    call.new_kv[...] = rng.standard_normal(call.new_kv.shape)
    joined = KVCache.for_graph(placed, 5)
    split = KVCache(CFG.num_layers, CFG.num_kv_heads, CFG.head_dim, 5)
    for nodes in ([0, 2], [1]):
        rows = np.array(nodes, np.int32)
        joined.commit_call(call, rows)
        new_keys, new_values = (np.ascontiguousarray(a) for a in (call.new_keys, call.new_values))
        split.commit(new_keys, new_values, rows)
    assert joined.length == split.length == 3
    np.testing.assert_array_equal(joined.keys, split.keys)
    np.testing.assert_array_equal(joined.values, split.values)


def _as_float_table(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph with its bfloat16 input table widened to float32 and the Cast after
    the Gather made an Identity: the plain float32 lookup of the same values."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == TensorProto.BFLOAT16:
            bits = np.frombuffer(t.raw_data, "<u2").astype(np.uint32) << 16
            table = bits.view(np.float32).reshape(tuple(t.dims))
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(table, t.name))
    for n in m.graph.node:
        if n.op_type == "Cast" and n.input[0].startswith("row_embeds_bf16"):
            n.op_type = "Identity"
            del n.attribute[:]
    return m


@pytest.mark.parametrize("variant", ["cpu", "plain"])
def test_a_bfloat16_table_is_stored_as_such_and_looks_up_the_same_floats(weights, variant):
    bf16 = DepthDecoderWeights(dict(weights))
    for name in ("c0_embedding", "code_embeddings"):  # a bf16 checkpoint's tables
        bits = np.asarray(bf16[name], np.float32).view(np.uint32) & 0xFFFF0000
        bf16[name] = bits.view(np.float32)
    model = build_depth_graph(CFG, bf16, heads="grouped", variant=variant)
    types = {t.name: t.data_type for t in model.graph.initializer}
    assert [n for n, t in types.items() if t == TensorProto.BFLOAT16] == ["input_table"]
    fp32 = build_depth_graph(CFG, weights, heads="grouped", variant=variant)
    assert TensorProto.BFLOAT16 not in {t.data_type for t in fp32.graph.initializer}
    greedy = cs.SamplingParams(0.0, 0, 1.0)
    decs = [
        DepthDecoder(m.SerializeToString(), tree=TREE, params=greedy, threads=1)
        for m in (model, _as_float_table(model))
    ]
    rng = np.random.default_rng(4)
    for i, h in enumerate(rng.standard_normal((3, CFG.hidden_size)).astype(np.float32)):
        codes = [d.decode_frame(h, i, cs.Generator(i), "ar") for d in decs]
        np.testing.assert_array_equal(codes[0], codes[1])
        np.testing.assert_array_equal(decs[0].cache.keys, decs[1].cache.keys)
