"""The depth graph builder computes the Qwen3 code-predictor semantics, without torch (CI runs
this): `build_depth_graph` on checked-in weights against the torch `DepthModel`'s logits for
them (tests/data/depth_golden.npz, written by `python tests/tiny_models.py`;
test_tts_torch.py checks, with torch, that the file is still what the torch model computes)."""

import numpy as np
import pytest
from paths import DATA
from tiny_models import GOLDEN_DEPTH

from codecspec.calibrate.data import teacher_forced_feeds
from codecspec.graphs import build_depth_graph
from codecspec.runtime.session import open_session

GOLDEN = DATA / "depth_golden.npz"


@pytest.fixture(scope="module")
def golden():
    d = np.load(GOLDEN)
    weights = {k[2:]: d[k] for k in d if k.startswith("w:")}
    return weights, d["hidden"], d["codes"], d["logits"]


def _graph_logits(weights, hidden, codes):
    """[frames, G-1, V]: the graph's teacher-forced logits (row p is read by head p - 1)."""
    model = build_depth_graph(GOLDEN_DEPTH, weights, heads="graph")
    sess = open_session(model.SerializeToString(), "cpu")
    out = []
    for h, c in zip(hidden, codes):
        out.append(sess.run(["logits"], teacher_forced_feeds(GOLDEN_DEPTH, h, c))[0][1:])
    return np.stack(out)


def test_depth_graph_matches_the_torch_models_golden_logits(golden):
    weights, hidden, codes, want = golden
    np.testing.assert_allclose(_graph_logits(weights, hidden, codes), want, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("dropped", ["q_norm", "k_norm", "post_norm"])
def test_a_graph_without_a_norm_is_caught(golden, dropped):
    """The golden norms are not ones, so a builder that dropped one would fail the check."""
    weights, hidden, codes, want = golden
    broken = dict(weights)
    name = f"layers.0.{dropped}"
    broken[name] = np.ones_like(weights[name])
    assert np.abs(_graph_logits(broken, hidden, codes) - want).max() > 1e-2
