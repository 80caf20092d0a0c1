"""Reader of fio's JSON output (``--output-format=json``) into benchrun metric rows.

Standard library only: the ``fio`` suite calls it inside benchmark pods, and the launcher
calls it on the output of a spec's own fio command.

Per job (``case`` = the job name; ``<job>:read`` / ``<job>:write`` when a job does both)
and per direction that moved bytes:

* ``bandwidth_mib_per_s`` — ``bw_bytes`` / 2^20 (fio's ``bw`` is KiB/s; fio's own "MiB/s")
* ``iops`` — fio's ``iops`` (mean over the job's runtime)
* ``p99_clat_ms`` — the 99th percentile of completion latency (``clat_ns.percentile
  ["99.000000"]``, or total latency ``lat_ns`` when fio ran with ``--lat_percentiles=1``
  and no clat percentiles), in milliseconds; absent when fio reported no percentiles.

Jobs that ended with a non-zero ``error`` give no metrics; :func:`job_errors` lists them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.suites.result import metric

DIRECTIONS = ("read", "write", "trim")


def parse_fio_json(text: str, source: str = "fio output") -> dict[str, Any]:
    """The JSON document in fio's output; text fio printed before it (notes, warnings) is skipped."""
    start = text.find("{")
    if start < 0:
        raise BenchrunError(f"{source}: no JSON object found; run fio with --output-format=json")
    try:
        doc = json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError as exc:
        raise BenchrunError(f"{source}: fio JSON does not parse ({exc}); was the run cut short?") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise BenchrunError(f"{source}: not fio JSON output (no 'jobs' list)")
    return doc


def job_errors(doc: dict[str, Any]) -> list[str]:
    """``"<job>: error <n>"`` for each job fio reports as failed."""
    return [f"{j.get('jobname')}: error {j.get('error')}" for j in doc["jobs"] if j.get("error")]


def _p99_ms(stats: dict[str, Any]) -> float | None:
    for key, scale in (("clat_ns", 1e-6), ("lat_ns", 1e-6), ("clat", 1e-3)):  # "clat" (usec): fio 2.x
        pct = (stats.get(key) or {}).get("percentile") or {}
        for name, value in pct.items():
            try:
                if abs(float(name) - 99.0) < 1e-9:
                    return float(value) * scale
            except ValueError:
                continue
    return None


def fio_metrics(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Metric rows for every job and direction that moved bytes (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    for job in doc["jobs"]:
        if job.get("error"):
            continue
        name = str(job.get("jobname", "job"))
        active = [d for d in DIRECTIONS if (job.get(d) or {}).get("io_bytes", 0) > 0]
        for direction in active:
            stats = job[direction]
            case = name if len(active) == 1 else f"{name}:{direction}"
            bw_bytes = stats.get("bw_bytes")
            if bw_bytes is None:  # older fio: bw in KiB/s only
                bw_bytes = float(stats.get("bw", 0)) * 1024
            rows.append(metric("bandwidth_mib_per_s", float(bw_bytes) / 2**20, "MiB/s", "higher", case=case))
            rows.append(metric("iops", float(stats.get("iops", 0.0)), "IO/s", "higher", case=case))
            p99 = _p99_ms(stats)
            if p99 is not None:
                ios = stats.get("total_ios")  # the completions the percentile is of
                rows.append(metric("p99_clat_ms", p99, "ms", "lower", case=case,
                                   **({"samples": int(ios)} if isinstance(ios, (int, float)) and ios > 0 else {})))
    return rows


def fio_context(doc: dict[str, Any]) -> dict[str, Any]:
    """What the output says about the run: fio version, each job's options, runtime, disk util."""
    return {
        "fio_version": doc.get("fio version"),
        "jobs": {
            str(j.get("jobname")): {
                "options": j.get("job options", {}),
                "job_runtime_ms": j.get("job_runtime"),
                "error": j.get("error", 0),
            }
            for j in doc["jobs"]
        },
        "disk_util": doc.get("disk_util", []),
    }


def metrics_from_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Metric rows from a file holding fio's JSON output."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BenchrunError(f"{p}: cannot read fio output ({exc.strerror})") from None
    return fio_metrics(parse_fio_json(text, str(p)))
