"""DuckDB views over the Iceberg tables (the iceberg extension's scan, filters pushed down), now or as of
a snapshot or a time, and the snapshot ids a query read.

``as_of`` is a snapshot id (of any table: the others are read as they were at that snapshot's
commit) or an ISO 8601 time. A time resolves, per table, to the last *commit* at or before it
(one metadata file of the table's log), never to a snapshot inside a commit: curating a run is a
delete and an append in one commit, and a reader never sees the delete without the append.
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


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def parse_as_of(value: str) -> int | dt.datetime:
    """``--as-of``: a snapshot id (digits) or an ISO 8601 time (UTC when no zone is given)."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BenchrunError(f"--as-of {value!r}: give a snapshot id (see `benchrun query \"SELECT * FROM "
                            "warehouse_snapshots\"`) or an ISO 8601 time such as 2026-12-01T12:00:00Z") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _metadata_at(tbl: Any, when_ms: int) -> tuple[str, int | None] | None:
    """The table's metadata file and current snapshot as of its last commit at or before ``when_ms``."""
    from pyiceberg.serializers import FromInputFile

    log = [(e.timestamp_ms, e.metadata_file) for e in tbl.metadata.metadata_log]
    log.append((tbl.metadata.last_updated_ms, tbl.metadata_location))
    earlier = [entry for entry in log if entry[0] <= when_ms]
    if not earlier:
        return None
    location = max(earlier)[1]
    if location == tbl.metadata_location:
        snap = tbl.current_snapshot()
        return location, snap.snapshot_id if snap else None
    meta = FromInputFile.table_metadata(tbl.io.new_input(location))
    return location, meta.current_snapshot_id


def table_reads(home: Path, as_of: int | dt.datetime | None = None) -> dict[str, TableRead]:
    """Per existing table: the metadata file and snapshot a view reads (now, or as of ``as_of``)."""
    from benchrun.warehouse import lake

    cat = lake.catalog(home)
    current = lake.current_tables(home)
    tables = {t: cat.load_table(f"{lake.NAMESPACE}.{t}") for t in current}
    if as_of is None:
        return {t: TableRead(t, loc, snap) for t, (loc, snap) in current.items()}
    exact: tuple[str, int] | None = None
    if isinstance(as_of, int):
        for t, tbl in tables.items():
            snap = tbl.snapshot_by_id(as_of)
            if snap is not None:
                exact, when_ms = (t, as_of), snap.timestamp_ms
                break
        else:
            raise BenchrunError(f"--as-of {as_of}: no table has that snapshot (expired, or never made); "
                                "list them with `benchrun query \"SELECT * FROM warehouse_snapshots\"`")
    else:
        when_ms = int(as_of.timestamp() * 1000)
    out: dict[str, TableRead] = {}
    for t, tbl in tables.items():
        found = _metadata_at(tbl, when_ms)
        if found is None:
            continue  # the table did not exist yet
        location, snap = found
        if exact is not None and exact[0] == t:
            snap = exact[1]
        out[t] = TableRead(t, location, snap)
    return out


def view_sql(table: str, read: TableRead | None) -> str:
    """``CREATE OR REPLACE VIEW`` over one Iceberg table (its columns only), or an empty typed relation."""
    schema = TABLES[table]
    cols = ", ".join(f'"{name}"' for name in schema.names)
    if read is None or read.snapshot_id is None:
        empty = ", ".join(f'CAST(NULL AS {duckdb_type(f.type)}) AS "{f.name}"' for f in schema)
        return f'CREATE OR REPLACE VIEW "{table}" AS SELECT {empty} WHERE false'
    source = f"iceberg_scan({_quote(read.metadata_location)}, snapshot_from_id => {int(read.snapshot_id)})"
    if table in DIMENSIONS:
        key = schema.names[0]
        body = f'SELECT DISTINCT ON ("{key}") {cols} FROM {source} ORDER BY "{key}"'
    else:
        body = f"SELECT {cols} FROM {source}"
    return f'CREATE OR REPLACE VIEW "{table}" AS {body}'


def create_views(con: Any, home: Path, as_of: int | dt.datetime | None = None) -> dict[str, int | None]:
    """Every table's view on ``con``; returns the snapshot id each view reads (None: empty)."""
    reads = table_reads(home, as_of)
    for table in TABLES:
        con.execute(view_sql(table, reads.get(table)))
    return {t: r.snapshot_id for t, r in sorted(reads.items())}


def prepare_connection(con: Any, home: Path) -> list[str]:
    """Load the extensions and, for an S3 location, its secret; the directories the scans may read."""
    from benchrun.warehouse import lake
    from benchrun.warehouse.duck import load_extensions

    load_extensions(con)
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
