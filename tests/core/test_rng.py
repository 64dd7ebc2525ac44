"""cs.Generator (counter-based, keyed by (seed, stream); `step` counts drawing calls) and batch
independence of verify_tree_batch (docs/api-extensions.md)."""

import numpy as np
import pytest
from stats import assert_law, counts_of, law_ok, make_logits, random_tree_paths, softmax

import codecspec as cs

KINDS = ["topk", "iid", "swor"]


def sp(t, k=0, p=1.0):
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


def test_attributes_and_defaults():
    g = cs.Generator(seed=1234)
    assert g.seed == 1234 and g.stream == 0 and g.step == 0
    h = cs.Generator(seed=7, stream=3)
    assert h.seed == 7 and h.stream == 3 and h.step == 0
    for attr in ("seed", "stream", "step"):
        with pytest.raises(AttributeError):
            setattr(g, attr, 5)


def test_same_seed_identical():
    a, b = cs.Generator(seed=42), cs.Generator(seed=42)
    for n in (1, 7, 1000):
        np.testing.assert_array_equal(a.random(n), b.random(n))
    assert a.step == b.step == 3


def test_different_seeds_and_streams_differ():
    a = cs.Generator(seed=1).random(64)
    assert not np.array_equal(a, cs.Generator(seed=2).random(64))
    assert not np.array_equal(a, cs.Generator(seed=1, stream=1).random(64))
    big = cs.Generator(seed=2**63 + 5).random(64)
    assert not np.array_equal(big, cs.Generator(seed=5).random(64))


def test_successive_calls_differ():
    g = cs.Generator(seed=3)
    draws = [g.random(16) for _ in range(50)]
    assert len({d.tobytes() for d in draws}) == 50


