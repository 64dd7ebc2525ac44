"""Micro-benchmarks of codecspec's Rust core against the plain-numpy oracle (bench/oracle.py).

    pytest bench --benchmark-enable --benchmark-only --benchmark-group-by=group   # measure
    pytest bench                                                                  # smoke: once
    pytest bench -m "not slow"                                                    # skip V=65536

Every benchmark group holds a codecspec / numpy pair on identical inputs; ``extra_info``
carries the implementation name and the target that ``bench/report.py`` checks. Each case is
built by a ``case_*`` function (also used by ``report.py --paired`` outside pytest).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pytest

import benchdata as bd
import oracle as o

IMPLS = ["codecspec", "numpy"]

G_VERIFY_TREE = "verify_tree N=16 V=2048"
G_VERIFY_TREE_COLD = "verify_tree N=16 V=2048, 16 inputs cycled"
G_TREE_BUILD = "tree build+masks N=64 K=6"
G_BATCH = "verify_tree_batch B=64 N=16 V=2048"
G_GROUPS_SMALL = "groups V=8192 D=256"
G_GROUPS_LARGE = "groups V=65536 D=256"
G_SAMPLE = "sample [16,2048]"
G_WARP = "warp [16,2048]"
G_KV = "kv_commit 5x2x8x64x128 path=4"
G_KV_ROWS = "kv_commit rows 5x2x8x64x128 path=4"


@dataclass
class Case:
    run: Callable[[], Any]
    check: Callable[[Any], None] = lambda result: None
    target_s: Optional[float] = None  # codecspec median must be <= target_s
    min_speedup: Optional[float] = None  # numpy median / codecspec median must be >= this
    info: dict = field(default_factory=dict)  # extra_info recorded before timing


def _cs():
    return pytest.importorskip("codecspec")


def _bench(benchmark, impl, case: Case, **pedantic):
    benchmark.extra_info.update(
        impl=impl, target_s=case.target_s, min_speedup=case.min_speedup, **case.info
    )
    if pedantic:
        result = benchmark.pedantic(case.run, warmup_rounds=0, iterations=1, **pedantic)
    else:
        result = benchmark(case.run)
    case.check(result)
    return result


def _check_verify(r, tree_depth=3, vocab=bd.V):
    tokens = np.asarray(r.tokens)
    assert r.num_accepted <= tree_depth
    assert tokens.shape == (r.num_accepted + 1,)
    assert ((tokens >= 0) & (tokens < vocab)).all()


def _trees(impl, accept, budget, max_depth):
    """(codecspec tree or None, oracle tree with the same node order)."""
    if impl == "codecspec":
        tree = _cs().DraftTree.greedy(accept, budget=budget, max_depth=max_depth)
        return tree, o.Tree(tree.paths)
    return None, o.Tree.greedy(accept, budget, max_depth=max_depth)


# --------------------------------------------------------------------------------------------
# verify_tree: one stream, N=16 drafts, K=3, V=2048, T=0.9, top-k 50, top-k drafts
# --------------------------------------------------------------------------------------------


def _verify_tree_case(impl, inputs, **targets) -> Case:
    tree, otree = _trees(impl, bd.accept_matrix(3), 16, 3)
    feed = itertools.cycle(inputs(otree))
    if impl == "codecspec":
        cs = _cs()
        params, gen = bd.cs_params(cs), cs.Generator(seed=0)

        def run():
            tokens, logits = next(feed)
            return cs.verify_tree(tree, tokens, logits, params, gen)

    else:
        orng = np.random.default_rng(0)

        def run():
            tokens, logits = next(feed)
            return o.verify_tree(otree, tokens, logits, bd.ORACLE_PARAMS, orng)

        targets = {}
    mean_acc = float(np.mean([run().num_accepted for _ in range(320)]))
    return Case(run, _check_verify, info={"mean_accepted": mean_acc}, **targets)


def case_verify_tree(impl) -> Case:
    """One input set, cache-hot like logits just written by the verify call: the target."""

    def inputs(otree):
        return [bd.tree_inputs(otree, bd.V, np.random.default_rng(bd.VERIFY_SEED))]

    return _verify_tree_case(impl, inputs, target_s=25e-6, min_speedup=10.0)


def case_verify_tree_cycled(impl) -> Case:
    """16 input sets in turn (2.2 MB): logits no longer sit in L1/L2 when the call starts."""

    def inputs(otree):
        rng = np.random.default_rng(0)
        return [bd.tree_inputs(otree, bd.V, rng) for _ in range(16)]

    return _verify_tree_case(impl, inputs)


@pytest.mark.benchmark(group=G_VERIFY_TREE)
@pytest.mark.parametrize("impl", IMPLS)
def test_verify_tree(benchmark, impl):
    _bench(benchmark, impl, case_verify_tree(impl))


@pytest.mark.benchmark(group=G_VERIFY_TREE_COLD)
@pytest.mark.parametrize("impl", IMPLS)
def test_verify_tree_cycled(benchmark, impl):
    _bench(benchmark, impl, case_verify_tree_cycled(impl))


# --------------------------------------------------------------------------------------------
# tree build + masks: greedy(N=64, K=6) + ancestor_mask + attention_bias + position_ids
# --------------------------------------------------------------------------------------------


def case_tree_build_masks(impl) -> Case:
    accept = bd.accept_matrix(6)
    past = 32
    if impl == "codecspec":
        cs = _cs()

        def run():
            t = cs.DraftTree.greedy(accept, budget=64, max_depth=6)
            return t, t.ancestor_mask(), t.attention_bias(past), t.position_ids(past)

        targets = {"target_s": 20e-6}
    else:

        def run():
            t = o.Tree.greedy(accept, 64, max_depth=6)
            return t, t.ancestor_mask(), t.attention_bias(past), t.position_ids(past)

        targets = {}

    def check(result):
        t, mask, bias, pos = result
        assert t.num_nodes == 65
        assert mask.shape == (65, 65) and bias.shape == (65, past + 65) and pos.shape == (65,)

    return Case(run, check, **targets)


@pytest.mark.benchmark(group=G_TREE_BUILD)
@pytest.mark.parametrize("impl", IMPLS)
def test_tree_build_masks(benchmark, impl):
    _bench(benchmark, impl, case_tree_build_masks(impl))


# --------------------------------------------------------------------------------------------
# verify_tree_batch: 64 streams x N=16, V=2048
# --------------------------------------------------------------------------------------------


def case_verify_tree_batch(impl) -> Case:
    b = 64
    tree, otree = _trees(impl, bd.accept_matrix(3), 16, 3)
    rng = np.random.default_rng(1)
    parts = [bd.tree_inputs(otree, bd.V, rng) for _ in range(b)]
    tokens = np.concatenate([p[0] for p in parts])
    logits = np.concatenate([p[1] for p in parts])
    if impl == "codecspec":
        cs = _cs()
        params = bd.cs_params(cs)
        root = cs.Generator(seed=0)
        gens = [root.fork(i) for i in range(b)]
        trees = [tree] * b

        def run():
            return cs.verify_tree_batch(trees, tokens, logits, params, gens)

        targets = {"target_s": 1e-3}
    else:
        rngs = [np.random.default_rng(i) for i in range(b)]
        otrees = [otree] * b

        def run():
            return o.verify_tree_batch(otrees, tokens, logits, bd.ORACLE_PARAMS, rngs)

        targets = {}

    def check(results):
        assert len(results) == b
        for r in results:
            _check_verify(r)

    mean_acc = float(np.mean([r.num_accepted for _ in range(5) for r in run()]))
    return Case(run, check, info={"mean_accepted": mean_acc}, **targets)


@pytest.mark.benchmark(group=G_BATCH)
@pytest.mark.parametrize("impl", IMPLS)
def test_verify_tree_batch(benchmark, impl):
    _bench(benchmark, impl, case_verify_tree_batch(impl))


# --------------------------------------------------------------------------------------------
# AcousticGroups.from_embeddings (brute-force cosine), V=8192 and V=65536, D=256
# --------------------------------------------------------------------------------------------


def _groups_case(impl, vocab, target_s=None) -> Case:
    emb = bd.clustered_embeddings(vocab, 256, np.random.default_rng(2))
    th = bd.GROUP_THRESHOLD
    if impl == "codecspec":
        cs = _cs()

        def run():
            return cs.AcousticGroups.from_embeddings(emb, th)

    else:
        target_s = None

        def run():
            return o.Groups.from_embeddings(emb, th)

    def check(grp):
        assert grp.num_groups == vocab

    return Case(run, check, target_s=target_s)


def case_groups_small(impl) -> Case:
    return _groups_case(impl, 8192)


def case_groups_large(impl) -> Case:
    return _groups_case(impl, 65536, target_s=10.0)


@pytest.mark.benchmark(group=G_GROUPS_SMALL)
@pytest.mark.parametrize("impl", IMPLS)
def test_groups_small(benchmark, impl):
    _bench(benchmark, impl, case_groups_small(impl), rounds=3)


@pytest.mark.slow
@pytest.mark.benchmark(group=G_GROUPS_LARGE)
@pytest.mark.parametrize("impl", IMPLS)
def test_groups_large(benchmark, impl):
    if impl == "numpy" and benchmark.disabled:
        pytest.skip("numpy V=65536 baseline (~50 s) only runs with --benchmark-enable")
    grp = _bench(benchmark, impl, case_groups_large(impl), rounds=1)
    sizes = np.array([len(grp.members(k)) for k in range(0, 65536, 64)])
    benchmark.extra_info["mean_group_size_sampled"] = float(sizes.mean())
    assert 2.0 <= sizes.mean() <= 10.0


# --------------------------------------------------------------------------------------------
# sample / warp on [16, 2048]
# --------------------------------------------------------------------------------------------


def _rows(n=16):
    return (np.random.default_rng(3).standard_normal((n, bd.V)) * 2.5).astype(np.float32)


def case_sample(impl) -> Case:
    logits = _rows()
    if impl == "codecspec":
        cs = _cs()
        params, gen = bd.cs_params(cs), cs.Generator(seed=0)

        def run():
            return cs.sample(logits, params, gen)

    else:
        rng = np.random.default_rng(0)

        def run():
            return o.sample(logits, bd.ORACLE_PARAMS, rng)

    def check(toks):
        toks = np.asarray(toks)
        assert toks.shape == (16,) and ((toks >= 0) & (toks < bd.V)).all()

    return Case(run, check)


def case_warp(impl) -> Case:
    logits = _rows()
    if impl == "codecspec":
        cs = _cs()
        params = bd.cs_params(cs)

        def run():
            return cs.warp(logits, params)

    else:

        def run():
            return o.warp(logits, bd.ORACLE_PARAMS)

    def check(probs):
        probs = np.asarray(probs)
        assert probs.shape == (16, bd.V)
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)

    return Case(run, check)


@pytest.mark.benchmark(group=G_SAMPLE)
@pytest.mark.parametrize("impl", IMPLS)
def test_sample(benchmark, impl):
    _bench(benchmark, impl, case_sample(impl))


@pytest.mark.benchmark(group=G_WARP)
@pytest.mark.parametrize("impl", IMPLS)
def test_warp(benchmark, impl):
    _bench(benchmark, impl, case_warp(impl))


# --------------------------------------------------------------------------------------------
# kv_commit: Qwen3-TTS code-predictor cache, accepted path of 4 nodes (root + 3)
# --------------------------------------------------------------------------------------------


def _kv_case(impl, with_rows) -> Case:
    rng = np.random.default_rng(4)
    cache = bd.kv_cache(rng)
    rows = rng.standard_normal((5, 2, 8, 17, 128)).astype(np.float32) if with_rows else None
    nodes, past = bd.KV_NODES, bd.KV_PAST_LEN
    if impl == "codecspec":
        cs = _cs()
        if with_rows:

            def run():
                return cs.kv_commit(cache, past, nodes, rows)

        else:

            def run():
                return cs.kv_commit(cache, past, nodes)

    else:

        def run():
            return o.kv_commit(cache, past, nodes, rows)

    def check(new_len):
        assert new_len == past + len(nodes)

    return Case(run, check)


def case_kv_commit(impl) -> Case:
    """rows=None: the verify call's rows already sit at past_len + node; compact the path."""
    return _kv_case(impl, with_rows=False)


