"""DuckDB views over the warehouse (the Iceberg tables, through benchrun.warehouse.lakeviews, or the
parquet partitions of the earlier layout), the one short-lived writer of warehouse.duckdb,
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
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from benchrun.errors import BenchrunError
from benchrun.warehouse.schemas import DIMENSIONS, TABLES, duckdb_type
from benchrun.warehouse.partitions import readable_partitions
from benchrun.warehouse.sqlcheck import check_read_only  # the statement check (views.check_read_only, as before)
from benchrun.warehouse.writer import warehouse_root

log = logging.getLogger(__name__)

DB_NAME = "warehouse.duckdb"
DEFAULT_QUERY_LIMIT = 10_000
# The change_points history asset writes one file for the whole history (benchrun.stats.changepoint).
CHANGE_POINT_FACT = ("change_point_fact", "change_points.parquet")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def view_sql(home: Path, table: str, con: Any = None, files: list[Path] | None = None) -> str:
    """``CREATE OR REPLACE VIEW`` for one table: its parquet files, or an empty typed relation.

    With ``con``, the files' columns are probed first so that partitions written before a
    column was added still read (the column is null there, never invented). ``files``
    (default: every readable partition) are the only files the view reads.
    """
    schema = TABLES[table]
    if files is None:
        files = readable_partitions(home, table)[0]
    if files:
        listed = "[" + ", ".join(_quote(str(f)) for f in files) + "]"
        source = f"read_parquet({listed}, union_by_name = true, hive_partitioning = false)"
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


def create_views(con: Any, home: Path) -> list[str]:
    """Create every table's view on ``con`` (a DuckDB connection); notes name damaged files left out."""
    import duckdb

    notes: list[str] = []
    if _iceberg():
        from benchrun.warehouse import lakeviews
        from benchrun.warehouse.migrate import migrate_on_first_use

        migrate_on_first_use(home)  # a home of an earlier release: its parquet layout copied in, once

        if not con.execute("SELECT count(*) FROM duckdb_extensions() WHERE loaded AND extension_name = 'iceberg'"
                           ).fetchone()[0]:
            # warehouse.duckdb's writer (a confined one has them): the extensions, the S3 store's secret
            lakeviews.prepare_connection(con, home)
        lakeviews.create_views(con, home, notes=notes)
        _change_point_view(con, home, notes)
        return notes
    for table in TABLES:
        files, damaged = readable_partitions(home, table)
        notes.extend(damaged)
        for note in damaged:
            log.warning("%s", note)
        try:
            con.execute(view_sql(home, table, con, files))
        except duckdb.Error as exc:
            raise BenchrunError(
                f"{warehouse_root(home) / table}: cannot build the {table} view ({str(exc).splitlines()[0]}); "
                "a partition file is damaged or foreign: curate that run again or remove its run_id= directory"
            ) from exc
    _change_point_view(con, home, notes)
    return notes


def _iceberg() -> bool:
    from benchrun.warehouse.lake import enabled

    return enabled()


def _change_point_view(con: Any, home: Path, notes: list[str]) -> None:
    import duckdb

    change_points = warehouse_root(home).joinpath(*CHANGE_POINT_FACT)
    if change_points.is_file():
        try:
            con.execute(f'CREATE OR REPLACE VIEW "{CHANGE_POINT_FACT[0]}" AS '
                        f"SELECT * FROM read_parquet({_quote(str(change_points.resolve()))})")
        except duckdb.Error as exc:
            note = (f"{change_points}: damaged, change_point_fact left out ({str(exc).splitlines()[0]}); "
                    "materialize change_points again")
            log.warning("%s", note)
            notes.append(note)


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


def refresh_views(home: Path, *, wait_s: float = 30.0, connect: Callable[[Path], Any] | None = None) -> Path:
    """(Re)create the views in ``<home>/warehouse.duckdb``: one short-lived writer at a time.

    ``connect(db)`` gives the connection as a context manager (the Dagster code passes
    dagster-duckdb's ``DuckDBResource.get_connection``); by default one is opened here."""
    import duckdb

    db = Path(home) / DB_NAME
    deadline = time.monotonic() + wait_s
    if connect is not None:
        with _writer_lock(home), connect(db) as con:
            create_views(con, home)
        return db
    with _writer_lock(home):
        while True:
            try:
                con = duckdb.connect(str(db), config=_extension_config())
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


