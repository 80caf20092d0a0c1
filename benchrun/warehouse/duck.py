"""DuckDB's extensions (avro, httpfs, iceberg) loaded from their pinned wheels' files, never downloaded.

DuckDB's own extension download cannot be reached from the machines benchrun runs on, so each
extension comes as a ``duckdb-extension-<name>`` wheel (pinned to the DuckDB version exactly,
pyproject.toml) holding ``extensions/v<duckdb version>/<name>.duckdb_extension``; a connection
``LOAD``s that file by path, with ``autoinstall_known_extensions`` off so that nothing is fetched.
The iceberg extension reads Iceberg's manifests through avro, so avro is loaded first.

DuckDB checks an extension's signature on every ``LOAD``: it hashes the whole file (84 MB for
the three), 0.2 s of CPU for each new connection, which every query, report and curation opens.
A process checks each file once: a connection opened after all of its files passed that check
here, and are unchanged since (same device, inode, size and modification time), is opened with
``allow_unsigned_extensions`` and skips it. Skipping it guards against nothing the first check
did not: whoever can replace a file inside the installed wheel between two connections can
replace the Python code that opens them. A connection's queries still cannot load anything
(benchrun turns external access off and locks the configuration before any query runs).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError

ICEBERG_EXTENSIONS = ("avro", "httpfs", "iceberg")  # load order: iceberg needs avro


def extension_file(name: str) -> Path:
    """The ``.duckdb_extension`` file of the ``duckdb-extension-<name>`` wheel for this DuckDB."""
    import duckdb

    module = f"duckdb_extension_{name}"
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise BenchrunError(f"DuckDB extension {name!r}: the wheel duckdb-extension-{name}=={duckdb.__version__} "
                            "is not installed; reinstall benchrun (pip install -e .) to get the pinned wheels")
    version = duckdb.__version__
    for base in spec.submodule_search_locations:
        path = Path(base) / "extensions" / f"v{version}" / f"{name}.duckdb_extension"
        if path.is_file():
            return path
    found = sorted(p.parent.name for base in spec.submodule_search_locations
                   for p in Path(base).glob(f"extensions/*/{name}.duckdb_extension"))
    raise BenchrunError(f"DuckDB extension {name!r}: the installed wheel is built for {found or 'no version'}, "
                        f"not DuckDB v{version}; pin duckdb-extension-{name}=={version} (pyproject.toml) and reinstall")


_CHECKED: dict[str, tuple[int, int, int, int]] = {}  # file -> its identity when DuckDB checked its signature


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def extension_config(names: tuple[str, ...] = ICEBERG_EXTENSIONS) -> dict[str, Any]:
    """The configuration to open a connection with that will load ``names``: the signature check is
    skipped only when this process has checked every one of those files and none changed since."""
    try:
        checked = all(_CHECKED.get(str(p)) == _identity(p) for p in map(extension_file, names))
    except OSError:
        checked = False
    return {"allow_unsigned_extensions": True} if checked else {}


def load_extensions(con: Any, names: tuple[str, ...] = ICEBERG_EXTENSIONS) -> None:
    """``LOAD`` each extension on ``con`` from its wheel's file (before external access is turned off).
    A load with the signature check on records the file as checked (:func:`extension_config`)."""
    checking = not con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone()[0]
    for name in names:
        path = extension_file(name)
        before = _identity(path)
        con.execute("LOAD '" + str(path).replace("'", "''") + "'")
        if checking and _identity(path) == before:
            _CHECKED[str(path)] = before


def connect_with_extensions(database: str = ":memory:", **config: Any) -> Any:
    """A DuckDB connection that never downloads an extension, with avro, httpfs and iceberg loaded."""
    import duckdb

    con = duckdb.connect(database, config={"autoinstall_known_extensions": False,
                                           "autoload_known_extensions": False, **extension_config(), **config})
    try:
        load_extensions(con)
    except BaseException:
        con.close()
        raise
    return con
