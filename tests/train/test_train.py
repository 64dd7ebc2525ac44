"""Offline training: corpus collection, teacher forcing, offsets (Adam / CE), Medusa baseline."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_models import TINY, VARIANT

import codecspec as cs
from codecspec.calibrate.data import (
    collect_frames,
    drift_weights,
    read_heads,
    synthetic_inputs,
    teacher_forced_feeds,
    teacher_forced_hidden,
)
from codecspec.calibrate.medusa import MedusaHeads, train_medusa
from codecspec.calibrate.offsets import (
    Adam,
    _Examples,
    config_hash,
    cross_entropy,
    draft_logits,
    evaluate_offsets,
    heads_hash,
    load_offsets,
    lookahead_pairs,
    offset_loss_and_grad,
    offsets_path_for,
    save_offsets,
    train_offsets,
)
from codecspec.graphs import DepthDecoderConfig, build_depth_graph
from codecspec.graphs.reference import reference_run
from codecspec.runtime.depth_graph import DepthGraph

CFG = TINY


@pytest.fixture(scope="module")
def model():
    w = drift_weights(CFG, seed=0)
    m = build_depth_graph(CFG, w, variant=VARIANT)
    return m, w, DepthGraph(m, "cpu", threads=1)


@pytest.fixture(scope="module")
def corpus(model):
    m, w, graph = model
    hiddens, c0s = synthetic_inputs(CFG, 240, seed=1)
    codes = collect_frames(graph, hiddens, c0s, cs.Generator(3), progress=False)
    z = teacher_forced_hidden(graph, hiddens, c0s, codes, progress=False)
    return hiddens, c0s, codes, z, read_heads(m)


# ---------------------------------------------------------------------- corpus
def test_collect_frames_are_valid_codes(corpus):
    hiddens, c0s, codes, z, _ = corpus
    assert codes.shape == (240, CFG.num_codebooks) and codes.dtype == np.int64
    assert np.array_equal(codes[:, 0], c0s)
    assert codes[:, 1:].min() >= 0 and codes[:, 1:].max() < CFG.codebook_size
    assert z.shape == (240, CFG.num_codebooks, CFG.hidden_size) and z.dtype == np.float32


def test_teacher_forced_hidden_matches_reference(model, corpus):
    _, w, graph = model
    hiddens, c0s, codes, z, _ = corpus
    for n in (0, 7):
        ref = reference_run(CFG, w, teacher_forced_feeds(CFG, hiddens[n], codes[n]))
        np.testing.assert_allclose(z[n], ref["hidden"], rtol=1e-4, atol=1e-4)


def test_teacher_forced_hidden_rejects_bad_input(model, corpus):
    _, _, graph = model
    hiddens, c0s, codes, _, _ = corpus
    with pytest.raises(ValueError, match="c0s"):
        teacher_forced_hidden(graph, hiddens[:2], c0s[:2] + 1, codes[:2], progress=False)
    with pytest.raises(ValueError, match="codes"):
        teacher_forced_hidden(graph, hiddens[:2], c0s[:2], codes[:2, :-1], progress=False)


def test_read_heads_from_graph_and_weights(model, tmp_path):
    m, w, _ = model
    np.testing.assert_array_equal(read_heads(m), w["heads"])
    from codecspec.graphs import save_model

    save_model(m, tmp_path / "d.onnx")
    np.testing.assert_array_equal(read_heads(tmp_path / "d.onnx"), w["heads"])


# ---------------------------------------------------------------------- draft logits
def test_zero_offsets_are_head_reuse(corpus):
    *_, z, heads = corpus
    zeros = np.zeros((CFG.num_draft_offsets, CFG.hidden_size), np.float32)
    G = CFG.num_codebooks
    for lv in range(G - 1):
        d = draft_logits(z[:5, lv + 1], heads, zeros, lv)
        for j in range(1, CFG.num_draft_offsets + 1):
            np.testing.assert_allclose(
                d[:, j - 1], z[:5, lv + 1] @ heads[min(lv + j, G - 2)].T, rtol=1e-5, atol=1e-5
            )


@pytest.mark.parametrize("which", ["zero", "random"])
def test_host_drafts_equal_graph_drafts(model, corpus, which):
    """Acceptance is measured on the host from z; it must see the decoder's exact drafts."""
    _, _, graph = model
    hiddens, _, codes, z, heads = corpus
    rng = np.random.default_rng(5)
    K, H = CFG.num_draft_offsets, CFG.hidden_size
    offs = np.zeros((K, H), np.float32) if which == "zero" else rng.normal(0, 0.5, (K, H))
    offs = offs.astype(np.float32)
    for n in (0, 3):
        feeds = teacher_forced_feeds(CFG, hiddens[n], codes[n])
        feeds["draft_offsets"] = offs
        g_logits, g_drafts = graph.session.run(["logits", "draft_logits"], feeds)
        for lv in range(CFG.num_codebooks - 1):
            host = draft_logits(z[n, lv + 1], heads, offs, lv)
            np.testing.assert_allclose(g_drafts[lv + 1], host, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(g_logits[lv + 1], z[n, lv + 1] @ heads[lv].T, atol=1e-4)


# ---------------------------------------------------------------------- optimisation
def test_cross_entropy_gradient_finite_differences():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (6, 9))
    t = rng.integers(0, 9, 6)
    loss, g = cross_entropy(logits, t)
    num = np.zeros_like(logits)
    eps = 1e-6
    for idx in np.ndindex(*logits.shape):
        lp, lm = logits.copy(), logits.copy()
        lp[idx] += eps
        lm[idx] -= eps
        num[idx] = (cross_entropy(lp, t)[0] - cross_entropy(lm, t)[0]) / (2 * eps)
    np.testing.assert_allclose(g, num, atol=1e-7)
    ref = np.mean(np.log(np.exp(logits).sum(1)) - logits[np.arange(6), t])
    assert loss == pytest.approx(ref, rel=1e-12)