def _extension_config() -> dict[str, Any]:
    """A connection that will load the Iceberg extensions checks each file's signature once a process."""
    if not _iceberg():
        return {}
    from benchrun.warehouse.duck import extension_config

    return extension_config()


def _confined_connection(home: Path) -> Any:
    """An in-memory connection that can read only the warehouse directory, then locked.

    External access is off (no other file, no network, no extension install or load) and
    the configuration is locked, so a query cannot turn it back on.
    """
    import duckdb

    root = warehouse_root(home).resolve()
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False, **_extension_config()})
    try:
        allowed = [str(root) + "/"]
        if _iceberg():  # the iceberg extension from its wheel, and an S3 location's prefix and secret
            from benchrun.warehouse.lakeviews import prepare_connection

            allowed += prepare_connection(con, home)
        _clear_credentials(con)
        # Order matters: allowed_directories can only be set while external access is on.
        con.execute("SET allowed_directories = [" + ", ".join(_quote(d) for d in allowed) + "]")
        con.execute("SET temp_directory = ''")
        # One query cannot take the machine: its memory is bounded (no spilling, see above).
        con.execute("SET memory_limit = " + _quote(_memory_limit()))
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


# Settings an extension fills from the process's environment (httpfs: AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN into s3_*), which any query could read with
# current_setting(). The warehouse's own S3 access goes through a secret, which queries cannot
# read (sqlcheck refuses duckdb_secrets() and which_secret()).
_CREDENTIAL_SETTING = re.compile(r"(secret_access_key|session_token|password|key_id|connection_string|_token)\Z", re.I)


def _clear_credentials(con: Any) -> None:
    """Empty every setting that holds a credential, before the configuration is locked."""
    for name, value in con.execute("SELECT name, value FROM duckdb_settings() WHERE input_type = 'VARCHAR'").fetchall():
        if value not in (None, "") and _CREDENTIAL_SETTING.search(str(name)):
            con.execute(f"SET GLOBAL {name} = ''")  # a DuckDB setting's name, not user input; GLOBAL: every cursor


_LIMITS_CHECKED: set[str] = set()


def _memory_limit() -> str:
    """One query's memory bound (DuckDB's ``memory_limit``): ``BENCHRUN_QUERY_MEMORY_LIMIT``, default 2GB;
    a value DuckDB does not take is an error naming the variable."""
    value = os.environ.get("BENCHRUN_QUERY_MEMORY_LIMIT", "").strip() or "2GB"
    if value not in _LIMITS_CHECKED:
        import duckdb

        with duckdb.connect() as probe:
            try:
                probe.execute("SET memory_limit = " + _quote(value))
            except duckdb.Error:
                raise BenchrunError(f"BENCHRUN_QUERY_MEMORY_LIMIT={value!r}: give one query's memory bound as a size "
                                    "such as 2GB, 512MB or 1.5GiB (unset: 2GB)") from None
        _LIMITS_CHECKED.add(value)
    return value


def _fingerprint(home: Path) -> tuple:
    """What the views of ``home`` are built from: every partition file's identity (path, inode,
    size, mtime) and the query memory limit. Files are written to a temp name and renamed, so a
    rewritten partition has a new inode; equal fingerprints mean equal views."""
    root = warehouse_root(home)
    files = []
    for table in TABLES:
        for f in sorted((root / table).glob("run_id=*/part.parquet")):
            try:
                st = f.stat()
            except OSError:
                continue
            files.append((str(f), st.st_ino, st.st_size, st.st_mtime_ns))
    change_points = root.joinpath(*CHANGE_POINT_FACT)
    with contextlib.suppress(OSError):
        st = change_points.stat()
        files.append((str(change_points), st.st_ino, st.st_size, st.st_mtime_ns))
    if _iceberg():
        from benchrun.warehouse.lakeviews import fingerprint

        files.append(("iceberg", fingerprint(home)))
    return (str(Path(home).resolve()), _memory_limit(), tuple(files))


