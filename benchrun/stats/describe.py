"""Per-metric replicate statistics: summaries, MAD outliers, median / BCa / tail-quantile intervals.

Pure functions over numpy arrays and pandas frames; every random draw is seeded. The unit
of replication is one launch (one replicate): the inputs here are one value per replicate,
except :func:`tail_intervals`, which reads per-request rows *within* one replicate to put
an interval on that replicate's p99.
"""

from __future__ import annotations

import math
import warnings
import zlib
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    import pandas as pd

MAD_SCALE = 1.4826  # makes the MAD a consistent estimator of sigma for normal data
OUTLIER_Z = 3.5  # Iglewicz & Hoaglin's cut-off for the modified z-score
BCA_MIN_N = 10
DEFAULT_SEED = 20260101


@dataclass(frozen=True)
class Interval:
    """A confidence interval with the coverage it actually has (order statistics are discrete)."""

    low: float
    high: float
    coverage: float
    method: str
    note: str = ""

    def as_dict(self, prefix: str) -> dict[str, Any]:
        return {f"{prefix}_{k}": v for k, v in asdict(self).items()}


NAN_INTERVAL = Interval(math.nan, math.nan, math.nan, "none", "too few replicates")


def stable_seed(base: int, *parts: object) -> int:
    """A seed derived from ``base`` and a key, independent of iteration order."""
    return (int(base) + zlib.crc32("|".join(map(str, parts)).encode())) % (2**32)


