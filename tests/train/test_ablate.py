"""Drafter ablation: head reuse vs offsets vs Medusa heads, library and CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_models import TINY, VARIANT

from codecspec.calibrate.data import drift_weights, synthetic_inputs
from codecspec.cli import main
from codecspec.graphs import build_depth_graph, save_model
from codecspec.runtime.depth_graph import heads_sidecar
from codecspec.train.ablate import DRAFTERS, ablate

CFG = TINY
BUDGETS = (1, 2, 4, 8)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The drift model of test_calibrate: sticky codes plus a per-level shift that offsets learn."""
    path = tmp_path_factory.mktemp("model") / "depth.onnx"
    save_model(build_depth_graph(CFG, drift_weights(CFG, seed=0), variant=VARIANT), path)
    return path


@pytest.fixture(scope="module")
def result(model, tmp_path_factory):
    return ablate(
        model,
        tmp_path_factory.mktemp("ablation"),
        frames=160,
        budgets=BUDGETS,
        seed=1,
        threads=1,
        train_kwargs=dict(epochs=10, lr=1e-2),
        medusa_kwargs=dict(epochs=3),
        progress=False,
    )


def test_result_shape(result):
    assert result.budgets == list(BUDGETS)
    assert len(result.rows) == len(DRAFTERS) * len(BUDGETS)
    assert set(result.acceptance) == set(DRAFTERS)
    K, H = CFG.num_draft_offsets, CFG.hidden_size
    p = result.num_parameters
    assert p["head_reuse"] == 0 and p["offsets"] == K * H
    assert p["medusa"] > 100 * p["offsets"]
    assert p["lm_heads"] == (CFG.num_codebooks - 1) * CFG.codebook_size * H
    for r in result.rows:
        assert r.nodes == r.budget + 1 and 1 <= r.max_depth <= K
        assert r.num_parameters == p[r.drafter]
    assert set(result.ratios()) == set(BUDGETS)
    assert result.meta["frames"] == {
        "total": 160,
        "train": 120,
        "heldout": 40,
        "medusa_selection": 20,
    }


def test_tokens_per_call_in_range(result):
    G = CFG.num_codebooks
    for r in result.rows:
        assert 1.0 <= r.simulated_tokens_per_call <= G - 1, r
        assert 1.0 <= r.predicted_tokens_per_call <= G - 1, r


def test_offsets_not_worse_than_head_reuse_on_a_drift_model(result):
    reuse, offs = result.tokens_per_call("head_reuse"), result.tokens_per_call("offsets")
    # Held-out replay on 40 frames is noisy: only a wide shortfall counts as a failure.
    for n, h, o in zip(BUDGETS, reuse, offs):
        assert o >= h - 0.05, (n, h, o)
    # The drift is what offsets learn: on average they must gain, mostly at the deeper depths.
    assert np.mean(offs) > np.mean(reuse)
    top1 = {d: result.acceptance[d].top(1) for d in DRAFTERS}
    assert top1["offsets"][-1] > top1["head_reuse"][-1]


def test_files_written(result):
    out = result.out_dir
    data = json.loads((out / "ablation.json").read_text())
    for key in ("sampling", "seed", "frames", "budgets", "num_parameters", "rows", "drafters"):
        assert key in data, key
    assert set(data["drafters"]) == set(DRAFTERS)
    assert len(data["drafters"]["offsets"]["top1"]) == CFG.num_draft_offsets
    assert set(data["ratio_offsets_vs_medusa"]) == {str(n) for n in BUDGETS}
    assert data["seed"] == 1 and data["target"]["param_fraction"] < 0.01
    assert set(data["target"]["per_budget"]) == {str(n) for n in BUDGETS}
    md = (out / "ablation.md").read_text(encoding="utf-8")
    assert md.strip() == result.markdown().strip()
    assert "offsets ÷ Medusa" in md and "Parameters:" in md
    assert sum(line.startswith("| ") for line in md.splitlines()) == 1 + len(BUDGETS)
    assert result.summary()
    pytest.importorskip("matplotlib")
    assert (out / "ablation.png").stat().st_size > 1000


@pytest.mark.parametrize("budgets", [(), (0, 4), (-1,)])
def test_bad_budgets(model, tmp_path, budgets):
    with pytest.raises(ValueError, match="budgets"):
        ablate(model, tmp_path, frames=8, budgets=budgets, progress=False)


def test_missing_model(tmp_path):
    with pytest.raises((FileNotFoundError, ValueError), match="model"):
        ablate(tmp_path / "nope.onnx", tmp_path, frames=8, progress=False)
    assert main(["ablate", "--model", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2


def test_cli_end_to_end(tmp_path, capsys):
    """A model directory (heads="hidden" graph + sidecar + frames.npz), table and JSON."""
    w = drift_weights(CFG, seed=0)
    d = tmp_path / "model"
    d.mkdir()
    save_model(build_depth_graph(CFG, w, variant=VARIANT, heads="hidden"), d / "depth.onnx")
    np.save(heads_sidecar(d / "depth.onnx"), w["heads"])
    hiddens, c0s = synthetic_inputs(CFG, 20, seed=3)
    np.savez(d / "frames.npz", hiddens=hiddens, c0s=c0s)
    argv = ["ablate", "--model", str(d), "--frames", "64", "--budgets", "1", "2"]
    argv += ["--epochs", "2", "--threads", "1", "--seed", "2"]
    assert main(argv + ["--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "| N |" in out and "offsets ÷ Medusa" in out and "wrote" in out
    assert (tmp_path / "a" / "ablation.json").is_file()
    assert main(argv + ["--out", str(tmp_path / "b"), "--json", "--temperature", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["frames"]["total"] == 20  # the directory's frames.npz, not synthetic inputs
    assert data["inputs"] == "given" and data["budgets"] == [1, 2]
    assert data["sampling"]["temperature"] == 0.0
