"""The result every suite writes and every reader (ingest, warehouse, stats) reads.

Standard library only: this module runs inside benchmark pods (ARCHITECTURE.md §1).

A suite invocation is one replicate. It writes one JSON document to
``structured/<run_id>_<suite>_r<k>.json`` (see :func:`result_path`) with this shape::

    {
      "schema": "benchrun.suite_result/v1",
      "run_id": "...", "suite": "...", "replicate": 1, "benchmark_case_id": "...",
      "status": "ok" | "unavailable" | "failed",
      "reason": null | "unavailable: no CUDA device" | "...",
      "synthetic": false,                 # true when fed by the reference server
      "started_utc": "...", "finished_utc": "...",
      "parameters": {...},                # what the suite was asked to do
      "context": {...},                   # what it ran on: BLAS, device, fio version, ...
      "metrics": [Metric, ...],           # headline numbers of this replicate
      "samples": {"name": "relative/path"},   # sample files (parquet/json) under the run dir
      "serving": [ServingPoint, ...]      # serving suites only: one row per point x bucket
    }

A metric is one number of one replicate::

    {"name": "tflops", "value": 1.23, "unit": "TFLOP/s", "direction": "higher",
     "case": "n=2048,fp64", "rank_id": null, "node_name": null, "gpu_uuid": null}

``name`` follows CONTRACT.md §5 where the spec names the quantity (``ttft_ms``,
``tokens_per_second``, ``p99_latency_ms`` ...); ``case`` separates the cases one suite
measures (a message size, an fio job, a sweep point and bucket); ``direction`` is
``higher`` or ``lower`` (is better) and drives comparisons. A metric that cannot be
measured is absent, never zero; the reason goes in ``reason`` or ``context``.

Samples inside a replicate (iterations, requests) are summarised by the suite; the
replicate is the unit of replication (stats never treat samples as independent).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

SCHEMA = "benchrun.suite_result/v1"
STATUSES = ("ok", "unavailable", "failed")
DIRECTIONS = ("higher", "lower")

# Fields of one serving summary row (one load point x one mix bucket x one replicate).
# ``bucket`` is "<in>/<out>" or "all". Percentile families expand to
# <base>_{mean,p50,p90,p95,p99,p999,min,max,std}. Optional quantities (goodput,
# attainment, cost) are null when the spec declares no SLO / price: absent, not zero.
PERCENTILE_SUFFIXES = ("mean", "p50", "p90", "p95", "p99", "p999", "min", "max", "std")
SERVING_DISTRIBUTIONS = ("ttft_ms", "decode_ms_per_token", "e2e_ms", "token_gap_ms")
SERVING_SCALARS = (
    "point",  # label, e.g. "c=8" or "rate=4.0"
    "load_model",  # closed_loop | open_loop
    "offered_load",  # concurrency (closed loop) or requests/s (open loop)
    "bucket",
    "n_requests",
    "n_errors",
    "window_s",
    "jitter_ms",
    "tokens_per_second",
    "per_user_output_tokens_per_s",
    "request_throughput_rps",
    "request_goodput",
    "slo_attainment",
    "cost_per_request_usd",
    "cost_per_token_usd",
    "achieved_rate_rps",
    "schedule_lag_p99_ms",
    "verdict",  # valid | invalid
    "verdict_reasons",  # list of strings
)

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def _safe(name: str, what: str) -> str:
    if not _SAFE.match(name) or ".." in name:
        raise ValueError(f"{what} {name!r} is not a safe file-name component")
    return name


def result_path(run_dir: str | os.PathLike[str], run_id: str, suite: str, replicate: int) -> Path:
    """``<run_dir>/structured/<run_id>_<suite>_r<k>.json`` with validated components."""
    _safe(run_id, "run id")
    _safe(suite, "suite name")
    return Path(run_dir) / "structured" / f"{run_id}_{suite}_r{int(replicate)}.json"


def raw_path(run_dir: str | os.PathLike[str], run_id: str, suite: str, replicate: int, kind: str, ext: str) -> Path:
    """``<run_dir>/raw/<run_id>_<suite>_r<k>_<kind>.<ext>`` (CONTRACT.md §4 naming)."""
    _safe(run_id, "run id")
    _safe(suite, "suite name")
    _safe(kind, "kind")
    _safe(ext, "extension")
    return Path(run_dir) / "raw" / f"{run_id}_{suite}_r{int(replicate)}_{kind}.{ext}"


def metric(
    name: str,
    value: float,
    unit: str,
    direction: str,
    case: str = "",
    **keys: Any,
) -> dict[str, Any]:
    """One metric row; ``keys`` may carry join keys such as rank_id or node_name."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    if not math.isfinite(float(value)):
        raise ValueError(f"metric {name!r}: value {value!r} is not a finite number; leave the metric out "
                         "when it cannot be measured")
    row: dict[str, Any] = {
        "name": name,
        "value": float(value),
        "unit": unit,
        "direction": direction,
        "case": case,
    }
    row.update(keys)
    return row


def read_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a suite result document; raises ValueError naming the file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: not a readable suite result ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{p}: schema is not {SCHEMA}")
    if doc.get("status") not in STATUSES:
        raise ValueError(f"{p}: status must be one of {STATUSES}")
    rep = doc.get("replicate")
    if rep is not None and (isinstance(rep, bool) or not isinstance(rep, int)):
        raise ValueError(f"{p}: replicate must be an integer, not {rep!r}")
    named = re.search(r"_r(\d+)\.json\Z", p.name)
    if named and rep is None:
        raise ValueError(f"{p}: has no replicate field; a result document says its replicate "
                         f"({int(named.group(1))}, as its file name r{int(named.group(1))} says)")
    if named and rep != int(named.group(1)):
        # the file of replicate k is replicate k: readers key values by the field, so three files saying
        # replicate 1 became one replicate's median and a run of 6 compared as 3
        raise ValueError(f"{p}: replicate is {rep!r}, but the file name says replicate {int(named.group(1))} "
                         f"(r{int(named.group(1))}); a result document is written to its own replicate's file")
    metrics = doc.get("metrics", [])
    if not isinstance(metrics, list):
        raise ValueError(f"{p}: metrics must be a list of metric objects, not a {type(metrics).__name__}")
    for j, m in enumerate(metrics):
        if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not m["name"]:
            raise ValueError(f"{p}: metrics[{j}] is not a metric object with a name")
        v = m.get("value")
        if m.get("direction") not in DIRECTIONS or isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{p}: metric {m['name']!r} lacks a numeric value or direction")
        if not math.isfinite(v):
            # an infinite throughput or a NaN latency is no measurement: it would widen or empty the
            # comparison's interval instead of failing; a suite that cannot measure a metric leaves it out
            raise ValueError(f"{p}: metric {m['name']!r} has the value {v!r}, not a finite number")
        rank = m.get("rank_id")
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            # the warehouse keys rank rows by an integer rank (measurement_fact.rank_id is int64)
            raise ValueError(f"{p}: metric {m['name']!r} has rank_id {rank!r}: give the rank as a non-negative "
                             "integer, or leave rank_id out")
    return doc
