"""The effects of :mod:`benchrun.stats.effects` for many metrics at once (one array per sample-size pair).

All metrics with n candidate and m baseline replicates form two matrices; the pairwise
differences of every metric are one (metrics × n·m) array, sorted once per row, which gives
the Hodges–Lehmann estimates, the interval bounds (at the critical rank cached per (n, m)) and
the Mann–Whitney U statistics. p-values come from the exact null distribution cached per
(n, tie pattern) — one lookup for every tie-free metric of a group. Results equal the
per-metric reference (tests compare them on random inputs).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from benchrun.stats.effects import critical_rank, hull
from benchrun.stats.ranktest import EXACT_MAX_N, asymptotic_pvalues, exact_pvalues, tie_pattern

FIELDS = ("shift", "shift_low", "shift_high", "ci_coverage", "ci_coverage_kind", "p_value", "p_regression",
          "p_improvement", "t_regression", "t_improvement", "test", "scale", "ratio", "ci_low", "ci_high",
          "difference", "diff_ci_low", "diff_ci_high")


def _welch_lower(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row-wise one-sided Welch p for "x lower than y" (NaN where undefined; the limit where
    neither arm varies)."""
    n, m = x.shape[1], y.shape[1]
    vx = x.var(axis=1, ddof=1) / n
    vy = y.var(axis=1, ddof=1) / m
    se2 = vx + vy
    ok = se2 > 0
    out = np.full(x.shape[0], np.nan)
    if ok.any():
        t = (x.mean(axis=1)[ok] - y.mean(axis=1)[ok]) / np.sqrt(se2[ok])
        df = se2[ok] ** 2 / (vx[ok] ** 2 / (n - 1) + vy[ok] ** 2 / (m - 1))
        out[ok] = stats.t.cdf(t, df)
    const = se2 == 0  # neither arm varies: the limit of t (see effects.welch_lower)
    if const.any():
        d = x.mean(axis=1)[const] - y.mean(axis=1)[const]
        out[const] = np.where(d < 0, 0.0, np.where(d > 0, 1.0, 0.5))
    return out


def effects(baseline: np.ndarray, candidate: np.ndarray, higher: np.ndarray, confidence: float) -> dict[str, Any]:
    """Effects of every row: ``baseline`` (metrics × m), ``candidate`` (metrics × n), ``higher``
    (metrics,) True where higher is better. Returns one array per field of
    :func:`benchrun.stats.effects.effect`."""
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    rows, m = b.shape
    n = c.shape[1]
    sign = np.where(np.asarray(higher, dtype=bool), 1.0, -1.0)[:, None]
    log = (b > 0).all(axis=1) & (c > 0).all(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(log[:, None], sign * np.log(np.where(log[:, None], c, 1.0)), sign * c)
        y = np.where(log[:, None], sign * np.log(np.where(log[:, None], b, 1.0)), sign * b)
    diffs = (x[:, :, None] - y[:, None, :]).reshape(rows, n * m)
    srt = np.sort(diffs, axis=1)
    est = np.median(srt, axis=1)
    k, cov = critical_rank(n, m, confidence)
    low, high = srt[:, k - 1], srt[:, n * m - k]
    u2 = 2 * np.count_nonzero(diffs > 0, axis=1) + np.count_nonzero(diffs == 0, axis=1)  # 2U
    s2 = u2 + n * (n + 1)  # twice the candidate's rank sum
    pooled = np.sort(np.concatenate([x, y], axis=1), axis=1)
    ties = (np.diff(pooled, axis=1) == 0).any(axis=1)
    degenerate = pooled[:, 0] == pooled[:, -1]
    p_lo, p_hi, p_two = (np.empty(rows) for _ in range(3))
    exact = n <= EXACT_MAX_N and m <= EXACT_MAX_N
    plain = ~ties
    if plain.any():
        fn = (lambda s: exact_pvalues(n, (1,) * (n + m), s)) if exact else \
             (lambda s: asymptotic_pvalues(n, m, (1,) * (n + m), s))
        p_lo[plain], p_hi[plain], p_two[plain] = fn(s2[plain])
    for i in np.nonzero(ties)[0]:  # rare for continuous metrics; each pattern's distribution is cached
        pattern = tie_pattern(pooled[i])
        fn2 = exact_pvalues if exact else (lambda nn, pat, s: asymptotic_pvalues(nn, m, pat, s))
        lo_i, hi_i, two_i = fn2(n, pattern, s2[i:i + 1])
        p_lo[i], p_hi[i], p_two[i] = lo_i[0], hi_i[0], two_i[0]
    p_lo[degenerate] = p_hi[degenerate] = p_two[degenerate] = 1.0
    test = np.where(degenerate, "degenerate", "exact" if exact else "asymptotic").astype(object)
    # beyond EXACT_MAX_N the normal approximation's interval is approximate, ties or not (as effects.py says)
    kind = np.full(rows, "approximate", dtype=object) if not exact else np.where(ties, "at_least", "exact").astype(object)
    low, high, kind = hull(x, y, low, high, kind, confidence)
    out: dict[str, Any] = {
        "shift": est, "shift_low": low, "shift_high": high, "ci_coverage": np.full(rows, cov),
        "ci_coverage_kind": kind, "p_value": np.minimum(p_two, 1.0), "p_regression": np.minimum(p_lo, 1.0),
        "p_improvement": np.minimum(p_hi, 1.0), "t_regression": _welch_lower(x, y),
        "t_improvement": _welch_lower(y, x), "test": test,
        "scale": np.where(log, "log", "absolute").astype(object),
    }
    nan = np.full(rows, np.nan)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        out["ratio"] = np.where(log, np.exp(est), nan)
        out["ci_low"] = np.where(log, np.exp(low), nan)
        out["ci_high"] = np.where(log, np.exp(high), nan)
        s1 = sign[:, 0]
        a, z = s1 * low, s1 * high
        out["difference"] = np.where(log, nan, s1 * est + 0.0)  # + 0.0: no negative zero
        out["diff_ci_low"] = np.where(log, nan, np.minimum(a, z) + 0.0)
        out["diff_ci_high"] = np.where(log, nan, np.maximum(a, z) + 0.0)
        ref = np.abs(np.median(b, axis=1))
        rel = ~log & (ref != 0)
        safe = np.where(rel, ref, 1.0)
        out["ratio"] = np.where(rel, 1 + est / safe, out["ratio"])
        out["ci_low"] = np.where(rel, 1 + low / safe, out["ci_low"])
        out["ci_high"] = np.where(rel, 1 + high / safe, out["ci_high"])
    return out


def nan_effect() -> dict[str, Any]:
    """The fields of a metric that could not be compared."""
    out: dict[str, Any] = {f: math.nan for f in FIELDS}
    out.update(test="none", scale="", ci_coverage_kind="")
    return out