def test_random_range_dtype_and_uniformity():
    g = cs.Generator(seed=2024)
    n = 1 << 18
    u = g.random(n)
    assert u.dtype == np.float64 and u.shape == (n,)
    assert (u > 0).all() and (u <= 1).all(), "random() must lie in (0, 1]"
    bins = 64
    c = counts_of(np.minimum((u * bins).astype(np.int64), bins - 1), bins)
    assert_law(c, np.full(bins, 1 / bins), n, what="uniform bins")
    # successive pairs are independent
    pairs = np.minimum((u * 8).astype(np.int64), 7)
    pc = counts_of(pairs[0::2] * 8 + pairs[1::2], 64)
    assert_law(pc, np.full(64, 1 / 64), n // 2, what="uniform pairs")
    assert not law_ok(counts_of(pairs[0::2] * 8 + pairs[0::2], 64), np.full(64, 1 / 64), n // 2)
    # fine resolution: more than 2**20 distinct values among 2**18 draws is not required, but
    # the draws must not be coarsely quantised
    assert len(np.unique(u)) > n * 0.99
    # power: a skewed generator fails the same check
    assert not law_ok(
        counts_of(np.minimum((u**1.05 * bins).astype(np.int64), bins - 1), bins),
        np.full(bins, 1 / bins),
        n,
    )


def test_fork():
    g = cs.Generator(seed=10)
    f1, f1b, f2 = g.fork(1), g.fork(1), g.fork(2)
    assert f1.step == 0 and f1.seed == g.seed
    np.testing.assert_array_equal(f1.random(32), f1b.random(32))
    assert not np.array_equal(g.fork(1).random(32), f2.random(32))
    assert not np.array_equal(g.fork(1).random(32), g.copy().random(32))
    # fork of a fork is independent of both levels
    ff = g.fork(1).fork(1).random(32)
    assert not np.array_equal(ff, g.fork(1).random(32))
    assert not np.array_equal(ff, g.random(32))
    np.testing.assert_array_equal(ff, g.fork(1).fork(1).random(32))
    # forking does not move the parent
    h = cs.Generator(seed=10)
    h.fork(5)
    np.testing.assert_array_equal(h.random(8), cs.Generator(seed=10).random(8))


def test_fork_streams_uncorrelated():
    g = cs.Generator(seed=77)
    n = 1 << 14
    a = g.fork(0).random(n)
    b = g.fork(1).random(n)
    ia, ib = (a * 8).astype(np.int64) % 8, (b * 8).astype(np.int64) % 8
    assert_law(counts_of(ia * 8 + ib, 64), np.full(64, 1 / 64), n, what="fork pairs")
    # power: two copies of one stream (a broken fork) fail the same check
    assert not law_ok(counts_of(ia * 8 + ia, 64), np.full(64, 1 / 64), n)


def test_copy_semantics():
    g = cs.Generator(seed=5)
    g.random(3)
    c = g.copy()
    assert c.seed == g.seed and c.stream == g.stream and c.step == g.step == 1
    x = c.random(10)
    assert c.step == 2 and g.step == 1, "drawing from the copy must not move the original"
    np.testing.assert_array_equal(g.random(10), x)


def test_step_counts_drawing_calls():
    g = cs.Generator(seed=1)
    v = 6
    rng = np.random.default_rng(0)
    rows = make_logits(rng, (4, v))
    q = softmax(make_logits(rng, (3, v))).astype(np.float32)
    x = np.array([1, 2, 3], dtype=np.int32)
    tree = cs.DraftTree.from_paths([(0,), (1,), (0, 0)])
    tok = np.array([0, 1, 2, 3], dtype=np.int32)
    calls = [
        (lambda: g.random(5), 1),
        (lambda: g.random(1), 1),
        (lambda: cs.sample(rows, sp(1.0), g), 1),
        (lambda: cs.sample(rows, sp(0.0), g), 0),
        (lambda: cs.verify_chain(rows, x, sp(0.8), g, draft_probs=q), 1),
        (lambda: cs.verify_chain(rows, x, sp(0.8), g), 1),
        (lambda: cs.verify_chain(rows, x, sp(0.0), g, draft_probs=q), 0),
        (lambda: cs.verify_tree(tree, tok, rows, sp(1.0), g), 1),
        (lambda: cs.verify_tree(tree, tok, rows, sp(1.0), g, rows * 0 + 1 / v, "iid"), 1),
        (lambda: cs.verify_tree(tree, tok, rows, sp(0.0), g), 0),
    ]
    for i, (fn, inc) in enumerate(calls):
        before = g.step
        fn()
        assert g.step == before + inc, f"call {i}: step {before} -> {g.step}, expected +{inc}"


def test_results_depend_on_step():
    """Same generator, successive calls use fresh randomness (keyed by step)."""
    g = cs.Generator(seed=8)
    rows = np.zeros((1, 50), dtype=np.float32)
    s = [int(cs.sample(rows, sp(1.0), g)[0]) for _ in range(64)]
    assert len(set(s)) > 20


# ------------------------------------------------------------------------------------------
# batch independence


def _random_stream(rng, kind, v):
    paths = random_tree_paths(rng, int(rng.integers(0, 9)), max_depth=3, max_rank=3)
    tree = cs.DraftTree.from_paths(paths)
    T = tree.num_nodes
    rows = make_logits(rng, (T, v), ninf_frac=0.1)
    q = softmax(make_logits(rng, (T, v)))
    tok = np.zeros(T, dtype=np.int32)
    par = np.asarray(tree.parents)
    for i in range(T):
        ch = np.flatnonzero(par == i)
        if len(ch) == 0:
            continue
        if kind == "iid":
            tok[ch] = rng.choice(v, size=len(ch), p=q[i])
        elif kind == "swor":
            tok[ch] = rng.choice(v, size=len(ch), replace=False, p=q[i])
        else:
            tok[ch] = rng.permutation(v)[: len(ch)]
    tok[0] = rng.integers(v)
    return tree, tok, rows, q.astype(np.float32)


def _batch(streams, params, gens, kind):
    trees = [s[0] for s in streams]
    tok = np.concatenate([s[1] for s in streams]).astype(np.int32)
    rows = np.concatenate([s[2] for s in streams]).astype(np.float32)
    q = None if kind == "topk" else np.concatenate([s[3] for s in streams])
    return cs.verify_tree_batch(trees, tok, rows, params, gens, draft_probs=q, draft_kind=kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("params", [(1.0, 0, 1.0), (0.8, 5, 0.9), (0.0, 0, 1.0)])
def test_batch_equals_single_stream(kind, params):
    rng = np.random.default_rng(KINDS.index(kind))
    v = 12
    p = sp(*params)
    base = cs.Generator(seed=99)
    for _rep in range(15):
        b = int(rng.integers(1, 9))
        streams = [_random_stream(rng, kind, v) for _ in range(b)]
        sid = [int(x) for x in rng.permutation(1000)[:b]]
        gens = [base.fork(s) for s in sid]
        for gg in gens[: b // 2]:  # generators at different steps
            gg.random(1)
        single = []
        for (tree, tok, rows, q), gg in zip(streams, gens):
            r = cs.verify_tree(tree, tok, rows, p, gg.copy(), None if kind == "topk" else q, kind)
            single.append(r)
        steps = [gg.step for gg in gens]
        res = _batch(streams, p, gens, kind)
        assert len(res) == b
        for j in range(b):
            np.testing.assert_array_equal(res[j].tokens, single[j].tokens, err_msg=f"stream {j}")
            np.testing.assert_array_equal(res[j].nodes, single[j].nodes)
            assert res[j].num_accepted == single[j].num_accepted
            inc = 0 if params[0] == 0 else 1
            assert gens[j].step == steps[j] + inc, "each stream's generator advances by one"
        # another batch composition: the streams reversed, plus extra streams around them
        extra = [_random_stream(rng, kind, v) for _ in range(3)]
        gens2 = [base.fork(s) for s in sid]
        for gg in gens2[: b // 2]:
            gg.random(1)
        order = list(reversed(range(b)))
        comp = [extra[0]] + [streams[j] for j in order] + extra[1:]
        gcomp = [base.fork(5000)] + [gens2[j] for j in order] + [base.fork(5001), base.fork(5002)]
        res2 = _batch(comp, p, gcomp, kind)
        for pos, j in enumerate(order, start=1):
            np.testing.assert_array_equal(res2[pos].tokens, single[j].tokens)
            np.testing.assert_array_equal(res2[pos].nodes, single[j].nodes)


def test_batch_many_streams_parallel_deterministic():
    rng = np.random.default_rng(3)
    v = 20
    streams = [_random_stream(rng, "iid", v) for _ in range(256)]
    base = cs.Generator(seed=4)
    r1 = _batch(streams, sp(1.0), [base.fork(i) for i in range(256)], "iid")
    r2 = _batch(streams, sp(1.0), [base.fork(i) for i in range(256)], "iid")
    for a, b in zip(r1, r2):
        np.testing.assert_array_equal(a.tokens, b.tokens)
    for (tree, tok, rows, q), a, i in zip(streams, r1, range(256)):
        s = cs.verify_tree(tree, tok, rows, sp(1.0), base.fork(i), q, "iid")
        np.testing.assert_array_equal(a.tokens, s.tokens)
