"""The pyiceberg SQL catalog of a home: where the tables' files go, which database holds the catalog,
opening it once per process, and the embedded default's one hazard, a home that was moved or copied.

Catalog: ``BENCHRUN_CATALOG_URI`` (a SQLAlchemy URL, e.g. ``postgresql+psycopg2://user@host/db``,
the password from ``BENCHRUN_CATALOG_PASSWORD`` when not in the URL), by default the sqlite file
``<home>/warehouse/catalog.sqlite`` (zero set-up). Table location: ``BENCHRUN_WAREHOUSE_LOCATION``
(``s3://bucket/prefix``, endpoint and credentials as for the artifact store), by default
``<home>/warehouse/iceberg``. The tables themselves: :mod:`benchrun.warehouse.lake`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

CATALOG_NAME = "benchrun"
CATALOG_ENV = "BENCHRUN_CATALOG_URI"
CATALOG_PASSWORD_ENV = "BENCHRUN_CATALOG_PASSWORD"
LOCATION_ENV = "BENCHRUN_WAREHOUSE_LOCATION"
CATALOG_FILE = "catalog.sqlite"
MIGRATED_MARKER = "migrated-to-iceberg.json"  # benchrun.warehouse.migrate's, in <home>/warehouse/


def table_location(home: Path) -> str:
    """Where the tables' files go: ``BENCHRUN_WAREHOUSE_LOCATION`` or ``<home>/warehouse/iceberg``."""
    given = os.environ.get(LOCATION_ENV, "").strip()
    if given:
        if not given.startswith("s3://") or len(given) <= len("s3://"):
            raise BenchrunError(f"{LOCATION_ENV}={given!r}: give s3://bucket/prefix (unset: under the home)")
        return given.rstrip("/")
    return str((Path(home) / "warehouse" / "iceberg").resolve())


def catalog_uri(home: Path) -> str:
    given = os.environ.get(CATALOG_ENV, "").strip()
    if given:
        if not (given.startswith("sqlite:") or given.startswith("postgresql")):
            raise BenchrunError(f"{CATALOG_ENV}: give a sqlite:/// or postgresql+psycopg2:// URL (unset: "
                                f"<home>/warehouse/{CATALOG_FILE})")
        password = os.environ.get(CATALOG_PASSWORD_ENV)
        if password and given.startswith("postgresql"):
            from sqlalchemy.engine import make_url

            given = make_url(given).set(password=password).render_as_string(hide_password=False)
        return given
    return f"sqlite:///{(Path(home) / 'warehouse' / CATALOG_FILE).resolve()}"


def s3_properties() -> dict[str, str]:
    """pyiceberg FileIO settings for an S3 location: the artifact store's endpoint and credentials."""
    props: dict[str, str] = {}
    endpoint = os.environ.get("BENCHRUN_S3_ENDPOINT_URL")
    if endpoint:
        props["s3.endpoint"] = endpoint
    for key, env in (("s3.access-key-id", "AWS_ACCESS_KEY_ID"), ("s3.secret-access-key", "AWS_SECRET_ACCESS_KEY"),
                     ("s3.session-token", "AWS_SESSION_TOKEN")):
        if os.environ.get(env):
            props[key] = os.environ[env]
    props["s3.region"] = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"
    return props


# (uri, location) -> (catalog, the sqlite file's identity when it is one): a catalog file removed and
# made anew under the same name (a rebuild) is opened again, not read through a stale connection.
_CATALOGS: dict[tuple[str, str], tuple[Any, tuple[int, int] | None]] = {}


def _sqlite_identity(uri: str) -> tuple[int, int] | None:
    """The sqlite catalog file's inode and the random ``application_id`` benchrun gave it (an inode can
    be reused by a file made anew under the same name), or None when it is not a sqlite file."""
    import sqlite3

    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///")
    try:
        inode = os.stat(path).st_ino
        con = sqlite3.connect(path, timeout=30)
        try:
            app = con.execute("PRAGMA application_id").fetchone()[0]
        finally:
            con.close()
    except (OSError, sqlite3.Error):
        return None
    return inode, app


