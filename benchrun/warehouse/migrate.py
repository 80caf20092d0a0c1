"""Migration of a parquet-layout warehouse (``warehouse/<table>/run_id=<id>/part.parquet``) into the
Iceberg tables: once by itself on the first use of an older home, or by ``benchrun migrate-warehouse``.

A run the tables already hold is never copied again: its rows there are the same or newer (curated
again), so a migration stopped half-way is finished by running it again and never puts older rows
back; nor is a run whose rows retention removed from a table (its records under
``warehouse/_retention/``: an Iceberg home's retention before it removed the parquet partitions too
left them behind). The counts checked are the parquet rows read and the rows the
tables hold for those runs afterwards, read back from the tables.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
from pathlib import Path
from typing import Iterable

import pyarrow as pa

from benchrun.paths import is_run_id
from benchrun.warehouse.lake import commit_run, load_or_create, run_ids
from benchrun.warehouse.lakecatalog import MIGRATED_MARKER, catalog, catalog_exists, local_default, written_under
from benchrun.warehouse.schemas import TABLES

log = logging.getLogger(__name__)

# Written into <home>/warehouse/ once a home's parquet layout is in the Iceberg tables: the row
# counts per table and the partitions left out. Its presence is what "migrated" means.
MARKER = MIGRATED_MARKER
# Written before a first-use migration's first commit and removed with the marker's writing: while it
# is there the tables exist but hold part of the layout, so the next use finishes the copy.
IN_PROGRESS = ".migration.in-progress"
_CHECKED: set[str] = set()  # homes this process has looked at (or is migrating)
_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_LOCK = threading.Lock()


@dataclasses.dataclass
class Migration:
    """Per table: (parquet rows of the runs copied, the tables' rows of those runs read back); the
    runs left as they were because the tables already held them; the partitions that did not read."""

    counts: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    already: dict[str, int] = dataclasses.field(default_factory=dict)
    expired: dict[str, int] = dataclasses.field(default_factory=dict)  # runs retention removed: never copied back
    left_out: list[str] = dataclasses.field(default_factory=list)

    @property
    def differ(self) -> list[str]:
        return sorted(t for t, (before, after) in self.counts.items() if before != after)


def has_parquet_layout(home: Path) -> bool:
    """Whether ``home`` holds a partition of the per-run parquet layout."""
    root = Path(home) / "warehouse"
    return any(next(iter((root / table).glob("run_id=*/part.parquet")), None) is not None
               for table in TABLES if (root / table).is_dir())


def _home_lock(key: str) -> threading.RLock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(key, threading.RLock())


def _tables_exist(home: Path) -> bool:
    """Whether the home's own catalog already holds a table (made by curation or a migration)."""
    return catalog_exists(home) and written_under(catalog(home)) is not None


def migrate_on_first_use(home: Path) -> Migration | None:
    """The first use of a home of an earlier release: when it holds the parquet layout, no marker,
    and its own catalog (the embedded default) has no table yet, copy the layout in, once, under a
    lock every process and thread of the home shares, and record the counts in the marker.

    Not by itself: with a shared catalog (``BENCHRUN_CATALOG_URI``/``BENCHRUN_WAREHOUSE_LOCATION``), or
    when the tables already exist (an earlier opt-in to Iceberg, or a migration that stopped half-way):
    ``benchrun migrate-warehouse`` copies the runs the tables lack. A count that differs raises, no
    marker is written and nothing is removed; the parquet files are never removed here."""
    import fcntl

    from benchrun.errors import BenchrunError

    key = str(Path(home).resolve())
    with _home_lock(key):  # a second thread of this process waits for the first's migration
        if key in _CHECKED:
            return None
        root = Path(home) / "warehouse"
        if (root / MARKER).is_file() or not has_parquet_layout(home):
            _CHECKED.add(key)
            return None
        resume = (root / IN_PROGRESS).is_file()  # a first-use migration that stopped half-way
        if not local_default(home) or (_tables_exist(home) and not resume):
            log.warning("warehouse: %s holds parquet partitions not copied into the Iceberg tables by themselves (the "
                        "tables exist, or the catalog is shared), so what is read may lack runs: `benchrun "
                        "migrate-warehouse` copies the runs they lack", root)
            _CHECKED.add(key)
            return None
        with open(root / ".migration.lock", "a+") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # the other processes of this home
            try:
                if (root / MARKER).is_file():  # another process of this home did it while we waited
                    _CHECKED.add(key)
                    return None
                log.warning("warehouse: %s holds the per-run parquet layout; %s it into the Iceberg tables once "
                            "(the parquet files stay)", root, "finishing copying" if resume else "copying")
                from benchrun.fsio import atomic_write_text

                atomic_write_text(root / IN_PROGRESS, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
                done = migrate_parquet(home)
                if done.differ:
                    raise BenchrunError(
                        f"warehouse: migrating {root} into the Iceberg tables left row counts that differ for "
                        f"{done.differ}; nothing was removed: run `benchrun migrate-warehouse` to see the counts, or "
                        f"set BENCHRUN_WAREHOUSE_FORMAT=parquet to keep the old layout")
                write_marker(home, done)
                _CHECKED.add(key)
                log.warning("warehouse: migrated %s rows into the Iceberg tables (%s)",
                            sum(a for _, a in done.counts.values()), root / MARKER)
                return done
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def write_marker(home: Path, done: Migration) -> Path:
    """Record a finished migration (rows per table, parquet and read back) in ``<home>/warehouse``."""
    from benchrun.fsio import atomic_write_json

    marker = atomic_write_json(Path(home) / "warehouse" / MARKER, {
        "migrated_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "tables": {t: {"parquet_rows": b, "iceberg_rows": a, "runs_already_in_the_table": done.already.get(t, 0)}
                   for t, (b, a) in done.counts.items()},
        "left_out": done.left_out})
    (Path(home) / "warehouse" / IN_PROGRESS).unlink(missing_ok=True)
    return marker


def _run_starts(home: Path, run_ids: Iterable[str]) -> dict[str, dt.datetime | None]:
    """Each run's start (``sources.run_start``: its first start), for the day partition."""
    from benchrun.rundir import read_json_or_none
    from benchrun.warehouse.sources import run_start

    out: dict[str, dt.datetime | None] = {}
    for run_id in run_ids:
        status = read_json_or_none(Path(home) / "runs" / run_id / "status.json", fix="curate the run again") or {}
        out[run_id] = run_start(status)
    return out


def _removed_by_retention(home: Path) -> dict[str, set[str]]:
    """Per table, the runs whose rows an applied retention pass removed (its records under
    ``warehouse/_retention/``: :func:`benchrun.warehouse.removed.retention_parts`)."""
    from benchrun.warehouse.removed import retention_parts

    out: dict[str, set[str]] = {}
    for _record, table, run_id in retention_parts(home):
        out.setdefault(table, set()).add(run_id)
    return out


def _rows_now(home: Path, table: str, ids: list[str]) -> int:
    """The tables' rows of ``ids`` in ``table``, read back."""
    from pyiceberg.expressions import In

    if not ids:
        return 0
    tbl = load_or_create(catalog(home), table)
    if tbl.current_snapshot() is None:
        return 0
    return tbl.scan(row_filter=In("run_id", ids), selected_fields=("run_id",)).to_arrow().num_rows


def migrate_parquet(home: Path) -> Migration:
    """Copy a parquet-layout home's partitions into the Iceberg tables, one commit per run per table,
    each run the table does not hold yet (see the module's docstring); partitions that do not read are
    named and left in place; the parquet files are never removed here."""
    import pyarrow.parquet as pq

    from benchrun.warehouse.partitions import readable_partitions

    key = str(Path(home).resolve())
    with _home_lock(key):
        _CHECKED.add(key)  # this is the migration: no first-use one starts inside it
        done = Migration()
        removed = _removed_by_retention(home)
        for table in TABLES:
            files, notes = readable_partitions(home, table)
            for note in notes:
                log.warning("%s", note)
            done.left_out.extend(notes)
            present = run_ids(home, table)
            by_run = {f.parent.name.removeprefix("run_id="): f for f in files}
            for run_id in [r for r in by_run if not is_run_id(r)]:  # named, left in place, never a crash
                note = (f"{by_run.pop(run_id).parent}: {run_id!r} is not a valid run id, so it was not copied; "
                        "rename the directory to its run's id (run_id=<id>) and run `benchrun migrate-warehouse`")
                log.warning("%s", note)
                done.left_out.append(note)
            done.already[table] = sum(1 for r in by_run if r in present)
            gone = removed.get(table, set())
            done.expired[table] = sum(1 for r in by_run if r in gone and r not in present)
            todo = {r: f for r, f in by_run.items() if r not in present and r not in gone}
            starts = _run_starts(home, todo)
            before, copied = 0, []
            for run_id, f in sorted(todo.items()):
                data = pq.ParquetFile(f).read()  # the file alone: no hive run_id= column inferred from its directory
                if data.num_rows == 0:
                    continue
                before += data.num_rows
                missing = [c for c in TABLES[table].names if c not in data.column_names]
                for name in missing:  # a partition written before the column existed: null, never invented
                    data = data.append_column(TABLES[table].field(name),
                                              pa.nulls(data.num_rows, TABLES[table].field(name).type))
                commit_run(home, table, run_id, [data], starts[run_id])
                copied.append(run_id)
            done.counts[table] = (before, _rows_now(home, table, copied))
        return done
