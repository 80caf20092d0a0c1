"""DuckDB's avro, httpfs and iceberg extensions load from the pinned wheels' files, never downloaded."""

from __future__ import annotations

import duckdb
import pytest

from benchrun.errors import BenchrunError
from benchrun.warehouse.duck import ICEBERG_EXTENSIONS, connect_with_extensions, extension_file


def test_each_extension_file_is_the_wheel_built_for_this_duckdb() -> None:
    for name in ICEBERG_EXTENSIONS:
        path = extension_file(name)
        assert path.is_file() and path.name == f"{name}.duckdb_extension"
        assert path.parent.name == f"v{duckdb.__version__}"


def test_connection_loads_them_with_autoinstall_off() -> None:
    con = connect_with_extensions()
    try:
        loaded = {row[0] for row in con.execute("SELECT extension_name FROM duckdb_extensions() WHERE loaded")
                  .fetchall()}
        assert set(ICEBERG_EXTENSIONS) <= loaded
        assert con.execute("SELECT current_setting('autoinstall_known_extensions')").fetchone()[0] is False
        # the iceberg extension's table functions are there
        names = {row[0] for row in con.execute("SELECT function_name FROM duckdb_functions()").fetchall()}
        assert {"iceberg_scan", "iceberg_snapshots", "iceberg_metadata"} <= names
    finally:
        con.close()


def test_a_missing_wheel_is_named_with_the_fix() -> None:
    with pytest.raises(BenchrunError, match="duckdb-extension-nosuch=="):
        extension_file("nosuch")
