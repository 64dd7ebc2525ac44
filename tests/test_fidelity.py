"""The p-values behind the end-to-end law tests (`codecspec.fidelity`): the hand-written
chi-square survival function and the two-sample homogeneity test against scipy, and the
homogeneity p-value uniform under the null, with a p-value inflated by one degree of freedom
that the same uniformity check must catch (such a regression would silently weaken every law
test that uses these p-values)."""

import numpy as np
import pytest
from scipy import stats

from codecspec import fidelity
from codecspec.fidelity import chi2_sf, homogeneity_pvalue, per_position_pvalues

DOFS = [1, 2, 3, 4, 7, 10, 31, 100, 511, 2000]
TAILS = [1 - 1e-12, 0.999, 0.9, 0.5, 0.1, 1e-3, 1e-8, 1e-20, 1e-60, 1e-200]


@pytest.mark.parametrize("dof", DOFS)
def test_chi2_sf_matches_scipy_from_the_bulk_to_the_far_tail(dof):
    stats_grid = [stats.chi2.isf(p, dof) for p in TAILS] + [1e-6, 0.5 * dof, dof, 3.0 * dof]
    for x in stats_grid:
        want = stats.chi2.sf(x, dof)
        got = chi2_sf(x, dof)
        assert 0.0 <= got <= 1.0
        if want < 1e-290:  # past float64's range: both underflow
            assert got < 1e-280, (x, dof, got)
            continue
        # relative error of p (log scale): what a law test's threshold reads
        assert abs(np.log(got) - np.log(want)) < 1e-9, (x, dof, got, want)


def test_chi2_sf_edges():
    assert chi2_sf(0.0, 3) == 1.0 and chi2_sf(-1.0, 3) == 1.0
    assert chi2_sf(5.0, 0) == 1.0  # no degree of freedom: nothing to reject
    assert chi2_sf(1e5, 3) == pytest.approx(stats.chi2.sf(1e5, 3), abs=1e-300)


def test_homogeneity_without_pooling_is_scipys_contingency_test():
    """Every expected count >= 5: the statistic and p-value of a 2 x k contingency table."""
    rng = np.random.default_rng(0)
    for k in (2, 3, 8, 40):
        for n in (300, 5000):
            law = rng.dirichlet(np.full(k, 5.0))
            a, b = rng.multinomial(n, law), rng.multinomial(n // 2 + 7, law)
            table = np.stack([a, b])
            exp = stats.contingency.expected_freq(table)
            if exp.min() < 5:
                continue
            want = stats.chi2_contingency(table, correction=False).pvalue
            assert homogeneity_pvalue(a, b) == pytest.approx(want, rel=1e-9, abs=1e-300)


def _pooled_reference(a, b):
    """The pooling rule written from its description: drop empty cells, sort by the pooled
    count, merge runs of the rarest cells until each merged cell expects >= 5 in the smaller
    sample; a short remainder joins the last merged cell."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    frac = min(a.sum(), b.sum()) / (a.sum() + b.sum())
    keep = (a + b) > 0
    order = np.argsort((a + b)[keep], kind="stable")
    a, b = a[keep][order], b[keep][order]
    cells, start, run = [], 0, 0.0
    for i in range(len(a)):
        run += a[i] + b[i]
        if run * frac >= 5:
            cells.append((start, i + 1))
            start, run = i + 1, 0.0
    if start < len(a):
        if cells:
            cells[-1] = (cells[-1][0], len(a))
        else:
            cells.append((start, len(a)))
    return np.array([[a[s:e].sum() for s, e in cells], [b[s:e].sum() for s, e in cells]])


def test_homogeneity_with_pooling_is_scipys_test_on_the_pooled_table():
    rng = np.random.default_rng(1)
    checked = 0
    for trial in range(60):
        k = int(rng.integers(5, 200))
        law = rng.dirichlet(np.full(k, 0.3))  # many rare cells
        n = int(rng.integers(40, 3000))
        a, b = rng.multinomial(n, law), rng.multinomial(int(rng.integers(40, 3000)), law)
        table = _pooled_reference(a, b)
        if table.shape[1] < 2:
            assert homogeneity_pvalue(a, b) == 1.0
            continue
        want = stats.chi2_contingency(table, correction=False).pvalue
        assert homogeneity_pvalue(a, b) == pytest.approx(want, rel=1e-9, abs=1e-300), trial
        checked += 1
    assert checked > 40


def _null_pvalues(n_tests=2000, seed=2):
    """p-values of pairs of samples drawn from one law with rare cells (pooling at work)."""
    rng = np.random.default_rng(seed)
    law = rng.dirichlet(np.full(24, 0.6))
    return np.array(
        [
            homogeneity_pvalue(
                rng.multinomial(int(rng.integers(200, 800)), law),
                rng.multinomial(int(rng.integers(200, 800)), law),
            )
            for _ in range(n_tests)
        ]
    )


def _uniform(p) -> bool:
    """p-values look uniform: Kolmogorov-Smirnov against U(0, 1), and the 5% and 1% rejection
    rates inside 4-sigma binomial bounds."""
    n = len(p)
    if stats.kstest(p, "uniform").pvalue < 1e-4:
        return False
    for alpha in (0.05, 0.01):
        sd = np.sqrt(alpha * (1 - alpha) / n)
        if abs(np.mean(p < alpha) - alpha) > 4 * sd:
            return False
    return True


def test_homogeneity_pvalue_is_uniform_under_the_null():
    assert _uniform(_null_pvalues())


def test_the_uniformity_check_catches_an_inflated_pvalue(monkeypatch):
    """One degree of freedom too many inflates every p-value: law tests would pass laws they
    should reject. The same uniformity check catches it."""
    honest = fidelity.chi2_sf
    monkeypatch.setattr(fidelity, "chi2_sf", lambda stat, dof: honest(stat, dof + 1))
    assert not _uniform(_null_pvalues())


def test_homogeneity_pvalue_rejects_different_laws():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(16))
    q = 0.8 * p + 0.2 * rng.dirichlet(np.ones(16))
    assert homogeneity_pvalue(rng.multinomial(20000, p), rng.multinomial(20000, q)) < 1e-6


def test_degenerate_inputs_give_no_evidence():
    assert homogeneity_pvalue(np.zeros(4), np.array([1, 2, 3, 4])) == 1.0
    assert homogeneity_pvalue(np.array([3, 0]), np.array([4, 0])) == 1.0  # one cell


def test_per_position_pvalues_compares_columns_and_names_bad_shapes():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 8, (3000, 3))
    b = rng.integers(0, 8, (3000, 3))
    b[:, 2] = rng.integers(0, 4, 3000)  # column 2 from another law
    p = per_position_pvalues(a, b, 8)
    assert p.shape == (3,) and p[:2].min() > 1e-4 and p[2] < 1e-12
    with pytest.raises(ValueError, match=r"^codes\b"):
        per_position_pvalues(a, b[:, :2], 8)
