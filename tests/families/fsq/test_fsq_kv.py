"""FSQ packing (mixed radix, first level most significant), factorized sampling (independent
heads side by side), the Bernoulli stop head, and kv_commit (cache row moves), per
docs/api-extensions.md."""

import itertools

import numpy as np
import pytest
from stats import N_DRAWS, assert_law, counts_of, law_ok, make_logits, np_warp

import codecspec as cs


def sp(t, k=0, p=1.0):
    return cs.SamplingParams(temperature=t, top_k=k, top_p=p)


# ------------------------------------------------------------------------------------------
# fsq_pack / fsq_unpack


def np_pack(ch, levels):
    out = np.zeros(ch.shape[:-1], dtype=np.int64)
    for i, lv in enumerate(levels):
        out = out * lv + ch[..., i]
    return out


def test_fsq_8766_all_codes():
    levels = [8, 7, 6, 6]
    grid = np.array(list(itertools.product(*[range(lv) for lv in levels])), dtype=np.int64)
    assert len(grid) == 2016
    packed = np.asarray(cs.fsq_pack(grid, levels))
    assert packed.dtype == np.int64 and packed.shape == (2016,)
    np.testing.assert_array_equal(packed, np.arange(2016))  # first level most significant
    un = np.asarray(cs.fsq_unpack(np.arange(2016), levels))
    assert un.dtype == np.int64 and un.shape == (2016, 4)
    np.testing.assert_array_equal(un, grid)
    np.testing.assert_array_equal(cs.fsq_pack(np.array([1, 0, 0, 0]), levels), 252)
    np.testing.assert_array_equal(cs.fsq_pack(np.array([0, 0, 1, 0]), levels), 6)


@pytest.mark.parametrize(
    "levels, shape",
    [([5], (7,)), ([2, 2, 2], (3, 4)), ([3, 5, 7, 9, 4], (2, 3, 5)), ([8, 7, 6, 6], (3, 8))],
)
def test_fsq_round_trip(levels, shape):
    rng = np.random.default_rng(len(levels))
    ch = np.stack([rng.integers(0, lv, size=shape) for lv in levels], axis=-1)
    for dtype in (np.int64, np.int32):
        packed = np.asarray(cs.fsq_pack(ch.astype(dtype), levels))
        assert packed.shape == shape
        np.testing.assert_array_equal(packed, np_pack(ch, levels))
        np.testing.assert_array_equal(cs.fsq_unpack(packed, levels), ch)


@pytest.mark.parametrize("bad", [[8, 0, 0, 0], [0, 7, 0, 0], [0, 0, 0, 6], [-1, 0, 0, 0]])
def test_fsq_pack_out_of_range(bad):
    with pytest.raises(ValueError, match="channels"):
        cs.fsq_pack(np.array([[0, 0, 0, 0], bad]), [8, 7, 6, 6])


def test_fsq_unpack_out_of_range_and_bad_levels():
    with pytest.raises(ValueError, match="packed"):
        cs.fsq_unpack(np.array([0, 2016]), [8, 7, 6, 6])
    with pytest.raises(ValueError, match="packed"):
        cs.fsq_unpack(np.array([-1]), [8, 7, 6, 6])
    with pytest.raises(ValueError, match="levels"):
        cs.fsq_pack(np.array([[0, 0]]), [3, 0])
    with pytest.raises(ValueError, match="levels"):
        cs.fsq_unpack(np.array([0]), [3, -2])
    with pytest.raises(ValueError, match="channels|levels"):
        cs.fsq_pack(np.array([[0, 0, 0]]), [8, 7, 6, 6])  # last dim != len(levels)


# ------------------------------------------------------------------------------------------
# sample_factorized

HEADS = [5, 3, 8]


