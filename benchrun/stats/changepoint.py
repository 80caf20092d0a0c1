"""Change points over run history: per series (workload digest × hardware key × metric) of
replicate medians, ruptures PELT proposes breaks and a selection-aware rank permutation test
keeps the significant ones; results go to ``change_point_fact``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from scipy import stats

from benchrun.errors import BenchrunError
from benchrun.stats.compare import holm
from benchrun.stats.gate import categorize, identity
from benchrun.stats.load import load_run, replicate_table
from benchrun.suites.result import atomic_path

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

MIN_HEAD = 5  # no change point among the first points of a series: they set the reference
MIN_SEGMENT = 3  # points on each side of a break, at least
FACT_COLUMNS = [
    "series_id", "workload_spec_digest", "hardware_key", "suite", "case", "metric", "direction",
    "change_index", "run_id", "change_utc", "before_mean", "after_mean", "before_n", "after_n",
    "magnitude_pct", "p_value", "p_adjusted", "kind", "artifact_manifest_digest", "method", "detected_utc",
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


def _max_shift_stat(ranks: np.ndarray, min_segment: int) -> np.ndarray:
    """Max over split points of the standardised rank-mean difference, per row of ``ranks``."""
    length = ranks.shape[-1]
    k = np.arange(min_segment, length - min_segment + 1)
    csum = np.cumsum(ranks, axis=-1)
    total = csum[..., -1:]
    before = csum[..., k - 1] / k
    after = (total - csum[..., k - 1]) / (length - k)
    return np.max(np.abs(after - before) * np.sqrt(k * (length - k) / length), axis=-1)


def shift_pvalue(segment: Sequence[float], *, min_segment: int = MIN_SEGMENT, n_perm: int = 1999,
                 seed: int = 0) -> float:
    """Permutation p-value for "this segment holds a shift somewhere".

    The statistic is maximised over every split point, on ranks, in the data and in each
    permutation alike — so the test accounts for the break having been *chosen* where the
    data differ most (testing before/after at the chosen break would not).
    """
    x = np.asarray(segment, dtype=float)
    if x.size < 2 * min_segment:
        return 1.0
    ranks = stats.rankdata(x)
    observed = _max_shift_stat(ranks, min_segment)
    rng = np.random.default_rng(seed)
    perms = rng.permuted(np.broadcast_to(ranks, (n_perm, ranks.size)), axis=1)
    null = _max_shift_stat(perms, min_segment)
    return float((1 + np.count_nonzero(null >= observed - 1e-12)) / (1 + n_perm))


def detect(
    values: Sequence[float],
    *,
    alpha: float = 0.05,
    min_head: int = MIN_HEAD,
    min_segment: int = MIN_SEGMENT,
    penalty: float | None = None,
    seed: int = 0,
) -> list[ChangePoint]:
    """Significant change points of one series (in time order).

    The series is scaled by a robust noise estimate (MAD of successive differences / √2) so
    the PELT penalty (default 3·ln n, BIC-like) means the same for every metric. Each
    proposed break is tested on the points between its neighbouring breaks with a
    selection-aware permutation test (:func:`shift_pvalue`); Holm's correction over the
    breaks of a series keeps the false alarms at ``alpha`` per series. Breaks before
    ``min_head`` are not reported.
    """
    import ruptures as rpt

    y = np.asarray(values, dtype=float)
    n = y.size
    if n < max(min_head, min_segment) + min_segment:
        return []
    d = np.diff(y)
    noise = 1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2)
    if not noise > 0:
        noise = float(np.std(y)) or 1.0
    z = (y - np.median(y)) / noise
    pen = penalty if penalty is not None else 3.0 * math.log(n)
    bkps = rpt.Pelt(model="l2", min_size=min_segment, jump=1).fit(z.reshape(-1, 1)).predict(pen=pen)
    bounds = [0] + [b for b in bkps if b < n] + [n]
    cands = []
    for i in range(1, len(bounds) - 1):
        k = bounds[i]
        if k < min_head:
            continue
        before, after = y[bounds[i - 1]:k], y[k:bounds[i + 1]]
        if before.size < min_segment or after.size < min_segment:
            continue
        p = shift_pvalue(y[bounds[i - 1]:bounds[i + 1]], min_segment=min_segment, seed=seed + k)
        cands.append((k, float(before.mean()), float(after.mean()), before.size, after.size, p))
    if not cands:
        return []
    padj = holm([c[5] for c in cands])
    out = []
    for (k, bm, am, nb, na, p), pa in zip(cands, padj):
        if pa < alpha:
            mag = 100.0 * (am - bm) / abs(bm) if bm else math.nan
            out.append(ChangePoint(k, bm, am, nb, na, mag, p, float(pa)))
    return out


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


def change_points(history: "pd.DataFrame", *, alpha: float = 0.05, min_head: int = MIN_HEAD) -> "pd.DataFrame":
    """Detect change points in every series of a history table; one row per change point."""
    import pandas as pd

    rows = []
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for key, grp in history.groupby(SERIES, sort=True):
        grp = grp.sort_values(["created_utc", "run_id"], kind="stable").reset_index(drop=True)
        sid = hashlib.sha256("|".join(map(str, key)).encode()).hexdigest()[:16]
        direction = grp["direction"].iloc[0]
        seed = int(sid[:8], 16)
        for cp in detect(grp["median"].to_numpy(), alpha=alpha, min_head=min_head, seed=seed):
            at = grp.iloc[cp.index]
            worse = (cp.after_mean < cp.before_mean) == (direction == "higher")
            rows.append({
                "series_id": sid, **dict(zip(SERIES, key)), "direction": direction,
                "change_index": cp.index, "run_id": at["run_id"], "change_utc": at["created_utc"],
                "before_mean": cp.before_mean, "after_mean": cp.after_mean, "before_n": cp.before_n,
                "after_n": cp.after_n, "magnitude_pct": cp.magnitude_pct, "p_value": cp.p_value,
                "p_adjusted": cp.p_adjusted, "kind": "regression" if worse else "improvement",
                "artifact_manifest_digest": at["artifact_manifest_digest"],
                "method": "ruptures.Pelt(l2, pen=3ln n)+max-rank permutation+holm", "detected_utc": now,
            })
    return pd.DataFrame(rows, columns=FACT_COLUMNS)


def write_change_point_fact(df: "pd.DataFrame", home: Path) -> Path:
    """``<home>/warehouse/change_point_fact/change_points.parquet``: temporary name, then rename."""
    out_dir = Path(home) / "warehouse" / "change_point_fact"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "change_points.parquet"
    with atomic_path(target) as tmp:
        df.to_parquet(tmp, index=False)
    return target
