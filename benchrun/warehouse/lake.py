"""The warehouse as Apache Iceberg tables in a pyiceberg SQL catalog: one atomic commit per run per table.

The default warehouse (``BENCHRUN_WAREHOUSE_FORMAT`` unset or ``iceberg``). The catalog and the
tables' location (a sqlite file and a directory in the home by default, Postgres and ``s3://`` at
scale) are :mod:`benchrun.warehouse.lakecatalog`'s, whose names this module re-exports.

Every table of :mod:`benchrun.warehouse.schemas` has the same columns plus, where it lacks them,
``run_id`` and always ``run_started_utc`` (the run's start): the tables are partitioned by
``day(run_started_utc)`` and, where the table has one, by ``suite`` — never by run id, so files
grow with days and suites, not with runs. Curating a run replaces exactly its rows (a delete by
``run_id`` and an append, one transaction: one catalog commit), so re-curation is idempotent;
a commit that loses the race with another writer (the catalog's optimistic concurrency:
``CommitFailedException``) is redone on the table's new state.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import random
import re
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id
from benchrun.warehouse.schemas import TABLES, TS
from benchrun.warehouse.lakecatalog import (  # noqa: F401  (the catalog's names, used through this module as before the split)
    CATALOG_ENV, CATALOG_FILE, CATALOG_NAME, CATALOG_PASSWORD_ENV, LOCATION_ENV, _CATALOGS, _is_locked, _retry_locked,
    catalog, catalog_exists, catalog_uri, s3_properties, table_location,
)

log = logging.getLogger(__name__)

NAMESPACE = "benchrun"
FORMAT_ENV = "BENCHRUN_WAREHOUSE_FORMAT"  # "iceberg" (unset: the default) or "parquet", the per-run layout before it
RUN_START = "run_started_utc"
SNAPSHOT_RUN_PROPERTY = "benchrun.run-id"
# on every snapshot of one commit (a curation's delete and append, a compaction's): which snapshots
# made one commit once the metadata log no longer says (a delete-only commit, then the same run's
# append in the next, carry the same run id)
SNAPSHOT_COMMIT_PROPERTY = "benchrun.commit"
COMMIT_ATTEMPTS = 60
# What keeps a commit's cost flat as a table's history grows (benchmarks/warehouse_scale.py): each
# commit rewrites the manifest list and the table metadata, which hold every manifest and every
# snapshot kept, and pyiceberg deep-copies that metadata some 30 times per commit (profiled: 27 ms
# a copy at 260 snapshots, 85 % of a commit). Appends merge small manifests (fast appends add one
# each; pyiceberg's default), superseded metadata files are deleted and only 20 kept, and past
# MAX_SNAPSHOTS the oldest untagged snapshots are expired by the writer itself (the maintenance
# asset expires by age as well): time travel reaches the last MAX_SNAPSHOTS snapshots of a table
# (a run's commit makes one or two), and a snapshot a tag names is always kept.
TABLE_PROPERTIES = {
    "format-version": "2",
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "32",
    # merged manifests stop growing at 1 MiB (~2,200 data files each): a merge then rewrites at most that
    # much, where pyiceberg's 8 MiB default let the one merged manifest grow with the table and made every
    # 32nd commit slower (10,000 runs: commit p99 0.27 s over runs 1-1,000, 2.52 s over 9,001-10,000;
    # with the cap 0.36 and 0.46 s, 0.45 s over all 40,000 commits: benchmarks/README.md)
    "commit.manifest.target-size-bytes": str(1 << 20),
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}
MAX_SNAPSHOTS_ENV = "BENCHRUN_LAKE_MAX_SNAPSHOTS"
MAX_SNAPSHOTS = 200
EXPIRE_SLACK = 100  # expire in batches: once MAX_SNAPSHOTS + EXPIRE_SLACK are kept, back to MAX_SNAPSHOTS
FILTER_COLUMN = "suite"


def enabled() -> bool:
    """True when the warehouse is the Iceberg tables: the default; ``BENCHRUN_WAREHOUSE_FORMAT=parquet``
    keeps the per-run parquet layout of earlier releases."""
    value = os.environ.get(FORMAT_ENV, "").strip().lower() or "iceberg"
    if value not in ("parquet", "iceberg"):
        raise BenchrunError(f"{FORMAT_ENV}={value!r}: give iceberg or parquet (unset: iceberg)")
    return value == "iceberg"


def iceberg_schema_of(table: str) -> pa.Schema:
    """The table's columns plus ``run_id`` (when absent) and ``run_started_utc``: what the Iceberg table holds."""
    schema = TABLES[table]
    extra = []
    if "run_id" not in schema.names:
        extra.append(pa.field("run_id", pa.string()))
    extra.append(pa.field(RUN_START, TS))
    return pa.schema([*schema, *extra])


