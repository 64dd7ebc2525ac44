"""Float16 storage of ONNX graphs: half the bytes, float32 compute on the rounded weights."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from tiny_models import TINY, VARIANT

from codecspec.graphs import DepthDecoderWeights, build_depth_graph, example_feeds
from codecspec.graphs.storage import round_float16, store_float16
from codecspec.runtime.session import open_session


def _graph():
    w = DepthDecoderWeights.random(TINY, seed=3)
    return build_depth_graph(TINY, w, variant=VARIANT, heads="graph")


def _rounded_in_place(model: onnx.ModelProto, min_elements: int) -> onnx.ModelProto:
    """The same graph with big initializers rounded through float16 but stored as float32."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype == np.float32 and a.size >= min_elements:
            init.CopyFrom(numpy_helper.from_array(round_float16(a), init.name))
    return out


def test_half_size_and_identical_outputs():
    model = _graph()
    small = store_float16(model, min_elements=256)
    assert len(small.SerializeToString()) < 0.6 * len(model.SerializeToString())
    feeds = example_feeds(TINY, num_query=5, past_len=3, seed=1)
    a = open_session(small.SerializeToString(), "cpu").run(None, feeds)
    b = open_session(_rounded_in_place(model, 256).SerializeToString(), "cpu").run(None, feeds)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)
    # and it is a different model from the float32 one: rounding is not a no-op
    c = open_session(model.SerializeToString(), "cpu").run(None, feeds)
    assert max(float(np.abs(x - y).max()) for x, y in zip(a, c)) > 0


def test_original_is_untouched_and_small_tensors_stay_float32():
    model = _graph()
    before = model.SerializeToString()
    small = store_float16(model, min_elements=10**9)
    assert model.SerializeToString() == before
    assert all(i.data_type != onnx.TensorProto.FLOAT16 for i in small.graph.initializer)


def test_bad_input():
    with pytest.raises(ValueError, match="model"):
        store_float16(b"not a model")
    with pytest.raises(ValueError, match="min_elements"):
        store_float16(_graph(), min_elements=0)
    with pytest.raises(ValueError, match="weights"):
        round_float16(np.array([1e6], np.float32), "weights")


def test_bf16_exact_heads_share_one_array():
    import codecspec as cs
    from codecspec.graphs.storage import round_bf16_exact

    w = np.random.default_rng(0).standard_normal((3, 96, 40)).astype(np.float32) * 0.05
    r = round_bf16_exact(w, "heads")
    assert np.array_equal(r.astype(np.float16).astype(np.float32), r)  # saved as f16 exactly
    assert np.abs(r - w).max() <= 2.0**-8 * np.abs(w).max()
    assert not cs.HeadBank(w).targets_bf16 and cs.HeadBank(r).targets_bf16
    z = np.random.default_rng(1).standard_normal(40).astype(np.float32)
    bank = cs.HeadBank(r.astype(np.float16))  # as loaded from the shipped sidecar
    for h in range(3):
        want = r[h].astype(np.float64) @ z.astype(np.float64)
        np.testing.assert_allclose(bank.logits(h, z), want, rtol=1e-5, atol=1e-5)


def test_heads_are_read_through_the_float16_cast():
    from codecspec.calibrate.data import read_heads

    model = _graph()
    want = read_heads(model)
    got = read_heads(store_float16(model, min_elements=256))
    np.testing.assert_array_equal(got, round_float16(want))
