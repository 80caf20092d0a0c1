"""DuckDB views over the Iceberg tables (the iceberg extension's scan, filters pushed down), now or as of
a snapshot or a time, and the snapshot ids a query read.

``as_of`` is a snapshot id (of any table: the others are read as they were at that snapshot's
commit) or an ISO 8601 time. A time resolves, per table, to the snapshot that was current after
the last *commit* at or before it, never to a snapshot inside a commit: curating a run is a
delete and an append in one commit, and a reader never sees the delete without the append. The
snapshots come from the table's snapshot log (kept until the snapshots expire), not from its
metadata log (which keeps only the last ``write.metadata.previous-versions-max`` files); a time
before the table's earliest kept snapshot, where its history has expired, is an error naming
the earliest time available.

Every current data file's parquet footer is read when the views are built: a damaged or foreign
file is left out, with a note naming it, and that table's view reads its remaining files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.warehouse.schemas import DIMENSIONS, TABLES, duckdb_type


@dataclasses.dataclass(frozen=True)
class TableRead:
    """What one view reads: a metadata file and the snapshot id current in it (None: an empty table)."""

    table: str
    metadata_location: str
    snapshot_id: int | None
    files: tuple[str, ...] | None = None  # set when some data files are damaged: the readable ones
    # the columns of the snapshot's schema (None: all of the table's): a table made by an earlier release
    # lacks the columns added since until a curation adds them, and its older snapshots always do
    columns: frozenset[str] | None = None


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclasses.dataclass(frozen=True)
class Tag:
    """``--as-of NAME``: the snapshots ``benchrun tag-warehouse NAME`` named (never expired)."""

    name: str


# where snapshot ids come from: every query's --json names the snapshot each table's view read
_SNAPSHOT_IDS = "`benchrun query \"SELECT 1\" --json` prints each table's current one as snapshot_ids"


def parse_as_of(value: str) -> int | dt.datetime | Tag:
    """``--as-of``: a snapshot id (digits), an ISO 8601 time (UTC when no zone is given) or a tag
    name (letters first: what ``benchrun tag-warehouse`` made)."""
    from benchrun.warehouse.lake import TAG_PATTERN

    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        if text == "main":  # Iceberg's branch of the current snapshots, no tag: `tag-warehouse main` is refused
            raise BenchrunError("--as-of main: main is the warehouse as it is now, which a query without --as-of "
                                f"reads; to read an earlier state give a tag, a snapshot id ({_SNAPSHOT_IDS}) or a "
                                "time") from None
        if TAG_PATTERN.fullmatch(text):
            return Tag(text)
        raise BenchrunError(f"--as-of {value!r}: give a snapshot id ({_SNAPSHOT_IDS}), an ISO 8601 time such as "
                            "2026-12-01T12:00:00Z, or a tag made by `benchrun tag-warehouse NAME`") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _ms_text(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


_PROPS = ("benchrun.run-id", "benchrun.operation")
_COMMIT = "benchrun.commit"  # lake.SNAPSHOT_COMMIT_PROPERTY: the same on each snapshot of one commit


def _same_commit(first: Any, then: Any) -> bool:
    """Whether snapshot ``then`` was made in the same commit as ``first``, from the snapshots alone
    (for commits older than the metadata log): a delete (or rewrite) followed directly by an append
    with the same commit mark (``benchrun.commit``); for snapshots from before the marks, the append of
    the same run's curation (or of the same compaction)."""
    if first is None or then is None or then.parent_snapshot_id != first.snapshot_id:
        return False
    a, b = first.summary, then.summary
    if a is None or b is None or str(a.operation.value) not in ("delete", "overwrite") \
            or str(b.operation.value) != "append":
        return False
    commit = [s.additional_properties.get(_COMMIT) for s in (a, b)]
    if commit != [None, None]:  # written by a release that marks its commits: exact
        return commit[0] == commit[1]
    keys = [(a.additional_properties.get(k), b.additional_properties.get(k)) for k in _PROPS]
    return any(x is not None for x, _ in keys) and all(x == y for x, y in keys)


def commit_snapshots(tbl: Any) -> list[tuple[int, int]]:
    """``(time_ms, snapshot_id)`` of each kept snapshot that a commit of ``tbl`` ended with, oldest first.

    A commit's metadata file records the time of the last snapshot it added, so within the span of
    the metadata log a snapshot ended a commit exactly when its time is a logged one; before that
    span the snapshots themselves tell (:func:`_same_commit`)."""
    meta = tbl.metadata
    logged = {e.timestamp_ms for e in meta.metadata_log} | {meta.last_updated_ms}
    since = min(logged)
    entries = list(meta.snapshot_log)
    out = []
    for i, entry in enumerate(entries):
        if entry.timestamp_ms >= since:
            ends = entry.timestamp_ms in logged or entry.snapshot_id == meta.current_snapshot_id
        else:
            after = entries[i + 1] if i + 1 < len(entries) else None
            ends = after is None or not _same_commit(tbl.snapshot_by_id(entry.snapshot_id),
                                                     tbl.snapshot_by_id(after.snapshot_id))
        if ends:
            out.append((entry.timestamp_ms, entry.snapshot_id))
    return out