def _partition_spec(schema: Any, table: str) -> Any:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, IdentityTransform

    fields = [PartitionField(source_id=schema.find_field(RUN_START).field_id, field_id=1000,
                             transform=DayTransform(), name="run_day")]
    if FILTER_COLUMN in TABLES[table].names:
        fields.append(PartitionField(source_id=schema.find_field(FILTER_COLUMN).field_id, field_id=1001,
                                     transform=IdentityTransform(), name=FILTER_COLUMN))
    return PartitionSpec(*fields)


def load_or_create(cat: Any, table: str) -> Any:
    """The Iceberg table ``benchrun.<table>``, created (schema and partition spec) when absent."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
    from pyiceberg.schema import assign_fresh_schema_ids

    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
    ident = f"{NAMESPACE}.{table}"
    try:
        return _retry_locked(lambda: cat.load_table(ident), f"load {table}")
    except NoSuchTableError:
        pass
    from sqlalchemy.exc import IntegrityError

    try:
        _retry_locked(lambda: cat.create_namespace(NAMESPACE), "create the namespace")
    except (NamespaceAlreadyExistsError, IntegrityError):  # another writer created it first
        pass
    schema = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(iceberg_schema_of(table)))
    from benchrun.warehouse import laketx

    try:
        made = _retry_locked(lambda: cat.create_table(ident, schema=schema, partition_spec=_partition_spec(schema, table),
                                                      properties=dict(TABLE_PROPERTIES)), f"create {table}")
    except (TableAlreadyExistsError, IntegrityError):  # another writer created it first
        return _retry_locked(lambda: cat.load_table(ident), f"load {table}")
    # empty, and made by a writer that claims its runs (a crash before this: the table keeps its deletes)
    _retry_locked(lambda: laketx.claims_complete(cat, table), "mark the claims complete")
    return made


def _missing_columns(tbl: Any, table: str) -> list[str]:
    """The columns of :func:`iceberg_schema_of` that ``tbl`` lacks (made by an earlier release; a
    run's commit adds them: Iceberg schema evolution, the older rows read them as null)."""
    have = set(tbl.schema().column_names)
    return [name for name in iceberg_schema_of(table).names if name not in have]


def _as_table(table: str, batches: Iterable[pa.RecordBatch | pa.Table], run_id: str,
              run_started: dt.datetime | None) -> pa.Table:
    """The run's rows of ``table`` in the Iceberg table's schema (run id and start filled in)."""
    base = TABLES[table]
    target = iceberg_schema_of(table)
    parts = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if not isinstance(batch, pa.Table):
            batch = pa.Table.from_batches([batch])
        parts.append(batch.select(base.names).cast(base))
    data = pa.concat_tables(parts) if parts else base.empty_table()
    n = data.num_rows
    if "run_id" not in base.names:
        data = data.append_column(target.field("run_id"), pa.array([run_id] * n, pa.string()))
    elif n and data.column("run_id").null_count == n:
        data = data.set_column(base.get_field_index("run_id"), base.field("run_id"), pa.array([run_id] * n, pa.string()))
    return data.append_column(target.field(RUN_START), pa.array([run_started] * n, TS))


def _run_rows(run_id: str, run_started: dt.datetime | None) -> Any:
    """The run's rows: its id within its start's day, so that only that day's manifests and files are read
    (a run's start never changes once set; a run curated before it started had no start: null)."""
    from pyiceberg.expressions import And, EqualTo, IsNull, Or

    if run_started is None:
        return And(EqualTo("run_id", run_id), IsNull(RUN_START))
    lo = dt.datetime.combine(run_started.astimezone(dt.timezone.utc).date(), dt.time(), dt.timezone.utc)
    return And(EqualTo("run_id", run_id), Or(_in_day(lo), IsNull(RUN_START)))


def _in_day(lo: dt.datetime) -> Any:
    """The rows whose run started in the UTC day from ``lo``."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    return And(GreaterThanOrEqual(RUN_START, lo.isoformat()), LessThan(RUN_START, (lo + dt.timedelta(days=1)).isoformat()))


@dataclasses.dataclass(frozen=True)
class Commit:
    """One run's commit to one table: rows written, the snapshot it made (None: nothing changed), attempts."""

    table: str
    rows: int
    snapshot_id: int | None
    attempts: int
    seconds: float


def commit_run(home: Path, table: str, run_id: str, batches: Iterable[pa.RecordBatch | pa.Table],
               run_started: dt.datetime | None, *, attempts: int = COMMIT_ATTEMPTS, every_day: bool = False) -> Commit:
    """Replace ``run_id``'s rows of ``table`` with ``batches`` in one Iceberg commit; retried on conflicts.

    A conflict (another writer committed first) redoes the delete and append on the table's new
    snapshot; after ``attempts`` conflicts the run's warehouse step fails with the reason, and
    ``benchrun rebuild-warehouse`` repairs it from the evidence."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException
    from pyiceberg.expressions import EqualTo

    from benchrun.warehouse import laketx

    validate_run_id(run_id)
    data = _as_table(table, batches, run_id, run_started)
    cat = catalog(home)
    start = time.monotonic()
    for attempt in range(1, attempts + 1):
        tbl = load_or_create(cat, table)
        before = tbl.current_snapshot()
        # the base is loaded before the claim (laketx: why a first curation may skip the delete)
        first = attempt == 1 and _retry_locked(lambda: laketx.first_curation(cat, table, run_id), "claim the run")
        try:
            with laketx.Transaction(tbl) as tx:
                if data.num_rows and _missing_columns(tbl, table):  # a table of an earlier release
                    with tx.update_schema() as evolve:  # in this commit: the schema never changes alone
                        evolve.union_by_name(iceberg_schema_of(table))
                props = {SNAPSHOT_RUN_PROPERTY: run_id, SNAPSHOT_COMMIT_PROPERTY: uuid.uuid4().hex}
                if before is not None and not first:
                    with warnings.catch_warnings():  # "did not match any records": a run's first curation
                        warnings.simplefilter("ignore", UserWarning)
                        rows = EqualTo("run_id", run_id) if every_day else _run_rows(run_id, run_started)
                        tx.delete(rows, snapshot_properties=props)
                if data.num_rows:
                    tx.append(data, snapshot_properties=props)
        except (CommitFailedException, ValidationException) as exc:
            # ValidationException: a delete that matched nothing (and no append) is still checked against
            # what other writers added meanwhile; like a lost race, redone on the new snapshot
            reason = str(exc)
        except (FileNotFoundError, pa.lib.ArrowInvalid) as exc:  # a data file of the day the delete rewrites is damaged
            raise BenchrunError(
                f"warehouse table {table}: a data file of run {run_id}'s day cannot be read ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''}); `benchrun rebuild-warehouse` takes a damaged "
                "file out and writes the runs it held again; then run this again") from None
        except Exception as exc:  # noqa: BLE001 - a locked sqlite catalog is a conflict too
            if not _is_locked(exc):
                raise
            reason = str(exc).splitlines()[0]
        else:
            after = tbl.current_snapshot()
            changed = after is not None and (before is None or after.snapshot_id != before.snapshot_id)
            bound_snapshots(tbl)
            return Commit(table, data.num_rows, after.snapshot_id if changed else None, attempt,
                          time.monotonic() - start)
        log.info("%s: commit of run %s lost a race (attempt %d: %s); retrying", table, run_id, attempt, reason)
        time.sleep(random.uniform(0.01, 0.05) * min(attempt, 10))
    raise BenchrunError(f"warehouse: the commit of run {run_id} to {table} failed after {attempts} attempts "
                        f"({reason}); run `benchrun rebuild-warehouse {run_id}` to repair it from the evidence")


def current_tables(home: Path) -> dict[str, tuple[str, int | None]]:
    """Each table that exists in the catalog: its current metadata file and snapshot id."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    cat = catalog(home)
    out: dict[str, tuple[str, int | None]] = {}
    try:
        names = {ident[-1] for ident in _retry_locked(lambda: cat.list_tables(NAMESPACE), "list tables")}
    except NoSuchNamespaceError:
        return out
    for table in TABLES:
        if table not in names:
            continue
        try:
            tbl = _retry_locked(lambda t=table: cat.load_table(f"{NAMESPACE}.{t}"), f"load {table}")
        except NoSuchTableError:
            continue
        snap = tbl.current_snapshot()
        out[table] = (tbl.metadata_location, snap.snapshot_id if snap else None)
    return out


def table_files(home: Path, table: str) -> int:
    """The data files in the table's current snapshot."""
    tbl = load_or_create(catalog(home), table)
    return sum(1 for _ in tbl.scan().plan_files()) if tbl.current_snapshot() else 0


COMPACT_BATCH_BYTES = 256 << 20  # a compaction commit rewrites at most about this much (rarely more than one)


def _partition_rows(key: tuple) -> Any:
    """The rows of one partition: (run_day, and suite where the table has it) as :func:`_partition_spec` makes them."""
    from pyiceberg.expressions import And, EqualTo, IsNull

    day, *suite = key
    where = IsNull(RUN_START) if day is None else _in_day(dt.datetime.fromtimestamp(day * 86400, dt.timezone.utc))
    if suite:
        where = And(where, IsNull(FILTER_COLUMN) if suite[0] is None else EqualTo(FILTER_COLUMN, suite[0]))
    return where


def compact(home: Path, table: str, *, attempts: int = COMMIT_ATTEMPTS) -> tuple[int, int]:
    """Rewrite each partition (day, suite) of ``table`` whose files several snapshots added
    (:func:`lakecompact.partitions_to_compact`) as the writer splits it: one commit per table (per
    ``COMPACT_BATCH_BYTES`` rewritten), none when all are compact (a day of two suites, or one
    compaction split, stays so: rewriting it at every maintenance pushed the runs' snapshots out of the
    writers' bound); data files (before, after). A lost race is planned again on the new snapshot."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    from benchrun.warehouse import lakecompact, laketx

    before = table_files(home, table)
    done: set[tuple] = set()  # rewritten by this call, not again (one over the target size stays several files)
    lost = 0
    while True:
        tbl = load_or_create(catalog(home), table)
        if tbl.current_snapshot() is None:
            break
        batch, size = [], 0
        for key, nbytes in lakecompact.partitions_to_compact(tbl, done):
            if batch and size + nbytes > COMPACT_BATCH_BYTES:
                break
            batch, size = [*batch, key], size + nbytes
        if not batch:
            break
        where = lakecompact.any_of([_partition_rows(key) for key in batch])
        rows = tbl.scan(row_filter=where).to_arrow()
        try:
            props = {"benchrun.operation": "compact", SNAPSHOT_COMMIT_PROPERTY: uuid.uuid4().hex}
            with laketx.Transaction(tbl) as tx:  # a lost race: planned again (not pyiceberg's re-staging)
                tx.overwrite(rows, overwrite_filter=where, snapshot_properties=props)
        except (CommitFailedException, ValidationException):
            lost += 1
            if lost >= attempts:
                raise BenchrunError(f"warehouse: compaction of {table} lost {attempts} races; run it again") from None
            time.sleep(random.uniform(0.01, 0.05) * min(lost, 10))
            continue
        done.update(batch)
    return before, table_files(home, table)


def max_snapshots() -> int:
    raw = os.environ.get(MAX_SNAPSHOTS_ENV)
    if raw in (None, ""):
        return MAX_SNAPSHOTS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 10:
        raise BenchrunError(f"{MAX_SNAPSHOTS_ENV}={raw!r}: a whole number of snapshots kept per table, at least 10")
    return value


def bound_snapshots(tbl: Any, keep: int | None = None) -> list[int]:
    """Expire the oldest snapshots of ``tbl`` beyond ``keep`` (default :func:`max_snapshots`) once
    ``EXPIRE_SLACK`` more have gathered; never the current one or one a tag or branch names.
    A lost race is left to the next commit (the next writer expires them)."""
    from pyiceberg.exceptions import CommitFailedException

    keep = max_snapshots() if keep is None else keep
    snaps = list(tbl.snapshots())
    if len(snaps) <= keep + max(1, min(EXPIRE_SLACK, keep // 10)):
        return []
    named = {ref.snapshot_id for ref in tbl.metadata.refs.values()}
    old = [s.snapshot_id for s in sorted(snaps, key=lambda s: s.timestamp_ms)[:len(snaps) - keep]
           if s.snapshot_id not in named]
    if not old:
        return []
    try:
        tbl.maintenance.expire_snapshots().by_ids(old).commit()
    except CommitFailedException:
        return []
    except Exception as exc:  # noqa: BLE001 - a locked sqlite catalog: the next commit tries again
        if not _is_locked(exc):
            raise
        return []
    from benchrun.warehouse import lakefiles

    try:  # expiry deletes no file: those only the expired snapshots held go now (their grace passed)
        lakefiles.remove_unreferenced(tbl)
    except Exception as exc:  # noqa: BLE001 - the commit stands; maintain-warehouse removes them later
        log.warning("%s: files of expired snapshots not removed (%s); `benchrun maintain-warehouse` removes them",
                    tbl.name(), exc)
    return old


def apply_table_properties(home: Path, table: str) -> dict[str, str]:
    """Set :data:`TABLE_PROPERTIES` on an existing table (tables made before they existed);
    the properties changed."""
    from benchrun.warehouse import laketx

    tbl = load_or_create(catalog(home), table)
    changed = {k: v for k, v in TABLE_PROPERTIES.items() if k != "format-version" and tbl.properties.get(k) != v}
    if changed:
        with laketx.Transaction(tbl) as tx:
            tx.set_properties(changed)
    return changed


def maintain(home: Path, table: str, older_than: dt.datetime, *, dry_run: bool = False,
             grace: dt.timedelta | None = None) -> tuple[int, int, list[int], int]:
    """One table's maintenance (the asset and ``maintain-warehouse``): its properties brought to
    :data:`TABLE_PROPERTIES`, compacted, snapshots older than ``older_than`` expired, then the files
    no snapshot left references removed (:mod:`benchrun.warehouse.lakefiles`: expiry alone deletes
    none, so expired and deleted rows stayed on disk); (data files before, after, snapshots expired,
    files removed — or, in a dry run, that would be)."""
    from benchrun.warehouse import lakefiles

    grace = lakefiles.GRACE if grace is None else grace
    if dry_run:  # changes nothing, and makes no catalog or table where there is none: nothing to maintain
        tbl = _existing_table(home, table)
        if tbl is None:
            return 0, 0, [], 0
        files = sum(1 for _ in tbl.scan().plan_files()) if tbl.current_snapshot() else 0
        expiring = expire_snapshots(home, table, older_than, dry_run=True)
        return (files, files, expiring,
                lakefiles.remove_unreferenced(tbl, grace=grace, dry_run=True, expiring=frozenset(expiring)).files)
    from benchrun.warehouse import laketx

    apply_table_properties(home, table)
    claimed = laketx.claim_existing(catalog(home), table, lambda: run_ids(home, table))
    if claimed:
        log.info("%s: claimed the %d runs it held from before the first-curation claims", table, claimed)
    try:
        before, after = compact(home, table)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid/ArrowIOError: a damaged or missing data file
        raise BenchrunError(f"warehouse table {table}: a data file cannot be read ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}); the table was not maintained. "
                            "`benchrun rebuild-warehouse` writes the runs it holds again, then maintain it") from None
    expired = expire_snapshots(home, table, older_than)
    removed = lakefiles.remove_unreferenced(load_or_create(catalog(home), table), grace=grace)
    return before, after, expired, removed.files


def _existing_table(home: Path, table: str) -> Any:
    """The Iceberg table ``benchrun.<table>`` where the home's catalog already holds it, else None (made by nobody)."""
    from pyiceberg.exceptions import NoSuchTableError

    if not catalog_exists(home):
        return None
    cat = catalog(home)
    try:
        return _retry_locked(lambda: cat.load_table(f"{NAMESPACE}.{table}"), f"load {table}")
    except NoSuchTableError:
        return None


def expire_snapshots(home: Path, table: str, older_than: dt.datetime, *, dry_run: bool = False) -> list[int]:
    """Snapshots of ``table`` older than ``older_than`` (never the current one, never one a tag or
    branch names): listed, and expired unless a dry run."""
    tbl = load_or_create(catalog(home), table)
    current = tbl.current_snapshot()
    cutoff = int(older_than.timestamp() * 1000)
    named = {ref.snapshot_id for ref in tbl.metadata.refs.values()}
    old = [s.snapshot_id for s in tbl.snapshots()
           if s.timestamp_ms < cutoff and (current is None or s.snapshot_id != current.snapshot_id)
           and s.snapshot_id not in named]
    if old and not dry_run:
        tbl.maintenance.expire_snapshots().by_ids(old).commit()
    return old


TAG_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,99}")


