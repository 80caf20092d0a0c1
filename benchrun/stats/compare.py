"""Candidate-versus-baseline comparison: Hodges–Lehmann effects with exact Mann–Whitney intervals,
verdicts against a no-change margin δ, Holm (gating) and Benjamini–Hochberg (reported) corrections,
and one confirmation round before a gating regression is declared.

Effects are ratios on a higher-is-better scale: > 1 is better whatever the metric's direction.
They are estimated on log values (a shift in log space is a ratio), one value per replicate.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
from scipy import stats

from benchrun.errors import BenchrunError
from benchrun.stats.describe import SERIES_KEYS

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

VERDICTS = ("regression", "improvement", "no_change", "inconclusive")
EXACT_MAX_N = 50  # exact null distribution up to 50 x 50 replicates; normal approximation beyond

# The fresh replicates of a confirmation round: given the keys (suite, case, metric) of the
# suspected gating regressions, return (baseline_table, candidate_table) of new replicates
# of both arms, launched interleaved (the launcher's job). Same columns as replicate_table.
ConfirmHook = Callable[[list[tuple[str, str, str]]], "tuple[pd.DataFrame, pd.DataFrame]"]


@lru_cache(maxsize=256)
def mw_null_cdf(n: int, m: int) -> np.ndarray:
    """Exact null CDF of the Mann–Whitney U statistic for sample sizes n and m (no ties).

    The counts are the coefficients of the Gaussian binomial [n+m choose n]_q, built exactly
    with integer arithmetic; ``cdf[u] = P(U <= u)`` for u = 0..n·m.
    """
    n, m = sorted((int(n), int(m)))
    size = n * m + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, n + 1):
        # multiply by (1 - q^(m+i)), then divide by (1 - q^i): both exact on integers
        step = m + i
        for j in range(size - 1, step - 1, -1):
            poly[j] -= poly[j - step]
        for j in range(i, size):
            poly[j] += poly[j - i]
    total = math.comb(n + m, n)
    counts = np.array([c / total for c in poly], dtype=float)
    return np.minimum(np.cumsum(counts), 1.0)


def _critical_rank(n: int, m: int, confidence: float) -> tuple[int, float]:
    """The rank k of the ordered pairwise differences for the interval [D(k), D(nm−k+1)],
    and that interval's coverage 1 − 2·P(U ≤ k−1). k ≥ 1 always; the coverage says the truth."""
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
    """Hodges–Lehmann shift of x over y with its exact interval and the Mann–Whitney p-value."""

    estimate: float
    low: float
    high: float
    coverage: float
    p_value: float
    method: str


def hodges_lehmann(x: Sequence[float], y: Sequence[float], confidence: float) -> Shift:
    """HL estimate median(x_i − y_j), the interval from the ordered pairwise differences at the
    exact critical value, and the two-sided Mann–Whitney p-value (scipy, exact without ties)."""
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    n, m = xa.size, ya.size
    if n < 1 or m < 1:
        return Shift(math.nan, math.nan, math.nan, math.nan, math.nan, "none")
    diffs = np.sort(np.subtract.outer(xa, ya).ravel())
    est = float(np.median(diffs))
    k, cov = _critical_rank(n, m, confidence)
    low, high = float(diffs[k - 1]), float(diffs[n * m - k])
    if np.ptp(np.concatenate([xa, ya])) == 0:
        return Shift(est, low, high, cov, 1.0, "degenerate")
    ties = np.unique(np.concatenate([xa, ya])).size < n + m
    method = "exact" if (not ties and n <= EXACT_MAX_N and m <= EXACT_MAX_N) else "asymptotic"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(stats.mannwhitneyu(xa, ya, alternative="two-sided", method=method).pvalue)
    return Shift(est, low, high, cov, min(p, 1.0), method)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (NaN stays NaN and is not counted in the family)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.nonzero(~np.isnan(p))[0]
    if idx.size == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    m = order.size
    adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


