"""cs.AcousticGroups (PCG similarity groups, docs/design.md section 2) against a numpy brute force:
group k = {t : cos(e_k, e_t) >= threshold} (always containing k), singleton tokens only in their
own group, w[k, t] = 1/|groups(t)|, coarse(p)[k] = sum_t w[k, t] p(t)."""

import numpy as np
import pytest
from stats import group_weights

import codecspec as cs


def brute_groups(emb, thr, singletons=()):
    e = np.asarray(emb, dtype=np.float64)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    cos = e @ e.T
    v = len(e)
    s = set(int(x) for x in singletons)
    groups = []
    for k in range(v):
        if k in s:
            groups.append({k})
        else:
            groups.append({t for t in range(v) if cos[k, t] >= thr and t not in s} | {k})
    return groups, cos


def safe_threshold(cos, target, margin=1e-4):
    """A threshold near `target` at least `margin` away from every off-diagonal cosine."""
    vals = np.sort(cos[~np.eye(len(cos), dtype=bool)])
    for delta in np.linspace(0, 0.2, 2001):
        for thr in (target + delta, target - delta):
            if np.min(np.abs(vals - thr)) >= margin:
                return float(thr)
    raise AssertionError("test bug: no safe threshold")


def members_of(grp, k):
    return sorted(int(t) for t in np.asarray(grp.members(k)).ravel())


def groups_of(grp, t):
    return sorted(int(k) for k in np.asarray(grp.groups_of(t)).ravel())


def check_against(grp, groups, v):
    assert grp.num_groups == len(groups)
    for k, g in enumerate(groups):
        assert members_of(grp, k) == sorted(g), f"group {k}"
    for t in range(v):
        assert groups_of(grp, t) == sorted(k for k, g in enumerate(groups) if t in g), f"token {t}"
    w = group_weights([sorted(g) for g in groups], v)
    rng = np.random.default_rng(v)
    p = rng.dirichlet(np.ones(v), size=(3, 2))
    p[0, 0, : v // 2] = 0
    p[0, 0] /= p[0, 0].sum()
    c = np.asarray(grp.coarse(p.astype(np.float32)))
    assert c.shape == (3, 2, len(groups))
    np.testing.assert_allclose(c, p @ w.T, atol=1e-6)
    np.testing.assert_allclose(c.sum(axis=-1), 1.0, atol=1e-5)
    c1 = np.asarray(grp.coarse(p[1, 1].astype(np.float32)))
    assert c1.shape == (len(groups),)
    np.testing.assert_allclose(c1, w @ p[1, 1], atol=1e-6)


@pytest.mark.parametrize("v, d, target", [(12, 3, 0.5), (30, 4, 0.3), (40, 8, 0.1), (25, 2, 0.9)])
def test_from_embeddings_vs_brute_force(v, d, target):
    rng = np.random.default_rng(v * d)
    emb = rng.standard_normal((v, d)).astype(np.float32)
    _, cos = brute_groups(emb, 0.0)
    thr = safe_threshold(cos, target)
    groups, _ = brute_groups(emb, thr)
    grp = cs.AcousticGroups.from_embeddings(emb, thr)
    check_against(grp, groups, v)
    assert any(len(g) > 1 for g in groups)  # the case really has overlapping groups


def test_from_embeddings_singletons():
    v, d = 20, 3
    rng = np.random.default_rng(5)
    emb = rng.standard_normal((v, d)).astype(np.float32)
    _, cos = brute_groups(emb, 0.0)
    thr = safe_threshold(cos, 0.2)
    sing = [0, 7, 19]
    groups, _ = brute_groups(emb, thr, sing)
    grp = cs.AcousticGroups.from_embeddings(emb, thr, singletons=sing)
    check_against(grp, groups, v)
    for s in sing:
        assert members_of(grp, s) == [s]
        assert groups_of(grp, s) == [s]


def test_from_embeddings_extreme_thresholds():
    v = 10
    rng = np.random.default_rng(6)
    emb = rng.standard_normal((v, 4)).astype(np.float32)
    grp = cs.AcousticGroups.from_embeddings(emb, 1.5)  # nothing is that similar: singletons
    check_against(grp, [{k} for k in range(v)], v)
    grp = cs.AcousticGroups.from_embeddings(emb, -1.5)  # everything is: one big group each
    check_against(grp, [set(range(v)) for _ in range(v)], v)
    p = rng.dirichlet(np.ones(v)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(grp.coarse(p)), np.full(v, 1 / v), atol=1e-6)


def test_duplicate_embeddings_same_group():
    emb = np.array([[1, 0], [1, 0], [0, 1], [2, 0.001], [-1, 0]], dtype=np.float32)
    grp = cs.AcousticGroups.from_embeddings(emb, 0.99)
    assert members_of(grp, 0) == [0, 1, 3]
    assert members_of(grp, 2) == [2]
    assert members_of(grp, 4) == [4]
    assert groups_of(grp, 1) == [0, 1, 3]


def test_from_members():
    members = [[0, 1, 2], [2, 3], [3, 4, 0], [5]]
    grp = cs.AcousticGroups.from_members(members, 6)
    check_against(grp, [set(m) for m in members], 6)
    p = np.array([0.1, 0.2, 0.3, 0.1, 0.2, 0.1], dtype=np.float32)
    # w: token 0 in groups 0,2 ; 2 in 0,1 ; 3 in 1,2 ; others alone
    want = [0.1 / 2 + 0.2 + 0.3 / 2, 0.3 / 2 + 0.1 / 2, 0.1 / 2 + 0.2 + 0.1 / 2, 0.1]
    np.testing.assert_allclose(np.asarray(grp.coarse(p)), want, atol=1e-6)


@pytest.mark.parametrize(
    "members, v",
    [
        ([[0, 1], [2, 6]], 6),  # token out of range
        ([[0, 1], [-1, 2]], 3),  # negative token
        ([[0, 1], [1]], 3),  # token 2 in no group: the coarse law would not sum to 1
    ],
)
def test_from_members_validation(members, v):
    with pytest.raises(ValueError, match="members|vocab_size"):
        cs.AcousticGroups.from_members(members, v)


def test_coarse_rejects_wrong_vocab():
    grp = cs.AcousticGroups.from_members([[0, 1], [1, 2]], 3)
    with pytest.raises(ValueError, match="probs"):
        grp.coarse(np.full(4, 0.25, dtype=np.float32))
    with pytest.raises(ValueError, match="probs"):
        grp.coarse(np.array([0.5, np.nan, 0.5], dtype=np.float32))
    with pytest.raises(ValueError, match="probs"):
        grp.coarse(np.array([0.5, -0.1, 0.6], dtype=np.float32))


def test_layout_independent():
    """A Fortran-ordered array must mean the same as its C-contiguous copy."""
    rng = np.random.default_rng(11)
    grp = cs.AcousticGroups.from_members([[0, 1], [1, 2], [3], [4, 0]], 5)
    p = rng.dirichlet(np.ones(5), size=7).astype(np.float32)
    w = group_weights([[0, 1], [1, 2], [3], [4, 0]], 5)
    np.testing.assert_allclose(np.asarray(grp.coarse(np.asfortranarray(p))), p @ w.T, atol=1e-6)
    emb = rng.standard_normal((8, 3)).astype(np.float32)
    _, cos = brute_groups(emb, 0.0)
    thr = safe_threshold(cos, 0.3)
    groups, _ = brute_groups(emb, thr)
    check_against(cs.AcousticGroups.from_embeddings(np.asfortranarray(emb), thr), groups, 8)