def tag_tables(home: Path, name: str, *, force: bool = False, attempts: int = COMMIT_ATTEMPTS) -> dict[str, int]:
    """Tag every table's current snapshot ``name`` (what a decision read): ``--as-of NAME`` reads
    exactly these snapshots later, and no expiry removes them. A name already given to other
    snapshots is refused unless ``force`` (it then moves). Returns each tagged table's snapshot."""
    from pyiceberg.exceptions import CommitFailedException

    if not TAG_PATTERN.fullmatch(name) or name == "main":
        raise BenchrunError(f"tag {name!r}: a letter, then up to 99 letters, digits, '.', '_' or '-' (not 'main'), "
                            "e.g. release-2026-12-03")
    cat = catalog(home)
    out: dict[str, int] = {}
    tables = list(current_tables(home))

    def refuse_taken(table: str, ref: Any) -> None:
        if ref is not None and not force:
            raise BenchrunError(f"tag {name}: {table} already has it on snapshot {ref.snapshot_id}; choose "
                                "another name, or --force to move it to the current snapshots")

    for table in tables:  # a taken name is refused before any table is tagged, not half-way
        refuse_taken(table, load_or_create(cat, table).metadata.refs.get(name))
    # one table after another (Iceberg has no commit across tables): each its snapshot current then
    for table in tables:
        for attempt in range(1, attempts + 1):
            tbl = load_or_create(cat, table)
            snap = tbl.current_snapshot()
            if snap is None:
                break  # no rows yet: nothing to tag (reads as empty at this tag)
            ref = tbl.metadata.refs.get(name)
            if ref is not None and ref.snapshot_id == snap.snapshot_id:
                out[table] = snap.snapshot_id
                break
            refuse_taken(table, ref)  # tagged by another process since the check above
            try:
                ms = tbl.manage_snapshots()
                if ref is not None:
                    ms = ms.remove_tag(name)
                ms.create_tag(snap.snapshot_id, name).commit()
            except CommitFailedException:
                time.sleep(random.uniform(0.01, 0.05) * min(attempt, 10))
                continue
            out[table] = snap.snapshot_id
            break
        else:
            raise BenchrunError(f"tag {name}: {table} kept changing ({attempts} attempts); try again")
    return out


