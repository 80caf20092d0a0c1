"""Spread apart from shift: a regression (or improvement) verdict is re-examined with Brunner–Munzel's test, which allows unequal spreads, and the Ansari–Bradley scale test, so that a noisier candidate is reported as ``spread changed`` and not as a shift of its median.

The rank test behind the verdicts assumes both arms have the same spread; a candidate four
times as noisy as its baseline makes it reject a true no-shift 5.6–6.7 % of the time at a
nominal 5 % (the issue's audit). Only the rows that reached a regression or improvement
verdict are examined (a handful, so the analysis of many metrics stays fast): on the log
values (the differences for a metric with values ≤ 0), Brunner–Munzel's one-sided p in the
verdict's direction is scaled by the same correction factor the row's gate p received
(p_adjusted / p_gate, Holm or BH); when it no longer passes α the verdict becomes
``spread changed`` if the Ansari–Bradley test on the median-centred values finds the spreads
differ at α, else ``inconclusive`` (the note says why; ``spread_ratio`` is candidate MAD /
baseline MAD). A complete separation of the arms, where Brunner–Munzel's variance is 0,
keeps the verdict.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
from scipy import stats

SPREAD_CHANGED = "spread changed"


def _scaled(b: np.ndarray, c: np.ndarray, higher: bool) -> tuple[np.ndarray, np.ndarray]:
    """Both arms on the analysis scale, signed so that larger is better."""
    sign = 1.0 if higher else -1.0
    if (b > 0).all() and (c > 0).all():
        return sign * np.log(b), sign * np.log(c)
    return sign * b, sign * c


def brunner_munzel_p(b: np.ndarray, c: np.ndarray, worse: bool) -> float:
    """One-sided Brunner–Munzel p that the candidate is worse (``worse``) or better; 0 when the
    arms are completely separated in that direction (its variance estimate is 0)."""
    if np.max(c) < np.min(b):
        return 0.0 if worse else 1.0
    if np.min(c) > np.max(b):
        return 1.0 if worse else 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(stats.brunnermunzel(c, b, alternative="less" if worse else "greater").pvalue)
    return p if math.isfinite(p) else 1.0


def scale_p(b: np.ndarray, c: np.ndarray) -> float:
    """Two-sided Ansari–Bradley p on the median-centred values."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = float(stats.ansari(b - np.median(b), c - np.median(c)).pvalue)
    return p if math.isfinite(p) else 1.0


def _mad(x: np.ndarray) -> float:
    return float(np.median(np.abs(x - np.median(x))))


def apply_spread(df: Any, values_of: Callable[[int], tuple[np.ndarray, np.ndarray] | None], alpha: float) -> None:
    """Re-examine the regression/improvement rows of a comparison frame (in place); see the
    module docstring. ``values_of(i)`` gives row i's ok values (baseline, candidate) or None."""
    for col, init in (("p_brunner_munzel", math.nan), ("p_spread", math.nan), ("spread_ratio", math.nan)):
        if col not in df.columns:
            df[col] = init
    for i in np.nonzero(df["verdict"].isin(["regression", "improvement"]).to_numpy())[0]:
        i = int(i)
        if "tail_method" in df.columns and df.at[i, "tail_method"]:
            continue  # a p99 judged on requests
        vals = values_of(i)
        if vals is None:
            continue
        b, c = _scaled(*(np.asarray(v, dtype=float) for v in vals), df.at[i, "direction"] == "higher")
        if b.size < 3 or c.size < 3:
            continue
        worse = df.at[i, "verdict"] == "regression"
        if df.at[i, "gating"]:  # Holm on the one-sided gate p
            raw = df.at[i, "p_gate"] if worse else df.at[i, "p_improvement"]
            adj = df.at[i, "p_adjusted"] if worse else df.at[i, "p_adjusted_improvement"]
        else:  # BH on the two-sided p
            raw, adj = df.at[i, "p_value"], df.at[i, "p_adjusted"]
        factor = float(adj / raw) if raw and raw > 0 and math.isfinite(raw) and math.isfinite(adj) else 1.0
        p_bm = brunner_munzel_p(b, c, worse)
        mb, mc = _mad(b), _mad(c)
        df.at[i, "p_brunner_munzel"] = p_bm
        df.at[i, "spread_ratio"] = mc / mb if mb > 0 else math.inf if mc > 0 else 1.0
        if min(1.0, p_bm * max(factor, 1.0)) < alpha:
            continue  # the shift stands (the scale test is run only where it decides something)
        p_sc = scale_p(b, c)
        df.at[i, "p_spread"] = p_sc
        ratio, was = df.at[i, "spread_ratio"], df.at[i, "verdict"]
        if p_sc < alpha:
            df.at[i, "verdict"] = SPREAD_CHANGED
            note = f"spread changed (candidate MAD {ratio:.2g}x the baseline's); the median's shift is not established"
        else:
            df.at[i, "verdict"] = "inconclusive"
            note = f"the rank test's {was} is not confirmed by Brunner-Munzel (unequal spreads allowed)"
        df.at[i, "note"] = "; ".join(x for x in (str(df.at[i, "note"] or ""), note) if x)
