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


def contention_threshold_pct(environ: dict[str, str] | None = None) -> float:
    """``BENCHRUN_CONTENTION_PCT`` (percent of the machine's CPU), default 10."""
    raw = (environ if environ is not None else os.environ).get("BENCHRUN_CONTENTION_PCT")
    try:
        return float(raw) if raw else DEFAULT_CONTENTION_PCT
    except ValueError:
        return DEFAULT_CONTENTION_PCT


def _values(table: pa.Table, metric: str) -> np.ndarray:
    sel = table.filter(pc.equal(table["metric"], metric))
    return sel["value"].to_numpy(zero_copy_only=False).astype(float)


def _throttled_s(table: pa.Table) -> float | None:
    """Longest per-GPU time throttled: each throttled sample counts the time since that GPU's previous sample."""
    sel = table.filter(pc.equal(table["metric"], "gpu_throttled"))
    if sel.num_rows == 0:
        return None
    worst = 0.0
    for idx in set(sel["device_index"].to_pylist()):
        g = sel.filter(pc.equal(sel["device_index"], idx)).sort_by("ts")
        ts = g["ts"].cast(pa.int64()).to_numpy() / 1e6
        flags = g["value"].to_numpy()
        worst = max(worst, float(sum(ts[i] - ts[i - 1] for i in range(1, len(ts)) if flags[i] >= 0.5)))
    return worst


def summarise(table: pa.Table) -> list[dict[str, Any]]:
    """Metric rows (suite-result shape) for one replicate's samples; absent inputs → absent rows."""
    rows: list[dict[str, Any]] = []

    def add(name: str, value: float | None, unit: str, direction: str) -> None:
        if value is not None and np.isfinite(value):
            rows.append({"name": name, "value": float(value), "unit": unit, "direction": direction,
                         "case": CASE, "source": "telemetry"})

    for metric, direction in (("cpu_utilization_pct", "higher"), ("gpu_utilization_pct", "higher"),
                              ("background_cpu_pct", "lower")):
        v = _values(table, metric)
        if v.size:
            add(f"{metric}_mean", float(v.mean()), "%", direction)
            add(f"{metric}_p95", float(np.percentile(v, 95)), "%", direction)
    for metric, unit in (("memory_used_bytes", "bytes"), ("gpu_memory_used_bytes", "bytes")):
        v = _values(table, metric)
        if v.size:
            add(f"{metric}_peak", float(v.max()), unit, "lower")
    v = _values(table, "suite_cpu_pct")
    if v.size:
        add("suite_cpu_pct_mean", float(v.mean()), "%", "lower")
    add("gpu_throttled_s", _throttled_s(table), "s", "lower")
    return rows


def contention(rows: list[dict[str, Any]], threshold_pct: float) -> tuple[bool, str | None]:
    """(contended, reason) from the summary rows: mean background CPU above the threshold."""
    mean = next((r["value"] for r in rows if r["name"] == "background_cpu_pct_mean"), None)
    if mean is None:
        return False, None
    if mean > threshold_pct:
        return True, (f"processes other than the suite used {mean:.1f} % of the machine's CPU on average "
                      f"(threshold {threshold_pct:g} %)")
    return False, None
