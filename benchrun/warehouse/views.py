"""DuckDB views over the parquet partitions, the one short-lived writer of warehouse.duckdb,
and read-only queries that carry ``query_spec_digest``.

DuckDB lets one process write a database file and then refuses even readers, so the
file is only opened briefly (under an OS lock) to (re)create views; queries run on an
in-memory connection with the same views and never hold the file open.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import logging
import re
import time
from pathlib import Path
from typing import Any, Iterator

from benchrun.errors import BenchrunError
from benchrun.warehouse.schemas import DIMENSIONS, TABLES, duckdb_type
from benchrun.warehouse.writer import table_glob, warehouse_root

log = logging.getLogger(__name__)

DB_NAME = "warehouse.duckdb"
READ_ONLY_TYPES = ("SELECT", "EXPLAIN")
# The change_points history asset writes one file for the whole history (benchrun.stats.changepoint).
CHANGE_POINT_FACT = ("change_point_fact", "change_points.parquet")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def view_sql(home: Path, table: str, con: Any = None) -> str:
    """``CREATE OR REPLACE VIEW`` for one table: its parquet files, or an empty typed relation.

    With ``con``, the files' columns are probed first so that partitions written before a
    column was added still read (the column is null there, never invented).
    """
    schema = TABLES[table]
    files = list((warehouse_root(home) / table).glob("run_id=*/part.parquet"))
    if files:
        source = f"read_parquet({_quote(table_glob(home, table))}, union_by_name = true, hive_partitioning = false)"
        present = set(schema.names)
        if con is not None:
            present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        cols = ", ".join(
            f'"{f.name}"' if f.name in present else f'CAST(NULL AS {duckdb_type(f.type)}) AS "{f.name}"'
            for f in schema
        )
        if table in DIMENSIONS:
            # Dimensions are written per run; the same natural attributes are one row.
            body = f'SELECT DISTINCT ON ("{schema.names[0]}") {cols} FROM {source} ORDER BY "{schema.names[0]}"'
        else:
            body = f"SELECT {cols} FROM {source}"
    else:
        cols = ", ".join(f'CAST(NULL AS {duckdb_type(f.type)}) AS "{f.name}"' for f in schema)
        body = f"SELECT {cols} WHERE false"
    return f'CREATE OR REPLACE VIEW "{table}" AS {body}'


def create_views(con: Any, home: Path) -> None:
    """Create every table's view on ``con`` (a DuckDB connection)."""
    import duckdb

    for table in TABLES:
        try:
            con.execute(view_sql(home, table, con))
        except duckdb.Error as exc:
            raise BenchrunError(
                f"{warehouse_root(home) / table}: cannot build the {table} view ({str(exc).splitlines()[0]}); "
                "a partition file is damaged or foreign: curate that run again or remove its run_id= directory"
            ) from exc
    change_points = warehouse_root(home).joinpath(*CHANGE_POINT_FACT)
    if change_points.is_file():
        try:
            con.execute(f'CREATE OR REPLACE VIEW "{CHANGE_POINT_FACT[0]}" AS '
                        f"SELECT * FROM read_parquet({_quote(str(change_points.resolve()))})")
        except duckdb.Error as exc:
            raise BenchrunError(f"{change_points}: cannot build the change_point_fact view "
                                f"({str(exc).splitlines()[0]}); materialize change_points again") from exc


@contextlib.contextmanager
def _writer_lock(home: Path) -> Iterator[None]:
    path = Path(home) / f"{DB_NAME}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def refresh_views(home: Path, *, wait_s: float = 30.0) -> Path:
    """(Re)create the views in ``<home>/warehouse.duckdb``: one short-lived writer at a time."""
    import duckdb

    db = Path(home) / DB_NAME
    deadline = time.monotonic() + wait_s
    with _writer_lock(home):
        while True:
            try:
                con = duckdb.connect(str(db))
            except duckdb.IOException as exc:
                # Someone outside benchrun holds the file (e.g. a notebook): wait, then say who to close.
                if time.monotonic() > deadline:
                    raise BenchrunError(f"{db}: held open by another process ({exc}); close it and curate again") from exc
                time.sleep(0.2)
                continue
            try:
                create_views(con, home)
            finally:
                con.close()
            return db


def connect(home: Path) -> Any:
    """An in-memory DuckDB connection with every view (never touches warehouse.duckdb)."""
    import duckdb

    con = duckdb.connect(":memory:")
    create_views(con, Path(home))
    return con


_LINE_COMMENT = re.compile(r"--[^\n]*")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)


def normalise_sql(sql: str) -> str:
    """Comments removed, whitespace collapsed, trailing semicolons dropped (string literals kept)."""
    parts = re.split(r"('(?:[^']|'')*')", sql)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part)
        else:
            part = _BLOCK_COMMENT.sub(" ", _LINE_COMMENT.sub(" ", part))
            out.append(re.sub(r"\s+", " ", part))
    return "".join(out).strip().rstrip(";").strip()


def query_spec_digest(sql: str) -> str:
    """sha256 of the normalised SQL: the identity of the query behind a rollup."""
    return hashlib.sha256(normalise_sql(sql).encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class QueryResult:
    """A query's rows (as a pyarrow table) and the digest of the query that produced them."""

    sql: str
    query_spec_digest: str
    table: Any  # pyarrow.Table


def query(sql: str, home: Path, params: list[Any] | None = None) -> QueryResult:
    """Run one read-only statement (SELECT / EXPLAIN) over the warehouse views."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise BenchrunError(f"query: not valid SQL ({str(exc).splitlines()[0]})") from exc
    if len(statements) != 1:
        raise BenchrunError(f"query: give exactly one statement, not {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_ONLY_TYPES:
        raise BenchrunError(f"query: {kind} statements are refused; the warehouse is read-only here (use SELECT)")
    con = connect(home)
    try:
        table = con.execute(sql, params or []).fetch_arrow_table()
    except duckdb.Error as exc:
        raise BenchrunError(f"query failed: {str(exc).splitlines()[0]}") from exc
    finally:
        con.close()
    return QueryResult(sql=sql, query_spec_digest=query_spec_digest(sql), table=table)
