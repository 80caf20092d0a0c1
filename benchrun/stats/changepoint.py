"""Change points over run history: per series (workload digest × hardware key × metric) of
replicate medians, binary segmentation with a max-CUSUM rank test whose null distribution
allows for autocorrelation, Benjamini–Hochberg across the series of a pass, and a flag for
the change points that are new since the previous pass; results go to ``change_point_fact``.

Benchmark histories are autocorrelated (a machine drifts, images are shared across nights):
a test that assumes independent points raises false alarms on a drifting series (measured
on AR(1) nulls of 40 points: 14 % at φ = 0.2, 58 % at φ = 0.5 with the plain permutation
test). Here the null distribution of the statistic is simulated from a Gaussian AR(1)
process with the series' own lag-1 autocorrelation (estimated on normal scores of the ranks
after removing the candidate break, bias-corrected), ranked like the data.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from scipy import stats

from benchrun.errors import BenchrunError
from benchrun.stats.compare import benjamini_hochberg, holm
from benchrun.stats.gate import categorize, identity
from benchrun.stats.load import load_run, replicate_table
from benchrun.fsio import atomic_path

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

MIN_HEAD = 5  # no change point among the first points of a series: they set the reference
MIN_SEGMENT = 3  # points on each side of a break, at least
N_SIM = 999  # simulated null series per test
# φ is estimated twice: around one mean (unbiased under no change, but a real shift reads as
# persistence and would hide itself) and around the two means of the candidate break (which
# under no change soaks up autocorrelation and reads too low). The test uses the smaller of
# the first and the second plus this margin, set by simulation so that AR(1) nulls with φ up
# to 0.5 keep their false alarms at or below 5 % (tests/test_changepoint.py).
PHI_SPLIT_MARGIN = 0.3
METHOD = "binary segmentation, max-CUSUM rank test vs simulated AR(1) null, Holm in series, BH across series"
FACT_COLUMNS = [
    "series_id", "workload_spec_digest", "hardware_key", "suite", "case", "metric", "direction",
    "change_index", "run_id", "change_utc", "before_mean", "after_mean", "before_n", "after_n",
    "magnitude_pct", "p_value", "p_adjusted", "kind", "artifact_manifest_digest", "method", "detected_utc",
    "ar1_phi", "new",
]


@dataclass(frozen=True)
class ChangePoint:
    """One significant break in a series: index of the first point after it, and its size."""

    index: int
    before_mean: float
    after_mean: float
    before_n: int
    after_n: int
    magnitude_pct: float
    p_value: float
    p_adjusted: float
    phi: float = 0.0


def _cusum(ranks: np.ndarray, min_segment: int) -> np.ndarray:
    """Standardised rank-mean difference at every split k = min_segment .. L − min_segment (per row)."""
    length = ranks.shape[-1]
    k = np.arange(min_segment, length - min_segment + 1)
    csum = np.cumsum(ranks, axis=-1)
    total = csum[..., -1:]
    before = csum[..., k - 1] / k
    after = (total - csum[..., k - 1]) / (length - k)
    return np.abs(after - before) * np.sqrt(k * (length - k) / length)


def _max_shift_stat(ranks: np.ndarray, min_segment: int) -> np.ndarray:
    """Max over split points of the standardised rank-mean difference, per row of ``ranks``."""
    return np.max(_cusum(ranks, min_segment), axis=-1)


def ar1_phi(segment: Sequence[float], split: int | None = None) -> float:
    """Lag-1 autocorrelation of the normal scores of ``segment``'s ranks, with the means on
    either side of ``split`` removed (so a shift does not pass for persistence), bias-corrected
    for the two estimated means, clipped to [0, 0.95] (negative autocorrelation only makes the
    test conservative)."""
    x = np.asarray(segment, dtype=float)
    n = x.size
    if n < 4:
        return 0.0
    z = stats.norm.ppf((stats.rankdata(x) - 0.5) / n)
    e = z.copy()
    for part in ((slice(0, split), slice(split, n)) if split else (slice(0, n),)):
        e[part] = z[part] - z[part].mean()
    den = float((e**2).sum())
    if not den > 0:
        return 0.0
    phi = float((e[1:] * e[:-1]).sum() / den)
    means = 2 if split else 1
    phi += means * (1 + 3 * max(phi, 0.0)) / n  # Kendall's bias of the lag-1 estimate, per mean removed
    return float(min(max(phi, 0.0), 0.95))


@lru_cache(maxsize=256)
def _null_stats(length: int, phi_key: int, min_segment: int, n_sim: int, seed: int) -> np.ndarray:
    """Sorted max-CUSUM statistics of ``n_sim`` ranked Gaussian AR(1) series (φ = phi_key / 100)."""
    phi = phi_key / 100.0
    rng = np.random.default_rng(seed)
    eps = rng.standard_normal((n_sim, length + 50))
    y = np.empty_like(eps)
    y[:, 0] = eps[:, 0] / math.sqrt(1 - phi**2) if phi < 1 else eps[:, 0]
    for t in range(1, y.shape[1]):
        y[:, t] = phi * y[:, t - 1] + eps[:, t]
    y = y[:, 50:]
    ranks = stats.rankdata(y, axis=1)
    return np.sort(_max_shift_stat(ranks, min_segment))


def shift_pvalue(segment: Sequence[float], *, min_segment: int = MIN_SEGMENT, n_perm: int = N_SIM,
                 seed: int = 0, phi: float | None = None) -> float:
    """p-value for "this segment holds a shift somewhere", allowing for AR(1) autocorrelation.

    The statistic is the max over every split point of the standardised rank CUSUM — in the
    data and in each simulated null series alike, so the test accounts for the break having
    been *chosen* where the data differ most. The null series are Gaussian AR(1) with the
    segment's own φ (:func:`ar1_phi`, rounded up to 0.01), ranked like the data; with φ = 0
    this is the rank permutation test.
    """
    x = np.asarray(segment, dtype=float)
    if x.size < 2 * min_segment:
        return 1.0
    ranks = stats.rankdata(x)
    cus = _cusum(ranks, min_segment)
    observed = float(cus.max())
    if phi is None:
        phi = ar1_phi(x, min_segment + int(np.argmax(cus)))
    # one simulated null per (length, φ to 0.01): shared by every series of that shape (cached)
    null = _null_stats(x.size, int(math.ceil(phi * 100 - 1e-9)), min_segment, int(n_perm), int(seed) % 2)
    above = null.size - np.searchsorted(null, observed - 1e-12, side="left")
    return float((1 + above) / (1 + null.size))


def _segment(y: np.ndarray, lo: int, hi: int, *, alpha: float, min_head: int, min_segment: int, seed: int,
             out: list[tuple[int, float, float]], depth: int = 0) -> float:
    """Binary segmentation of y[lo:hi]: test, split at the best break, recurse while significant.
    Appends (break index, p, φ) to ``out``; returns the p-value of this segment's test."""
    seg = y[lo:hi]
    if seg.size < 2 * min_segment:
        return 1.0
    # located by least squares on the values (the rank statistic is too coarse to place a
    # break between two ranks), tested on ranks
    k = lo + min_segment + int(np.argmax(_cusum(seg - seg.mean(), min_segment)))
    phi = min(ar1_phi(seg), ar1_phi(seg, k - lo) + PHI_SPLIT_MARGIN)
    p = shift_pvalue(seg, min_segment=min_segment, seed=seed + depth, phi=phi)
    if p >= alpha:
        return p
    if k >= min_head:
        out.append((k, p, phi))
    _segment(y, lo, k, alpha=alpha, min_head=min_head, min_segment=min_segment, seed=seed, out=out, depth=depth + 1)
    _segment(y, k, hi, alpha=alpha, min_head=min_head, min_segment=min_segment, seed=seed, out=out, depth=depth + 1)
    return p