# One built database per process: (fingerprint, base connection, notes). Building the views
# costs a footer read and a DESCRIBE per partition table (a run queries the warehouse ~25
# times); each caller gets its own cursor on the same in-memory database, which it closes.
_BUILT: list[tuple[tuple, Any, list[str], dict[str, int | None] | None]] = []
_BUILT_LOCK = threading.Lock()


def connect(home: Path, notes: list[str] | None = None, *, as_of: Any = None,
            snapshots: dict[str, int | None] | None = None) -> Any:
    """An in-memory, read-confined DuckDB connection with every view (never touches warehouse.duckdb).

    ``notes`` (when given) receives one line per damaged partition left out of the views, rebuilt
    whenever a partition file (or an Iceberg table's metadata file) changed since the last call here.
    Iceberg: ``as_of`` (a snapshot id or a datetime) reads the tables as they were then; ``snapshots``
    (when given) receives the snapshot id each view reads."""
    if as_of is not None and not _iceberg():
        raise BenchrunError("query: --as-of needs the Iceberg tables, the default: unset BENCHRUN_WAREHOUSE_FORMAT=parquet "
                            "(the parquet layout is copied into them on first use); this warehouse is the parquet layout")
    if _iceberg():
        from benchrun.warehouse.migrate import migrate_on_first_use

        migrate_on_first_use(Path(home))  # a home of an earlier release: its parquet layout copied in, once
    if as_of is not None:
        return _connect_at(Path(home), notes, as_of, snapshots)
    key = _fingerprint(Path(home))
    with _BUILT_LOCK:
        if _BUILT and _BUILT[0][0] == key:
            base, found, read = _BUILT[0][1], _BUILT[0][2], _BUILT[0][3]
            for note in found:
                log.warning("%s", note)
        else:
            base = _confined_connection(Path(home))
            read = None
            try:
                if _iceberg():
                    from benchrun.warehouse import lakeviews

                    found: list[str] = []
                    read = lakeviews.create_views(base, Path(home), notes=found)
                    _change_point_view(base, Path(home), found)
                else:
                    found = create_views(base, Path(home))
            except BaseException:
                base.close()
                raise
            _BUILT[:] = [(key, base, found, read)]  # the previous database goes when its last cursor closes
        con = base.cursor()
    if notes is not None:
        notes.extend(found)
    if snapshots is not None and read is not None:
        snapshots.update(read)
    return con


def _connect_at(home: Path, notes: list[str] | None, as_of: Any, snapshots: dict[str, int | None] | None) -> Any:
    """A fresh confined connection whose Iceberg views read ``as_of`` (or now), with the snapshots read."""
    from benchrun.warehouse import lakeviews

    con, extra = _confined_connection(home), (notes if notes is not None else [])
    try:
        (snapshots if snapshots is not None else {}).update(lakeviews.create_views(con, home, as_of, notes=extra))
        _change_point_view(con, home, extra)
    except BaseException:
        con.close()
        raise
    return con


# Cursors running a user's query: interrupted when the process gets SIGINT/SIGTERM (while
# stop_queries_on_signal is active), since a query blocks the main thread inside DuckDB and
# Python's own handler would run only after it returned.
_RUNNING: set[Any] = set()


class SignalSeen:
    """The signal that stopped the queries (None while none came)."""

    def __init__(self, wake_r: int) -> None:
        self.signum: int | None = None
        self._fd = wake_r
        self._lock = threading.Lock()

    def take(self) -> int | None:
        """Read the wakeup fd (the watcher or the main thread, whichever looks first)."""
        with self._lock:
            with contextlib.suppress(OSError):
                data = os.read(self._fd, 512)
                if data and self.signum is None:
                    self.signum = data[0]
            return self.signum