def run_ids(home: Path, table: str) -> set[str]:
    """Run ids with rows in ``table`` now (read with pyiceberg's scan of the run_id column)."""
    tbl = load_or_create(catalog(home), table)
    if tbl.current_snapshot() is None:
        return set()
    return {r for r in tbl.scan(selected_fields=("run_id",)).to_arrow().column("run_id").unique().to_pylist() if r}


# The columns each table gained after its rows began to be signed (fd16c85), left out of a row's digest
# where null: a run signed before one existed keeps its digest once the table has it, by schema evolution
# or made anew (rebuild-warehouse, which loses a table's schema history). Add each new column here
# (tests/test_lake_review_fixes.py fails until then); none yet: no column was added since.
DIGEST_ADDED: dict[str, frozenset[str]] = {}


def run_rows_digest(home: Path, run_id: str) -> dict[str, dict[str, Any]]:
    """``{table: {"rows": n, "sha256": h}}`` of ``run_id``'s rows in each Iceberg table now (tables
    without any: left out). The digest is over the rows, not the files: each row as canonical
    JSON (keys sorted, values as text where JSON has none), the lines sorted, so compaction and
    snapshot expiry — which rewrite files, not rows — leave it unchanged, and an edited value
    does not. What the run's signed statement records and ``verify`` recomputes."""
    import hashlib
    import json

    from pyiceberg.expressions import EqualTo

    validate_run_id(run_id)
    if not catalog_exists(home):
        return {}
    out: dict[str, dict[str, Any]] = {}
    cat = catalog(home)
    for table in sorted(TABLES):
        tbl = load_or_create(cat, table)
        if tbl.current_snapshot() is None:
            continue
        try:
            rows = tbl.scan(row_filter=EqualTo("run_id", run_id)).to_arrow().to_pylist()
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid/ArrowIOError: a damaged or missing data file
            raise BenchrunError(f"warehouse table {table}: its data cannot be read for run {run_id} "
                                f"({type(exc).__name__}: {exc}); rebuild the run's rows with "
                                f"`benchrun rebuild-warehouse {run_id}`") from None
        if not rows:
            continue
        # left out where null: the columns added since rows were signed (DIGEST_ADDED), and for a table
        # made before that list, those it gained by schema evolution since it was made
        added = DIGEST_ADDED.get(table, frozenset()) | (
            set(tbl.schema().column_names) - set(min(tbl.schemas().items())[1].column_names))
        if added:
            rows = [{k: v for k, v in r.items() if v is not None or k not in added} for r in rows]
        lines = sorted(json.dumps(r, sort_keys=True, default=str, separators=(",", ":")) for r in rows)
        h = hashlib.sha256()
        for line in lines:
            h.update(line.encode("utf-8") + b"\n")
        out[table] = {"rows": len(rows), "sha256": h.hexdigest()}
    return out


def delete_run(home: Path, table: str, run_id: str) -> Commit:
    """Delete ``run_id``'s rows of ``table`` in one commit (retention; expiry later removes the files)."""
    started = None
    from benchrun.rundir import read_json_or_none
    from benchrun.warehouse.sources import run_start

    try:
        status = read_json_or_none(Path(home) / "runs" / validate_run_id(run_id) / "status.json", fix="")
    except BenchrunError:  # a damaged status.json: the start is unknown (below)
        status = None
    status = status if isinstance(status, dict) else {}
    started = run_start(status)
    if started is None:  # the run's start is unknown: look in every day (reads every manifest)
        return commit_run(home, table, run_id, [], None, every_day=True)
    return commit_run(home, table, run_id, [], started)
