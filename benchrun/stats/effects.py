"""Per-metric effect of a candidate over a baseline, one metric at a time: the reference implementation.

The analysis works on a higher-is-better scale (values of lower-is-better metrics are negated),
on log values when every value of both arms is positive (a shift in log space is a ratio, and
a margin δ becomes the symmetric band |log ratio| ≤ log(1 + δ)), otherwise on the values
themselves (metrics that can be 0 — error counts, wrong values — are judged by their absolute
difference against an absolute margin from the spec). Per metric:

* the Hodges–Lehmann shift (median of the pairwise differences) with the exact distribution-free
  interval from the ordered differences and its actual coverage (exact without ties; with ties
  the closed interval covers at least that much), widened where needed to the shifts that
  Brunner–Munzel's test does not reject (:func:`hull`): the exact interval assumes both arms
  have one shape, and loses coverage when one is noisier (:mod:`benchrun.stats.bminterval`);
  where it widens, the coverage kind is ``widened`` (at least the exact coverage under equal
  shapes, about it under unequal spreads),
* exact permutation p-values of the rank-sum test, ties included: one-sided both ways and
  two-sided,
* the one-sided Welch t p-value on the same scale, which the gate uses when the exact rank test
  cannot reach the gating threshold (see :func:`benchrun.stats.compare.gate_tests`).

:mod:`benchrun.stats.batch` computes the same numbers for all metrics at once; the tests
hold the two equal on random inputs.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from scipy import stats

from benchrun.stats.bminterval import accepted, rounding
from benchrun.stats.ranktest import EXACT_MAX_N, mw_null_cdf, rank_pvalues, rejects


@lru_cache(maxsize=512)
def critical_rank(n: int, m: int, confidence: float) -> tuple[int, float]:
    """The rank k of the ordered pairwise differences for the interval [D(k), D(nm−k+1)],
    and that interval's coverage 1 − 2·P(U ≤ k−1) (no ties). k ≥ 1 always; the coverage says
    the truth when even [D(1), D(nm)] falls short of ``confidence``."""
    alpha = 1.0 - confidence
    if n <= EXACT_MAX_N and m <= EXACT_MAX_N:
        cdf = mw_null_cdf(n, m)
        ok = np.nonzero(cdf <= alpha / 2 + 1e-12)[0]  # values of k-1 allowed
        k = int(ok[-1]) + 1 if ok.size else 1
        k = min(k, (n * m + 1) // 2)
        return k, max(0.0, 1.0 - 2.0 * float(cdf[k - 1]))
    z = stats.norm.ppf(1 - alpha / 2)
    k = int(math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12)))
    return max(k, 1), confidence


@dataclass(frozen=True)
class Shift:
    """Hodges–Lehmann shift of x over y, its interval, and the rank-test p-values."""

    estimate: float
    low: float
    high: float
    coverage: float
    p_value: float  # two-sided
    method: str  # exact | asymptotic | degenerate | none
    p_lower: float = math.nan  # one-sided: x tends lower than y
    p_higher: float = math.nan  # one-sided: x tends higher than y
    coverage_kind: str = "exact"  # exact | at_least (ties) | approximate (beyond the exact range)


def hodges_lehmann(x: Sequence[float], y: Sequence[float], confidence: float) -> Shift:
    """HL estimate median(x_i − y_j), the interval from the ordered pairwise differences at the
    exact critical value, and the exact permutation p-values of the rank-sum test (ties exact)."""
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    n, m = xa.size, ya.size
    if n < 1 or m < 1:
        return Shift(math.nan, math.nan, math.nan, math.nan, math.nan, "none")
    diffs = np.sort(np.subtract.outer(xa, ya).ravel())
    est = float(np.median(diffs))
    k, cov = critical_rank(n, m, confidence)
    low, high = float(diffs[k - 1]), float(diffs[n * m - k])
    pooled = np.concatenate([xa, ya])
    exact = n <= EXACT_MAX_N and m <= EXACT_MAX_N
    if np.ptp(pooled) == 0:
        return Shift(est, low, high, cov, 1.0, "degenerate", 1.0, 1.0, "at_least")
    ties = np.unique(pooled).size < n + m
    if exact and not ties:
        # no ties: scipy's exact Mann–Whitney is the independent reference here
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p_lo = float(stats.mannwhitneyu(xa, ya, alternative="less", method="exact").pvalue)
            p_hi = float(stats.mannwhitneyu(xa, ya, alternative="greater", method="exact").pvalue)
            p_two = float(stats.mannwhitneyu(xa, ya, alternative="two-sided", method="exact").pvalue)
    else:
        p_lo, p_hi, p_two = rank_pvalues(xa, ya)
    kind = "approximate" if not exact else ("at_least" if ties else "exact")
    return Shift(est, low, high, cov, min(p_two, 1.0), "exact" if exact else "asymptotic",
                 min(p_lo, 1.0), min(p_hi, 1.0), kind)


def hull(x: np.ndarray, y: np.ndarray, low: np.ndarray, high: np.ndarray, kind: np.ndarray, confidence: float
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The interval [``low``, ``high``] of each row (candidate rows ``x``, baseline rows ``y``)
    widened to the shifts Brunner–Munzel's test does not reject at ``confidence``; a row it
    widens becomes coverage kind ``widened``: it contains the exact interval, so under one shape
    it covers at least ``ci_coverage``; it is widened because the shapes may differ, and then it
    covers about ``ci_coverage`` (93.6–94.6 % for a stated 95 % with one arm 4× as noisy:
    :mod:`benchrun.stats.bminterval`)."""
    b_low, b_high = accepted(x, y, confidence)
    tol = rounding(x, y)  # a bound an ulp beyond the exact one is the same bound (tied differences)
    new_low = np.where(b_low < low - tol, b_low, low)  # NaN (no Brunner–Munzel interval) keeps the exact bound
    new_high = np.where(b_high > high + tol, b_high, high)
    wider = (new_low < low) | (new_high > high)
    return new_low, new_high, np.where(wider, "widened", kind).astype(object)