@contextlib.contextmanager
def stop_queries_on_signal() -> Iterator[SignalSeen | None]:
    """While active, SIGINT and SIGTERM interrupt every running query at once (DuckDB's
    ``interrupt()``, from a watcher thread woken by the signal's wakeup fd: a query blocks the
    main thread inside DuckDB, where Python's own handler would run only after it returned).
    Yields what saw the signal (None off the main thread, where signals cannot be handled)."""
    import select
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    wake_r, wake_w = os.pipe()
    stop_r, stop_w = os.pipe()
    for fd in (wake_r, wake_w, stop_r, stop_w):
        os.set_blocking(fd, False)
    seen = SignalSeen(wake_r)
    previous_term = signal.getsignal(signal.SIGTERM)
    if previous_term in (signal.SIG_DFL, None):  # a Python handler, so that the wakeup fd hears it

        def terminated(signum: int, _frame: Any) -> None:
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, terminated)
    previous_fd = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            ready, _, _ = select.select([wake_r, stop_r], [], [])
            if stop_r in ready:
                return
            seen.take()
            for cursor in list(_RUNNING):
                with contextlib.suppress(Exception):
                    cursor.interrupt()

    watcher = threading.Thread(target=watch, name="query-interrupt", daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        signal.set_wakeup_fd(previous_fd)
        os.write(stop_w, b"x")
        watcher.join()
        seen.take()
        for fd in (wake_r, wake_w, stop_r, stop_w):
            os.close(fd)
        if previous_term in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


# What lies between two of DuckDB's tokens (its tokenizer yields no comment tokens): whitespace and comments.
_GAP = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.S)
# A token's own text at the start of its span: a quoted one whole (quotes, doubled quotes and all), any
# other up to the first whitespace or comment (no keyword, name, number or operator holds one).
_QUOTED_TOKEN = (
    re.compile(r"[Ee]'(?:[^'\\]|''|\\.)*'", re.S),  # E'...': backslash escapes
    re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*|)\$.*?\$\1\$", re.S),  # $$...$$, $tag$...$tag$
    re.compile(r"[A-Za-z]?&?'(?:[^']|'')*'", re.S),  # '...', X'..', B'..', U&'..'
    re.compile(r'(?:[Uu]&)?"(?:[^"]|"")*"', re.S),  # "name", U&"name"
)
_BARE_TOKEN = re.compile(r"(?:[^\s\-/]|-(?!-)|/(?!\*))+")


def _token_texts(sql: str) -> list[tuple[str, bool]]:
    """Each of DuckDB's tokens of ``sql`` as written, and whether whitespace or a comment followed it.
    What follows a token that is not only whitespace and comments (DuckDB reads an unterminated
    string as part of a keyword) is kept verbatim, so distinct text never normalises the same."""
    import duckdb

    tokens = duckdb.tokenize(sql)
    out: list[tuple[str, bool]] = []
    lead = sql[: tokens[0][0]] if tokens else sql
    if _GAP.fullmatch(lead) is None:
        out.append((lead, False))
    for i, (start, kind) in enumerate(tokens):
        span = sql[start: tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)]
        quoted = kind == duckdb.token_type.string_const or span[:1] == '"' or span[:3].upper() == 'U&"'
        found = None
        for pattern in (_QUOTED_TOKEN if quoted else (_BARE_TOKEN,)):
            found = pattern.match(span)
            if found:
                break
        text = found.group(0) if found else ""
        rest = span[len(text):]
        if rest and _GAP.fullmatch(rest) is None:
            text, rest = span, ""
        out.append((text, bool(rest)))
    return out


def normalise_sql(sql: str) -> str:
    """The statement rebuilt from DuckDB's tokens: comments removed, the whitespace between tokens one
    space, trailing semicolons dropped; every token as written (a string literal, a ``$$`` string and a
    quoted identifier whole, ``--`` and spaces inside them included)."""
    parts = _token_texts(sql)
    while parts and parts[-1][0] == ";":
        parts.pop()
    out = []
    for i, (text, spaced) in enumerate(parts):
        out.append(text)
        if spaced and i + 1 < len(parts):
            out.append(" ")
    return "".join(out).strip()


