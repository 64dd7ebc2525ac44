"""The PyTorch side of the reference model on tiny sizes ([train] extra; skipped without torch).

The important property: the torch depth decoder computes exactly what codecspec's graph
builder exports (the Qwen3 code-predictor semantics), and the exported temporal graphs compute
what the torch temporal model computes, step by step with a KV cache.
"""

import numpy as np
import pytest
from paths import DATA

torch = pytest.importorskip(
    "torch", reason="exercises the PyTorch model and its export ([train] extra)"
)

from tiny_models import TINY  # noqa: E402

from codecspec.families.reference.model import TemporalStepper  # noqa: E402
from codecspec.families.reference.torch_model import TTSModel, export_onnx  # noqa: E402
from codecspec.graphs import build_depth_graph  # noqa: E402
from codecspec.runtime.session import open_session  # noqa: E402
from codecspec.train.networks import DepthModel, TemporalConfig, depth_weights  # noqa: E402

TCFG = TemporalConfig(
    vocab_size=12,
    num_languages=2,
    num_speakers=3,
    latent_dim=8,
    d_model=64,
    num_heads=4,
    ff_size=96,
    encoder_layers=1,
    decoder_layers=2,
    draft_layers=1,
    fourier_bands=4,
    c0_vocab_size=128,
    dropout=0.0,
)


def _batch(gen, B=2, P=9, T=7):
    codes = torch.randint(0, 128, (B, T, TINY.num_codebooks), generator=gen)
    return {
        "phonemes": torch.randint(4, 12, (B, P), generator=gen),
        "phoneme_lengths": torch.tensor([P, P - 3][:B]),
        "language": torch.tensor([0, 1][:B]),
        "speaker": torch.tensor([2, 0][:B]),
        "latents": torch.randn(B, T, 8, generator=gen),
        "frame_lengths": torch.tensor([T, T - 2][:B]),
        "frame_mask": torch.arange(T)[None, :] < torch.tensor([T, T - 2][:B])[:, None],
        "codes": codes,
    }


def test_depth_model_matches_the_exported_graph():
    torch.manual_seed(0)
    m = DepthModel(TINY).eval()
    with torch.no_grad():  # non-trivial norms, so a missing norm weight would show
        for layer in m.layers:
            for n in (layer.input_norm, layer.q_norm, layer.k_norm, layer.post_norm):
                n.weight.uniform_(0.5, 1.5)
    G = TINY.num_codebooks
    hidden = torch.randn(3, TINY.hidden_size)
    codes = torch.randint(0, 128, (3, G))
    with torch.no_grad():
        want = m(hidden, codes).numpy()  # [3, G-1, V]
    w = depth_weights(m)
    sess = open_session(build_depth_graph(TINY, w, heads="graph").SerializeToString(), "cpu")
    from codecspec.calibrate.data import teacher_forced_feeds

    for n in range(3):
        feeds = teacher_forced_feeds(TINY, hidden[n].numpy(), codes[n].numpy())
        logits = sess.run(["logits"], feeds)[0]  # [G, V]; row p is read by head p - 1
        np.testing.assert_allclose(logits[1:], want[n], atol=2e-4, rtol=1e-4)


def test_losses_are_finite_and_training_lowers_them():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = TTSModel(TCFG, TINY)
    batch = _batch(gen)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(30):
        out = model.losses(batch, depth_frames=0, gen=gen)
        loss = out["c0"] + out["draft_c0"] + out["depth"]
        assert torch.isfinite(loss)
        first = float(loss) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss) < 0.7 * first
    assert out["depth_levels"].shape == (TINY.num_codebooks - 1,)


def test_exported_temporal_graphs_match_torch_step_by_step(tmp_path):
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(1)
    model = TTSModel(TCFG, TINY).eval()
    b = _batch(gen, B=1, P=9, T=6)
    b["phoneme_lengths"] = torch.tensor([9])
    b["frame_lengths"] = torch.tensor([6])
    with torch.no_grad():
        h_ref, logits_ref, draft_ref = model.temporal.run_batch(b)
    paths = export_onnx(model.temporal, tmp_path)
    enc = open_session(str(paths["encoder"]), "cpu")
    kv = enc.run(None, {k: b[k].numpy() for k in ("phonemes", "language", "speaker")})
    for name, cross, ref in (
        ("temporal", kv[:2], logits_ref),
        ("draft_temporal", kv[2:], draft_ref),
    ):
        step = TemporalStepper(
            open_session(str(paths[name]), "cpu"), cross[0], cross[1], int(b["speaker"][0]), 6
        )
        lat = b["latents"].numpy()[0]
        for t in range(6):
            h, logits = step.step(lat[t - 1] if t else None)
            np.testing.assert_allclose(logits, ref[0, t].numpy(), atol=1e-4)
            if name == "temporal":
                np.testing.assert_allclose(h, h_ref[0, t].numpy(), atol=1e-4)


def test_depth_model_rejects_an_input_projection():
    from dataclasses import replace

    with pytest.raises(ValueError, match="input_proj"):
        DepthModel(replace(TINY, input_hidden_size=32))
    with pytest.raises(ValueError, match="input width"):
        TTSModel(TCFG, replace(TINY, hidden_size=32, num_heads=2, num_kv_heads=1))


def test_the_checked_in_depth_golden_is_the_torch_models(tmp_path):
    """tests/data/depth_golden.npz (what the torch-free test_depth_graph_golden.py compares
    the graph builder with) is what `write_depth_golden` computes with today's torch model."""

    from tiny_models import write_depth_golden

    want = np.load(DATA / "depth_golden.npz")
    got = np.load(write_depth_golden(tmp_path / "golden.npz"))
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