def _snapshot_at(table: str, tbl: Any, when_ms: int, notes: list[str]) -> tuple[int | None, int | None]:
    """(snapshot id current at ``when_ms`` or None, the earliest time available when the table had no
    rows yet then); raises when the table's history at ``when_ms`` has expired."""
    ends = commit_snapshots(tbl)
    if not ends:
        return None, None  # no snapshot: the table has never had rows
    earlier = [i for i, (ms, _) in enumerate(ends) if ms <= when_ms]
    if earlier:
        at_ms, sid = ends[earlier[-1]]
        # the snapshot after it lost its parent: expiry removed the history between (a tag keeps an old
        # snapshot, and time moved on past it), so what was current at when_ms is not known
        log = [e.snapshot_id for e in tbl.metadata.snapshot_log]
        after = log[log.index(sid) + 1] if sid in log and log.index(sid) + 1 < len(log) else None
        nxt = tbl.snapshot_by_id(after) if after is not None else None
        if nxt is None or nxt.parent_snapshot_id is not None or when_ms == at_ms:
            return sid, None
        resumes = _ms_text(ends[earlier[-1] + 1][0]) if earlier[-1] + 1 < len(ends) else _ms_text(nxt.timestamp_ms)
        raise BenchrunError(f"--as-of {_ms_text(when_ms)}: {table}'s snapshots before {resumes} have expired "
                            f"(a tagged snapshot of {_ms_text(at_ms)} is kept: read it with --as-of TAG); "
                            f"the earliest time available for {table} after {_ms_text(at_ms)} is {resumes}")
    first_entry = tbl.metadata.snapshot_log[0]
    first = tbl.snapshot_by_id(first_entry.snapshot_id)
    earliest = _ms_text(ends[0][0])
    # expiry clears the kept snapshots' parent ids, but not their sequence numbers (a table's first is 1)
    if first is None or first.sequence_number != 1:
        raise BenchrunError(f"--as-of {_ms_text(when_ms)}: {table}'s snapshots before {earliest} have expired; "
                            f"the earliest time available for {table} is {earliest}")
    notes.append(f"--as-of {_ms_text(when_ms)}: {table} had no rows yet (its first commit is at {earliest}); "
                 "read as empty")
    return None, ends[0][0]


def _refuse_inside_commit(table: str, tbl: Any, snapshot_id: int) -> None:
    """Refuse a snapshot id made inside a commit (a re-curation's delete, before its append): it holds
    half a commit; the error names the snapshot that commit ended with."""
    log = [e.snapshot_id for e in tbl.metadata.snapshot_log]
    ends = [sid for _, sid in commit_snapshots(tbl)]
    if snapshot_id not in log or snapshot_id in ends:
        return
    final = next((sid for sid in ends if sid in log and log.index(sid) > log.index(snapshot_id)), None)
    raise BenchrunError(f"--as-of {snapshot_id}: that snapshot of {table} was made inside a commit (a run's delete "
                        "before its append) and holds half of it"
                        + (f"; the commit ended with snapshot {final}: give --as-of {final}" if final else ""))


