"""Per-replicate summaries of the samples (the numbers statistics, the gate and comparisons see)
and the contention verdict: was the replicate measured while other processes used the machine?"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_CONTENTION_PCT = 10.0  # mean background CPU, % of the whole machine
CASE = "telemetry"
# What summarise writes per replicate: time-weighted means and p95s of rates and utilizations, peaks of
# the memory samples, and two of their own. Host CPU utilization has no better direction: the result
# schema needs one, so it is written "higher" and read as none (benchrun.stats.directions.DIRECTIONLESS).
TIMED = (("cpu_utilization_pct", "higher"), ("gpu_utilization_pct", "higher"), ("background_cpu_pct", "lower"))
PEAKS = (("memory_used_bytes", "bytes"), ("gpu_memory_used_bytes", "bytes"))
SUMMARY_METRICS = (*(f"{m}_{s}" for m, _ in TIMED for s in ("mean", "p95")), *(f"{m}_peak" for m, _ in PEAKS),
                   "suite_cpu_pct_mean", "gpu_throttled_s")
# the sampled quantities those rows summarise (a declared secondary quantity covers its _mean, _p95 and _peak
# rows: benchrun.stats.reading.TELEMETRY_SUMMARIES; gpu_throttled's one row, gpu_throttled_s, is named as it is)
SAMPLED = (*(m for m, _ in TIMED), *(m for m, _ in PEAKS), "suite_cpu_pct")


def contention_threshold_pct(environ: dict[str, str] | None = None) -> float:
    """``BENCHRUN_CONTENTION_PCT`` (percent of the machine's CPU), default 10. A value that is not a
    number from 0 to 100 is refused (exit 2) naming the variable: ``ten`` was read as the default
    without a word, and the threshold decides which replicates a comparison keeps (review 2026-12-08)."""
    raw = (environ if environ is not None else os.environ).get("BENCHRUN_CONTENTION_PCT")
    if not raw or not raw.strip():
        return DEFAULT_CONTENTION_PCT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 100.0:
        from benchrun.errors import BenchrunError

        raise BenchrunError(f"BENCHRUN_CONTENTION_PCT={raw!r}: expected the mean background CPU (a percent of the "
                            f"machine, 0 to 100) above which a replicate is contended; unset it for the default "
                            f"{DEFAULT_CONTENTION_PCT:g}", exit_code=2)
    return value


def _values(table: pa.Table, metric: str) -> np.ndarray:
    sel = table.filter(pc.equal(table["metric"], metric))
    return sel["value"].to_numpy(zero_copy_only=False).astype(float)


def _timed(table: pa.Table, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """A metric's values and the seconds each describes: a rate's ``interval_s``; a gauge's (no
    ``interval_s``: NVML utilization) the time since its device's previous sample, as
    :func:`_throttled_s` counts it (so a device's first sample, taken before the suite began,
    describes no time of it)."""
    sel = table.filter(pc.equal(table["metric"], metric))
    values = sel["value"].to_numpy(zero_copy_only=False).astype(float)
    seconds = pc.fill_null(sel["interval_s"], np.nan).to_numpy(zero_copy_only=False).astype(float)
    gauge = np.isnan(seconds)
    if gauge.any():
        ts = sel["ts"].cast(pa.int64()).to_numpy(zero_copy_only=False) / 1e6
        device = pc.fill_null(sel["device_index"], -1).to_numpy(zero_copy_only=False).astype(np.int64)
        seconds = np.where(gauge, _series_gaps(ts, np.where(gauge, device, -2)), seconds)  # -2: the rates apart
    return values, np.clip(seconds, 0.0, None)


def _series_gaps(ts: np.ndarray, series: np.ndarray) -> np.ndarray:
    """Each sample's time since the previous sample of its series (same key in ``series``); 0 for a
    series' first: what a gauge's sample describes (:func:`_timed`, :func:`in_window`)."""
    order = np.lexsort((ts, series))
    follows = np.r_[False, series[order][1:] == series[order][:-1]]
    gap = np.zeros(ts.size)
    gap[order] = np.where(follows, np.r_[0.0, np.diff(ts[order])], 0.0)
    return gap


def in_window(table: pa.Table, start: float, end: float) -> tuple[pa.Table, int]:
    """The rows that describe part of ``[start, end]`` (epoch seconds), each weighing only that part,
    and the most such rows any one series (metric, device) has.

    A row describes the time up to its ``ts``: a rate its ``interval_s``, a gauge the time since the
    previous sample of its series (as :func:`_timed` weighs it). A row is kept when that time overlaps
    the window, or when it was read inside it, and its ``interval_s`` becomes the overlap, so the
    summaries weigh it by the part of the window it describes: the sample that covers the window's end
    (taken after it) counts for its share, and one that ends just inside counts only for the part
    inside. Until 2026-12-07 rows were picked by ``ts`` alone at full weight: at 1 Hz over a 2 s window,
    100 % background for the second ending 0.05 s into it read as a 50 % mean (contended) where the
    window saw about 2.5 %.
    """
    n = table.num_rows
    if n == 0:
        return table, 0
    ts = table["ts"].cast(pa.int64()).to_numpy(zero_copy_only=False) / 1e6
    seconds = pc.fill_null(table["interval_s"], np.nan).to_numpy(zero_copy_only=False).astype(float)
    metric = np.unique(table["metric"].to_numpy(zero_copy_only=False).astype(str), return_inverse=True)[1]
    device = pc.fill_null(table["device_index"], -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
    series = metric.astype(np.int64) * (int(device.max()) + 1) + device
    span = np.clip(np.where(np.isnan(seconds), _series_gaps(ts, series), seconds), 0.0, None)
    overlap = np.clip(np.minimum(ts, end) - np.maximum(ts - span, start), 0.0, None)
    keep = (overlap > 0) | ((ts >= start) & (ts <= end))
    most = int(np.bincount(series[overlap > 0]).max()) if (overlap > 0).any() else 0
    out = table.set_column(table.schema.get_field_index("interval_s"), table.schema.field("interval_s"),
                           pa.array(overlap, pa.float64()))
    return out.filter(pa.array(keep)), most


def time_mean(values: np.ndarray, seconds: np.ndarray) -> float:
    """Σ value·Δt / Σ Δt: each value weighs as long as the time it describes (the sampler's
    closing tick, tens of ms after the last full period, weighs tens of ms, not a period); the
    plain mean where no sample describes any time."""
    total = float(seconds.sum())
    return float(np.dot(values, seconds) / total) if total > 0 else float(values.mean())


def time_percentile(values: np.ndarray, seconds: np.ndarray, q: float) -> float:
    """The level the metric stayed at or below for ``q`` % of the time its samples describe
    (time-weighted inverted CDF: one of the sampled values); numpy's linear percentile of the
    values where no sample describes any time."""
    total = float(seconds.sum())
    if total <= 0:
        return float(np.percentile(values, q))
    order = np.argsort(values, kind="stable")
    reached = np.cumsum(seconds[order])
    i = int(np.searchsorted(reached, q / 100.0 * total, side="left"))
    return float(values[order][min(i, values.size - 1)])


def _throttled_s(table: pa.Table) -> float | None:
    """Longest per-GPU time throttled: each throttled sample counts the time it describes (see
    :func:`_timed`: since that GPU's previous sample, or its part of a measured window)."""
    sel = table.filter(pc.equal(table["metric"], "gpu_throttled"))
    if sel.num_rows == 0:
        return None
    flags, seconds = _timed(table, "gpu_throttled")
    device = pc.fill_null(sel["device_index"], -1).to_numpy(zero_copy_only=False)
    return max(float(seconds[(device == d) & (flags >= 0.5)].sum()) for d in np.unique(device))


def summarise(table: pa.Table) -> list[dict[str, Any]]:
    """Metric rows (suite-result shape) for one replicate's samples; absent inputs → absent rows."""
    rows: list[dict[str, Any]] = []

    def add(name: str, value: float | None, unit: str, direction: str) -> None:
        if value is not None and np.isfinite(value):
            rows.append({"name": name, "value": float(value), "unit": unit, "direction": direction,
                         "case": CASE, "source": "telemetry"})

    # Means and p95s of rates and utilizations are time-weighted (see _timed); peaks are of the samples.
    for metric, direction in TIMED:
        v, dt = _timed(table, metric)
        if v.size:
            add(f"{metric}_mean", time_mean(v, dt), "%", direction)
            add(f"{metric}_p95", time_percentile(v, dt, 95), "%", direction)
    for metric, unit in PEAKS:
        v = _values(table, metric)
        if v.size:
            add(f"{metric}_peak", float(v.max()), unit, "lower")
    v, dt = _timed(table, "suite_cpu_pct")
    if v.size:
        add("suite_cpu_pct_mean", time_mean(v, dt), "%", "lower")
    add("gpu_throttled_s", _throttled_s(table), "s", "lower")
    return rows


def contention(rows: list[dict[str, Any]], threshold_pct: float) -> tuple[bool | None, str | None]:
    """(contended, reason) from the summary rows: mean background CPU (time-weighted) above the threshold;
    None (not judged, saying why) without a background mean: no samples are no evidence of a quiet machine."""
    mean = next((r["value"] for r in rows if r["name"] == "background_cpu_pct_mean"), None)
    if mean is None:
        return None, "not judged: no background CPU samples to judge by"
    if mean > threshold_pct:
        return True, (f"processes other than the suite used {mean:.1f} % of the machine's CPU on average "
                      f"(threshold {threshold_pct:g} %)")
    return False, None