@pytest.mark.parametrize("params", [(1.0, 0, 1.0), (0.9, 3, 1.0), (1.3, 0, 0.8)])
def test_sample_factorized_law(params):
    n = N_DRAWS
    rng = np.random.default_rng(int(params[0] * 10) + params[1])
    row = np.concatenate([make_logits(rng, (h,), ninf_frac=0.1, params=params) for h in HEADS])
    x = np.ascontiguousarray(np.broadcast_to(row, (n, row.size)))
    g = cs.Generator(seed=3)
    s = np.asarray(cs.sample_factorized(x, HEADS, sp(*params), g))
    assert s.dtype == np.int32 and s.shape == (n, len(HEADS))
    assert g.step == 1
    off = np.cumsum([0] + HEADS)
    laws = [np_warp(row[off[c] : off[c + 1]], *params) for c in range(len(HEADS))]
    for c, h in enumerate(HEADS):
        assert ((s[:, c] >= 0) & (s[:, c] < h)).all()
        assert_law(counts_of(s[:, c], h), laws[c], n, what=f"head {c}")
    # heads are independent: joint law of heads 0 and 2 is the product law
    joint = s[:, 0].astype(np.int64) * HEADS[2] + s[:, 2]
    assert_law(counts_of(joint, HEADS[0] * HEADS[2]), np.outer(laws[0], laws[2]).ravel(), n)
    # power: per-head laws at another temperature are rejected by the same counts
    wrong = [np_warp(row[off[c] : off[c + 1]], params[0] * 1.6, *params[1:]) for c in range(3)]
    assert not all(law_ok(counts_of(s[:, c], h), wrong[c], n) for c, h in enumerate(HEADS))
    if params[1]:
        # top-k applied to the whole concatenated row instead of per head is also rejected
        whole = np_warp(row, params[0], params[1], params[2])
        parts = [whole[off[c] : off[c + 1]] for c in range(3)]
        assert not all(
            p.sum() > 0 and law_ok(counts_of(s[:, c], HEADS[c]), p / p.sum(), n)
            for c, p in enumerate(parts)
        )


def test_sample_factorized_greedy_and_shape():
    rng = np.random.default_rng(1)
    x = make_logits(rng, (2, 3, sum(HEADS)))
    g = cs.Generator(seed=1)
    s = np.asarray(cs.sample_factorized(x, HEADS, sp(0.0), g))
    assert s.shape == (2, 3, 3) and g.step == 0
    off = np.cumsum([0] + HEADS)
    for c in range(3):
        np.testing.assert_array_equal(s[..., c], np.argmax(x[..., off[c] : off[c + 1]], axis=-1))


def test_sample_factorized_gepard_shape():
    rng = np.random.default_rng(2)
    heads = [8, 7, 6, 6] * 8  # 32 channels
    x = make_logits(rng, (4, sum(heads)))
    s = np.asarray(cs.sample_factorized(x, heads, sp(1.0), cs.Generator(seed=2)))
    assert s.shape == (4, 32)
    assert (s < np.array(heads)).all() and (s >= 0).all()


# ------------------------------------------------------------------------------------------
# sample_stop


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@pytest.mark.parametrize("temperature", [1.0, 0.7, 2.0])
def test_sample_stop_law(temperature):
    n = N_DRAWS
    logits = np.array([-2.0, -0.3, 0.0, 0.8, 3.0], dtype=np.float32)
    x = np.ascontiguousarray(np.broadcast_to(logits, (n, logits.size)))
    g = cs.Generator(seed=4)
    s = np.asarray(cs.sample_stop(x, g, temperature=temperature))
    assert s.dtype == np.bool_ and s.shape == x.shape
    assert g.step == 1
    for j, lg in enumerate(logits):
        p = _sigmoid(float(lg) / temperature)
        assert_law(counts_of(s[:, j].astype(np.int64), 2), [1 - p, p], n, what=f"logit {lg}")
    # power: a wrong temperature (ignoring T, or T off by 1.5x) is caught
    j = 3
    for wrong_t in {1.0, temperature * 1.5} - {temperature}:
        p = _sigmoid(float(logits[j]) / wrong_t)
        assert not law_ok(counts_of(s[:, j].astype(np.int64), 2), [1 - p, p], n)


def test_sample_stop_default_temperature_and_scalar_shape():
    """Without `temperature` the law is sigmoid(logit) (temperature 1): checked on logits that
    do not saturate, where temperatures 0.7 and 1.5 give laws the test tells apart."""
    g = cs.Generator(seed=5)
    s = np.asarray(cs.sample_stop(np.zeros((3, 2), np.float32), g))
    assert s.shape == (3, 2) and s.dtype == np.bool_
    n = N_DRAWS
    logits = np.array([-1.0, 0.8, 2.0], dtype=np.float32)
    s = np.asarray(cs.sample_stop(np.ascontiguousarray(np.broadcast_to(logits, (n, 3))), g))
    for j, lg in enumerate(logits):
        counts = counts_of(s[:, j].astype(np.int64), 2)
        for t in (1.0, 0.7, 1.5):
            p = _sigmoid(float(lg) / t)
            assert law_ok(counts, [1 - p, p], n) == (t == 1.0), (lg, t)


# ------------------------------------------------------------------------------------------
# kv_commit


def _ref_commit_inplace(cache, past, nodes):
    out = cache.copy()
    for j, nd in enumerate(nodes):
        out[..., past + j, :] = cache[..., past + nd, :]
    return out


def _ref_commit_rows(cache, past, nodes, rows):
    out = cache.copy()
    for j, nd in enumerate(nodes):
        out[..., past + j, :] = rows[..., nd, :]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("lead", [(), (3,), (2, 2, 4)])
