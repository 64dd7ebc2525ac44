"""Does speculative decoding emit the same law as autoregressive decoding?

Two-sample chi-square homogeneity tests on per-position code histograms. Sparse cells are
pooled so that every expected count is at least 5 (the usual validity condition).
"""

from __future__ import annotations

import math

import numpy as np


def _gammaincc(a: float, x: float) -> float:
    """Regularised upper incomplete gamma Q(a, x): series for x < a + 1, Lentz continued
    fraction otherwise (both converge fast in their regions)."""
    if x <= 0:
        return 1.0
    lg = math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(-x + a * math.log(x) - lg))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return min(1.0, math.exp(-x + a * math.log(x) - lg) * h)


def chi2_sf(stat: float, dof: int) -> float:
    """P(X >= stat) for X ~ chi-square(dof)."""
    if dof <= 0:
        return 1.0
    return _gammaincc(dof / 2.0, stat / 2.0)


def homogeneity_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """p-value that count vectors `a` and `b` come from one categorical law."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    na, nb = a.sum(), b.sum()
    if na == 0 or nb == 0:
        return 1.0
    pooled = a + b
    keep = pooled > 0
    a, b, pooled = a[keep], b[keep], pooled[keep]
    # Pool the rarest cells until each expected count is >= 5 in both samples.
    order = np.argsort(pooled, kind="stable")
    a, b = a[order], b[order]
    frac = min(na, nb) / (na + nb)
    cells_a, cells_b, acc_a, acc_b = [], [], 0.0, 0.0
    for x, y in zip(a, b):
        acc_a, acc_b = acc_a + x, acc_b + y
        if (acc_a + acc_b) * frac >= 5:
            cells_a.append(acc_a)
            cells_b.append(acc_b)
            acc_a = acc_b = 0.0
    if acc_a + acc_b > 0:
        if cells_a:
            cells_a[-1] += acc_a
            cells_b[-1] += acc_b
        else:
            cells_a.append(acc_a)
            cells_b.append(acc_b)
    if len(cells_a) < 2:
        return 1.0
    ca, cb = np.array(cells_a), np.array(cells_b)
    tot = ca + cb
    ea, eb = tot * na / (na + nb), tot * nb / (na + nb)
    stat = float(((ca - ea) ** 2 / ea).sum() + ((cb - eb) ** 2 / eb).sum())
    return chi2_sf(stat, len(ca) - 1)


def per_position_pvalues(codes_a: np.ndarray, codes_b: np.ndarray, vocab: int) -> np.ndarray:
    """p-value per code position for two [N, G] code matrices (columns compared pairwise)."""
    codes_a, codes_b = np.asarray(codes_a), np.asarray(codes_b)
    if codes_a.ndim != 2 or codes_b.ndim != 2 or codes_a.shape[1] != codes_b.shape[1]:
        raise ValueError(
            f"codes: expected [N, G] arrays with equal G, got {codes_a.shape} and {codes_b.shape}"
        )
    out = []
    for j in range(codes_a.shape[1]):
        ha = np.bincount(codes_a[:, j], minlength=vocab)
        hb = np.bincount(codes_b[:, j], minlength=vocab)
        out.append(homogeneity_pvalue(ha, hb))
    return np.array(out)