def welch_lower(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided Welch t p-value for "x has a lower mean than y"; NaN when undefined (fewer
    than 2 values in an arm); the limit 0, 1 or 0.5 when neither arm varies."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n, m = xa.size, ya.size
    if n < 2 or m < 2:
        return math.nan
    vx, vy = xa.var(ddof=1) / n, ya.var(ddof=1) / m
    se2 = vx + vy
    if se2 == 0:
        # No spread in either arm: the data say the difference is certain (t is ±inf), so
        # p is 0 or 1; equal constants are no evidence either way.
        d = xa.mean() - ya.mean()
        return 0.0 if d < 0 else 1.0 if d > 0 else 0.5
    if not se2 > 0:
        return math.nan
    t = (xa.mean() - ya.mean()) / math.sqrt(se2)
    df = se2**2 / (vx**2 / (n - 1) + vy**2 / (m - 1))
    return float(stats.t.cdf(t, df))


def on_analysis_scale(baseline: Sequence[float], candidate: Sequence[float], direction: str
                      ) -> tuple[np.ndarray, np.ndarray, str]:
    """(candidate, baseline) on the higher-is-better analysis scale, and the scale's name:
    ``log`` when every value is positive, else ``absolute``."""
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    sign = 1.0 if direction == "higher" else -1.0
    if b.size and c.size and (b > 0).all() and (c > 0).all():
        return sign * np.log(c), sign * np.log(b), "log"
    return sign * c, sign * b, "absolute"


def effect(baseline: Sequence[float], candidate: Sequence[float], direction: str, confidence: float) -> dict[str, Any]:
    """Effect of candidate over baseline on the analysis scale (see the module docstring).

    ``shift``/``shift_low``/``shift_high`` are on the analysis scale (higher is better).
    On the log scale ``ratio``/``ci_low``/``ci_high`` are their exponentials (a ratio > 1 is
    better whatever the metric's direction); on the absolute scale ``difference`` and
    ``diff_ci_low``/``diff_ci_high`` are candidate − baseline in the metric's unit, and
    ``ratio`` is shown relative to the baseline median when that is not 0.
    """
    x, y, scale = on_analysis_scale(baseline, candidate, direction)
    s = hodges_lehmann(x, y, confidence)
    lows, highs, kinds = hull(x[None], y[None], np.array([s.low]), np.array([s.high]),
                              np.array([s.coverage_kind], dtype=object), confidence)
    s = Shift(s.estimate, float(lows[0]), float(highs[0]), s.coverage, s.p_value, s.method, s.p_lower, s.p_higher,
              str(kinds[0]))
    out: dict[str, Any] = {
        "shift": s.estimate, "shift_low": s.low, "shift_high": s.high, "ci_coverage": s.coverage,
        "ci_coverage_kind": s.coverage_kind, "p_value": s.p_value, "p_regression": s.p_lower,
        "p_improvement": s.p_higher, "t_regression": welch_lower(x, y), "t_improvement": welch_lower(y, x),
        "test": s.method, "scale": scale,
        "ratio": math.nan, "ci_low": math.nan, "ci_high": math.nan,
        "difference": math.nan, "diff_ci_low": math.nan, "diff_ci_high": math.nan,
    }
    if scale == "log":
        out.update(ratio=math.exp(s.estimate), ci_low=math.exp(s.low), ci_high=math.exp(s.high))
    else:
        sign = 1.0 if direction == "higher" else -1.0
        lo, hi = sorted((sign * s.low + 0.0, sign * s.high + 0.0))  # + 0.0: no negative zero
        out.update(difference=sign * s.estimate + 0.0, diff_ci_low=lo, diff_ci_high=hi)
        ref = abs(float(np.median(np.asarray(baseline, dtype=float)))) if len(baseline) else 0.0
        if ref:
            out.update(ratio=1 + s.estimate / ref, ci_low=1 + s.low / ref, ci_high=1 + s.high / ref)
    return out


def verdict_on_scale(shift: float, low: float, high: float, p_regression_adj: float, p_improvement_adj: float,
                     alpha: float, margin: float) -> str:
    """regression / improvement: significant in that direction after correction, the whole
    interval on that side of 0 and the estimate beyond the margin; no_change: the interval
    inside [−margin, +margin] (needs a margin > 0); otherwise inconclusive.

    On the log scale the margin is log(1 + δ), so +3 % and −3 % (as ratios 1.03 and 1/1.03)
    sit exactly on the band's edges whatever the metric's direction.
    """
    if any(math.isnan(v) for v in (shift, low, high)):
        return "inconclusive"
    if rejects(p_regression_adj, alpha) and high < 0 and shift < -margin:
        return "regression"
    if rejects(p_improvement_adj, alpha) and low > 0 and shift > margin:
        return "improvement"
    if margin > 0 and low >= -margin and high <= margin:
        return "no_change"
    return "inconclusive"


def verdict(ratio: float, ci_low: float, ci_high: float, p_adjusted: float, alpha: float, delta: float) -> str:
    """The verdict of a ratio on the higher-is-better scale with margin δ: the symmetric log
    band [1/(1+δ), 1+δ]; ``p_adjusted`` serves both directions."""
    if any(math.isnan(v) or v <= 0 for v in (ratio, ci_low, ci_high)):
        return "inconclusive"
    return verdict_on_scale(math.log(ratio), math.log(ci_low), math.log(ci_high), p_adjusted, p_adjusted,
                            alpha, math.log1p(delta))
