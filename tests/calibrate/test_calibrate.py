"""Calibration: acceptance statistics, tree replay vs prediction, latency profile, end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_models import TINY, VARIANT

import codecspec as cs
from codecspec.calibrate.acceptance import Acceptance, measure_acceptance
from codecspec.calibrate.budget import choose_budget, predict_tree, simulate_tree
from codecspec.calibrate.data import (
    collect_frames,
    drift_weights,
    read_heads,
    synthetic_inputs,
    teacher_forced_hidden,
)
from codecspec.calibrate.decision import read_decision
from codecspec.calibrate.device import calibrate
from codecspec.calibrate.latency import LatencyProfile, measure_latency
from codecspec.calibrate.medusa import MedusaHeads
from codecspec.calibrate.offsets import load_offsets, train_offsets
from codecspec.decode.depth import DepthDecoder
from codecspec.graphs import (
    build_depth_graph,
    save_model,
)
from codecspec.runtime.depth_graph import DepthGraph

CFG = TINY
GREEDY = cs.SamplingParams(0.0, 0, 1.0)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    m = build_depth_graph(CFG, drift_weights(CFG, seed=0), variant=VARIANT)
    path = tmp_path_factory.mktemp("model") / "depth.onnx"
    save_model(m, path)
    return path, DepthGraph(path, "cpu", threads=1), read_heads(m)


@pytest.fixture(scope="module")
def frames(model):
    _, graph, heads = model
    hiddens, c0s = synthetic_inputs(CFG, 300, seed=2)
    codes = collect_frames(graph, hiddens, c0s, cs.Generator(11), progress=False)
    z = teacher_forced_hidden(graph, hiddens, c0s, codes, progress=False)
    offs, _ = train_offsets(z[:200], codes[:200], heads, 3, epochs=10, lr=1e-2, progress=False)
    return hiddens, c0s, codes, z, offs


def _synthetic_ranks(accept, N, G, seed=0):
    """Ranks drawn independently per depth from a[d][r] (rank M = none of the drafts)."""
    rng = np.random.default_rng(seed)
    K, M = accept.shape
    p = np.concatenate([accept, 1 - accept.sum(1, keepdims=True)], axis=1)
    ranks = np.stack([rng.choice(M + 1, size=(N, G - 1), p=p[d]) for d in range(K)], axis=2)
    for lv in range(G - 1):
        for d in range(K):
            if lv + 2 + d > G - 1:
                ranks[:, lv, d] = -1
    return ranks.astype(np.int32)


# ---------------------------------------------------------------------- acceptance
def test_acceptance_matrix_is_a_distribution_per_depth(model, frames):
    _, _, heads = model
    _, _, codes, z, offs = frames
    acc = measure_acceptance(z[200:], codes[200:], heads, offs, num_ranks=16)
    assert acc.matrix.shape == (3, 16)
    assert np.all(acc.matrix >= 0) and np.all(acc.matrix <= 1)
    assert np.all(acc.matrix.sum(axis=1) <= 1 + 1e-12)
    G = CFG.num_codebooks
    # depth d (0-based) is measured at node levels 0..G-3-d of every frame
    np.testing.assert_array_equal(acc.counts, [100 * (G - 2 - d) for d in range(3)])
    assert acc.ranks.shape == (100, G - 1, 3)
    assert acc.matrix[0, 0] > 0.2  # the drift model's drafts are informative
    d = acc.to_dict()
    assert set(d) >= {"matrix", "counts", "top1", "top5", "name"}


def test_zero_offsets_and_medusa_acceptance(model, frames):
    _, _, heads = model
    _, _, codes, z, offs = frames
    zero = measure_acceptance(z[200:], codes[200:], heads, None, K=3, num_ranks=8)
    med = measure_acceptance(
        z[200:], codes[200:], drafter=MedusaHeads.from_heads(heads, 3), num_ranks=8
    )
    # Untrained Medusa heads are copies of the frozen heads: identical to head reuse.
    np.testing.assert_allclose(med.matrix, zero.matrix)
    assert med.num_parameters > 100 * zero.num_parameters
    trained = measure_acceptance(z[200:], codes[200:], heads, offs, num_ranks=8)
    assert trained.top(1)[-1] >= zero.top(1)[-1]


def test_prediction_equals_replay_under_independence():
    a = np.array([[0.6, 0.12, 0.05, 0.03, 0.02, 0.01]]) * 0.9 ** np.arange(3)[:, None]
    G = 16
    ranks = _synthetic_ranks(a, 3000, G)
    for N in (1, 4, 12):
        tree = cs.DraftTree.greedy(a, N, max_depth=3)
        sim = simulate_tree(tree, ranks)
        pred = predict_tree(tree, a, G)
        assert sim.calls_per_frame == pytest.approx(pred["calls_per_frame"], rel=0.02)
        assert sim.tokens_per_round == pytest.approx(tree.expected_tokens(a), rel=0.03)
        assert pred["tokens_per_round"] == pytest.approx(tree.expected_tokens(a))


def test_prediction_roughly_matches_replay_on_model_frames(model, frames):
    _, _, heads = model
    _, _, codes, z, offs = frames
    acc = measure_acceptance(z[200:], codes[200:], heads, offs, num_ranks=16)
    G = CFG.num_codebooks
    for N in (1, 4, 8):
        tree = cs.DraftTree.greedy(acc.matrix, N, max_depth=3)
        sim = simulate_tree(tree, acc.ranks)
        pred = predict_tree(tree, acc.matrix, G)
        assert 1.0 <= sim.tokens_per_call <= G - 1
        # Independence ignores the correlation of consecutive hits, so only roughly.
        assert sim.tokens_per_call == pytest.approx(pred["tokens_per_call"], rel=0.2)
        assert sum(sim.accepted_hist) > 0


def test_replay_equals_decoder_exactly_when_greedy(model):
    """Greedy decoding is deterministic: replaying the tree on the AR frames must give the
    speculative decoder's exact call count, frame by frame."""
    _, graph, heads = model
    hiddens, c0s = synthetic_inputs(CFG, 40, seed=5)
    codes = collect_frames(graph, hiddens, c0s, cs.Generator(0), params=GREEDY, progress=False)
    z = teacher_forced_hidden(graph, hiddens, c0s, codes, progress=False)
    offs = np.random.default_rng(0).normal(0, 0.3, (3, CFG.hidden_size)).astype(np.float32)
    acc = measure_acceptance(z, codes, heads, offs, num_ranks=8)
    for paths in ([(0,), (1,), (0, 0), (0, 0, 0), (1, 0)], [(0,), (0, 0)]):
        tree = cs.DraftTree.from_paths(paths)
        dec = DepthDecoder(graph, tree=tree, offsets=offs, params=GREEDY)
        for n in range(len(c0s)):
            before = dec.stats.calls
            out = dec.decode_frame(hiddens[n], int(c0s[n]), cs.Generator(1), "spec")
            assert np.array_equal(out, codes[n])
            sim = simulate_tree(tree, acc.ranks[n : n + 1])
            assert sim.calls_per_frame == dec.stats.calls - before, (paths, n)