def test_offset_gradient_finite_differences():
    rng = np.random.default_rng(1)
    N, G, H, V, K = 5, 6, 8, 11, 3
    z = rng.standard_normal((N, G, H))
    heads = rng.standard_normal((G - 1, V, H))
    codes = rng.integers(0, V, (N, G))
    b = 0.3 * rng.standard_normal((K, H))
    loss, grad = offset_loss_and_grad(b, z, codes, heads)
    num = np.zeros_like(b)
    eps = 1e-6
    for idx in np.ndindex(*b.shape):
        bp, bm = b.copy(), b.copy()
        bp[idx] += eps
        bm[idx] -= eps
        num[idx] = (
            offset_loss_and_grad(bp, z, codes, heads)[0]
            - offset_loss_and_grad(bm, z, codes, heads)[0]
        ) / (2 * eps)
    np.testing.assert_allclose(grad, num, atol=1e-8)
    # The training path (frozen logits cached, gradient collapsed per pair) agrees.
    ex = _Examples(z.astype(np.float32), codes, heads.astype(np.float32), K)
    l2, g2 = ex.loss_grad(b.astype(np.float32), np.arange(N))
    assert l2 == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(g2, grad, atol=1e-5)


def test_adam_matches_reference_update_and_minimises():
    p = np.array([1.0, -2.0])
    opt = Adam([p], lr=0.1, betas=(0.9, 0.999), eps=1e-8)
    g = np.array([0.5, -1.0])
    opt.step([g])
    # First step with bias correction moves every coordinate by lr * sign(g).
    np.testing.assert_allclose(p, [0.9, -1.9], atol=1e-7)
    x = np.array([3.0, -4.0, 0.5])
    opt = Adam([x], lr=0.05)
    for _ in range(2000):
        opt.step([2 * (x - 1.0)])
    np.testing.assert_allclose(x, 1.0, atol=1e-2)


def test_lookahead_pairs_cover_valid_targets():
    pairs = lookahead_pairs(8, 3)
    assert len(pairs) == 6 + 5 + 4
    lv, j, h = pairs.T
    assert np.all(h == lv + j) and np.all(h <= 6) and np.all(lv + 1 + j <= 7)