def test_kv_commit_inplace(dtype, lead):
    rng = np.random.default_rng(len(lead))
    cap, d, T = 24, 5, 7
    for past, nodes in [(0, [0]), (3, [0, 2, 5]), (10, [0, 1, 2, 3, 4, 5, 6]), (17, [0, 6])]:
        cache = rng.standard_normal(lead + (cap, d)).astype(dtype)
        want = _ref_commit_inplace(cache, past, nodes)
        before = cache.copy()
        new_len = cs.kv_commit(cache, past, np.array(nodes, dtype=np.int64))
        assert new_len == past + len(nodes)
        np.testing.assert_array_equal(cache[..., :new_len, :], want[..., :new_len, :])
        np.testing.assert_array_equal(cache[..., past + T :, :], before[..., past + T :, :])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("lead", [(), (3,), (2, 2, 4)])
def test_kv_commit_rows(dtype, lead):
    rng = np.random.default_rng(10 + len(lead))
    cap, d, T = 20, 3, 6
    for past, nodes in [(0, [0]), (4, [0, 3, 4]), (14, [0, 1, 2, 3, 4, 5])]:
        cache = rng.standard_normal(lead + (cap, d)).astype(dtype)
        rows = rng.standard_normal(lead + (T, d)).astype(dtype)
        want = _ref_commit_rows(cache, past, nodes, rows)
        new_len = cs.kv_commit(cache, past, np.array(nodes, dtype=np.int32), rows=rows)
        assert new_len == past + len(nodes)
        np.testing.assert_array_equal(cache, want)  # nothing else is touched


def test_kv_commit_errors():
    cache = np.zeros((2, 10, 4), dtype=np.float32)
    rows = np.zeros((2, 5, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="nodes"):
        cs.kv_commit(cache, 3, np.array([0, 7]))  # 3 + 7 >= capacity 10
    with pytest.raises(ValueError, match="nodes"):
        cs.kv_commit(cache, 0, np.array([0, 5]), rows=rows)  # rows has only 5 nodes
    with pytest.raises(ValueError, match="nodes"):
        cs.kv_commit(cache, 0, np.array([0, 3, 2]))  # not strictly increasing
    with pytest.raises(ValueError, match="nodes"):
        cs.kv_commit(cache, 0, np.array([0, -1]))
    with pytest.raises(ValueError, match="past_len|nodes"):
        cs.kv_commit(cache, 8, np.array([0, 1, 2]), rows=rows)  # 8 + 3 > 10
    with pytest.raises(ValueError, match="past_len"):
        cs.kv_commit(cache, 11, np.array([0]), rows=rows)
    with pytest.raises(ValueError, match="rows"):
        cs.kv_commit(cache, 0, np.array([0]), rows=np.zeros((3, 5, 4), np.float32))
    with pytest.raises(ValueError, match="rows"):
        cs.kv_commit(cache, 0, np.array([0]), rows=np.zeros((2, 5, 3), np.float32))
    with pytest.raises(ValueError, match="cache"):
        cs.kv_commit(np.zeros((2, 10, 4)), 0, np.array([0]))  # float64: cannot modify in place
    with pytest.raises(ValueError, match="cache"):
        cs.kv_commit(np.zeros((2, 4, 10), np.float32).transpose(0, 2, 1), 0, np.array([0]))
    # nothing was modified by the rejected calls
    assert (cache == 0).all()


def test_layout_independent():
    """A Fortran-ordered array must mean the same as its C-contiguous copy."""
    rng = np.random.default_rng(12)
    levels = [8, 7, 6, 6]
    ch = np.stack([rng.integers(0, lv, size=6) for lv in levels], axis=-1)
    np.testing.assert_array_equal(cs.fsq_pack(np.asfortranarray(ch), levels), np_pack(ch, levels))
    x = make_logits(rng, (4, 8))
    off = [0, 5, 8]
    s = np.asarray(
        cs.sample_factorized(np.asfortranarray(x), [5, 3], sp(0.0), cs.Generator(seed=0))
    )
    for c in range(2):
        np.testing.assert_array_equal(s[:, c], np.argmax(x[:, off[c] : off[c + 1]], axis=-1))
    sl = np.array([[60.0, -60.0, 60.0], [-60.0, -60.0, 60.0]], dtype=np.float32)
    got = np.asarray(cs.sample_stop(np.asfortranarray(sl), cs.Generator(seed=0)))
    np.testing.assert_array_equal(got, sl > 0)
    cache = np.zeros((10, 4), np.float32)
    rows = rng.standard_normal((5, 4)).astype(np.float32)
    cs.kv_commit(cache, 2, np.array([0, 2, 3]), rows=np.asfortranarray(rows))
    np.testing.assert_array_equal(cache[2:5], rows[[0, 2, 3]])