def _mark_identity(cat: Any) -> None:
    """Give a new sqlite catalog file its random ``application_id`` (kept when it has one)."""
    import secrets

    with cat.engine.begin() as con:
        if not con.exec_driver_sql("PRAGMA application_id").scalar():
            con.exec_driver_sql(f"PRAGMA application_id = {secrets.randbelow(2**31 - 1) + 1}")


class MovedHomeError(BenchrunError):
    """The embedded default's tables name another home's files (the home was moved or copied)."""


def local_default(home: Path) -> bool:
    """The embedded default: the sqlite catalog and the table files both inside the home."""
    return not os.environ.get(CATALOG_ENV, "").strip() and not os.environ.get(LOCATION_ENV, "").strip()


def written_under(cat: Any) -> str | None:
    """Where the catalog's tables were written: the first metadata location it holds (None: no table yet)."""
    from sqlalchemy import text

    with cat.engine.connect() as con:
        row = con.execute(text("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :c "
                               "AND metadata_location IS NOT NULL LIMIT 1"), {"c": CATALOG_NAME}).first()
    return row[0] if row else None


def moved_home(home: Path, cat: Any) -> str | None:
    """For the embedded default: the location the tables were written under when that is not this
    home's (the home was moved or copied: Iceberg addresses every file by absolute path), else None."""
    if not local_default(home):
        return None
    first = written_under(cat)
    here = table_location(home).rstrip("/") + "/"
    if first is None or first.removeprefix("file://").startswith(here):
        return None
    return first.removeprefix("file://").rsplit("/benchrun/", 1)[0]  # <location>/<namespace>/<table>/metadata/...


def catalog(home: Path, *, allow_moved: bool = False) -> Any:
    """The pyiceberg SQL catalog of ``home`` (one per process and setting; its tables are created on first use).

    The embedded default's tables address their files by absolute path, so a home that was moved or
    copied is refused with the fix (``benchrun rebuild-warehouse``, which rebuilds them from the run
    directories; ``allow_moved`` is its way in)."""
    from pyiceberg.catalog.sql import SqlCatalog

    uri, location = catalog_uri(home), table_location(home)
    if os.environ.get("BENCHRUN_SHARED_STATE") and (uri.startswith("sqlite:") or not location.startswith("s3://")):
        raise BenchrunError(f"BENCHRUN_SHARED_STATE is set: the Iceberg warehouse must be shared too; set {CATALOG_ENV} "
                            f"to a postgresql+psycopg2:// URL and {LOCATION_ENV} to s3://bucket/prefix (or "
                            f"BENCHRUN_WAREHOUSE_FORMAT=parquet to keep mirroring the parquet layout of earlier releases)")
    key = (uri, location)
    cached = _CATALOGS.get(key)
    if cached is None or (uri.startswith("sqlite:") and cached[1] != _sqlite_identity(uri)):
        if cached is not None:
            cached[0].engine.dispose()  # its file was replaced: its pooled connections read the old one
        if uri.startswith("sqlite:"):
            (Path(home) / "warehouse").mkdir(parents=True, exist_ok=True)
        props = {"uri": uri, "warehouse": location, "init_catalog_tables": "true"}
        if location.startswith("s3://"):
            props.update(s3_properties())
        from sqlalchemy.exc import SQLAlchemyError

        try:
            cat = _retry_locked(lambda: SqlCatalog(CATALOG_NAME, **props), "open the catalog", racing_create=True)
            if uri.startswith("sqlite:"):
                _sqlite_waits(cat)
                _retry_locked(lambda: _mark_identity(cat), "mark the catalog")
            old = None if allow_moved else _retry_locked(lambda: moved_home(home, cat), "read the catalog")
        except SQLAlchemyError as exc:  # an unreachable database, a wrong password: the setting, not a traceback
            raise BenchrunError(_unreachable(uri, exc)) from None
        if old is not None:
            cat.engine.dispose()
            raise MovedHomeError(
                f"warehouse: the Iceberg tables of {home} were written under {old}, and Iceberg addresses every file by "
                f"absolute path: this home was moved or copied. Run `benchrun rebuild-warehouse` to rebuild them here "
                f"from the run directories and the artifact store (the evidence is unchanged)")
        _CATALOGS[key] = (cat, _sqlite_identity(uri))
    return _CATALOGS[key][0]


