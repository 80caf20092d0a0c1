"""Exact two-sample rank (Mann–Whitney / Wilcoxon rank-sum) null distributions, with ties.

The null distribution is the permutation distribution of the candidate arm's rank sum over
all C(n+m, n) ways to split the pooled values, computed exactly by counting (a dynamic
programme over tie groups), so tied values — error counts, integer metrics, identical
replicates — get their exact p-value instead of the normal approximation. Hand-written
because scipy's exact Mann–Whitney refuses ties (it falls back to the asymptotic test) and
``scipy.stats.permutation_test`` enumerates or samples splits one by one, which is far
slower for 1,000 metrics; results are checked against brute-force enumeration in the tests.

Rank sums are kept in units of half ranks (twice the mid-rank), so every value is an integer.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np
from scipy import stats

EXACT_MAX_N = 50  # exact up to 50 replicates per arm; normal approximation (tie-corrected) beyond


def tie_pattern(pooled: np.ndarray) -> tuple[int, ...]:
    """Sizes of the groups of equal values of ``pooled``, in increasing value order."""
    _, counts = np.unique(pooled, return_counts=True)
    return tuple(int(c) for c in counts)


@lru_cache(maxsize=512)
def ranksum_distribution(n: int, pattern: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(support, probabilities) of twice the rank sum of ``n`` items drawn without replacement
    from a pool whose tie groups have sizes ``pattern`` (mid-ranks within a group)."""
    total = sum(pattern)
    max_s = 2 * sum(range(total - n + 1, total + 1))
    # dp[j, s]: number of ways to choose j items so far with doubled rank sum s (floats: the
    # counts reach C(100, 50) ≈ 1e29, beyond int64; relative error stays ~1e-16)
    dp = np.zeros((n + 1, max_s + 1))
    dp[0, 0] = 1.0
    start = 0
    for size in pattern:
        r2 = 2 * start + size + 1  # twice the mid-rank of ranks start+1 .. start+size
        new = dp.copy()  # choosing 0 of this group
        for c in range(1, min(size, n) + 1):
            w = math.comb(size, c)
            shift = c * r2
            if shift > max_s:
                break
            new[c:, shift:] += w * dp[: n + 1 - c, : max_s + 1 - shift]
        dp = new
        start += size
    counts = dp[n]
    support = np.nonzero(counts)[0]
    probs = counts[support] / math.comb(total, n)
    return support.astype(np.int64), probs