def mad_scaled(values: Sequence[float]) -> float:
    """Median absolute deviation × 1.4826."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan
    return float(MAD_SCALE * np.median(np.abs(x - np.median(x))))


def robust_z(values: Sequence[float]) -> tuple[np.ndarray, bool]:
    """Robust z per value, (x − median) / (1.4826 · MAD), and whether the MAD is degenerate.

    When the MAD is 0 (half or more of the values identical) the z-scores are undefined:
    they are returned as NaN and the caller flags nothing and notes ``mad_degenerate``.
    """
    x = np.asarray(values, dtype=float)
    mad = mad_scaled(x)
    if x.size == 0 or not mad > 0:
        return np.full(x.shape, np.nan), True
    return (x - np.median(x)) / mad, False


def outlier_flags(values: Sequence[float], threshold: float = OUTLIER_Z) -> np.ndarray:
    """True where |robust z| > threshold; all False when the MAD is degenerate."""
    z, degenerate = robust_z(values)
    if degenerate:
        return np.zeros(z.shape, dtype=bool)
    return np.abs(z) > threshold


def median_interval(values: Sequence[float], confidence: float) -> Interval:
    """Distribution-free interval for the median from order statistics, with its exact coverage.

    [x(k), x(n−k+1)] covers the median with probability 1 − 2·P(B ≤ k−1), B ~ Bin(n, ½).
    The largest k reaching ``confidence`` is used; when even [min, max] falls short (n ≤ 5
    at 95 %) that interval is returned with its lower coverage and a note saying so.
    """
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n < 2:
        return NAN_INTERVAL
    ks = np.arange(1, n // 2 + 1)
    covs = 1.0 - 2.0 * stats.binom.cdf(ks - 1, n, 0.5)  # decreasing in k
    ok = np.nonzero(covs >= confidence - 1e-12)[0]
    best_k = int(ks[ok[-1]]) if ok.size else 0
    note = ""
    if best_k == 0:
        best_k = 1
        note = f"n={n} cannot reach {confidence:.0%}: [min, max] shown with its actual coverage"
    cov = float(1.0 - 2.0 * stats.binom.cdf(best_k - 1, n, 0.5))
    return Interval(float(x[best_k - 1]), float(x[n - best_k]), cov, "order_statistic", note)


def quantile_interval(values: Sequence[float], q: float, confidence: float) -> tuple[Interval, bool]:
    """Distribution-free interval for the q-quantile: [x(l), x(u)] with P(l ≤ B < u), B ~ Bin(n, q).

    Returns the interval and whether it is *bounded*: with too few samples the upper order
    statistic needed does not exist, and the tail estimate is not to be trusted.
    """
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n == 0:
        return NAN_INTERVAL, False
    alpha = 1.0 - confidence
    cdf = stats.binom.cdf(np.arange(0, n + 1), n, q)  # cdf[j] = P(B <= j)
    lows = np.nonzero(cdf[:n] <= alpha / 2)[0]  # candidates for l-1
    highs = np.nonzero(cdf[:n] >= 1 - alpha / 2)[0]  # candidates for u-1
    bounded = lows.size > 0 and highs.size > 0
    # Without the order statistic a side needs, that side is unbounded (±inf), never x(1) or x(n):
    # [x(l), x(n)] covers the p99 only when x(n) exceeds it, which few samples rarely do.
    low = float(x[int(lows[-1])]) if lows.size else -math.inf
    high = float(x[int(highs[0])]) if highs.size else math.inf
    lower_cdf = float(cdf[int(lows[-1])]) if lows.size else 0.0
    upper_cdf = float(cdf[int(highs[0])]) if highs.size else 1.0
    note = "" if bounded else f"only {n} samples: too few for a bounded {q:g}-quantile interval"
    return Interval(low, high, upper_cdf - lower_cdf, "order_statistic", note), bounded


def min_samples_for_quantile(q: float, confidence: float) -> int:
    """Fewest samples for which :func:`quantile_interval` is bounded (368 for p99 at 95 %)."""
    alpha = 1.0 - confidence
    n = max(1, math.ceil(math.log(alpha / 2) / math.log(max(q, 1 - q))))
    while True:  # the closed form is exact up to rounding; confirm on the binomial itself
        cdf = stats.binom.cdf(np.arange(0, n), n, q)
        if (cdf <= alpha / 2).any() and (cdf >= 1 - alpha / 2).any():
            return n
        n += 1


def bca_interval(
    values: Sequence[float], confidence: float, *, seed: int = DEFAULT_SEED, n_resamples: int = 4999
) -> Interval:
    """BCa bootstrap interval of the mean (scipy.stats.bootstrap), from 10 replicates up."""
    x = np.asarray(values, dtype=float)
    if x.size < BCA_MIN_N:
        return Interval(math.nan, math.nan, math.nan, "none", f"BCa needs ≥ {BCA_MIN_N} replicates, have {x.size}")
    if np.ptp(x) == 0:
        return Interval(float(x[0]), float(x[0]), confidence, "degenerate", "all replicates equal")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on near-degenerate jackknife; NaN is checked below
        res = stats.bootstrap(
            (x,),
            np.mean,
            confidence_level=confidence,
            method="BCa",
            n_resamples=n_resamples,
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Interval(math.nan, math.nan, math.nan, "none", "BCa undefined for these values")
    note = "" if x.size >= 100 else (
        "BCa is approximate and undercovers with few replicates (simulated: ~90 % for a nominal 95 % "
        "at n = 10, ~93 % at n = 40); the median interval's coverage is exact")
    return Interval(lo, hi, confidence, "bca_mean", note)


def summarize(values: Sequence[float], confidence: float, *, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """n, mean, median, std, CV, min, max, MAD, outlier count and intervals of one arm's replicates."""
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    mean = float(np.mean(x)) if n else math.nan
    std = float(np.std(x, ddof=1)) if n > 1 else math.nan
    _, degenerate = robust_z(x)
    flags = outlier_flags(x)
    out: dict[str, Any] = {
        "n": n,
        "mean": mean,
        "median": float(np.median(x)) if n else math.nan,
        "std": std,
        "cv": std / abs(mean) if n > 1 and mean != 0 else math.nan,
        "min": float(np.min(x)) if n else math.nan,
        "max": float(np.max(x)) if n else math.nan,
        "mad": mad_scaled(x),
        "n_outliers": int(flags.sum()),
        "mad_degenerate": bool(degenerate and n > 0),
        "notes": "mad_degenerate" if degenerate and n > 0 else "",
    }
    out.update(median_interval(x, confidence).as_dict("median_ci"))
    out.update(bca_interval(x, confidence, seed=seed).as_dict("bca_ci"))
    return out


