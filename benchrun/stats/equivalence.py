"""What "no change" needs: the 1 − 2α Hodges–Lehmann interval (two one-sided tests at α), its exact coverage, and the rule that it lie inside ±margin with at least that coverage.

With few replicates even the widest interval of pairwise differences, [D(1), D(nm)], covers
less than 1 − 2α (2 vs 2: 1 − 2/6 = 66.7 %; 3 vs 2: 80 %; at α = 5 % the first to reach 90 % are
3 vs 3 and 5 vs 2): such an interval inside ±margin is no test at α, so the row stays
``inconclusive`` and its note says why.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

Matrices = Callable[[np.ndarray, int, int], "tuple[np.ndarray, np.ndarray]"]


def level(confidence: float) -> float:
    """The equivalence interval's level: 1 − 2α (α = 1 − confidence), at least 0.5."""
    return max(2.0 * confidence - 1.0, 0.5)


def interval(matrices: Matrices, nb: np.ndarray, nc: np.ndarray, higher: np.ndarray, comparable: np.ndarray,
             confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (low, high, coverage): the Hodges–Lehmann interval at :func:`level`, on each row's
    analysis scale (log when every value of both arms is positive), widened as the reported interval
    is to Brunner–Munzel's accepted shifts (``effects.hull``), and the exact interval's coverage
    (``critical_rank``: without ties; with ties the closed interval covers at least that).
    ``matrices(rows, n_b, n_c)`` gives the baseline and candidate values of those rows. Without the
    widening a candidate 4× as noisy (8 vs 30 replicates) whose true shift is the margin was called
    "no change" in 11.2–12.5 % of 1,000 such rows for α = 5 %; with it 4.5–5.0 % (two samples;
    tests/test_bminterval.py)."""
    from benchrun.stats.effects import critical_rank, hull

    rows = nb.size
    lo, hi, cov = np.full(rows, np.nan), np.full(rows, np.nan), np.full(rows, np.nan)
    lev = level(confidence)
    for n_b, n_c in sorted({(int(x), int(y)) for x, y in zip(nb[comparable], nc[comparable])}):
        sel = np.nonzero(comparable & (nb == n_b) & (nc == n_c))[0]
        bm, cm = matrices(sel, n_b, n_c)
        sign = np.where(higher[sel], 1.0, -1.0)[:, None]
        log = (bm > 0).all(axis=1) & (cm > 0).all(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(log[:, None], sign * np.log(np.where(log[:, None], cm, 1.0)), sign * cm)
            y = np.where(log[:, None], sign * np.log(np.where(log[:, None], bm, 1.0)), sign * bm)
        srt = np.sort((x[:, :, None] - y[:, None, :]).reshape(len(sel), n_b * n_c), axis=1)
        k, coverage = critical_rank(n_c, n_b, lev)
        lo[sel], hi[sel], _kind = hull(x, y, srt[:, k - 1], srt[:, n_b * n_c - k],
                                       np.full(len(sel), "exact", dtype=object), lev)
        cov[sel] = coverage
    return lo, hi, cov


def no_change(low: np.ndarray, high: np.ndarray, coverage: np.ndarray | None, margin: np.ndarray, alpha: float
              ) -> tuple[np.ndarray, np.ndarray]:
    """(no_change, too_few): the interval lies inside ±margin (margin > 0) and covers at least
    1 − 2α; ``too_few`` marks the rows whose interval lies inside but covers less. A coverage
    of NaN (none given: rows made before it was recorded) is taken as too little."""
    low, high, margin = (np.asarray(a, dtype=float) for a in (low, high, margin))
    with np.errstate(invalid="ignore"):
        inside = (margin > 0) & (low >= -margin) & (high <= margin)
        enough = np.asarray(coverage, dtype=float) >= level(1.0 - alpha) - 1e-9 if coverage is not None \
            else np.zeros(low.size, dtype=bool)
    return inside & enough, inside & ~enough


def too_few_note(n_baseline: int, n_candidate: int, coverage: float, alpha: float) -> str:
    """The row's note when its interval lay inside the margin but covered too little."""
    return (f"no change not shown: with {n_baseline} vs {n_candidate} replicates the widest equivalence interval "
            f"covers {100 * coverage:.1f} %, short of the {100 * level(1.0 - alpha):.0f} % two one-sided tests at "
            f"α need; run more replicates")