# ---------------------------------------------------------------------- training
def test_offsets_recover_a_planted_shift():
    """Targets drawn from heads[l+1] @ (z_l + b*): training must find b* back.

    K=1 so that every code position is the target of exactly one (level, lookahead) pair.
    """
    rng = np.random.default_rng(2)
    N, G, H, V, K = 600, 8, 16, 32, 1
    z = rng.standard_normal((N, G, H)).astype(np.float32)
    heads = (rng.standard_normal((G - 1, V, H)) / np.sqrt(H) * 2).astype(np.float32)
    planted = rng.normal(0, 1.0, (K, H)).astype(np.float32)
    codes = rng.integers(0, V, (N, G))
    for lv, j, h in lookahead_pairs(G, K):
        lg = (z[:, lv + 1] + planted[j - 1]) @ heads[h].T
        p = np.exp(lg - lg.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        codes[:, lv + 1 + j] = [rng.choice(V, p=row) for row in p]
    offs, hist = train_offsets(
        z, codes, heads, K, epochs=40, lr=3e-2, val_fraction=0.2, seed=0, progress=False
    )
    assert hist.final["mean_ce"] < hist.baseline["mean_ce"] - 0.2
    planted_ce = evaluate_offsets(planted, z, codes, heads)["mean_ce"]
    assert evaluate_offsets(offs, z, codes, heads)["mean_ce"] < planted_ce + 0.05
    cos = (offs * planted).sum(1) / np.linalg.norm(offs, axis=1) / np.linalg.norm(planted, axis=1)
    assert np.all(cos > 0.8), cos


def test_offsets_reduce_heldout_ce_on_model_frames(corpus):
    *_, codes, z, heads = corpus
    offs, hist = train_offsets(
        z,
        codes,
        heads,
        CFG.num_draft_offsets,
        epochs=15,
        lr=1e-2,
        val_fraction=0.25,
        progress=False,
    )
    assert offs.shape == (CFG.num_draft_offsets, CFG.hidden_size) and offs.dtype == np.float32
    assert hist.baseline is not None and hist.final is not None
    assert hist.final["mean_ce"] < hist.baseline["mean_ce"] - 0.05
    assert np.mean(hist.train_loss[-5:]) < np.mean(hist.train_loss[:5])
    # Deeper lookaheads gain most: their heads expect the most drift.
    assert hist.final["top1"][-1] >= hist.baseline["top1"][-1]
    assert len(hist.eval_steps) == 15 and len(hist.steps) == len(hist.train_loss)
    for key in ("ce", "top1", "top5"):
        assert len(hist.final[key]) == CFG.num_draft_offsets


def test_train_offsets_default_hyperparameters_run(corpus):
    *_, codes, z, heads = corpus
    offs, hist = train_offsets(z, codes, heads, 3, steps=3, progress=False)
    assert len(hist.steps) == 3 and np.all(np.isfinite(offs))
    # lr 1e-3: Adam moves each coordinate by at most ~lr per step.
    assert np.abs(offs).max() <= 3 * 1.1e-3


# ---------------------------------------------------------------------- persistence
def test_save_load_offsets_roundtrip(tmp_path, corpus):
    *_, heads = corpus
    offs = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float32)
    meta = {"config_hash": config_hash(CFG), "heads_hash": heads_hash(heads), "train_loss": 1.5}
    path = save_offsets(tmp_path / "m.offsets.npz", offs, meta)
    assert path.name == "m.offsets.npz"
    back, m = load_offsets(path, config=CFG, heads=heads)
    np.testing.assert_array_equal(back, offs)
    assert m["train_loss"] == 1.5 and m["K"] == 3 and m["hidden_size"] == 64 and "date" in m
    other = DepthDecoderConfig(**{**CFG.to_dict(), "num_layers": 3})
    with pytest.raises(ValueError, match="config"):
        load_offsets(path, config=other)
    with pytest.raises(ValueError, match="head"):
        load_offsets(path, heads=heads + 1)
    np.save(tmp_path / "plain.npy", offs)
    np.testing.assert_array_equal(load_offsets(tmp_path / "plain.npy")[0], offs)
    assert offsets_path_for("/x/depth.onnx").as_posix() == "/x/depth.offsets.npz"
    with pytest.raises(FileNotFoundError):
        load_offsets(tmp_path / "missing.npz")
    json.dumps(m)


# ---------------------------------------------------------------------- Medusa baseline
def test_medusa_starts_at_head_reuse_and_learns(corpus):
    *_, codes, z, heads = corpus
    K, G, V, H = 3, CFG.num_codebooks, CFG.codebook_size, CFG.hidden_size
    m0 = MedusaHeads.from_heads(heads, K)
    P = len(lookahead_pairs(G, K))
    assert m0.num_parameters == P * (V * H + V)
    zeros = np.zeros((K, H), np.float32)
    for lv in range(G - 1):
        want = draft_logits(z[:4, lv + 1], heads, zeros, lv)
        got = m0.draft_logits(z[:4, lv + 1], lv)
        assert got.shape == (4, K, V)
        for j in range(1, K + 1):
            if lv + j <= G - 2:
                np.testing.assert_allclose(got[:, j - 1], want[:, j - 1], atol=1e-5)
            else:
                assert not got[:, j - 1].any()
    m, hist = train_medusa(z, codes, heads, K, epochs=4, lr=1e-3, val_fraction=0.25, progress=False)
    assert hist.final["mean_ce"] < hist.baseline["mean_ce"]
    assert m.draft_logits(z[0, 1], 0).shape == (K, V)


def test_medusa_save_load(tmp_path, corpus):
    *_, heads = corpus
    m = MedusaHeads.from_heads(heads, 3)
    m.bias[:] = 0.25
    m.save(tmp_path / "medusa.npz")
    back = MedusaHeads.load(tmp_path / "medusa.npz")
    np.testing.assert_array_equal(back.weights, m.weights)
    np.testing.assert_array_equal(back.bias, m.bias)
    assert (back.G, back.K) == (m.G, m.K)
