"""Iceberg warehouse defects found in review: a table made by an earlier release (a column the code
added since), time travel past deletes and tags, and the damaged inputs of the lake's commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchrun.store import open_store
from benchrun.warehouse import TABLES, curate_run, lake, query
from benchrun.warehouse import schemas
from test_store_helpers import make_run_dir


@pytest.fixture(autouse=True)
def iceberg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    for env in (lake.CATALOG_ENV, lake.LOCATION_ENV):
        monkeypatch.delenv(env, raising=False)
    lake._CATALOGS.clear()


def _stored_run(home: Path, run_id: str, **kw) -> tuple[Path, object]:
    run_dir = make_run_dir(home, run_id, **kw)
    return run_dir, open_store(None, home).put_run_dir(run_dir, run_id)


def _count(home: Path, sql: str, **kw) -> int:
    return query(sql, home, **kw).table.column(0)[0].as_py()


def test_a_table_of_an_earlier_release_gains_the_new_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home made before a column existed (measurement_fact without ``unit``, as telemetry_slice_fact
    without ``point`` at 408774e): curation adds the column (schema evolution, in the run's commit),
    queries read it as null for the older rows, and its history reads without it."""
    old = TABLES["measurement_fact"]
    run_a, man_a = _stored_run(tmp_path, "run-a")
    with monkeypatch.context() as m:
        m.setitem(schemas.TABLES, "measurement_fact", old.remove(old.get_field_index("unit")))
        curate_run(run_a, tmp_path, man_a)
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    assert "unit" not in tbl.schema().column_names
    at_a = query("SELECT 1", tmp_path).snapshot_ids["measurement_fact"]
    # before any new curation: every query works (the view reads the column as null)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE unit IS NULL") == 9
    digest_a = lake.run_rows_digest(tmp_path, "run-a")
    run_b, man_b = _stored_run(tmp_path, "run-b")
    curate_run(run_b, tmp_path, man_b)
    assert "unit" in lake.catalog(tmp_path).load_table("benchrun.measurement_fact").schema().column_names
    assert lake.run_rows_digest(tmp_path, "run-a") == digest_a  # what run-a's statement was signed with
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE unit IS NOT NULL") == 9
    curate_run(run_a, tmp_path, man_a)  # an old run curated again: replaced, with its unit now
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    assert "unit" in tbl.schema().column_names
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE unit IS NOT NULL") == 18
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE unit IS NULL", as_of=at_a) == 9

