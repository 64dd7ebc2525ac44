"""attention="in_place" graphs (the Qwen3-TTS talker's): each layer's cache is bound as both
the past and the present, GroupQueryAttention writes a call's keys at their positions and
attends over the filled rows only. The same hidden states and cache rows as the default graph
(to float rounding), the rows past the call untouched, and a result that does not depend on
the cache's capacity (the default graph attends over all of it, masked)."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import TINY

from codecspec.calibrate.data import drift_weights
from codecspec.graphs import build_depth_graph, graph_io_names
from codecspec.runtime.depth_graph import DepthGraph
from codecspec.runtime.kv import KVCache

CFG = TINY


@pytest.fixture(scope="module")
def weights():
    return drift_weights(CFG, seed=7, sharpness=30.0, drift=0.6)


@pytest.fixture(scope="module")
def graphs(weights):
    def load(attention):
        g = build_depth_graph(CFG, weights, heads="hidden", attention=attention)
        return DepthGraph(g.SerializeToString(), provider="cpu", threads=1)

    return {a: load(a) for a in ("call", "in_place")}


def _inputs(rng, q):
    embeds = rng.standard_normal((q, CFG.input_width)).astype(np.float32)
    return np.zeros(q, np.int64), embeds


def _run_in_place(graph, cache, ids, embeds):
    """One bound call after the cache's rows; returns its hidden states."""
    q, start = len(ids), cache.length
    call = graph.bind(q, cache.keys, cache.values)
    call.ids[:] = ids
    call.embeds[...] = embeds
    call.pos[:] = np.arange(start, start + q)
    call.run()
    cache.length += q
    return call.hidden.copy()


def _run_call(graph, cache, ids, embeds):
    """The default graph over the cache's valid rows; commits the new rows."""
    q, n = len(ids), cache.length
    bias = np.zeros((q, n + q), np.float32)
    bias[:, n:] = np.triu(np.full((q, q), -np.inf, np.float32), k=1)
    hidden, nk, nv = graph(
        ids, embeds, np.arange(n, n + q), bias, cache.keys[:, :, :n], cache.values[:, :, :n]
    )
    cache.commit(nk, nv, np.arange(q, dtype=np.int32))
    return hidden


def test_in_place_io_names_and_errors(graphs):
    ins, outs = graph_io_names("hidden", "in_place", CFG.num_layers)
    assert "attention_bias" not in ins and "past_keys" not in ins
    assert "past_key.0" in ins and f"present_value.{CFG.num_layers - 1}" in outs
    assert outs[0] == "hidden" and "new_keys" not in outs
    assert [i.name for i in graphs["in_place"].session.get_inputs()] == list(ins)
    assert graphs["in_place"].kv_in_place and not graphs["call"].kv_in_place
    with pytest.raises(ValueError, match="^num_layers:"):
        graph_io_names("hidden", "in_place")
    with pytest.raises(ValueError, match="^attention:"):
        build_depth_graph(
            CFG, drift_weights(CFG, seed=1), heads="hidden", variant="plain", attention="in_place"
        )


def test_prefill_then_steps_match_the_default_graph(graphs):
    rng = np.random.default_rng(0)
    L, kvh, hd = CFG.num_layers, CFG.num_kv_heads, CFG.head_dim
    a, b = KVCache(L, kvh, hd, 12), KVCache(L, kvh, hd, 12)
    for q in (4, 1, 1, 2, 1):
        ids, embeds = _inputs(rng, q)
        got = _run_in_place(graphs["in_place"], a, ids, embeds)
        want = _run_call(graphs["call"], b, ids, embeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        n = a.length
        np.testing.assert_allclose(a.keys[:, :, :n], b.keys[:, :, :n], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(a.values[:, :, :n], b.values[:, :, :n], rtol=1e-5, atol=1e-5)
        assert not a.keys[:, :, n:].any() and not a.values[:, :, n:].any()  # nothing past it


def test_capacity_does_not_change_a_bit(graphs):
    """The same calls into caches of 10 and 40 rows: bit-identical hidden states. (The
    default graph attends over the whole capacity, masked; on an AVX2 EPYC its hidden states
    moved by ~2e-7 between capacities 7 and 16 here, which quantised weights amplify: the
    0.6B int4 talker's by 0.03 between 80 and 560.)"""
    rng = np.random.default_rng(1)
    L, kvh, hd = CFG.num_layers, CFG.num_kv_heads, CFG.head_dim
    small, large = KVCache(L, kvh, hd, 10), KVCache(L, kvh, hd, 40)
    for q in (3, 1, 1, 1):
        ids, embeds = _inputs(rng, q)
        h_small = _run_in_place(graphs["in_place"], small, ids, embeds)
        h_large = _run_in_place(graphs["in_place"], large, ids, embeds)
        np.testing.assert_array_equal(h_small, h_large)


def test_the_convenience_call_keeps_the_callers_arrays(graphs):
    rng = np.random.default_rng(2)
    L, kvh, hd = CFG.num_layers, CFG.num_kv_heads, CFG.head_dim
    cache = KVCache(L, kvh, hd, 8)
    _run_in_place(graphs["in_place"], cache, *_inputs(rng, 3))
    past_k, past_v = cache.keys[:, :, :3].copy(), cache.values[:, :, :3].copy()
    ids, embeds = _inputs(rng, 2)
    bias = np.zeros((2, 5), np.float32)
    hidden, nk, nv = graphs["in_place"](ids, embeds, np.arange(3, 5), bias, past_k, past_v)
    np.testing.assert_array_equal(past_k, cache.keys[:, :, :3])  # not written
    assert hidden.shape == (2, CFG.hidden_size) and nk.shape == (L, kvh, 2, hd)
    with pytest.raises(ValueError, match="^position_ids:"):
        graphs["in_place"](ids, embeds, np.arange(4, 6), bias, past_k, past_v)