def detect_series(values: Sequence[float], *, alpha: float = 0.05, min_head: int = MIN_HEAD,
                  min_segment: int = MIN_SEGMENT, seed: int = 0) -> tuple[list[ChangePoint], float]:
    """Significant change points of one series (in time order) and the series-level p-value
    (the test of the whole series: under no change at all, it alone decides whether anything
    is reported, so the false alarms per series stay at ``alpha``). Breaks found deeper are
    kept when Holm over the series' breaks keeps them below ``alpha``."""
    y = np.asarray(values, dtype=float)
    n = y.size
    if n < max(min_head, min_segment) + min_segment:
        return [], 1.0
    found: list[tuple[int, float, float]] = []
    p_series = _segment(y, 0, n, alpha=alpha, min_head=min_head, min_segment=min_segment, seed=seed, out=found)
    if not found:
        return [], p_series
    found.sort()
    padj = holm([f[1] for f in found])
    bounds = [0] + [f[0] for f in found] + [n]
    out = []
    for i, ((k, p, phi), pa) in enumerate(zip(found, padj)):
        if pa >= alpha:
            continue
        before, after = y[bounds[i]:k], y[k:bounds[i + 2]]
        bm, am = float(before.mean()), float(after.mean())
        mag = 100.0 * (am - bm) / abs(bm) if bm else math.nan
        out.append(ChangePoint(k, bm, am, before.size, after.size, mag, p, float(pa), phi))
    return out, p_series


