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
from functools import lru_cache
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
    coverage: float  # the coverage it has; NaN when only approximate (BCa)
    method: str
    note: str = ""
    nominal: float = math.nan  # the confidence level asked for

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
    k, cov, note = median_ranks(n, confidence)
    return Interval(float(x[k - 1]), float(x[n - k]), cov, "order_statistic", note, confidence)


@lru_cache(maxsize=256)
def median_ranks(n: int, confidence: float) -> tuple[int, float, str]:
    """The rank k of [x(k), x(n−k+1)] for the median, its exact coverage and a note (cached per n)."""
    ks = np.arange(1, n // 2 + 1)
    covs = 1.0 - 2.0 * stats.binom.cdf(ks - 1, n, 0.5)  # decreasing in k
    ok = np.nonzero(covs >= confidence - 1e-12)[0]
    best_k = int(ks[ok[-1]]) if ok.size else 0
    note = ""
    if best_k == 0:
        best_k = 1
        note = f"n={n} cannot reach {confidence:.0%}: [min, max] shown with its actual coverage"
    return best_k, float(1.0 - 2.0 * stats.binom.cdf(best_k - 1, n, 0.5)), note


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
    return Interval(low, high, upper_cdf - lower_cdf, "order_statistic", note, confidence), bounded


def min_samples_for_quantile(q: float, confidence: float) -> int:
    """Fewest samples for which :func:`quantile_interval` is bounded (368 for p99 at 95 %): the
    one request-count rule, :func:`benchrun.stats.tails.requests_needed` (checked on the binomial)."""
    from benchrun.stats.tails import requests_needed

    alpha = 1.0 - confidence
    n0 = requests_needed(q, confidence)
    cdf = stats.binom.cdf(np.arange(0, n0), n0, q)
    if (cdf <= alpha / 2).any() and (cdf >= 1 - alpha / 2).any():
        return n0
    n = max(1, math.ceil(math.log(alpha / 2) / math.log(max(q, 1 - q))))
    while True:  # the closed form is exact up to rounding; confirm on the binomial itself
        cdf = stats.binom.cdf(np.arange(0, n), n, q)
        if (cdf <= alpha / 2).any() and (cdf >= 1 - alpha / 2).any():
            return n
        n += 1


BCA_NOTE = ("approximate: BCa's coverage is not known exactly and falls short of the nominal level with "
            "few replicates (simulated at a nominal 95 %: {cov}); the median interval's coverage is exact")
# Coverage of this BCa at a nominal 95 %, simulated with 4,000 trials per cell (normal and
# lognormal(σ = 0.5) replicates; tests/test_stats.py::test_bca_is_labelled_approximate re-measures n = 10).
BCA_SIMULATED = "90 % normal / 89 % lognormal at n = 10, 93 % / 91 % at n = 20, 93 % / 93 % at n = 40"


def bca_interval(
    values: Sequence[float], confidence: float, *, seed: int = DEFAULT_SEED, n_resamples: int = 4999
) -> Interval:
    """BCa bootstrap interval of the mean (scipy.stats.bootstrap), from 10 replicates up.

    Its ``coverage`` is NaN: BCa is approximate and its real coverage depends on the data;
    ``nominal`` holds the level asked for and the note says how far short it falls."""
    x = np.asarray(values, dtype=float)
    if x.size < BCA_MIN_N:
        return Interval(math.nan, math.nan, math.nan, "none", f"BCa needs ≥ {BCA_MIN_N} replicates, have {x.size}",
                        confidence)
    if np.ptp(x) == 0:
        return Interval(float(x[0]), float(x[0]), math.nan, "degenerate", "all replicates equal", confidence)
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
        return Interval(math.nan, math.nan, math.nan, "none", "BCa undefined for these values", confidence)
    return Interval(lo, hi, math.nan, "bca_mean", BCA_NOTE.format(cov=BCA_SIMULATED), confidence)


@lru_cache(maxsize=64)
def _resample_weights(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """Bootstrap resamples of n replicates as counts (n_resamples × n), shared by every metric with n."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    w = np.zeros((n_resamples, n))
    np.add.at(w, (np.repeat(np.arange(n_resamples), n), idx.ravel()), 1.0)
    return w / n


def bca_batch(x: np.ndarray, confidence: float, *, seed: int = DEFAULT_SEED, n_resamples: int = 4999
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BCa intervals of the mean for every row of ``x`` (metrics × n, n ≥ 10) at once.

    One resample-weight matrix serves all rows (the resampled means are one matrix product),
    the jackknife of the mean is closed-form (θ₍ᵢ₎ = (n·x̄ − xᵢ)/(n − 1)), and the bias
    correction and percentile rules are scipy's. Returns (low, high, ok)."""
    rows, n = x.shape
    w = _resample_weights(n, n_resamples, stable_seed(seed, "bca", n))
    theta = x.mean(axis=1)
    boot = x @ w.T  # rows × resamples
    below = (boot < theta[:, None]).sum(axis=1) + (boot <= theta[:, None]).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z0 = stats.norm.ppf(below / (2.0 * n_resamples))
        d = (x - theta[:, None]) / (n - 1)  # θ̄ − θ₍ᵢ₎ for the mean
        acc = (d**3).sum(axis=1) / (6.0 * ((d**2).sum(axis=1)) ** 1.5)
        alpha = (1.0 - confidence) / 2
        bounds = []
        for z_a in (stats.norm.ppf(alpha), stats.norm.ppf(1 - alpha)):
            num = z0 + z_a
            bounds.append(stats.norm.cdf(z0 + num / (1 - acc * num)))
    boot.sort(axis=1)
    out = []
    for q in bounds:  # linear interpolation between order statistics, as numpy's percentile
        pos = np.clip(np.nan_to_num(q, nan=0.0), 0.0, 1.0) * (n_resamples - 1)
        lo_i = np.floor(pos).astype(np.int64)
        hi_i = np.minimum(lo_i + 1, n_resamples - 1)
        frac = pos - lo_i
        r = np.arange(rows)
        out.append(boot[r, lo_i] + (boot[r, hi_i] - boot[r, lo_i]) * frac)
    ok = np.isfinite(bounds[0]) & np.isfinite(bounds[1]) & np.isfinite(out[0]) & np.isfinite(out[1])
    return out[0], out[1], ok


def summarize(values: Sequence[float], confidence: float, *, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """n, mean, median, std, CV, min, max, MAD, outlier count and intervals of one arm's replicates
    (one metric at a time: the reference :func:`summarize_batch` is tested against)."""
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


SUMMARY_FIELDS = ("n", "mean", "median", "std", "cv", "min", "max", "mad", "n_outliers", "mad_degenerate", "notes",
                  *(f"median_ci_{f}" for f in ("low", "high", "coverage", "method", "note", "nominal")),
                  *(f"bca_ci_{f}" for f in ("low", "high", "coverage", "method", "note", "nominal")))


def summarize_batch(x: np.ndarray, confidence: float, *, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """:func:`summarize` for every row of ``x`` (metrics × n) at once; BCa from one shared
    resample matrix per n (so its bounds equal scipy's only within resampling noise)."""
    rows, n = x.shape
    obj = lambda v: np.full(rows, v, dtype=object)  # noqa: E731
    nan = lambda: np.full(rows, np.nan)  # noqa: E731
    srt = np.sort(x, axis=1)
    mean = x.mean(axis=1) if n else nan()
    median = np.median(x, axis=1) if n else nan()
    std = x.std(axis=1, ddof=1) if n > 1 else nan()
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = np.where((mean != 0) & (n > 1), std / np.abs(mean), np.nan) if n > 1 else nan()
        mad = MAD_SCALE * np.median(np.abs(x - median[:, None]), axis=1) if n else nan()
        degenerate = ~(mad > 0)
        z = (x - median[:, None]) / np.where(degenerate, 1.0, mad)[:, None]
    n_out = np.where(degenerate, 0, (np.abs(z) > OUTLIER_Z).sum(axis=1)) if n else np.zeros(rows, int)
    out: dict[str, np.ndarray] = {
        "n": np.full(rows, n), "mean": mean, "median": median, "std": std, "cv": cv,
        "min": srt[:, 0] if n else nan(), "max": srt[:, -1] if n else nan(), "mad": mad,
        "n_outliers": n_out.astype(int), "mad_degenerate": degenerate & (n > 0),
        "notes": np.where(degenerate & (n > 0), "mad_degenerate", "").astype(object),
    }
    if n >= 2:
        k, cov, note = median_ranks(n, confidence)
        med = {"low": srt[:, k - 1], "high": srt[:, n - k], "coverage": np.full(rows, cov),
               "method": obj("order_statistic"), "note": obj(note)}
    else:
        med = {"low": nan(), "high": nan(), "coverage": nan(), "method": obj("none"), "note": obj("too few replicates")}
    med["nominal"] = np.full(rows, confidence) if n >= 2 else nan()
    out.update({f"median_ci_{k_}": v for k_, v in med.items()})
    bca = {"low": nan(), "high": nan(), "coverage": nan(), "method": obj("none"),
           "note": obj(f"BCa needs ≥ {BCA_MIN_N} replicates, have {n}"), "nominal": np.full(rows, confidence)}
    if n >= BCA_MIN_N:
        lo, hi, ok = bca_batch(x, confidence, seed=seed)
        flat = srt[:, 0] == srt[:, -1]
        good = ok & ~flat
        bca["low"] = np.where(good, lo, np.where(flat, srt[:, 0], np.nan))
        bca["high"] = np.where(good, hi, np.where(flat, srt[:, 0], np.nan))
        bca["method"] = np.where(good, "bca_mean", np.where(flat, "degenerate", "none")).astype(object)
        bca["note"] = np.where(good, BCA_NOTE.format(cov=BCA_SIMULATED),
                               np.where(flat, "all replicates equal", "BCa undefined for these values")).astype(object)
    out.update({f"bca_ci_{k_}": v for k_, v in bca.items()})
    return out


SERIES_KEYS = ["suite", "case", "metric"]


def group_arrays(table: "pd.DataFrame", keys: list[str]) -> tuple["pd.DataFrame", np.ndarray, np.ndarray]:
    """Key rows (the keys, unit, direction, n) in sorted key order, the values grouped by key
    (by replicate within a key), and the start of each group in the values — with one
    factorize per key column and one lexsort, not a pandas groupby."""
    import pandas as pd

    codes = [pd.factorize(table[k].astype(str).to_numpy(), sort=True)[0] for k in keys]
    rep = table["replicate"].to_numpy() if "replicate" in table.columns else np.zeros(len(table), dtype=np.int64)
    order = np.lexsort((rep, *reversed(codes)))
    sorted_codes = np.stack([c[order] for c in codes]) if codes else np.zeros((0, len(table)), dtype=np.int64)
    change = np.ones(len(table), dtype=bool)
    if len(table) > 1:
        change[1:] = (np.diff(sorted_codes, axis=1) != 0).any(axis=0)
    starts = np.nonzero(change)[0].astype(np.int64)
    n = np.diff(np.r_[starts, len(table)]).astype(np.int64)
    extra = [c for c in ("unit", "direction") if c in table.columns]
    first = table.iloc[order[starts]]
    k = pd.DataFrame({c: first[c].astype(str).to_numpy() for c in keys})
    for c in extra:
        k[c] = first[c].to_numpy()
    k["n"] = n
    return k, table["value"].to_numpy(dtype=float)[order], starts


_groups = group_arrays


def trial_statistics(table: "pd.DataFrame", confidence: float, *, seed: int = DEFAULT_SEED,
                     engine: str = "batch") -> "pd.DataFrame":
    """One row per (suite, case, metric [, arm]) of a replicate table with :func:`summarize` columns.

    ``engine="batch"`` summarises all series with the same replicate count at once
    (:func:`summarize_batch`); ``"reference"`` calls :func:`summarize` per series with a
    per-series BCa seed."""
    import pandas as pd

    keys = SERIES_KEYS + (["arm"] if "arm" in table.columns else [])
    if "status" in table.columns:
        table = table[table["status"].astype(str) == "ok"]
    if table.empty:
        return pd.DataFrame(columns=[*keys, "unit", "direction", *SUMMARY_FIELDS])
    k, values, starts = _groups(table, keys)
    ns = k["n"].to_numpy()
    cols: dict[str, np.ndarray] = {}
    text = {"notes", "mad_degenerate"} | {f for f in SUMMARY_FIELDS if f.endswith(("_method", "_note"))}
    if engine == "reference":
        recs = [summarize(values[s0:s0 + n], confidence, seed=stable_seed(seed, *key))
                for s0, n, key in zip(starts, ns, k[keys].itertuples(index=False, name=None))]
        cols = {f: np.array([r[f] for r in recs], dtype=object) for f in SUMMARY_FIELDS}
    else:
        for f in SUMMARY_FIELDS:
            cols[f] = np.empty(len(k), dtype=object) if f in text else np.full(len(k), np.nan)
        for n in np.unique(ns):
            sel = np.nonzero(ns == n)[0]
            x = values[starts[sel][:, None] + np.arange(n)[None, :]]
            res = summarize_batch(x, confidence, seed=seed)
            for f in SUMMARY_FIELDS:
                cols[f][sel] = res[f]
    numeric = [f for f in SUMMARY_FIELDS if f not in text]
    data = {c: k[c].to_numpy() for c in (*keys, "unit", "direction")}
    data.update({f: (cols[f].astype(float) if f in numeric else cols[f]) for f in SUMMARY_FIELDS})
    out = pd.DataFrame(data)
    out["n"] = out["n"].astype(int)
    out["n_outliers"] = out["n_outliers"].astype(int)
    out["mad_degenerate"] = out["mad_degenerate"].astype(bool)
    return out


def flag_replicates(table: "pd.DataFrame") -> "pd.DataFrame":
    """The replicate table with ``robust_z`` and ``outlier`` columns (flagged and kept)."""
    out = table.copy()
    keys = SERIES_KEYS + (["arm"] if "arm" in table.columns else [])
    if out.empty:
        return out.assign(robust_z=np.nan, outlier=False)
    g = out.groupby(keys, sort=False)["value"]
    med = g.transform("median")
    dev = (out["value"] - med).abs()
    mad = MAD_SCALE * dev.groupby([out[k] for k in keys], sort=False).transform("median")
    ok = (mad > 0).to_numpy()
    z = np.where(ok, (out["value"] - med).to_numpy() / np.where(ok, mad.to_numpy(), 1.0), np.nan)
    out["robust_z"] = z
    out["outlier"] = np.where(ok, np.abs(np.nan_to_num(z)) > OUTLIER_Z, False).astype(bool)
    return out


TAIL_QUANTITIES = ("e2e_ms", "ttft_ms")


TAIL_INTERVAL_KIND = "descriptive"  # see tail_intervals: not a confidence interval


def tail_intervals(requests: "pd.DataFrame", confidence: float, q: float = 0.99) -> "pd.DataFrame":
    """Per (suite, replicate, point, bucket, quantity): the q-quantile of that replicate's
    requests, with a *descriptive* order-statistic band around it.

    The band (``ci_low``/``ci_high``, ``interval_kind`` = ``descriptive``) would have the
    stated ``coverage`` only if the requests of a replicate were independent; closed-loop
    requests are autocorrelated (they share queue state, caches and the machine's moment),
    so it is too narrow and it ignores replicate-to-replicate variation. The same holds for
    ``n_required`` (368 requests for a bounded p99 band at 95 %) and ``trustworthy``: they say
    whether the band is bounded, not that the p99 is known to that precision. Inference on
    the p99 uses each replicate's p99 as one observation (:func:`tail_summary`, and the
    comparison of the suites' per-replicate ``p99_*`` metrics).

    Rows with a non-empty ``error`` are excluded; bucket ``all`` pools the buckets of a point.
    """
    import pandas as pd

    cols = ["suite", "replicate", "point", "bucket", "quantity", "n_requests", "quantile", "value",
            "ci_low", "ci_high", "coverage", "interval_kind", "n_required", "trustworthy", "raw_file"]
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
                    "ci_high": iv.high, "coverage": iv.coverage, "interval_kind": TAIL_INTERVAL_KIND,
                    "n_required": n_required,
                    "trustworthy": bool(bounded and vals.size >= n_required),
                    "raw_file": g["raw_file"].iloc[0] if "raw_file" in g.columns else None,
                })
    return pd.DataFrame(rows, columns=cols)


def tail_summary(tails: "pd.DataFrame", confidence: float) -> "pd.DataFrame":
    """Per (suite, point, bucket, quantity): each replicate's p99 is one observation; their
    median with the order-statistic interval for the median (exact coverage, from the number
    of replicates), and their min and max. This is the inference on tail latency; the
    within-replicate bands of :func:`tail_intervals` are descriptive."""
    import pandas as pd

    cols = ["suite", "point", "bucket", "quantity", "quantile", "n_replicates", "median", "min", "max",
            "ci_low", "ci_high", "coverage", "interval_kind", "note"]
    if tails is None or tails.empty:
        return pd.DataFrame(columns=cols)
    keys = ["suite", "point", "bucket", "quantity"]
    t = tails.assign(unit="", direction="", replicate=tails["replicate"]).rename(columns={"value": "value"})
    k, values, starts = _groups(t, keys)
    rows = []
    for key, s0, n in zip(k[keys].itertuples(index=False, name=None), starts, k["n"].to_numpy()):
        v = values[s0:s0 + n]
        iv = median_interval(v, confidence)
        rows.append({**dict(zip(keys, key)), "quantile": float(tails["quantile"].iloc[0]), "n_replicates": int(n),
                     "median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
                     "ci_low": iv.low, "ci_high": iv.high, "coverage": iv.coverage,
                     "interval_kind": "order_statistic_over_replicates", "note": iv.note})
    return pd.DataFrame(rows, columns=cols)