def case_kv_commit_rows(impl) -> Case:
    """rows given: copy rows[..., nodes[j], :] of this call's 17 new rows to past_len + j."""
    return _kv_case(impl, with_rows=True)


@pytest.mark.benchmark(group=G_KV)
@pytest.mark.parametrize("impl", IMPLS)
def test_kv_commit(benchmark, impl):
    _bench(benchmark, impl, case_kv_commit(impl))


@pytest.mark.benchmark(group=G_KV_ROWS)
@pytest.mark.parametrize("impl", IMPLS)
def test_kv_commit_rows(benchmark, impl):
    _bench(benchmark, impl, case_kv_commit_rows(impl))


# group -> case builder, for report.py --paired (interleaved codecspec/numpy timing)
CASES = {
    G_VERIFY_TREE: case_verify_tree,
    G_VERIFY_TREE_COLD: case_verify_tree_cycled,
    G_TREE_BUILD: case_tree_build_masks,
    G_BATCH: case_verify_tree_batch,
    G_GROUPS_SMALL: case_groups_small,
    G_GROUPS_LARGE: case_groups_large,
    G_SAMPLE: case_sample,
    G_WARP: case_warp,
    G_KV: case_kv_commit,
    G_KV_ROWS: case_kv_commit_rows,
}
SLOW = {G_GROUPS_LARGE}