def test_replay_matches_sampling_decoder_in_distribution(model, frames):
    _, graph, heads = model
    hiddens, c0s, codes, z, offs = frames
    acc = measure_acceptance(z, codes, heads, offs, num_ranks=8)
    tree = cs.DraftTree.greedy(acc.matrix, 4, max_depth=3)
    sim = simulate_tree(tree, acc.ranks)
    dec = DepthDecoder(graph, tree=tree, offsets=offs)
    dec.decode_frames(hiddens[:150], c0s[:150], cs.Generator(99), "spec")
    assert dec.stats.calls_per_frame == pytest.approx(sim.calls_per_frame, rel=0.08)
    # the same check catches a replay off by one rank (each draft recorded one rank lower
    # than it was, so a top-1 hit reads as a top-2 one)
    r = acc.ranks
    off_by_one = simulate_tree(tree, np.where(r >= 0, np.minimum(r + 1, 8), r))  # 8: none
    assert dec.stats.calls_per_frame != pytest.approx(off_by_one.calls_per_frame, rel=0.08)


# ---------------------------------------------------------------------- latency and choice
def test_latency_profile(model):
    _, graph, _ = model
    lat = measure_latency(graph, (1, 2, 4, 9, 16), past_len=4, repeats=7, progress=False)
    assert lat.qs == [1, 2, 4, 9, 16]
    assert len(lat.graph_ms) == len(lat.host_ms) == 5 and lat.samples.shape == (7, 5)
    assert all(x > 0 for x in lat.graph_ms) and lat.prefill_ms > 0
    # More query tokens never get much cheaper (noisy shared machine: loose bound).
    assert lat.graph(16) > 0.7 * lat.graph(1)
    assert lat.cost(1) == pytest.approx(lat.graph(1) + lat.host(1))
    assert lat.graph(3) == pytest.approx((lat.graph(2) + lat.graph(4)) / 2)
    d = lat.to_dict()
    assert set(d) >= {"qs", "graph_ms", "host_ms", "total_ms", "past_len", "prefill_ms"}