def query_spec_digest(sql: str) -> str:
    """sha256 of the normalised SQL: the identity of the query behind a rollup."""
    return hashlib.sha256(normalise_sql(sql).encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class QueryResult:
    """A query's rows (as a pyarrow table) and the digest of the query that produced them."""

    sql: str
    query_spec_digest: str
    table: Any  # pyarrow.Table
    notes: tuple[str, ...] = ()
    snapshot_ids: dict[str, int | None] | None = None  # Iceberg: the snapshot each table's view read


def query(sql: str, home: Path, params: list[Any] | None = None, *, as_of: Any = None) -> QueryResult:
    """Run one read-only statement (SELECT / EXPLAIN of a SELECT) over the warehouse views."""
    import duckdb

    check_read_only(sql)
    notes: list[str] = []
    snapshots: dict[str, int | None] | None = {} if _iceberg() else None
    con = connect(home, notes, as_of=as_of, snapshots=snapshots)
    try:
        table = con.execute(sql, params or []).to_arrow_table()
    except duckdb.Error as exc:
        raise BenchrunError(f"query failed: {str(exc).splitlines()[0]}") from exc
    finally:
        con.close()
    return QueryResult(sql=sql, query_spec_digest=query_spec_digest(sql), table=table, notes=tuple(notes),
                       snapshot_ids=snapshots)


@dataclasses.dataclass
class QueryStream:
    """A running query: its columns, digest, row batches as they come, and whether rows were cut.

    Rows are fetched from DuckDB in batches, so memory stays bounded by the batch size and
    the first rows print before the last are computed. ``truncated`` is known once the
    batches are exhausted: true when the query had more than ``limit`` rows.
    """

    sql: str
    query_spec_digest: str
    columns: list[str]
    limit: int | None
    notes: tuple[str, ...]
    _reader: Any
    _con: Any
    truncated: bool = False
    rows_out: int = 0
    snapshot_ids: dict[str, int | None] | None = None

    def batches(self) -> Iterator[list[tuple[Any, ...]]]:
        """Lists of rows, each a tuple in ``columns`` order (two columns may share a name: a join's
        ``raw_path`` from both sides), at most ``limit`` rows in all; closes the connection at the end."""
        import duckdb

        try:
            for batch in self._reader:
                rows = list(zip(*(column.to_pylist() for column in batch.columns)))
                if self.limit is not None and self.rows_out + len(rows) > self.limit:
                    rows = rows[: self.limit - self.rows_out]
                    self.truncated = True
                self.rows_out += len(rows)
                if rows:
                    yield rows
                if self.truncated:
                    break
        except duckdb.Error as exc:
            raise BenchrunError(f"query failed: {str(exc).splitlines()[0]}") from exc
        except BaseException:
            self._con.interrupt()
            raise
        finally:
            self.close()

    def close(self) -> None:
        _RUNNING.discard(self._con)
        self._con.close()


def stream_query(sql: str, home: Path, *, limit: int | None = DEFAULT_QUERY_LIMIT,
                 batch_rows: int = 2048, as_of: Any = None, params: list[Any] | None = None) -> QueryStream:
    """Start one read-only query and return its rows as a stream, cut after ``limit`` rows; ``params``
    the values of its ``$1``, ``$2``, ... (a playbook's query, as its --json records them)."""
    import duckdb

    if limit is not None and limit < 1:
        raise BenchrunError("query: --limit must be at least 1 (or 0 for no limit)")
    check_read_only(sql)
    notes: list[str] = []
    snapshots: dict[str, int | None] | None = {} if _iceberg() else None
    con = connect(home, notes, as_of=as_of, snapshots=snapshots)
    _RUNNING.add(con)
    try:
        rel = con.execute(sql, params or [])
        reader = rel.to_arrow_reader(batch_rows)
        columns = list(reader.schema.names)
    except duckdb.Error as exc:
        _RUNNING.discard(con)
        con.close()
        raise BenchrunError(f"query failed: {str(exc).splitlines()[0]}") from exc
    except BaseException:  # a signal's handler raised while DuckDB ran: stop its threads, then close
        _RUNNING.discard(con)
        con.interrupt()
        con.close()
        raise
    return QueryStream(sql=sql, query_spec_digest=query_spec_digest(sql), columns=columns, limit=limit,
                       notes=tuple(notes), _reader=reader, _con=con, snapshot_ids=snapshots)