SERIES_KEYS = ["suite", "case", "metric"]


def trial_statistics(table: "pd.DataFrame", confidence: float, *, seed: int = DEFAULT_SEED) -> "pd.DataFrame":
    """One row per (suite, case, metric [, arm]) of a replicate table with :func:`summarize` columns."""
    import pandas as pd

    keys = SERIES_KEYS + (["arm"] if "arm" in table.columns else [])
    rows = []
    for key, grp in table.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(keys, key))
        row["unit"] = grp["unit"].iloc[0]
        row["direction"] = grp["direction"].iloc[0]
        row.update(summarize(grp["value"].to_numpy(), confidence, seed=stable_seed(seed, *key)))
        rows.append(row)
    return pd.DataFrame(rows)


def flag_replicates(table: "pd.DataFrame") -> "pd.DataFrame":
    """The replicate table with ``robust_z`` and ``outlier`` columns (flagged and kept)."""
    out = table.copy()
    keys = SERIES_KEYS + (["arm"] if "arm" in table.columns else [])
    out["robust_z"] = np.nan
    out["outlier"] = False
    for _, idx in out.groupby(keys, sort=False).groups.items():
        vals = out.loc[idx, "value"].to_numpy()
        z, degenerate = robust_z(vals)
        out.loc[idx, "robust_z"] = z
        out.loc[idx, "outlier"] = (np.abs(z) > OUTLIER_Z) if not degenerate else False
    out["outlier"] = out["outlier"].astype(bool)
    return out


TAIL_QUANTITIES = ("e2e_ms", "ttft_ms")


def tail_intervals(requests: "pd.DataFrame", confidence: float, q: float = 0.99) -> "pd.DataFrame":
    """Per (suite, replicate, point, bucket, quantity): the q-quantile, its order-statistic
    interval and whether enough successful requests were seen to trust it.

    Rows with a non-empty ``error`` are excluded; bucket ``all`` pools the buckets of a point.
    """
    import pandas as pd

    cols = ["suite", "replicate", "point", "bucket", "quantity", "n_requests", "quantile", "value",
            "ci_low", "ci_high", "coverage", "n_required", "trustworthy", "raw_file"]
    if requests is None or requests.empty:
        return pd.DataFrame(columns=cols)
    df = requests
    if "error" in df.columns:
        err = df["error"]
        df = df[err.isna() | (err.astype(str) == "")]
    n_required = min_samples_for_quantile(q, confidence)
    point_col = "point" if "point" in df.columns else None
    rows = []
    group_keys = ["suite", "replicate"] + ([point_col] if point_col else [])
    for key, grp in df.groupby(group_keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        base = dict(zip(group_keys, key))
        base.setdefault("point", "all")
        parts = [("all", grp)]
        if "bucket" in grp.columns:
            parts += [(str(b), g) for b, g in grp.groupby("bucket", sort=True)]
        for bucket, g in parts:
            for quantity in TAIL_QUANTITIES:
                if quantity not in g.columns:
                    continue
                vals = g[quantity].dropna().to_numpy(dtype=float)
                if vals.size == 0:
                    continue
                iv, bounded = quantile_interval(vals, q, confidence)
                rows.append({
                    **base, "bucket": bucket, "quantity": quantity, "n_requests": int(vals.size),
                    "quantile": q, "value": float(np.quantile(vals, q)), "ci_low": iv.low,
                    "ci_high": iv.high, "coverage": iv.coverage, "n_required": n_required,
                    "trustworthy": bool(bounded and vals.size >= n_required),
                    "raw_file": g["raw_file"].iloc[0] if "raw_file" in g.columns else None,
                })
    return pd.DataFrame(rows, columns=cols)