def benjamini_hochberg(pvalues: Sequence[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (scipy.stats.false_discovery_control); NaN kept."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = stats.false_discovery_control(p[ok], method="bh")
    return out


def verdict(ratio: float, ci_low: float, ci_high: float, p_adjusted: float, alpha: float, delta: float) -> str:
    """regression / improvement: significant after correction, the whole interval on one side
    of 1 and the estimate beyond the margin δ; no_change: the interval inside [1−δ, 1+δ];
    otherwise inconclusive. Ratios are on the higher-is-better scale."""
    if any(math.isnan(v) for v in (ratio, ci_low, ci_high)):
        return "inconclusive"
    significant = not math.isnan(p_adjusted) and p_adjusted < alpha
    if significant and ci_high < 1.0 and ratio < 1.0 - delta:
        return "regression"
    if significant and ci_low > 1.0 and ratio > 1.0 + delta:
        return "improvement"
    if ci_low >= 1.0 - delta and ci_high <= 1.0 + delta:
        return "no_change"
    return "inconclusive"


def effect(baseline: Sequence[float], candidate: Sequence[float], direction: str, confidence: float) -> dict[str, Any]:
    """Ratio (higher-is-better scale), interval, coverage and p-value of candidate over baseline.

    Positive values go through logs; a metric with a value ≤ 0 is compared on a linear
    scale relative to the baseline median instead, and says so in ``scale``.
    """
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(candidate, dtype=float)
    sign = 1.0 if direction == "higher" else -1.0
    if b.size and c.size and (b > 0).all() and (c > 0).all():
        s = hodges_lehmann(sign * np.log(c), sign * np.log(b), confidence)
        ratio, lo, hi, scale = math.exp(s.estimate), math.exp(s.low), math.exp(s.high), "log"
    else:
        ref = abs(float(np.median(b))) if b.size else math.nan
        s = hodges_lehmann(sign * c, sign * b, confidence)
        if not ref:
            ratio = lo = hi = math.nan
        else:
            ratio, lo, hi = 1 + s.estimate / ref, 1 + s.low / ref, 1 + s.high / ref
        scale = "linear"
    return {"ratio": ratio, "ci_low": lo, "ci_high": hi, "ci_coverage": s.coverage,
            "p_value": s.p_value, "test": s.method, "scale": scale}


@dataclass
class Comparison:
    """The result of comparing two runs (or two replicate tables)."""

    rows: "pd.DataFrame"
    confidence: float
    suspected: list[tuple[str, str, str]] = field(default_factory=list)
    confirmed: list[tuple[str, str, str]] = field(default_factory=list)
    confirmation: str = "not_needed"  # not_needed | confirmed | not_confirmed | not_run | failed
    notes: list[str] = field(default_factory=list)
    confirmation_error: str = ""  # why a confirmation round that was needed gave no answer

    @property
    def regression_detected(self) -> bool:
        return bool(self.confirmed)

    def condition(self) -> dict[str, str]:
        """The ``RegressionDetected`` condition (type, status, reason, message) for status.json."""
        if self.confirmed:
            names = ", ".join("/".join(k) for k in self.confirmed)
            return {"type": "RegressionDetected", "status": "True", "reason": "ConfirmedRegression",
                    "message": f"gating regression confirmed by a fresh interleaved round: {names}"}
        if self.confirmation == "failed":
            names = ", ".join("/".join(k) for k in self.suspected)
            return {"type": "RegressionDetected", "status": "Unknown", "reason": "ConfirmationFailed",
                    "message": f"gating regression suspected on {names}, but the confirmation round gave no "
                               f"answer: {self.confirmation_error}"}
        if self.confirmation == "not_run":
            names = ", ".join("/".join(k) for k in self.suspected)
            return {"type": "RegressionDetected", "status": "Unknown", "reason": "UnconfirmedRegression",
                    "message": f"gating regression awaits a confirmation round: {names}"}
        if self.confirmation == "not_confirmed":
            return {"type": "RegressionDetected", "status": "False", "reason": "NotConfirmed",
                    "message": "a suspected gating regression did not reproduce in the confirmation round"}
        return {"type": "RegressionDetected", "status": "False", "reason": "NoGatingRegression",
                "message": "no gating metric regressed"}

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready object per metric (NaN becomes None)."""
        out = []
        for rec in self.rows.to_dict(orient="records"):
            out.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()})
        return out


def _label(suite: str, case: str, metric: str) -> str:
    return f"{suite}/{metric}" + (f"[{case}]" if case else "")


def compare_tables(
    baseline: "pd.DataFrame",
    candidate: "pd.DataFrame",
    *,
    confidence: float = 0.95,
    primary: set[str] | frozenset[str] = frozenset(),
    delta_pct: Callable[[str], float] | float = 3.0,
    confirm: ConfirmHook | None = None,
    _round: int = 0,
) -> Comparison:
    """Compare two replicate tables metric by metric and return the verdicts.

    Primary metrics (by metric name) gate, with Holm's correction over the gating family;
    the others get Benjamini–Hochberg and are reported without gating. A gating regression
    calls ``confirm`` once for fresh interleaved replicates of both arms; only a regression
    that reproduces on those makes ``regression_detected`` true.
    """
    import pandas as pd

    alpha = 1.0 - confidence
    delta_of = delta_pct if callable(delta_pct) else (lambda _m, d=float(delta_pct): d)
    b_groups = {k: g for k, g in baseline.groupby(SERIES_KEYS, sort=True)}
    c_groups = {k: g for k, g in candidate.groupby(SERIES_KEYS, sort=True)}
    rows = []
    for key in sorted(set(b_groups) | set(c_groups)):
        suite, case, metric = key
        bg, cg = b_groups.get(key), c_groups.get(key)
        ref = bg if bg is not None else cg
        row: dict[str, Any] = {
            "metric": _label(suite, case, metric), "suite": suite, "case": case, "name": metric,
            "unit": ref["unit"].iloc[0], "direction": ref["direction"].iloc[0],
            "gating": metric in primary, "delta_pct": float(delta_of(metric)),
            "n_baseline": 0 if bg is None else len(bg), "n_candidate": 0 if cg is None else len(cg),
            "baseline_median": math.nan if bg is None else float(bg["value"].median()),
            "candidate_median": math.nan if cg is None else float(cg["value"].median()),
            "ratio": math.nan, "ci_low": math.nan, "ci_high": math.nan, "ci_coverage": math.nan,
            "p_value": math.nan, "test": "none", "scale": "", "note": "",
        }
        if bg is None or cg is None:
            row["note"] = "absent in the " + ("baseline" if bg is None else "candidate")
        elif len(bg) < 2 or len(cg) < 2:
            row["note"] = "fewer than 2 replicates in an arm"
        else:
            row.update(effect(bg["value"].to_numpy(), cg["value"].to_numpy(), row["direction"], confidence))
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return Comparison(rows=df, confidence=confidence, notes=["no metrics to compare"])
    gating = df["gating"].to_numpy(bool)
    df["p_adjusted"] = np.nan
    df["correction"] = np.where(gating, "holm", "bh")
    df.loc[gating, "p_adjusted"] = holm(df.loc[gating, "p_value"].to_numpy())
    df.loc[~gating, "p_adjusted"] = benjamini_hochberg(df.loc[~gating, "p_value"].to_numpy())
    df["verdict"] = [
        verdict(r.ratio, r.ci_low, r.ci_high, r.p_adjusted, alpha, r.delta_pct / 100.0)
        for r in df.itertuples()
    ]
    df["confirmation"] = ""
    result = Comparison(rows=df, confidence=confidence)
    n_gating = int(np.count_nonzero(gating & df["p_value"].notna().to_numpy()))
    if n_gating:
        nb = int(df.loc[gating, "n_baseline"].min())
        nc = int(df.loc[gating, "n_candidate"].min())
        if nb >= 2 and nc >= 2 and nb <= EXACT_MAX_N and nc <= EXACT_MAX_N:
            smallest = 2.0 * float(mw_null_cdf(nb, nc)[0])
            if smallest >= alpha / n_gating:
                result.notes.append(
                    f"{n_gating} gating tests with {nb} vs {nc} replicates: the smallest exact p "
                    f"({smallest:.4f}) cannot pass Holm's first threshold ({alpha / n_gating:.4f}); "
                    "add replicates or fewer primary metrics"
                )
    suspected = [
        (r.suite, r.case, r.name) for r in df.itertuples() if r.gating and r.verdict == "regression"
    ]
    result.suspected = suspected
    if not suspected:
        return result
    if _round > 0 or confirm is None:
        result.confirmation = "not_run"
        df.loc[df["gating"] & (df["verdict"] == "regression"), "confirmation"] = "not_run"
        return result
    log.info("gating regression suspected on %d metric(s); running one confirmation round", len(suspected))
    try:
        fresh_b, fresh_c = confirm(list(suspected))
    except BenchrunError as exc:  # e.g. a run whose pinned spec is gone: keep the verdicts, say why
        log.warning("confirmation round could not run: %s", exc)
        return _unanswered(result, suspected, str(exc))
    keyset = set(suspected)
    sub_b, sub_c = _only(fresh_b, keyset), _only(fresh_c, keyset)
    # A key without 2 fresh ok replicates in each arm was not tested again: it is neither
    # confirmed nor cleared.
    untested = [k for k in suspected if min(_count(sub_b, k), _count(sub_c, k)) < 2]
    again = compare_tables(sub_b, sub_c, confidence=confidence, primary=primary, delta_pct=delta_of, _round=1)
    confirmed_keys = {
        (r.suite, r.case, r.name) for r in again.rows.itertuples() if r.verdict == "regression"
    } if not again.rows.empty else set()
    result.confirmed = [k for k in suspected if k in confirmed_keys]
    for k in suspected:
        state = "confirmed" if k in confirmed_keys else "failed" if k in untested else "not_confirmed"
        df.loc[_mask(df, k), "confirmation"] = state
    if not result.confirmed and untested:
        return _unanswered(result, untested, "fewer than 2 ok fresh replicates in an arm of "
                           + ", ".join("/".join(k) for k in untested) + " (see the confirmation round's logs)")
    result.confirmation = "confirmed" if result.confirmed else "not_confirmed"
    return result


def _mask(df: "pd.DataFrame", key: tuple[str, str, str]) -> "pd.Series":
    return (df["suite"] == key[0]) & (df["case"] == key[1]) & (df["name"] == key[2])


def _only(table: "pd.DataFrame", keys: set[tuple[str, str, str]]) -> "pd.DataFrame":
    """The rows of a replicate table whose (suite, case, metric) is in ``keys``."""
    if table.empty:
        return table
    return table[np.array([tuple(k) in keys for k in table[SERIES_KEYS].itertuples(index=False)], dtype=bool)]


def _count(table: "pd.DataFrame", key: tuple[str, str, str]) -> int:
    if table.empty:
        return 0
    return int(((table["suite"] == key[0]) & (table["case"] == key[1]) & (table["metric"] == key[2])).sum())


def _unanswered(result: Comparison, keys: list[tuple[str, str, str]], why: str) -> Comparison:
    """A confirmation round that was needed but gave no answer: RegressionDetected=Unknown, with why."""
    result.confirmation = "failed"
    result.confirmation_error = why
    result.notes.append(f"confirmation round gave no answer: {why}")
    for k in keys:
        result.rows.loc[_mask(result.rows, k), "confirmation"] = "failed"
    return result
