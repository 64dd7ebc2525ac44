"""attention="placed": a verify call scores every tree node with the AR call's arithmetic, bit
for bit, so speculation over quantised weights keeps the AR law (MatMulNBits turns any
difference in a row's input, however small, into whole activation steps).

The fused attention ("call") sums a one-row and a several-row call in different orders; the
placed graph gathers each row's keys into one slot per position over one width for every
call. Checked here on both builder variants, every precision and a branching tree (siblings
at one depth must each see only their own ancestors), against the AR rows of the same
decoder, and against the default attention's numbers (the same function)."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import TINY

import codecspec as cs
from codecspec.calibrate.data import drift_weights
from codecspec.decode import DepthDecoder
from codecspec.families.qwen3_tts.row_exact import probe_tree_rows
from codecspec.graphs import build_depth_graph, read_graph_metadata
from codecspec.graphs.quantize import quantize_weights
from codecspec.graphs.row_probe import matmul_model, probe_rows, together_and_alone
from codecspec.runtime.session import open_session

pytest.importorskip("onnx_ir", reason="onnxruntime's MatMulNBits quantiser needs onnx_ir")

CFG = TINY
BRANCHING = cs.DraftTree.from_paths([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)])


@pytest.fixture(scope="module")
def weights():
    return drift_weights(CFG, seed=3, sharpness=30.0, drift=0.6)


def _graph(weights, variant: str, attention: str, precision: str):
    g = build_depth_graph(CFG, weights, heads="grouped", variant=variant, attention=attention)
    return g if precision == "fp32" else quantize_weights(g, precision)


def _kernels_row_independent(model, precision: str) -> bool:
    """Whether this CPU's MatMul kernels compute a row the same way in calls of any size (a
    placed graph can be no more exact than its MatMuls)."""
    if precision != "fp32":
        return probe_rows(model, precision, threads=1).row_independent
    W = np.random.default_rng(0).standard_normal((CFG.hidden_size, 96)).astype(np.float32)
    x = np.random.default_rng(1).standard_normal((17, CFG.hidden_size)).astype(np.float32)
    s = open_session(matmul_model(W).SerializeToString(), "cpu", 1)
    return all(np.array_equal(t, a) for t, a in together_and_alone(s, x, (2, 5, 17)))


def _frames(n: int = 6):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, CFG.hidden_size)).astype(np.float32), rng.integers(0, 40, n)


# attention="placed_op": codecspec's own attention operator (variant "cpu" only)
MODES = [("cpu", "placed"), ("plain", "placed"), ("cpu", "placed_op")]


@pytest.mark.parametrize("variant, attention", MODES)
@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_verified_rows_are_the_ar_rows_bit_for_bit(weights, variant, attention, precision):
    model = _graph(weights, variant, attention, precision)
    dec = DepthDecoder(model.SerializeToString(), tree=BRANCHING, provider="cpu", threads=1)
    rows = probe_tree_rows(dec, *_frames())
    assert rows["frames"] == 6
    if _kernels_row_independent(model, precision):
        assert rows["bitwise"] and rows["exact"], rows
    else:
        # This CPU's quantised kernel computes one row unlike several (int4 on AVX2): no
        # attention can make the rows equal, and the probe must say so (calibration reads it
        # and keeps `auto` on AR there).
        assert not rows["bitwise"], rows


@pytest.mark.parametrize("attention", ["placed", "placed_op"])
@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_greedy_speculation_gives_the_ar_codes_over_quantised_weights(
    weights, attention, precision
):
    """The law in its plainest form: greedy, every mode, the same codes."""
    model = _graph(weights, "cpu", attention, precision).SerializeToString()
    dec = DepthDecoder(model, tree=BRANCHING, params=cs.SamplingParams(0.0, 0, 1.0), threads=1)
    hiddens, c0s = _frames(12)
    for h, c0 in zip(hiddens, c0s):
        ar = dec.decode_frame(h, int(c0), cs.Generator(0), "ar")
        np.testing.assert_array_equal(dec.decode_frame(h, int(c0), cs.Generator(0), "spec"), ar)


@pytest.mark.parametrize("variant", ["cpu", "plain"])
def test_placed_attention_computes_the_default_attentions_function(weights, variant):
    """Same model, other summation order: the logits agree to float rounding."""
    hiddens, c0s = _frames(4)
    logits = {}
    modes = ("call", "placed", "placed_op") if variant == "cpu" else ("call", "placed")
    for attention in modes:
        g = _graph(weights, variant, attention, "fp32").SerializeToString()
        dec = DepthDecoder(g, tree=BRANCHING, provider="cpu", threads=1)
        rows = []
        for h, c0 in zip(hiddens, c0s):
            dec.decode_frame(h, int(c0), cs.Generator(0), "ar")
            rows.append(dec._step_call.logits.copy())
        logits[attention] = np.concatenate(rows)
    for attention in modes[1:]:
        np.testing.assert_allclose(logits[attention], logits["call"], rtol=0, atol=2e-5)


def test_the_mode_is_recorded_and_the_default_graph_is_unchanged(weights):
    placed = build_depth_graph(CFG, weights, heads="grouped", attention="placed")
    default = build_depth_graph(CFG, weights, heads="grouped")
    assert read_graph_metadata(placed)["attention"] == "placed"
    assert read_graph_metadata(default)["attention"] == "call"
    assert "codecspec.attention" not in {p.key for p in default.metadata_props}
    assert "GroupQueryAttention" not in {n.op_type for n in placed.graph.node}
    with pytest.raises(ValueError, match="^attention must be one of"):
        build_depth_graph(CFG, weights, attention="sorted")
    op = build_depth_graph(CFG, weights, heads="grouped", attention="placed_op")
    assert read_graph_metadata(op)["attention"] == "placed_op"
    assert {n.op_type for n in op.graph.node} >= {"PlacedAttention"}
    assert len(op.graph.node) < len(placed.graph.node)
    with pytest.raises(ValueError, match="placed_op.*variant='cpu'"):
        build_depth_graph(CFG, weights, variant="plain", attention="placed_op")
