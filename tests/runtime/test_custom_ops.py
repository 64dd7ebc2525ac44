"""codecspec's own onnxruntime operators (runtime.custom_ops, served by codecspec._core)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from codecspec.runtime import custom_ops
from codecspec.runtime.session import open_session

pytestmark = pytest.mark.skipif(not custom_ops.available(), reason="no custom-op entry point")

C = 6


def _params(seed=0):
    rng = np.random.default_rng(seed)
    alpha = np.exp(0.4 * rng.standard_normal((1, C, 1))).astype(np.float32)
    inv_beta = (1.0 / (np.exp(0.4 * rng.standard_normal((1, C, 1))) + 1e-9)).astype(np.float32)
    return alpha, inv_beta


def _chain(x="x", out="y", label="s"):
    """x + sin(x * a)^2 * ib with the decoder builder's five operators."""
    return [
        helper.make_node("Mul", [x, f"{label}_a"], [f"{label}_xa"]),
        helper.make_node("Sin", [f"{label}_xa"], [f"{label}_sin"]),
        helper.make_node("Mul", [f"{label}_sin", f"{label}_sin"], [f"{label}_sin2"]),
        helper.make_node("Mul", [f"{label}_sin2", f"{label}_ib"], [f"{label}_t"]),
        helper.make_node("Add", [x, f"{label}_t"], [out]),
    ]


def _model(nodes, alpha, inv_beta, labels=("s",), alpha_input=False):
    inits = []
    for label in labels:
        inits.append(numpy_helper.from_array(inv_beta, f"{label}_ib"))
        if not alpha_input:
            inits.append(numpy_helper.from_array(alpha, f"{label}_a"))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", C, "t"])]
    if alpha_input:
        inputs.append(helper.make_tensor_value_info("s_a", TensorProto.FLOAT, None))
    g = helper.make_graph(
        nodes, "snake", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, feeds, fused):
    sess = open_session(model.SerializeToString(), provider="cpu", custom_ops=fused)
    return sess.run(None, feeds)[0]


def test_snake_beta_is_the_formula_and_the_standard_graph():
    alpha, inv_beta = _params()
    rng = np.random.default_rng(1)
    x = (4.0 * rng.standard_normal((2, C, 3001))).astype(np.float32)
    x[0, 0, :3] = (3e4, -1e6, np.nan)  # beyond the fast reduction: the library sine; NaN stays
    plain = _model(_chain(), alpha, inv_beta)
    fused = _model(_chain(), alpha, inv_beta)
    assert custom_ops.fuse_snake(fused) == 1
    assert [n.op_type for n in fused.graph.node] == ["SnakeBeta"]
    y_plain = _run(plain, {"x": x}, False)
    y = _run(fused, {"x": x}, True)
    exact = x + inv_beta * np.sin(alpha.astype(np.float64) * x) ** 2
    assert np.isnan(y[0, 0, 2]) and np.isnan(y_plain[0, 0, 2])
    ok = ~np.isnan(exact)
    bound = 2.4e-7 * (np.abs(x) + 2 * np.abs(alpha * x) * inv_beta) + 1e-7  # float32 rounding
    assert np.all(np.abs(y - exact)[ok] <= bound[ok])
    assert np.all(np.abs(y - y_plain)[ok] <= 2 * bound[ok])
    # the check can fail: sin instead of sin^2 is far outside the bound
    wrong = x + inv_beta * np.sin(alpha * x)
    assert not np.all(np.abs(wrong - exact)[ok] <= bound[ok])


def test_every_chain_is_fused_and_nothing_else():
    alpha, inv_beta = _params()
    nodes = _chain(out="h", label="s1") + _chain(x="h", out="y", label="s2")
    model = _model(nodes, alpha, inv_beta, labels=("s1", "s2"))
    x = np.random.default_rng(2).standard_normal((1, C, 50)).astype(np.float32)
    want = _run(model, {"x": x}, False)
    assert custom_ops.fuse_snake(model) == 2
    assert [n.op_type for n in model.graph.node] == ["SnakeBeta", "SnakeBeta"]
    assert any(o.domain == custom_ops.DOMAIN for o in model.opset_import)
    np.testing.assert_allclose(_run(model, {"x": x}, True), want, rtol=1e-6, atol=1e-6)
    assert custom_ops.fuse_snake(model) == 0  # nothing left to fuse


def test_a_chain_that_differs_is_left_alone():
    alpha, inv_beta = _params()
    # alpha is not a constant: not a SnakeBeta this op can take
    model = _model(_chain(), alpha, inv_beta, alpha_input=True)
    assert custom_ops.fuse_snake(model) == 0
    # the sine is read elsewhere too: fusing would drop a value the graph needs
    nodes = _chain(out="h") + [helper.make_node("Add", ["h", "s_sin"], ["y"])]
    model = _model(nodes, alpha, inv_beta)
    assert custom_ops.fuse_snake(model) == 0
    # x + sin(x a)^2 * ib with another tensor added instead of x: not the activation
    nodes = _chain()
    nodes[-1] = helper.make_node("Add", ["s_xa", "s_t"], ["y"])
    assert custom_ops.fuse_snake(_model(nodes, alpha, inv_beta)) == 0


def test_bad_parameters_are_an_error_not_a_crash():
    alpha, inv_beta = _params()
    model = _model([helper.make_node("SnakeBeta", ["x", "a", "ib"], ["y"], domain="ai.codecspec")],
                   alpha[:, :4], inv_beta, labels=())  # fmt: skip
    model.graph.initializer.extend(
        [numpy_helper.from_array(alpha[:, :4], "a"), numpy_helper.from_array(inv_beta, "ib")]
    )
    model.opset_import.append(helper.make_opsetid(custom_ops.DOMAIN, 1))
    sess = open_session(model.SerializeToString(), provider="cpu", custom_ops=True)
    x = np.zeros((1, C, 8), np.float32)
    with pytest.raises(Exception, match="SnakeBeta: x must be"):
        sess.run(None, {"x": x})
    with pytest.raises(ValueError, match="SnakeBeta"):  # without registration: an unknown op
        open_session(model.SerializeToString(), provider="cpu")