def table_reads(home: Path, as_of: int | dt.datetime | Tag | None = None,
                notes: list[str] | None = None) -> dict[str, TableRead]:
    """Per existing table: the metadata file and snapshot a view reads (now, or as of ``as_of``)."""
    from benchrun.warehouse import lake

    notes = notes if notes is not None else []
    cat = lake.catalog(home)
    current = lake.current_tables(home)
    tables = {t: cat.load_table(f"{lake.NAMESPACE}.{t}") for t in current}
    if as_of is None:
        reads = {t: TableRead(t, loc, snap) for t, (loc, snap) in current.items()}
        return {t: _checked(r, tables[t], notes) for t, r in reads.items()}
    if isinstance(as_of, Tag):
        tagged = {t: tbl.metadata.refs.get(as_of.name) for t, tbl in tables.items()}
        tagged = {t: ref if ref is not None and ref.snapshot_ref_type == "tag" else None for t, ref in tagged.items()}
        if not any(ref is not None for ref in tagged.values()):
            raise BenchrunError(f"--as-of {as_of.name}: no table has that tag; `benchrun tag-warehouse {as_of.name}` "
                                f"makes it (from then on); or give a snapshot id ({_SNAPSHOT_IDS}) or a time")
        out_tag: dict[str, TableRead] = {}
        for t, tbl in tables.items():
            ref = tagged[t]
            if ref is None:  # a table that had no rows when the tag was made
                notes.append(f"--as-of {as_of.name}: {t} had no rows when it was tagged; read as empty")
            out_tag[t] = _checked(TableRead(t, tbl.metadata_location, ref.snapshot_id if ref else None), tbl, notes)
        return out_tag
    exact: tuple[str, int] | None = None
    if isinstance(as_of, int):
        for t, tbl in tables.items():
            snap = tbl.snapshot_by_id(as_of)
            if snap is not None:
                _refuse_inside_commit(t, tbl, as_of)
                exact, when_ms = (t, as_of), snap.timestamp_ms
                break
        else:
            raise BenchrunError(f"--as-of {as_of}: no table has that snapshot (expired, or never made); give one "
                                f"that is ({_SNAPSHOT_IDS}), a time or a tag")
    else:
        when_ms = int(as_of.timestamp() * 1000)
    out: dict[str, TableRead] = {}
    found: list[str] = []
    firsts: list[tuple[int, str]] = []
    for t, tbl in tables.items():
        if exact is not None and exact[0] == t:
            snap: int | None = exact[1]
        else:
            snap, first_ms = _snapshot_at(t, tbl, when_ms, found)
            if first_ms is not None:
                firsts.append((first_ms, t))
        out[t] = _checked(TableRead(t, tbl.metadata_location, snap), tbl, notes)
    if exact is None and firsts and all(r.snapshot_id is None for r in out.values()):
        first_ms, first_table = min(firsts)
        raise BenchrunError(f"--as-of {_ms_text(when_ms)}: before the warehouse's first commit ({first_table} at "
                            f"{_ms_text(first_ms)}); the earliest time available is {_ms_text(first_ms)}")
    notes.extend(found)
    return out


# Data files whose footer read and matched (an Iceberg data file is never rewritten in place): each
# rebuild of the views reads only new files' footers, and checks every local file's size.
_FOOTERS_READ: set[tuple[str, str]] = set()


def _checked(read: TableRead, tbl: Any, notes: list[str]) -> TableRead:
    """``read``, with the list of its readable data files when one of the snapshot's files is damaged."""
    import logging

    import pyarrow.parquet as pq

    from benchrun.warehouse.lake import iceberg_schema_of
    from benchrun.warehouse.lakefiles import size_problem

    if read.snapshot_id is None:
        return read
    read = dataclasses.replace(read, columns=_snapshot_columns(tbl, read.snapshot_id))
    expected = {f.name: _sql_type(f.type) for f in iceberg_schema_of(read.table)}
    tasks = list(tbl.scan(snapshot_id=read.snapshot_id).plan_files())
    good: list[str] = []
    for task in tasks:
        path = task.file.file_path
        try:
            problem = size_problem(path, task.file.file_size_in_bytes)
            if not problem and (path, read.table) not in _FOOTERS_READ:
                with tbl.io.new_input(path).open() as fh:
                    schema = pq.ParquetFile(fh).schema_arrow
                wrong = [f"{c.name} is {c.type}" for c in schema
                         if c.name in expected and _sql_type(c.type) != expected[c.name]]
                problem = "another schema than the table's: " + "; ".join(wrong[:3]) if wrong else ""
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if not problem:
            if len(_FOOTERS_READ) > 500_000:
                _FOOTERS_READ.clear()
            _FOOTERS_READ.add((path, read.table))
        if problem:
            note = (f"{path}: damaged data file left out of {read.table} ({problem}); its rows are missing until "
                    "the runs it holds are curated again (`benchrun rebuild-warehouse`)")
            logging.getLogger(__name__).warning("%s", note)
            notes.append(note)
        else:
            if task.delete_files:
                raise BenchrunError(f"{read.table}: a data file is damaged and others have delete files, so the view "
                                    "cannot leave it out; run `benchrun rebuild-warehouse`")
            good.append(path)
    if len(good) == len(tasks):
        return read
    return dataclasses.replace(read, files=tuple(good))


def _snapshot_columns(tbl: Any, snapshot_id: int) -> frozenset[str]:
    """The column names of the schema snapshot ``snapshot_id`` of ``tbl`` was written with."""
    snap = tbl.snapshot_by_id(snapshot_id)
    schema = tbl.schemas().get(snap.schema_id) if snap is not None and snap.schema_id is not None else None
    return frozenset((schema or tbl.schema()).column_names)


