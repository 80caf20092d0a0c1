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

Every other compared row is tested for a change of spread as well (:func:`flag_spread`:
Brown–Forsythe, Benjamini–Hochberg over the rows): a noisier candidate whose median did not
move is reported (``spread`` wider/narrower; an inconclusive row becomes ``spread changed``).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
from scipy import stats

from benchrun.stats.ranktest import rejects

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
            # the p Holm adjusted on that side: the rank test's, or Welch's where the gate fell back to it
            raw = df.at[i, "p_gate"] if worse else df.at[i, "p_gate_improvement"]
            adj = df.at[i, "p_adjusted"] if worse else df.at[i, "p_adjusted_improvement"]
        else:  # BH on the two-sided p
            raw, adj = df.at[i, "p_value"], df.at[i, "p_adjusted"]
        factor = float(adj / raw) if raw and raw > 0 and math.isfinite(raw) and math.isfinite(adj) else 1.0
        p_bm = brunner_munzel_p(b, c, worse)
        mb, mc = _mad(b), _mad(c)
        df.at[i, "p_brunner_munzel"] = p_bm
        df.at[i, "spread_ratio"] = mc / mb if mb > 0 else math.inf if mc > 0 else 1.0
        if rejects(min(1.0, p_bm * max(factor, 1.0)), alpha):
            continue  # the shift stands (the scale test is run only where it decides something)
        p_sc = scale_p(b, c)
        df.at[i, "p_spread"] = p_sc
        ratio, was = df.at[i, "spread_ratio"], df.at[i, "verdict"]
        if rejects(p_sc, alpha):
            df.at[i, "verdict"] = SPREAD_CHANGED
            note = f"spread changed (candidate MAD {ratio:.2g}x the baseline's); the median's shift is not established"
        else:
            df.at[i, "verdict"] = "inconclusive"
            note = f"the rank test's {was} is not confirmed by Brunner-Munzel (unequal spreads allowed)"
        df.at[i, "note"] = "; ".join(x for x in (str(df.at[i, "note"] or ""), note) if x)


def brown_forsythe_p(b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Two-sided Brown–Forsythe p per row of two value matrices (rows: metrics; columns:
    replicates): the pooled two-sample t on the absolute deviations from each arm's median,
    i.e. Levene's test centred on the median (``scipy.stats.levene(center="median")``, one
    vector step for every row)."""
    return _brown_forsythe(b, c)[0]


def _brown_forsythe(b: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p, candidate / baseline mean absolute deviation from the median) per row: the ratio is
    the quantity the test compares, so its side of 1 is the side the test found."""
    b, c = np.asarray(b, dtype=float), np.asarray(c, dtype=float)
    zb = np.abs(b - np.median(b, axis=1, keepdims=True))
    zc = np.abs(c - np.median(c, axis=1, keepdims=True))
    nb, nc = b.shape[1], c.shape[1]
    mb, mc = zb.mean(axis=1), zc.mean(axis=1)
    ss = ((zb - mb[:, None]) ** 2).sum(axis=1) + ((zc - mc[:, None]) ** 2).sum(axis=1)
    dof = nb + nc - 2
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (mc - mb) / np.sqrt(ss / dof * (1 / nb + 1 / nc))
    p = 2 * stats.t.sf(np.abs(t), dof)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(mb > 0, mc / np.where(mb > 0, mb, 1.0), np.where(mc > 0, np.inf, 1.0))
    return np.where(np.isfinite(p), p, np.where((mc != mb) & (ss == 0), 0.0, 1.0)), ratio


def flag_spread(df: Any, matrices: Callable[[np.ndarray, int, int], tuple[np.ndarray, np.ndarray]],
                nb: np.ndarray, nc: np.ndarray, comparable: np.ndarray, alpha: float) -> None:
    """Report a change of spread on every compared row, not only on flagged ones (in place).

    For each row with at least 3 replicates an arm (not a context row, not a p99 judged on
    requests), the Brown–Forsythe test on the analysis scale (log values where all are
    positive); the p's are Benjamini–Hochberg adjusted over those rows (``p_spread_adjusted``),
    and a row below α gets ``spread`` = ``wider`` or ``narrower`` (the side of 1 of the ratio the
    test compares: candidate over baseline mean absolute deviation from the median) and a note.
    An ``inconclusive`` row becomes ``spread changed`` (the candidate is noisier or steadier, its
    median not shown to move) unless it is screened as a suspect (``paired.screened``: a
    confirmation round, where one runs, takes it up; without one it stays inconclusive and says
    its spread); a ``no_change`` or shift verdict stays and says its spread.
    ``matrices(rows, n_b, n_c)`` gives the rows' ok values per arm."""
    from benchrun.stats.family import benjamini_hochberg

    rows = comparable.size
    for col, init in (("spread", ""), ("p_spread_adjusted", math.nan)):
        if col not in df.columns:
            df[col] = init
    role = df["role"].to_numpy()[:rows] if "role" in df.columns else np.full(rows, "")
    tail = (df["tail_method"].astype(str).to_numpy()[:rows] != "") if "tail_method" in df.columns else np.zeros(rows, bool)
    ok = comparable & (nb[:rows] >= 3) & (nc[:rows] >= 3) & (role != "context") & ~tail
    p = np.full(rows, np.nan)
    ratio = np.full(rows, np.nan)
    for n_b, n_c in sorted({(int(x), int(y)) for x, y in zip(nb[:rows][ok], nc[:rows][ok])}):
        sel = np.nonzero(ok & (nb[:rows] == n_b) & (nc[:rows] == n_c))[0]
        bm, cm = (np.asarray(m, dtype=float) for m in matrices(sel, n_b, n_c))
        pos = (bm > 0).all(axis=1) & (cm > 0).all(axis=1)
        bm = np.where(pos[:, None], np.log(np.where(pos[:, None], bm, 1.0)), bm)
        cm = np.where(pos[:, None], np.log(np.where(pos[:, None], cm, 1.0)), cm)
        p[sel], ratio[sel] = _brown_forsythe(bm, cm)
    tested = np.nonzero(~np.isnan(p))[0]
    if not tested.size:
        return
    adj = benjamini_hochberg(p[tested])
    # a gating row the confirmation round would take up (``paired.screened``) keeps its verdict:
    # a regression with a wider spread is still a suspect
    needed = ("gating", "p_gate", "shift", "margin", "name")
    if all(c in df.columns for c in needed):
        from benchrun.stats.paired import screened

        kept = np.asarray(screened(df, alpha), dtype=bool)
    else:
        kept = np.zeros(len(df), bool)
    for i, a in zip(tested, adj):
        i = int(i)
        df.at[i, "p_spread_adjusted"] = float(a)
        if not rejects(a, alpha):
            continue
        wider = bool(ratio[i] > 1)  # the test's own statistic: a significant row is never at 1
        df.at[i, "spread"] = "wider" if wider else "narrower"
        if df.at[i, "verdict"] == "inconclusive" and not kept[i]:
            df.at[i, "verdict"] = SPREAD_CHANGED
        if SPREAD_CHANGED not in str(df.at[i, "note"] or ""):
            note = (f"spread {'wider' if wider else 'narrower'}: the candidate's mean absolute deviation from its "
                    f"median {ratio[i]:.2g}x the baseline's (Brown-Forsythe, BH-adjusted p {a:.2g})")
            df.at[i, "note"] = "; ".join(x for x in (str(df.at[i, "note"] or ""), note) if x)