def test_latency_excludes_query_lengths_the_graph_rejects(model):
    """Some graphs cap the query length (older builds of the contrib RotaryEmbedding variant
    refused more query tokens than cache rows); such lengths are dropped and reported."""
    _, graph, _ = model

    class Capped:
        def __init__(self, inner, cap):
            self.inner, self.cap = inner, cap

        def run(self, names, feeds, *args):
            if len(feeds["input_ids"]) > self.cap:
                raise RuntimeError("query too long")
            return self.inner.run(names, feeds, *args)

        def get_inputs(self):
            return self.inner.get_inputs()

    class Stub:
        config = graph.config
        session = Capped(graph.session, 4)

    from codecspec.runtime import depth_graph

    class StubGraph(Stub, depth_graph.DepthGraph):
        def __init__(self):
            pass

    lat = measure_latency(StubGraph(), (1, 2, 4, 9), repeats=2, host=False, progress=False)
    assert lat.unsupported == [9] and lat.qs == [1, 2, 4] and lat.max_query == 4
    assert lat.to_dict()["unsupported_qs"] == [9]


def test_choose_budget_picks_the_best_simulated_speedup():
    a = np.array([[0.7, 0.1, 0.05, 0.02]]) * 0.9 ** np.arange(3)[:, None]
    ranks = _synthetic_ranks(a, 500, 16)
    acc = Acceptance(a, np.ones(3, np.int64), ranks)
    qs = [1, 2, 3, 5, 9, 17]
    # Flat cost up to q=5, then steep: small trees should win.
    lat = LatencyProfile(qs, [1.0, 1.0, 1.0, 1.0, 3.0, 9.0], [0.0] * 6, 8, 1, prefill_ms=1.0)
    best, rows = choose_budget(acc, lat, (1, 2, 4, 8, 16))
    assert [r.budget for r in rows] == [1, 2, 4, 8, 16]
    assert best == max(rows, key=lambda r: r.speedup_simulated).budget
    assert best == 4
    for r in rows:
        assert r.nodes == r.budget + 1 and r.tree.num_nodes == r.nodes
        assert r.simulated_calls_per_frame < 15  # beats 15 AR calls
    # Free verification: the biggest tree wins.
    flat = LatencyProfile(qs, [1.0] * 6, [0.0] * 6, 8, 1, prefill_ms=1.0)
    assert choose_budget(acc, flat, (1, 2, 4, 8, 16))[0] == 16
    # Budgets whose query length was not measured are skipped.
    _, rows = choose_budget(acc, lat, (4, 32))
    assert [r.budget for r in rows] == [4]