def _unreachable(uri: str, exc: BaseException) -> str:
    """The error for a catalog database that cannot be opened: the setting, its URL (no password), why."""
    from sqlalchemy.engine import make_url

    try:
        shown = make_url(uri).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL SQLAlchemy cannot parse is shown by its scheme only
        shown = uri.split("://", 1)[0] + "://…"
    why = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    where = f"{CATALOG_ENV}={shown}" if os.environ.get(CATALOG_ENV, "").strip() else f"the catalog {shown}"
    return (f"warehouse: {where} cannot be opened ({why[0] if why else type(exc).__name__}); check that the "
            f"database is up and reachable, the URL, and the password ({CATALOG_PASSWORD_ENV}), or unset "
            f"{CATALOG_ENV} for the sqlite file in the home")


def reset_moved(home: Path) -> str | None:
    """For a rebuild of every run: when this home's embedded-default tables were written under
    another path (a moved or copied home), remove this home's catalog and Iceberg files (they name the
    old home's paths; that home's own are not touched), so the rebuild writes them anew here; the old
    location, or None when nothing was moved."""
    import shutil

    if not local_default(home) or not (Path(home) / "warehouse" / CATALOG_FILE).is_file():
        return None
    cat = catalog(home, allow_moved=True)
    old = moved_home(home, cat)
    if old is None:
        return None
    cat.engine.dispose()
    _CATALOGS.clear()
    warehouse = Path(home) / "warehouse"
    for name in (CATALOG_FILE, *(CATALOG_FILE + s for s in ("-journal", "-wal", "-shm")), MIGRATED_MARKER):
        (warehouse / name).unlink(missing_ok=True)  # the marker described the tables set aside
    shutil.rmtree(warehouse / "iceberg", ignore_errors=True)  # files of the copy that name the old paths
    log.warning("warehouse: %s was written under %s; its Iceberg tables are rebuilt here", warehouse, old)
    return old


def _sqlite_waits(cat: Any) -> None:
    """Writers of one sqlite catalog wait for each other's short transactions instead of failing at once."""
    from sqlalchemy import event

    @event.listens_for(cat.engine, "connect")
    def _busy(dbapi_con: Any, _record: Any) -> None:
        dbapi_con.execute("PRAGMA busy_timeout = 30000")


def _is_locked(exc: BaseException) -> bool:
    from sqlalchemy.exc import OperationalError

    return isinstance(exc, OperationalError) and "locked" in str(exc).lower()


def _lost_create_race(exc: BaseException) -> bool:
    """Another process created the catalog's own tables (or a row) between our check and our create."""
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    text = str(exc).lower()
    return isinstance(exc, IntegrityError) or (isinstance(exc, ProgrammingError) and "already exists" in text) \
        or "already exists" in text


def _retry_locked(fn: Any, what: str, attempts: int = 20, *, racing_create: bool = False) -> Any:
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - only a locked sqlite catalog (or a lost create race) is retried
            retry = _is_locked(exc) or (racing_create and _lost_create_race(exc))
            if not retry or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def catalog_exists(home: Path) -> bool:
    """Whether this home has Iceberg tables (a catalog URL is set, or its sqlite file exists)."""
    return bool(os.environ.get(CATALOG_ENV, "").strip()) or (Path(home) / "warehouse" / CATALOG_FILE).is_file()
