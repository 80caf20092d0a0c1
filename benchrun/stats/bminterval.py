"""The interval of shifts that Brunner–Munzel's test does not reject, for many rows at once.

Why: the Hodges–Lehmann interval of :mod:`benchrun.stats.effects` takes its critical rank from
the Mann–Whitney null, which assumes both arms have the same shape. When one arm is noisier
its true coverage falls: at 30 vs 30 replicates with the candidate 4× as noisy, the stated
95 % interval covers the true shift in 91.9 % of cases, at 8 vs 30 in 83.6 % (log-normal data,
2,000 simulations each; ``benchmarks/statistics_audit.py --only coverage``). Brunner–Munzel's
statistic studentises the rank difference by each arm's own placement variance, so the shifts
it does not reject form an interval that nearly keeps its level with unequal spreads.
:mod:`benchrun.stats.effects` reports the hull of the two: under equal shapes it contains the
exact interval (so covers at least its stated coverage); with the candidate 4× as noisy it
covers 94.6 % and 93.6 % in the same cells (Brunner–Munzel's test is a little liberal with
few replicates in the noisy arm; its permutation version is no better: benchmarks/README.md).

How (no library inverts the test; scipy evaluates it at one shift): shifting the candidate by
d changes only the placements — candidate value i has #{j: x_i − y_j > d} baseline values
below it, baseline value j has #{i: x_i − y_j < d} candidate values below it — and they change
by one as d passes each pairwise difference. So every gap between consecutive distinct
differences is one state of the test, and the sums of placements and of their squares follow
from cumulative sums over the sorted differences: O(nm log nm) a row for all nm − 1 states,
where calling the test at each state would be O((nm)² ) a row.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

CHUNK = 1_000_000  # pairwise differences held at once


def rounding(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row, the size below which two pairwise differences count as equal: a few ulps of the
    largest magnitude in the row (a difference x_i − y_j is exact to within one)."""
    big = np.maximum(np.abs(x).max(axis=1, initial=0.0), np.abs(y).max(axis=1, initial=0.0))
    return 64 * np.finfo(float).eps * np.where(np.isfinite(big), big, 0.0)


def accepted(x: np.ndarray, y: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``x`` (rows × n, the candidate) and ``y`` (rows × m, the baseline): the
    smallest and largest shift d for which Brunner–Munzel's two-sided test of x − d against y
    has p ≥ 1 − ``confidence`` — the closure of the accepted gaps between pairwise differences.
    NaN where undefined (an arm of fewer than 2 values) or where no shift is accepted."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    rows, n = x.shape
    m = y.shape[1]
    low = np.full(rows, np.nan)
    high = np.full(rows, np.nan)
    if n < 2 or m < 2 or rows == 0:
        return low, high
    step = max(1, CHUNK // (n * m))  # about 15 arrays of rows × nm: bounded memory at any replicate count
    if rows > step:
        for a in range(0, rows, step):
            low[a:a + step], high[a:a + step] = accepted(x[a:a + step], y[a:a + step], confidence)
        return low, high
    diffs = (x[:, :, None] - y[:, None, :]).reshape(rows, n * m)
    order = np.argsort(diffs, axis=1, kind="stable")
    srt = np.take_along_axis(diffs, order, axis=1)
    # the r-th difference of candidate row i (ascending) is x_i minus the r-th largest baseline value;
    # the c-th of baseline column j is the c-th smallest candidate value minus y_j (ties: any order,
    # since a state is read only where every tied difference has been passed)
    r_in_row = np.argsort(np.argsort(-y, axis=1, kind="stable"), axis=1, kind="stable")  # rows × m
    c_in_col = np.argsort(np.argsort(x, axis=1, kind="stable"), axis=1, kind="stable")  # rows × n
    i_t, j_t = order // m, order % m
    r_t = np.take_along_axis(r_in_row, j_t, axis=1)
    c_t = np.take_along_axis(c_in_col, i_t, axis=1)
    steps = np.arange(1, n * m)  # states after t steps, t = 1 .. nm − 1 (the gap srt[t−1] .. srt[t])
    sum_px = n * m - steps
    sum_px2 = n * m * m + np.cumsum(-2 * (m - r_t) + 1, axis=1)[:, :-1]
    sum_py = steps
    sum_py2 = np.cumsum(2 * c_t + 1, axis=1)[:, :-1]
    mean_px, mean_py = sum_px / n, sum_py / m
    sx = (sum_px2 - n * mean_px**2) / (n - 1)
    sy = (sum_py2 - m * mean_py**2) / (m - 1)
    spread = n * sx + m * sy
    diff_rank = (m + 1) / 2 + mean_py - (n + 1) / 2 - mean_px  # mean rank of y minus that of x
    with np.errstate(divide="ignore", invalid="ignore"):
        w = n * m * diff_rank / ((n + m) * np.sqrt(spread))
        df = spread**2 / ((n * sx) ** 2 / (n - 1) + (m * sy) ** 2 / (m - 1))
        p = 2 * stats.t.sf(np.abs(w), df)
    p = np.where(spread > 1e-9, p, np.where(np.abs(diff_rank) > 0, 0.0, 1.0))
    p = np.where(np.isfinite(p), p, 1.0)
    # only real gaps are states: differences equal in exact arithmetic (0.7 − 0.4 and 0.8 − 0.5) can
    # differ by an ulp, and the phantom gap between them is a state no shift of the data reaches
    ok = (p >= 1 - confidence) & (srt[:, 1:] - srt[:, :-1] > rounding(x, y)[:, None])
    have = ok.any(axis=1)
    if have.any():
        first = np.argmax(ok, axis=1)
        last = ok.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1)
        idx = np.arange(rows)
        low[have] = srt[idx, first][have]
        high[have] = srt[idx, last + 1][have]
    return low, high
