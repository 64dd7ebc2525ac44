"""The temporal LM's stop head with a hidden layer (V2TemporalConfig.stop_hidden, the v3
recipe's `stop` step): the exported step graph computes the torch head's stop logits, a changed
head weight shows in them, and a bad width is refused by name."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="exports PyTorch models ([train] extra)")

from tiny_models import export_v2_graphs, tiny_v2_configs  # noqa: E402


def _model(stop_hidden: int):
    from codecspec.families.v2.torch_model import V2Model

    tcfg, dcfg = tiny_v2_configs(stop_hidden=stop_hidden)
    torch.manual_seed(0)
    return V2Model(tcfg, dcfg).eval()


def _feeds(cfg):
    from codecspec.families.v2.torch_model import CACHE_SLACK

    g = torch.Generator().manual_seed(1)
    cap, layers, n = cfg.window + CACHE_SLACK, cfg.decoder_layers, 3
    cross = torch.randn(layers, 1, cfg.num_heads, 5, cfg.head_dim, generator=g)
    cache = torch.randn(layers, 1, cfg.num_heads, cap, cfg.head_dim, generator=g)
    return dict(
        prev_tokens=torch.tensor([cfg.start_token, 5, 17]),
        progress=torch.tensor([0.2, 0.7, 1.1]),
        positions=torch.arange(n) + 2,
        speaker=torch.tensor([0]),
        cross_keys=cross,
        cross_values=cross * 0.5,
        cache_keys=cache,
        cache_values=-cache,
        cache_positions=torch.tensor([i if i < 2 else -1 for i in range(cap)]),
    )


def _torch_stop(model, feeds) -> np.ndarray:
    from codecspec.families.v2.torch_model import _StepExport

    tm = model.temporal
    with torch.no_grad():
        return _StepExport(tm, tm.decoder)(*feeds.values())[2].numpy()


@pytest.mark.parametrize("hidden", [0, 8])
def test_the_step_graph_computes_the_torch_stop_head(tmp_path, hidden):
    from codecspec.runtime.session import open_session

    model = _model(hidden)
    head = model.temporal.decoder.stop_head
    assert isinstance(head, torch.nn.Linear) == (hidden == 0)
    export_v2_graphs(model, tmp_path)
    feeds = _feeds(model.temporal.cfg)
    sess = open_session(tmp_path / "temporal.onnx", provider="cpu")
    got = sess.run(["stop_logits"], {k: v.numpy() for k, v in feeds.items()})[0]
    want = _torch_stop(model, feeds)
    assert got.shape == want.shape == (3,)
    assert np.abs(got - want).max() < 1e-4
    first = head if hidden == 0 else head[0]
    with torch.no_grad():  # broken variant: another first-layer weight moves the logits
        first.weight.mul_(-1.0)
    assert np.abs(got - _torch_stop(model, feeds)).max() > 1e-2


def test_the_draft_keeps_a_linear_stop_head():
    model = _model(8)
    assert isinstance(model.temporal.draft.stop_head, torch.nn.Linear)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "8"])
def test_a_bad_stop_width_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="stop_hidden"):
        tiny_v2_configs(stop_hidden=bad)