def detect(
    values: Sequence[float],
    *,
    alpha: float = 0.05,
    min_head: int = MIN_HEAD,
    min_segment: int = MIN_SEGMENT,
    penalty: float | None = None,  # kept for callers of the PELT version; unused
    seed: int = 0,
) -> list[ChangePoint]:
    """Significant change points of one series (see :func:`detect_series`). Breaks before
    ``min_head`` are not reported."""
    return detect_series(values, alpha=alpha, min_head=min_head, min_segment=min_segment, seed=seed)[0]


def hardware_key(environment: dict[str, Any]) -> str:
    """``hardware_key`` from the environment capture, else a digest of its hardware fields."""
    if environment.get("hardware_key"):
        return str(environment["hardware_key"])
    from benchrun.stats.load import RunInfo

    ident = identity(RunInfo("x", Path("."), {}, environment, {}))
    hw = {k: v for k, v in ident.items() if categorize(k) == "hardware"}
    return hashlib.sha256(json.dumps(hw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def history_table(home: Path, *, cadences: Sequence[str] | None = ("nightly",)) -> "pd.DataFrame":
    """Per run × metric: the median over replicates, with the series keys and run time.

    Only Succeeded runs with a workload digest; ``cadences`` limits the history (None = all).
    A run whose files cannot be read is skipped with a warning.
    """
    import pandas as pd

    frames = []
    runs_dir = Path(home) / "runs"
    for rd in sorted(p for p in runs_dir.glob("*") if (p / "status.json").is_file()):
        try:
            run = load_run(rd)
            st = run.status
            if st.get("phase") != "Succeeded" or not st.get("workload_spec_digest"):
                continue
            if cadences is not None and st.get("cadence") not in cadences:
                continue
            t = replicate_table(rd)
        except BenchrunError as exc:  # one damaged run must not hide the whole history
            log.warning("history: skipping run %s: %s", rd.name, exc)
            continue
        if t.empty:
            continue
        g = t.groupby(["suite", "case", "metric", "direction"], as_index=False).agg(
            median=("value", "median"), n=("value", "size"))
        g["run_id"] = run.run_id
        g["created_utc"] = st.get("created_utc") or ""
        g["workload_spec_digest"] = st["workload_spec_digest"]
        g["hardware_key"] = hardware_key(run.environment)
        g["artifact_manifest_digest"] = st.get("artifact_manifest_digest")
        frames.append(g)
    cols = ["run_id", "created_utc", "workload_spec_digest", "hardware_key", "suite", "case", "metric",
            "direction", "median", "n", "artifact_manifest_digest"]
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)[cols].sort_values(["created_utc", "run_id"], kind="stable")


SERIES = ["workload_spec_digest", "hardware_key", "suite", "case", "metric"]


def change_points(history: "pd.DataFrame", *, alpha: float = 0.05, min_head: int = MIN_HEAD,
                  previous: "pd.DataFrame | None" = None) -> "pd.DataFrame":
    """Detect change points in every series of a history table; one row per change point.

    Series whose whole-series test does not survive Benjamini–Hochberg across the series of
    this pass report nothing. ``new`` is False for a change point already in ``previous``
    (the fact of the last pass: same series and a break within ``MIN_SEGMENT`` runs of it),
    so each change is announced once even though the history is tested again every pass.
    """
    import pandas as pd

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    per_series = []
    for key, grp in history.groupby(SERIES, sort=True):
        grp = grp.sort_values(["created_utc", "run_id"], kind="stable").reset_index(drop=True)
        sid = hashlib.sha256("|".join(map(str, key)).encode()).hexdigest()[:16]
        cps, p_series = detect_series(grp["median"].to_numpy(), alpha=alpha, min_head=min_head,
                                      seed=int(sid[:8], 16))
        per_series.append((key, sid, grp, cps, p_series))
    q = benjamini_hochberg([p for *_, p in per_series]) if per_series else []
    seen = _previous_breaks(previous)
    rows = []
    for (key, sid, grp, cps, _p), q_series in zip(per_series, q):
        if not q_series < alpha:
            continue
        direction = grp["direction"].iloc[0]
        runs = grp["run_id"].tolist()
        for cp in cps:
            at = grp.iloc[cp.index]
            worse = (cp.after_mean < cp.before_mean) == (direction == "higher")
            old = any(abs(cp.index - runs.index(r)) <= MIN_SEGMENT for r in seen.get(sid, ()) if r in runs)
            rows.append({
                "series_id": sid, **dict(zip(SERIES, key)), "direction": direction,
                "change_index": cp.index, "run_id": at["run_id"], "change_utc": at["created_utc"],
                "before_mean": cp.before_mean, "after_mean": cp.after_mean, "before_n": cp.before_n,
                "after_n": cp.after_n, "magnitude_pct": cp.magnitude_pct, "p_value": cp.p_value,
                "p_adjusted": max(cp.p_adjusted, float(q_series)), "kind": "regression" if worse else "improvement",
                "artifact_manifest_digest": at["artifact_manifest_digest"], "method": METHOD, "detected_utc": now,
                "ar1_phi": cp.phi, "new": not old,
            })
    return pd.DataFrame(rows, columns=FACT_COLUMNS)


def _previous_breaks(previous: "pd.DataFrame | None") -> dict[str, set[str]]:
    if previous is None or previous.empty or "series_id" not in previous.columns:
        return {}
    out: dict[str, set[str]] = {}
    for sid, run in previous[["series_id", "run_id"]].itertuples(index=False):
        out.setdefault(str(sid), set()).add(str(run))
    return out


def read_change_point_fact(home: Path) -> "pd.DataFrame | None":
    """The fact written by the previous pass, or None (absent or unreadable: every break is new)."""
    import pandas as pd

    path = Path(home) / "warehouse" / "change_point_fact" / "change_points.parquet"
    if not path.is_file():
        return None
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # derived data: treat as absent rather than fail the pass
        log.warning("%s: unreadable (%s); reporting every change point as new", path, exc)
        return None


def write_change_point_fact(df: "pd.DataFrame", home: Path) -> Path:
    """``<home>/warehouse/change_point_fact/change_points.parquet``: temporary name, then rename."""
    out_dir = Path(home) / "warehouse" / "change_point_fact"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "change_points.parquet"
    with atomic_path(target) as tmp:
        df.to_parquet(tmp, index=False)
    return target
