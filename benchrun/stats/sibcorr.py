"""The pairwise correlations between sibling series on a shared timeline, accumulated night by
night, for :func:`benchrun.stats.changepoint.sibling_pool` (its design effect, and the joint rule's
margin: ``Detector.joint_rho``)."""

from __future__ import annotations

import numpy as np


def rho2_sums(pos: list[np.ndarray], val: list[np.ndarray], width: int, min_n: int, contrib: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """At each position c, over the series that contribute there (``contrib[:, c]``): Σ over
    ordered pairs a ≠ b of ρ²_ab and, per series a, Σ_b ρ²_ab, where ρ_ab is the correlation
    over the positions ≤ c where both have a night (0 until ``min_n`` shared nights)."""
    k = len(val)
    mat = np.full((width, k), np.nan)
    for j in range(k):
        mat[pos[j], j] = val[j]
    have = ~np.isnan(mat)
    z = np.where(have, mat - np.nanmean(mat, axis=0), 0.0)  # centred once: better numerics, same ρ
    h = have.astype(float)
    tot = np.zeros(width)
    row = np.zeros((width, k))
    s_n, s_x, s_xx, s_xy = (np.zeros((k, k)) for _ in range(4))  # s_x[a, b]: Σ x_a where b has a night too
    off = ~np.eye(k, dtype=bool)
    for c in range(width):
        s_n += np.outer(h[c], h[c])
        s_x += np.outer(z[c], h[c])
        s_xx += np.outer(z[c] ** 2, h[c])
        s_xy += np.outer(z[c], z[c])
        with np.errstate(invalid="ignore", divide="ignore"):
            cov = s_xy - s_x * s_x.T / s_n
            vx = s_xx - s_x**2 / s_n
            r2 = cov**2 / (vx * vx.T)
        r2 = np.where((s_n >= min_n) & np.isfinite(r2) & off, np.clip(r2, 0.0, 1.0), 0.0)
        m = contrib[:, c]
        r2 = r2 * m[:, None] * m[None, :]
        row[c] = r2.sum(axis=1)
        tot[c] = row[c].sum()
    return tot, row
