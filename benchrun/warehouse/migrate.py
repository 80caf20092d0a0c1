"""Migration of a parquet-layout warehouse (``warehouse/<table>/run_id=<id>/part.parquet``) into the Iceberg tables."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from pathlib import Path
from typing import Iterable

import pyarrow as pa

from benchrun.warehouse.lake import commit_run
from benchrun.warehouse.schemas import TABLES

log = logging.getLogger(__name__)

# Written into <home>/warehouse/ once a home's parquet layout is in the Iceberg tables: the row
# counts before and after, per table. Its presence is what "migrated" means; `benchrun
# migrate-warehouse` can always be run again (each run's rows are replaced, never added twice).
MARKER = "migrated-to-iceberg.json"
_CHECKED: set[str] = set()  # homes this process has looked at (or is migrating: no recursion)
_CHECK_LOCK = threading.Lock()


def has_parquet_layout(home: Path) -> bool:
    """Whether ``home`` holds a partition of the per-run parquet layout."""
    root = Path(home) / "warehouse"
    return any(next(iter((root / table).glob("run_id=*/part.parquet")), None) is not None
               for table in TABLES if (root / table).is_dir())


def migrate_on_first_use(home: Path) -> dict[str, tuple[int, int]] | None:
    """The first time a process of this release opens the Iceberg catalog of a home that still
    holds the parquet layout (and no marker): migrate it, once, under a lock every process of the
    home shares, and record the counts in the marker. None when there was nothing to do.

    A count that differs raises (nothing is removed, no marker written: the next use tries again,
    or `benchrun migrate-warehouse` reports it); the parquet files are never removed here."""
    import fcntl

    from benchrun.errors import BenchrunError

    key = str(Path(home).resolve())
    with _CHECK_LOCK:
        if key in _CHECKED:
            return None
        _CHECKED.add(key)
    root = Path(home) / "warehouse"
    if (root / MARKER).is_file() or not has_parquet_layout(home):
        return None
    with open(root / ".migration.lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            if (root / MARKER).is_file():  # another process of this home did it while we waited
                return None
            log.warning("warehouse: %s holds the per-run parquet layout; copying it into the Iceberg tables once "
                        "(the parquet files stay)", root)
            try:
                counts = migrate_parquet(home)
            except BaseException:
                with _CHECK_LOCK:
                    _CHECKED.discard(key)
                raise
            lost = sorted(t for t, (before, after) in counts.items() if before != after)
            if lost:
                with _CHECK_LOCK:
                    _CHECKED.discard(key)
                raise BenchrunError(f"warehouse: migrating {root} into the Iceberg tables left row counts that differ "
                                    f"for {lost}; nothing was removed: run `benchrun migrate-warehouse` to see the "
                                    f"counts, or set BENCHRUN_WAREHOUSE_FORMAT=parquet to keep the old layout")
            write_marker(home, counts)
            log.warning("warehouse: migrated %s rows into the Iceberg tables (%s)",
                        sum(a for _, a in counts.values()), root / MARKER)
            return counts
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def write_marker(home: Path, counts: dict[str, tuple[int, int]]) -> Path:
    """Record a finished migration (rows per table, parquet and Iceberg) in ``<home>/warehouse``."""
    from benchrun.fsio import atomic_write_json

    return atomic_write_json(Path(home) / "warehouse" / MARKER, {
        "migrated_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "tables": {t: {"parquet_rows": b, "iceberg_rows": a} for t, (b, a) in counts.items()}})


def _run_starts(home: Path, run_ids: Iterable[str]) -> dict[str, dt.datetime | None]:
    """Each run's start (status.json's started_utc, else created_utc), for the day partition."""
    from benchrun.rundir import read_json_or_none
    from benchrun.warehouse.sources import parse_ts

    out: dict[str, dt.datetime | None] = {}
    for run_id in run_ids:
        status = read_json_or_none(Path(home) / "runs" / run_id / "status.json", fix="curate the run again") or {}
        out[run_id] = parse_ts(status.get("started_utc")) or parse_ts(status.get("created_utc"))
    return out


def migrate_parquet(home: Path) -> dict[str, tuple[int, int]]:
    """Copy a parquet-layout home's partitions into the Iceberg tables: per table, rows (before, after).

    One commit per run per table, as curation makes (re-running replaces those rows again, so a
    migration stopped half-way is finished by running it again). Partitions that do not read are
    named and left in place; the parquet files are never removed here.
    """
    import pyarrow.parquet as pq

    from benchrun.warehouse.partitions import readable_partitions

    with _CHECK_LOCK:  # this is the migration: the catalog opened below does not start another
        _CHECKED.add(str(Path(home).resolve()))
    counts: dict[str, tuple[int, int]] = {}
    for table in TABLES:
        files, notes = readable_partitions(home, table)
        for note in notes:
            log.warning("%s", note)
        by_run = {f.parent.name.removeprefix("run_id="): f for f in files}
        starts = _run_starts(home, by_run)
        before = after = 0
        for run_id, f in sorted(by_run.items()):
            data = pq.ParquetFile(f).read()  # the file alone: no hive run_id= column inferred from its directory
            before += data.num_rows
            missing = [c for c in TABLES[table].names if c not in data.column_names]
            for name in missing:  # a partition written before the column existed: null, never invented
                data = data.append_column(TABLES[table].field(name), pa.nulls(data.num_rows, TABLES[table].field(name).type))
            after += commit_run(home, table, run_id, [data], starts[run_id]).rows
        counts[table] = (before, after)
    return counts