def _sql_type(typ: Any) -> str:
    """The SQL type DuckDB reads a parquet column as (a list's element field name does not matter)."""
    import pyarrow as pa

    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return _sql_type(typ.value_type) + "[]"
    try:
        return duckdb_type(typ)
    except KeyError:
        return str(typ)


def view_sql(table: str, read: TableRead | None, con: Any = None) -> str:
    """``CREATE OR REPLACE VIEW`` over one Iceberg table (its columns only), or an empty typed relation;
    a column the read's snapshot lacks (added by a later release) reads as null. With ``con``, where
    damaged files are left out, the remaining files' columns are probed first: files that all predate
    a column the snapshot has read it as null too (it failed every query of the table)."""
    schema = TABLES[table]
    have = read.columns if read is not None and read.columns is not None else frozenset(schema.names)
    if read is None or read.snapshot_id is None or read.files == ():
        empty = ", ".join(f'CAST(NULL AS {duckdb_type(f.type)}) AS "{f.name}"' for f in schema)
        return f'CREATE OR REPLACE VIEW "{table}" AS SELECT {empty} WHERE false'
    source = f"iceberg_scan({_quote(read.metadata_location)}, snapshot_from_id => {int(read.snapshot_id)})"
    if read.files is not None:  # damaged files left out: the snapshot's other files, read directly
        listed = ", ".join(_quote(f) for f in read.files)
        source = f"read_parquet([{listed}], union_by_name = true, hive_partitioning = false)"
        if con is not None:
            have = have & {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    cols = ", ".join(f'"{f.name}"' if f.name in have else f'CAST(NULL AS {duckdb_type(f.type)}) AS "{f.name}"'
                     for f in schema)
    if table in DIMENSIONS:
        key = schema.names[0]
        body = f'SELECT DISTINCT ON ("{key}") {cols} FROM {source} ORDER BY "{key}"'
    else:
        body = f"SELECT {cols} FROM {source}"
    return f'CREATE OR REPLACE VIEW "{table}" AS {body}'


def create_views(con: Any, home: Path, as_of: int | dt.datetime | None = None, *,
                 notes: list[str] | None = None) -> dict[str, int | None]:
    """Every table's view on ``con``; returns the snapshot id each view reads (None: empty). ``notes``
    receives one line per damaged data file left out (and per table read as empty at ``as_of``)."""
    reads = table_reads(home, as_of, notes)
    for table in TABLES:
        con.execute(view_sql(table, reads.get(table), con))
    return {t: r.snapshot_id for t, r in sorted(reads.items())}


def prepare_connection(con: Any, home: Path) -> list[str]:
    """Load the extensions and, for an S3 location, its secret; the directories the scans may read."""
    from benchrun.warehouse.duck import load_extensions

    load_extensions(con)
    return s3_secret(con, home)


def s3_secret(con: Any, home: Path) -> list[str]:
    """For an S3 location, the connection's (temporary) secret for it, with the artifact store's
    endpoint; the directories the scans may read ([] for a local location)."""
    from benchrun.warehouse import lake

    location = lake.table_location(home)
    if not location.startswith("s3://"):
        return []
    props = lake.s3_properties()
    parts = ["TYPE s3", f"REGION {_quote(props['s3.region'])}"]
    if props.get("s3.access-key-id"):
        parts += [f"KEY_ID {_quote(props['s3.access-key-id'])}", f"SECRET {_quote(props['s3.secret-access-key'])}"]
    if props.get("s3.session-token"):
        parts.append(f"SESSION_TOKEN {_quote(props['s3.session-token'])}")
    endpoint = os.environ.get("BENCHRUN_S3_ENDPOINT_URL", "")
    if endpoint:
        host = endpoint.split("://", 1)[-1].rstrip("/")
        parts += [f"ENDPOINT {_quote(host)}", "URL_STYLE 'path'", f"USE_SSL {str(endpoint.startswith('https')).lower()}"]
    con.execute("CREATE OR REPLACE SECRET benchrun_warehouse (" + ", ".join(parts) + ")")
    return [location + "/"]


def fingerprint(home: Path) -> tuple:
    """What the current views are built from: each table's metadata file (one catalog query; a commit
    always moves it to a new file)."""
    from sqlalchemy import text

    from benchrun.warehouse import lake

    cat = lake.catalog(home)
    with cat.engine.connect() as conn:
        rows = lake._retry_locked(lambda: conn.execute(text(
            "SELECT table_name, metadata_location FROM iceberg_tables WHERE catalog_name = :c AND table_namespace = :n"
        ), {"c": lake.CATALOG_NAME, "n": lake.NAMESPACE}).fetchall(), "read the catalog")
    return tuple(sorted((str(name), str(loc)) for name, loc in rows))