@lru_cache(maxsize=512)
def _cumulative(n: int, pattern: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    support, probs = ranksum_distribution(n, pattern)
    lower = np.minimum(np.cumsum(probs), 1.0)  # P(S <= support[i])
    upper = np.minimum(np.cumsum(probs[::-1])[::-1], 1.0)  # P(S >= support[i])
    return support, lower, upper


def exact_pvalues(n: int, pattern: tuple[int, ...], s2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P(S ≤ s), P(S ≥ s) and the two-sided P(|S − E| ≥ |s − E|) for observed doubled rank
    sums ``s2`` (one per metric) of the first arm (size ``n``) under one tie pattern."""
    support, lower, upper = _cumulative(n, pattern)
    support_, probs = ranksum_distribution(n, pattern)
    s2 = np.asarray(s2, dtype=np.int64)
    i_lo = np.searchsorted(support, s2, side="right") - 1
    i_hi = np.searchsorted(support, s2, side="left")
    p_le = np.where(i_lo >= 0, lower[np.clip(i_lo, 0, None)], 0.0)
    p_ge = np.where(i_hi < support.size, upper[np.clip(i_hi, None, support.size - 1)], 0.0)
    total = sum(pattern)
    e2 = n * (total + 1)  # twice the null mean of the rank sum
    dev = np.abs(support_ - e2)
    obs = np.abs(s2 - e2)
    # two-sided: mass of outcomes at least as far from the mean as the observed one
    order = np.argsort(dev, kind="stable")
    dev_sorted = dev[order]
    tail = np.cumsum(probs[order][::-1])[::-1]
    j = np.searchsorted(dev_sorted, obs, side="left")
    p_two = np.where(j < dev_sorted.size, tail[np.clip(j, None, dev_sorted.size - 1)], 0.0)
    return np.minimum(p_le, 1.0), np.minimum(p_ge, 1.0), np.minimum(p_two, 1.0)


def asymptotic_pvalues(n: int, m: int, pooled_counts: Sequence[int], s2: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normal approximation with tie correction and continuity correction (as scipy's)."""
    total = n + m
    t = np.asarray(pooled_counts, dtype=float)
    var = n * m / 12.0 * ((total + 1) - (t**3 - t).sum() / (total * (total - 1)))
    u = np.asarray(s2, dtype=float) / 2 - n * (n + 1) / 2  # U of the first arm
    mu = n * m / 2.0
    if var <= 0:
        one = np.ones_like(u)
        return one, one, one
    sd = math.sqrt(var)
    p_le = stats.norm.cdf((u - mu + 0.5) / sd)
    p_ge = stats.norm.sf((u - mu - 0.5) / sd)
    p_two = np.minimum(1.0, 2 * stats.norm.sf((np.abs(u - mu) - 0.5) / sd))
    return p_le, p_ge, p_two


def rank_pvalues(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """(P(lower), P(higher), two-sided) for "x tends lower / higher than y", exact with ties."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    pooled = np.concatenate([xa, ya])
    ranks2 = (2 * stats.rankdata(pooled)).astype(np.int64)
    s2 = np.array([ranks2[: xa.size].sum()])
    if xa.size <= EXACT_MAX_N and ya.size <= EXACT_MAX_N:
        lo, hi, two = exact_pvalues(xa.size, tie_pattern(pooled), s2)
    else:
        lo, hi, two = asymptotic_pvalues(xa.size, ya.size, tie_pattern(pooled), s2)
    return float(lo[0]), float(hi[0]), float(two[0])


@lru_cache(maxsize=256)
def mw_null_cdf(n: int, m: int) -> np.ndarray:
    """Exact null CDF of the Mann–Whitney U statistic for sample sizes n and m (no ties):
    ``cdf[u] = P(U ≤ u)`` for u = 0..n·m."""
    support, probs = ranksum_distribution(int(n), (1,) * (int(n) + int(m)))
    u = (support // 2 - n * (n + 1) // 2).astype(int)
    pmf = np.zeros(n * m + 1)
    pmf[u] = probs
    return np.minimum(np.cumsum(pmf), 1.0)


REL_TOL = 1e-9


def rejects(p: "float | np.ndarray", alpha: float) -> "bool | np.ndarray":
    """The one rejection rule every test, reachability check and verdict uses: p ≤ α, with a
    relative tolerance of 1e-9 so that binary rounding cannot split them (α = 1 − 0.9 is
    0.09999999999999998, and Holm's 2 × 1/20 is 0.1: the exact test chosen because its smallest
    p reaches α/2 must then reject at that p). NaN never rejects. Arrays give arrays."""
    return np.less_equal(p, alpha * (1 + REL_TOL))


# Past this log C(n+m, n) the floor 1/C is below 1e-300: zero for every α a spec can set
# (confidenceLevel < 1) and for Holm over any family size, so it is not computed exactly.
_LOG_FLOOR_NEGLIGIBLE = 690.0


def smallest_one_sided_p(n: int, m: int) -> float:
    """The smallest one-sided exact p attainable with n vs m replicates: 1 / C(n+m, n).

    Computed in log space first: C(n+m, n) overflows a float from n = m = 515 and takes
    ever longer as an integer, while any floor under 1e-300 gates alike (returned as 0.0)."""
    n, m = int(n), int(m)
    log_c = math.lgamma(n + m + 1) - math.lgamma(n + 1) - math.lgamma(m + 1)
    if log_c > _LOG_FLOOR_NEGLIGIBLE:
        return 0.0
    return 1.0 / math.comb(n + m, n)


def smallest_gating_n(family: int, alpha: float, *, max_n: int = 50) -> int | None:
    """Fewest replicates per arm (n = m) at which a one-sided exact rank test can pass Holm's
    first threshold α / family; None when not even ``max_n`` can."""
    for n in range(2, max_n + 1):
        if rejects(smallest_one_sided_p(n, n), alpha / max(1, family)):
            return n
    return None
