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


def _unsigned_allowed(con) -> bool:
    return con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone()[0]


def test_each_file_signature_is_checked_once_a_process_and_again_when_it_changes(tmp_path, monkeypatch) -> None:
    """DuckDB hashes every extension file on each LOAD (0.2 s a connection); a file this process has
    checked and that is unchanged since loads without the check, a changed one is checked again."""
    import os
    import shutil

    from benchrun.warehouse import duck

    copies = {}
    for name in ICEBERG_EXTENSIONS:
        copies[name] = tmp_path / f"{name}.duckdb_extension"
        shutil.copyfile(extension_file(name), copies[name])
    monkeypatch.setattr(duck, "extension_file", lambda name: copies[name])
    monkeypatch.setattr(duck, "_CHECKED", {})
    seen = []
    for step in range(4):
        if step == 2:  # the iceberg file changes (a reinstall): its signature is checked again
            st = copies["iceberg"].stat()
            os.utime(copies["iceberg"], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        con = connect_with_extensions()
        try:
            seen.append(_unsigned_allowed(con))
            assert set(ICEBERG_EXTENSIONS) <= {r[0] for r in con.execute(
                "SELECT extension_name FROM duckdb_extensions() WHERE loaded").fetchall()}
        finally:
            con.close()
    assert seen == [False, True, False, True]


def test_a_query_connection_opened_without_the_check_still_loads_no_file(tmp_path) -> None:
    from benchrun.warehouse import curate_run
    from benchrun.warehouse.views import _confined_connection
    from test_store_helpers import make_run_dir

    curate_run(make_run_dir(tmp_path, "run-a"), tmp_path)
    evil = tmp_path / "warehouse" / "evil.duckdb_extension"  # inside the directory queries may read
    evil.write_bytes(b"\0" * 1024)
    unchecked = []
    for _ in range(2):  # the second connection skips the signature check
        con = _confined_connection(tmp_path)
        try:
            unchecked.append(_unsigned_allowed(con))
            with pytest.raises(duckdb.Error, match="disabled through configuration"):
                con.execute(f"LOAD '{evil}'")
        finally:
            con.close()
    assert unchecked[-1] is True
