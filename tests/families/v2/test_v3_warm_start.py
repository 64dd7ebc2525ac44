"""Warm start from the shipped v3 folder (issue 29): the weights read back from its graphs are
the ones it runs — re-exported by the ship step they give its tensors bit for bit, the torch
step graph computes what its temporal.onnx computes — and a changed weight is caught."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="exercises PyTorch training ([train] extra)")

from codecspec.families.v2.model import default_v3_dir  # noqa: E402

MODEL = default_v3_dir()
RECIPE = Path(__file__).resolve().parents[3] / "models" / "recipe"
pytestmark = pytest.mark.skipif(not (MODEL / "model.json").is_file(), reason="no v3 folder")


def _fresh_model():
    from codecspec.families.v2.torch_model import V2Model, V2TemporalConfig
    from codecspec.graphs.config import DepthDecoderConfig

    meta = json.loads((MODEL / "model.json").read_text())
    torch.manual_seed(0)
    tcfg = V2TemporalConfig(**meta["temporal_config"])
    return V2Model(tcfg, DepthDecoderConfig.from_dict(meta["depth_config"]))


def _ship_export(model, out):
    sys.path.insert(0, str(RECIPE))
    from ship import export_graphs

    from codecspec.families.v2.torch_model import export_onnx

    export_graphs(model, out, export_temporal=export_onnx)


@pytest.fixture(scope="module")
def loaded():
    from codecspec.families.v2.train_init import load_folder_weights

    model = _fresh_model()
    rep = load_folder_weights(model, MODEL)
    return model.eval(), rep


def test_every_exported_weight_is_read_back(loaded):
    model, rep = loaded
    names = {n for n, _ in model.named_parameters()}
    assert set(rep["loaded"]) | set(rep["absent"]) == names
    assert all(n.startswith("temporal.draft_ce.") for n in rep["absent"])


def test_reexport_reproduces_the_folder_and_a_change_is_caught(loaded):
    from codecspec.families.v2.train_init import reexport_mismatches

    model, _ = loaded
    assert reexport_mismatches(model, MODEL, _ship_export) == []
    layer = model.depth.layers[0].down_proj.weight
    with torch.no_grad():
        layer[0, 0] += 0.01
    try:
        bad = reexport_mismatches(model, MODEL, _ship_export)
    finally:
        with torch.no_grad():
            layer[0, 0] -= 0.01
    assert bad == ["depth:l0_wd"]


def test_torch_step_computes_what_the_shipped_graph_computes(loaded):
    """Independent of the export: the shipped temporal.onnx run by ONNX Runtime and the loaded
    torch decoder on the same ring-cache inputs."""
    from codecspec.families.v2.torch_model import CACHE_SLACK, _StepExport
    from codecspec.runtime.session import open_session

    model, _ = loaded
    tm, cfg = model.temporal, model.temporal.cfg
    g = torch.Generator().manual_seed(1)
    cap, layers, n = cfg.window + CACHE_SLACK, cfg.decoder_layers, 4
    cross = torch.randn(layers, 1, cfg.num_heads, 9, cfg.head_dim, generator=g)
    cache = torch.randn(layers, 1, cfg.num_heads, cap, cfg.head_dim, generator=g)
    feeds = dict(
        prev_tokens=torch.tensor([1024, 5, 17, 300]),
        progress=torch.tensor([0.2, 0.7, 1.1, 1.6]),
        positions=torch.arange(n) + 10,
        speaker=torch.tensor([1]),
        cross_keys=cross,
        cross_values=cross * 0.5,
        cache_keys=cache,
        cache_values=-cache,
        cache_positions=torch.tensor([i if i < 10 else -1 for i in range(cap)]),
    )
    with torch.no_grad():
        want = _StepExport(tm, tm.decoder)(*feeds.values())[1].numpy()
    sess = open_session(MODEL / "temporal.onnx", provider="cpu")
    got = sess.run(["c0_logits"], {k: v.numpy() for k, v in feeds.items()})[0]
    assert np.abs(got - want).max() < 1e-3
    wrong = _fresh_model().temporal  # the same inputs through untrained weights differ
    with torch.no_grad():
        other = _StepExport(wrong, wrong.decoder)(*feeds.values())[1].numpy()
    assert np.abs(got - other).max() > 0.1


def test_training_data_with_other_speaker_ids_is_refused():
    """The embedding rows stand for the folder's symbols: data whose tables name other voices
    must not be trained from these weights."""
    from codecspec.families.v2.train_init import load_folder_weights
    from codecspec.frontend.text import Frontend

    d = json.loads((MODEL / "model.json").read_text())["frontend"]
    load_folder_weights(_fresh_model(), MODEL, Frontend.from_dict(d))  # the same tables: fine
    d["speakers"]["names"][-1] = "m7"  # a voice the folder never heard, in m3's row
    with pytest.raises(ValueError, match="frontend"):
        load_folder_weights(_fresh_model(), MODEL, Frontend.from_dict(d))


def _recipe(name):
    sys.path.insert(0, str(RECIPE))
    return __import__(name)


def test_folder_checkpoint_ships_the_folder_and_keeps_its_phoneme_ids(tmp_path):
    """`v3.py checkpoint`: a folder's weights as the checkpoint `ship` reads — loaded back,
    its export is the folder's, tensor for tensor; it carries the folder's frontend (a
    larger corpus would number the phonemes otherwise) and the depth passes' reports, the
    folder's own first, without this machine's home directory."""
    from codecspec.families.v2.train_init import reexport_mismatches

    v2, v3 = _recipe("v2"), _recipe("v3")
    report = tmp_path / "depth_probe.json"
    report.write_text(json.dumps({"checkpoint_step": f"the folder {Path.home()}/x"}))
    out = tmp_path / "ckpt.pt"
    v3.main(["checkpoint", "--from-folder", str(MODEL), "--out", str(out),
             "--depth-reports", str(report)])  # fmt: skip
    model, ck = v2.load_checkpoint(out)
    assert reexport_mismatches(model, MODEL, _ship_export) == []
    meta = json.loads((MODEL / "model.json").read_text())
    assert ck["frontend"] == meta["frontend"]
    # the passes the folder's decoder already had, then the new one
    had = json.loads((MODEL / "report.json").read_text())["train"].get("depth_passes", [])
    assert ck["depth_passes"] == had + [{"checkpoint_step": "the folder ~/x"}]


def test_folder_checkpoint_refuses_an_export_that_differs(tmp_path, monkeypatch):
    """The guard is live: an export that is not the folder's writes no checkpoint."""
    v2, v3 = _recipe("v2"), _recipe("v3")

    def shifted(model, out):
        with torch.no_grad():
            next(model.depth.parameters()).add_(1e-2)  # one tensor off by a little
        _ship_export(model, out)

    monkeypatch.setattr(v2, "_ship_export", shifted)
    out = tmp_path / "ckpt.pt"
    with pytest.raises(SystemExit, match="differs"):
        v3.main(["checkpoint", "--from-folder", str(MODEL), "--out", str(out)])
    assert not out.exists()
