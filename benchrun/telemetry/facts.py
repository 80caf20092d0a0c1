"""telemetry_slice_fact rows from a run's replicate sample files (built column-wise: a long run
at 10 Hz on a many-core host has millions of samples)."""

from __future__ import annotations

import logging
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from benchrun.telemetry.samples import parse_telemetry_name, read_samples

log = logging.getLogger(__name__)


def sample_files(run_dir: Any, run_id: str) -> list[tuple[str, str, int, str]]:
    """(relative path, suite, replicate, kind) of every telemetry/prometheus sample file of the run."""
    out = []
    raw = run_dir / "raw"
    for path in sorted(raw.glob(f"{run_id}_*_r*_*.parquet")) if raw.is_dir() else []:
        parsed = parse_telemetry_name(path.name)
        if parsed and parsed[0] == run_id:
            out.append((path.relative_to(run_dir).as_posix(), parsed[1], parsed[2], parsed[3]))
    return out


def _const(value: Any, dtype: pa.DataType, n: int) -> pa.Array:
    return pa.nulls(n, dtype) if value is None else pa.repeat(pa.scalar(value, dtype), n)


def slice_tables(src: Any, schema: pa.Schema) -> Iterator[pa.Table]:
    """One table per sample file, in ``schema`` (telemetry_slice_fact), with keys and lineage.

    ``src`` is the warehouse's RunSources (run_dir, run_id, launch_for, lineage).
    """
    for relpath, suite, rep, _kind in sample_files(src.run_dir, src.run_id):
        try:
            t = read_samples(src.run_dir / relpath)
        except ValueError as exc:
            log.warning("run %s: %s skipped", src.run_id, exc)
            continue
        n = t.num_rows
        if n == 0:
            continue
        launch = src.launch_for(suite, rep)
        meta = {k.decode(): v.decode() for k, v in (t.schema.metadata or {}).items()}
        consts = {
            "run_id": src.run_id,
            "benchmark_case_id": launch.get("benchmark_case_id") or meta.get("benchmark_case_id"),
            **{k: launch.get(k) for k in ("scheduler_run_id", "job_uid")},
            "suite": suite, "replicate": rep, **src.lineage(relpath),
        }
        interval = pc.fill_null(t["interval_s"], 0.0)
        start_us = pc.subtract(t["ts"].cast(pa.int64()), pc.cast(pc.round(pc.multiply(interval, 1e6)), pa.int64()))
        columns = {
            "window_start_utc": start_us.cast(schema.field("window_start_utc").type),
            "window_end_utc": t["ts"],
            "scope": t["scope"], "source": t["source"], "metric": t["metric"], "value": t["value"], "unit": t["unit"],
            "device_index": t["device_index"], "gpu_uuid": t["gpu_uuid"],
            "node_name": pc.coalesce(t["node_name"], _const(launch.get("node_name"), pa.string(), n)),
            "pod_uid": pc.coalesce(t["pod_uid"], _const(launch.get("pod_uid"), pa.string(), n)),
            "point": t["point"] if "point" in t.column_names else _const(None, pa.string(), n),
        }
        arrays = []
        for field in schema:
            col = columns.get(field.name)
            if col is None:
                arrays.append(_const(consts.get(field.name), field.type, n))
            else:
                col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
                arrays.append(col.cast(field.type))
        yield pa.Table.from_arrays(arrays, schema=schema)
