"""One telemetry sample row, the parquet schema of a replicate's samples, and reading/writing it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from benchrun.fsio import atomic_path

SAMPLE_SCHEMA = pa.schema([
    ("ts", pa.timestamp("us", tz="UTC")),  # end of the interval the value describes
    ("interval_s", pa.float64()),  # rates: seconds since the previous sample; gauges: null
    ("source", pa.string()),  # psutil | nvml | prometheus:<job>
    ("scope", pa.string()),  # node | core | gpu | process
    ("metric", pa.string()),
    ("device_index", pa.int64()),  # core number or GPU index; null for node scope
    ("gpu_uuid", pa.string()),
    ("node_name", pa.string()),
    ("pod_uid", pa.string()),
    ("value", pa.float64()),
    ("unit", pa.string()),
])

_TELEMETRY_NAME = re.compile(r"^(?P<run>[a-z0-9-]+)_(?P<suite>[A-Za-z0-9][A-Za-z0-9._-]*)_r(?P<rep>\d+)_(?P<kind>telemetry|prometheus|servermetrics)\.parquet$")


@dataclass(frozen=True)
class Sample:
    """One value of one metric on one device at one time (epoch seconds)."""

    ts: float
    source: str
    scope: str
    metric: str
    value: float
    unit: str
    device_index: int | None = None
    gpu_uuid: str | None = None
    interval_s: float | None = None
    node_name: str | None = None
    pod_uid: str | None = None


def telemetry_relpath(run_id: str, suite: str, replicate: int) -> str:
    """``raw/<run_id>_<suite>_r<k>_telemetry.parquet`` (CONTRACT.md §4 naming)."""
    return f"raw/{run_id}_{suite}_r{int(replicate)}_telemetry.parquet"


def parse_telemetry_name(name: str) -> tuple[str, str, int, str] | None:
    """(run_id, suite, replicate, kind) of a telemetry or prometheus sample file name, else None."""
    m = _TELEMETRY_NAME.match(name)
    return (m.group("run"), m.group("suite"), int(m.group("rep")), m.group("kind")) if m else None


def samples_table(samples: Iterable[Sample]) -> pa.Table:
    cols: dict[str, list] = {name: [] for name in SAMPLE_SCHEMA.names}
    for s in samples:  # plain getattr: every field is a scalar, and asdict deep-copies each one
        for name in SAMPLE_SCHEMA.names:
            cols[name].append(int(round(s.ts * 1_000_000)) if name == "ts" else getattr(s, name))
    arrays = []
    for field in SAMPLE_SCHEMA:
        if field.name == "ts":
            arrays.append(pa.array(cols["ts"], pa.int64()).cast(field.type))
        else:
            arrays.append(pa.array(cols[field.name], field.type))
    return pa.Table.from_arrays(arrays, schema=SAMPLE_SCHEMA)


def write_samples(path: Path, samples: Iterable[Sample], metadata: dict[str, str] | None = None) -> Path:
    """Write samples to ``path`` atomically (a temporary name, then renamed)."""
    table = samples_table(samples)
    if metadata:
        table = table.replace_schema_metadata({k.encode(): v.encode() for k, v in metadata.items()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


def read_samples(path: Path) -> pa.Table:
    """A telemetry parquet file, cast to :data:`SAMPLE_SCHEMA` (ValueError naming the file if it is not one)."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"{path}: not a readable telemetry parquet file ({exc})") from exc
    missing = [n for n in SAMPLE_SCHEMA.names if n not in table.column_names]
    if missing:
        raise ValueError(f"{path}: telemetry file lacks columns {missing}")
    out = table.select(SAMPLE_SCHEMA.names).cast(SAMPLE_SCHEMA.with_metadata(table.schema.metadata))
    if "point" in table.column_names:  # a serving point's server metrics (benchrun.loadgen.servermetrics)
        out = out.append_column("point", table["point"].cast(pa.string()))
    return out