# ---------------------------------------------------------------------- end to end
def test_calibrate_end_to_end(model, tmp_path):
    path, _, heads = model
    out = tmp_path / "calib"
    res = calibrate(
        path,
        out,
        frames=120,
        budgets=(1, 2, 4, 8),
        seed=3,
        threads=1,
        train_kwargs=dict(epochs=5, lr=1e-2),
        latency_repeats=5,
        end_to_end_frames=6,
        overhead_frames=6,
        medusa=True,
        medusa_kwargs=dict(epochs=1),
        progress=False,
        save_beside_model=False,
    )
    tree = cs.DraftTree.from_json((out / "tree.json").read_text())
    assert tree.paths == res.tree.paths and tree.num_nodes == res.budget + 1
    prof = json.loads((out / "device_profile.json").read_text())
    for key in (
        "provider",
        "cpu_model",
        "threads",
        "onnxruntime_version",
        "latency",
        "acceptance",
        "chosen_budget",
        "predicted_speedup",
        "simulated_speedup",
        "date",
        "budgets",
        "ablation",
        "end_to_end",
        "model",
        "sampling",
    ):
        assert key in prof, key
    assert prof["chosen_budget"] == res.budget in (1, 2, 4, 8)
    assert prof["threads"] == 1 and prof["provider"] == "CPUExecutionProvider"
    assert np.array(prof["acceptance"]).shape == (3, 8)
    assert [b["budget"] for b in prof["budgets"]] == [1, 2, 4, 8]
    assert set(prof["ablation"]) == {"zero_offsets", "medusa", "offsets"}
    assert prof["end_to_end"]["speedup"] > 0
    # what `auto` acts on: decision.json, in the one format, by the profile's rule
    decision = read_decision(out)
    assert decision == res.decision and decision.source == out / "decision.json"
    timed = prof["end_to_end"]["speedup"]
    assert (
        decision.speculate
        is prof["speculation_pays"]
        is (res.simulated_speedup > 1.0 and timed > 1.0)
    )
    assert decision.measured["chosen_budget"] == res.budget
    assert decision.device["threads"] == 1 and "cpu_flags" in decision.device
    assert res.files["decision"] == str(out / "decision.json")
    for weights in ("int8", "int4"):  # what speculation over quantised weights keeps here
        rows = prof["quantised_rows"][weights]
        assert rows["holds"] in ("bit-identical", "float-rounding"), rows
    offs, meta = load_offsets(out / "offsets.npz", config=CFG, heads=heads)
    np.testing.assert_array_equal(offs, res.offsets)
    assert "train_loss" in meta and "date" in meta
    assert not (path.parent / "depth.offsets.npz").exists()
    pytest.importorskip("matplotlib")
    for name in ("acceptance.png", "latency.png", "speedup.png", "training.png"):
        assert (out / name).stat().st_size > 1000, name


def test_calibrate_with_given_offsets_skips_training(model, tmp_path):
    path, _, _ = model
    offs = np.zeros((3, CFG.hidden_size), np.float32)
    res = calibrate(
        path,
        tmp_path,
        offsets=offs,
        frames=30,
        budgets=(1, 2),
        threads=1,
        latency_repeats=3,
        end_to_end_frames=0,
        overhead_frames=0,
        plots=False,
        progress=False,
    )
    assert res.train_history is None and res.end_to_end is None
    assert not (tmp_path / "offsets.npz").exists()
    assert res.profile["acceptance_frames"] == 30
    with pytest.raises(ValueError, match="offsets"):
        calibrate(
            path,
            tmp_path,
            offsets=np.zeros((2, 5), np.float32),
            frames=4,
            budgets=(1,),
            plots=False,
            progress=False,
            end_to_end_frames=0,
        )


def test_calibrate_hidden_heads_graph(model, tmp_path):
    """heads="hidden" graphs: heads from the sidecar, host-side head work in the profile."""
    from codecspec.runtime.depth_graph import heads_sidecar

    w = drift_weights(CFG, seed=0)
    path = tmp_path / "hid.onnx"
    save_model(build_depth_graph(CFG, w, variant=VARIANT, heads="hidden"), path)
    np.save(heads_sidecar(path), w["heads"])
    np.testing.assert_array_equal(read_heads(path), w["heads"])
    # Same hidden states as the heads="graph" build of the same weights.
    hiddens, c0s = synthetic_inputs(CFG, 3, seed=4)
    codes = collect_frames(model[1], hiddens, c0s, cs.Generator(0), progress=False)
    z_graph = teacher_forced_hidden(model[1], hiddens, c0s, codes, progress=False)
    z_hidden = teacher_forced_hidden(
        DepthGraph(path, "cpu", 1), hiddens, c0s, codes, progress=False
    )
    np.testing.assert_allclose(z_hidden, z_graph, atol=1e-5)
    res = calibrate(
        path,
        tmp_path / "out",
        frames=40,
        budgets=(1, 2, 4),
        threads=1,
        latency_repeats=3,
        train_kwargs=dict(epochs=2),
        end_to_end_frames=4,
        overhead_frames=4,
        plots=False,
        progress=False,
        save_beside_model=False,
    )
    assert res.profile["heads_in_graph"] is False
    assert all(h > 0 for h in res.latency.host_ms)
    assert res.end_to_end["speedup"] > 0
    assert (tmp_path / "out" / "offsets.npy").is_file()
