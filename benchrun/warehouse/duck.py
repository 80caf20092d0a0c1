"""DuckDB's extensions (avro, httpfs, iceberg) loaded from their pinned wheels' files, never downloaded.

DuckDB's own extension download cannot be reached from the machines benchrun runs on, so each
extension comes as a ``duckdb-extension-<name>`` wheel (pinned to the DuckDB version exactly,
pyproject.toml) holding ``extensions/v<duckdb version>/<name>.duckdb_extension``; a connection
``LOAD``s that file by path, with ``autoinstall_known_extensions`` off so that nothing is fetched.
The iceberg extension reads Iceberg's manifests through avro, so avro is loaded first.
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


def load_extensions(con: Any, names: tuple[str, ...] = ICEBERG_EXTENSIONS) -> None:
    """``LOAD`` each extension on ``con`` from its wheel's file (before external access is turned off)."""
    for name in names:
        con.execute("LOAD '" + str(extension_file(name)).replace("'", "''") + "'")


def connect_with_extensions(database: str = ":memory:", **config: Any) -> Any:
    """A DuckDB connection that never downloads an extension, with avro, httpfs and iceberg loaded."""
    import duckdb

    con = duckdb.connect(database, config={"autoinstall_known_extensions": False,
                                           "autoload_known_extensions": False, **config})
    try:
        load_extensions(con)
    except BaseException:
        con.close()
        raise
    return con
