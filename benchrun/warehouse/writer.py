"""Atomic per-run parquet partitions: ``<home>/warehouse/<table>/run_id=<id>/part.parquet``.

Each run's partition of a table is one file, written to a temporary name in the same
directory and renamed over the old one, so a reader (or a writer killed mid-write) only
ever sees the previous complete file or the new complete file, and re-curating a run
replaces exactly its rows.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from benchrun.fsio import fsync_dir
from benchrun.paths import validate_run_id
from benchrun.warehouse.schemas import TABLES

log = logging.getLogger(__name__)

PART = "part.parquet"
COMPRESSION = "snappy"  # DuckDB's own default for COPY ... TO parquet


def warehouse_root(home: Path) -> Path:
    return Path(home) / "warehouse"


def partition_dir(home: Path, table: str, run_id: str) -> Path:
    """``<home>/warehouse/<table>/run_id=<id>/`` (validated)."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
    validate_run_id(run_id)  # a DNS-1123 label: safe as a path component after "run_id="
    return warehouse_root(home) / table / f"run_id={run_id}"


def table_glob(home: Path, table: str) -> str:
    return str(warehouse_root(home).resolve() / table / "run_id=*" / PART)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale_temps(directory: Path) -> None:
    """Remove temporaries left by writers that died (their pid is in the name)."""
    for tmp in directory.glob(".part.*.tmp"):
        try:
            pid = int(tmp.name.split(".")[2])
        except (IndexError, ValueError):
            continue
        if not _pid_alive(pid):
            log.info("removing %s left by a writer that died", tmp)
            tmp.unlink(missing_ok=True)


def write_partition(
    home: Path,
    table: str,
    run_id: str,
    batches: Iterable[pa.RecordBatch | pa.Table],
) -> int:
    """Write ``batches`` (cast to the table's schema) as the run's partition; return the row count.

    An empty iterable still writes a file with the schema: the partition exists with zero
    rows, so a re-curation that finds nothing replaces old rows too.
    """
    schema = TABLES[table]
    directory = partition_dir(home, table, run_id)
    directory.mkdir(parents=True, exist_ok=True)
    _clean_stale_temps(directory)
    tmp = directory / f".part.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    rows = 0
    try:
        with pq.ParquetWriter(tmp, schema, compression=COMPRESSION) as writer:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if batch.schema != schema:
                    batch = batch.select(schema.names).cast(schema) if set(schema.names) <= set(batch.schema.names) else batch.cast(schema)
                if isinstance(batch, pa.RecordBatch):
                    writer.write_batch(batch)
                else:
                    writer.write_table(batch)
                rows += batch.num_rows
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, directory / PART)
        fsync_dir(directory)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    log.info("wrote %d rows to %s", rows, directory / PART)
    return rows


def rows_to_table(table: str, rows: list[dict]) -> pa.Table:
    """A list of row dicts as a table of ``table``'s schema (missing keys → null)."""
    schema = TABLES[table]
    return pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)


def remove_partition(home: Path, table: str, run_id: str) -> bool:
    """Delete a run's partition of ``table`` (retention); True when something was removed."""
    directory = partition_dir(home, table, run_id)
    if not directory.exists():
        return False
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()
    return True


def partition_run_ids(home: Path, table: str) -> list[str]:
    """Run ids with a partition of ``table``."""
    root = warehouse_root(home) / table
    if not root.is_dir():
        return []
    return sorted(p.name.split("=", 1)[1] for p in root.glob("run_id=*") if (p / PART).is_file())
