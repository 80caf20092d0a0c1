"""Iceberg warehouse defects found in review: compaction that rewrote compact days (and expired the
curations' snapshots), also those it had split itself, a row digest that changed when a table was made anew, commits that left
warehouse.duckdb's views behind, a damaged file's fallback that failed on older files, and a
first curation racing maintenance's claims."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest

from benchrun.warehouse import TABLES, curate_run, lake, laketx, query, schemas
from test_warehouse_iceberg import _stored_run, iceberg  # noqa: F401 (iceberg: the autouse fixture)

T = "measurement_fact"
START = dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc)


def _rows(run_id: str, suites: tuple[str, ...] = ("gemm",), schema: pa.Schema | None = None) -> pa.Table:
    schema = schema or TABLES[T]
    n = len(suites)
    cols = {f.name: pa.nulls(n, f.type) for f in schema}
    cols.update(run_id=pa.array([run_id] * n), suite=pa.array(list(suites)), metric=pa.array(["m"] * n),
                value=pa.array([1.0] * n))
    return pa.table(cols, schema=schema)


def _table(home: Path):
    return lake.catalog(home).load_table(f"{lake.NAMESPACE}.{T}")


def _files(home: Path) -> set[str]:
    return {t.file.file_path for t in _table(home).scan().plan_files()}


def _runs_as_of(home: Path, when: dt.datetime) -> int:
    return query(f"SELECT count(DISTINCT run_id) FROM {T}", home, as_of=when).table.column(0)[0].as_py()


def test_compaction_rewrites_only_partitions_of_several_files_in_one_commit(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """12 runs on 12 days, two suites each: every partition (day, suite) is one file. Maintenance
    rewrote every such day (two snapshots a day per table), those pushed the runs' snapshots out of
    the writers' bound, and `--as-of` a time before failed ("snapshots ... have expired")."""
    monkeypatch.setenv(lake.MAX_SNAPSHOTS_ENV, "20")
    when = None
    for i in range(12):
        lake.commit_run(tmp_path, T, f"r{i:02d}", [_rows(f"r{i:02d}", ("gemm", "serving"))],
                        START - dt.timedelta(days=i))
        if i == 5:
            time.sleep(0.01)
            when = dt.datetime.now(dt.timezone.utc)
            time.sleep(0.01)
    assert len(_table(tmp_path).snapshots()) == 12
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=7)
    for _ in range(2):  # nothing to compact: no commit
        head = _table(tmp_path).current_snapshot().snapshot_id
        assert lake.maintain(tmp_path, T, cutoff)[:2] == (24, 24)
        assert _table(tmp_path).current_snapshot().snapshot_id == head
        assert len(_table(tmp_path).snapshots()) == 12
    for i in range(3):  # three days gain a second file in each suite
        lake.commit_run(tmp_path, T, f"x{i}", [_rows(f"x{i}", ("gemm", "serving"))], START - dt.timedelta(days=i))
    before = _files(tmp_path)
    untouched = {f for f in before if not any(f"run_day={(START - dt.timedelta(days=i)).date()}" in f
                                              for i in range(3))}
    assert lake.compact(tmp_path, T) == (30, 24)
    after = _files(tmp_path)
    assert untouched <= after and len(after - untouched) == 6  # only the six partitions of two files
    assert len(_table(tmp_path).snapshots()) == 15 + 2  # one commit: its delete and append
    assert lake.compact(tmp_path, T) == (24, 24) and len(_table(tmp_path).snapshots()) == 17
    lake.commit_run(tmp_path, T, "r99", [_rows("r99", ("gemm", "serving"))], START + dt.timedelta(days=1))
    assert _runs_as_of(tmp_path, when) == 6  # the curations' snapshots were kept
    assert query(f"SELECT count(*) FROM {T}", tmp_path).table.column(0)[0].as_py() == 2 * 16


# What the signed digests are (computed with the code before this change): the row of _rows("r1") at
# START, in a table made with every column ("unit" null, included), and in one made without "unit".
FRESH_DIGEST = "b162ff865c6fca38bffc4cc5b57e5f1a23fcbe0ec3760ba6e02a9fc84e9359af"
WITHOUT_UNIT_DIGEST = "d25ab2c0b716f7ee07ef2705ead922f81326413f3c3fc47286d3c74906db9b6c"
# The columns of every table (iceberg_schema_of) when rows began to be signed (fd16c85), less none.
SIGNED_COLUMNS_SHA256 = "672da627cec6398348a9a6734376c13211f0d88c1ec4e2ea611bc214ab055ea4"


def _remake(home: Path) -> None:
    """The tables made anew, as `rebuild-warehouse` does for a moved or copied home."""
    lake._CATALOGS.clear()
    (home / "warehouse" / "catalog.sqlite").unlink()
    shutil.rmtree(home / "warehouse" / "iceberg")


def test_a_run_signed_before_a_column_was_added_keeps_its_digest_when_the_table_is_made_anew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The columns left out where null were those the table's schema history says it gained, so
    the same rows in a table made anew (rebuild-warehouse) hashed differently and verify failed."""
    new = TABLES[T]
    old = new.remove(new.get_field_index("unit"))
    # as if "unit" came after signing began, and was listed then
    monkeypatch.setattr(lake, "DIGEST_ADDED", {T: frozenset({"unit"})}, raising=False)
    with monkeypatch.context() as m:  # a home made by a release before the column
        m.setitem(schemas.TABLES, T, old)
        lake.commit_run(tmp_path, T, "r1", [_rows("r1", schema=old)], START)
    signed = lake.run_rows_digest(tmp_path, "r1")[T]
    assert signed == {"rows": 1, "sha256": WITHOUT_UNIT_DIGEST}
    lake.commit_run(tmp_path, T, "r2", [_rows("r2")], START)  # evolves the table: r1's unit reads null
    assert "unit" in _table(tmp_path).schema().column_names
    assert lake.run_rows_digest(tmp_path, "r1")[T] == signed
    _remake(tmp_path)
    lake.commit_run(tmp_path, T, "r1", [_rows("r1")], START)
    assert lake.run_rows_digest(tmp_path, "r1")[T] == signed


def test_the_digests_of_runs_signed_so_far_do_not_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh, old_home = tmp_path / "fresh", tmp_path / "old"
    lake.commit_run(fresh, T, "r1", [_rows("r1")], START)
    assert lake.run_rows_digest(fresh, "r1")[T]["sha256"] == FRESH_DIGEST  # a null column counted, as signed
    new = TABLES[T]
    old = new.remove(new.get_field_index("unit"))
    with monkeypatch.context() as m:  # a table made before a column, evolved since
        m.setitem(schemas.TABLES, T, old)
        lake.commit_run(old_home, T, "r1", [_rows("r1", schema=old)], START)
    lake.commit_run(old_home, T, "r2", [_rows("r2")], START)
    assert lake.run_rows_digest(old_home, "r1")[T]["sha256"] == WITHOUT_UNIT_DIGEST


def test_a_column_added_to_a_table_is_listed_among_those_left_out_of_the_digest_where_null() -> None:
    """A column added without its entry in DIGEST_ADDED would change, in a table made anew, the
    digest of every run signed before it (null there, absent when signed)."""
    cols = {t: [c for c in lake.iceberg_schema_of(t).names if c not in lake.DIGEST_ADDED.get(t, ())]
            for t in sorted(TABLES)}
    got = hashlib.sha256(json.dumps(cols, sort_keys=True).encode()).hexdigest()
    assert got == SIGNED_COLUMNS_SHA256, ("a table's columns changed: list each column added in "
                                          "benchrun.warehouse.lake.DIGEST_ADDED (a renamed or removed one changes "
                                          "every signed digest of its table)")


def _duckdb_count(home: Path, table: str) -> int:
    """A count through ``warehouse.duckdb``'s own views (what Dagster and the DuckDB CLI open)."""
    from benchrun.warehouse.duck import connect_with_extensions

    con = connect_with_extensions(str(home / "warehouse.duckdb"), access_mode="READ_ONLY")
    try:
        return con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    finally:
        con.close()


def test_migrate_warehouse_refreshes_the_views(tmp_path: Path) -> None:
    """22 runs copied (a commit each) aged out the metadata file the views named: IOException
    "Cannot open file .../metadata/00001-....metadata.json"."""
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.warehouse.views import refresh_views
    from benchrun.warehouse.writer import write_partition

    lake.commit_run(tmp_path, T, "run-x", [_rows("run-x")], START)
    refresh_views(tmp_path)
    for i in range(22):  # the parquet layout of runs no table holds yet
        write_partition(tmp_path, T, f"run-p{i:02d}", [_rows(f"run-p{i:02d}")])
    out = CliRunner().invoke(app, ["migrate-warehouse"], env={"BENCHRUN_HOME": str(tmp_path),
                                                              lake.FORMAT_ENV: "iceberg"})
    assert out.exit_code == 0, (out.output, out.exception)
    assert _duckdb_count(tmp_path, T) == 23


def test_facts_curated_again_when_a_run_ends_outside_its_asset_refresh_the_views(tmp_path: Path) -> None:
    """curate_final_status (cancel, a killed run marked failed, the failure sensor) commits to two
    tables and left the views naming metadata files its commits aged out."""
    from benchrun.warehouse.curate import FINAL_STATUS_TABLES, curate_final_status
    from benchrun.warehouse.views import refresh_views

    run_dir, manifest = _stored_run(tmp_path, "run-a")
    assert (run_dir / "manifest.json").is_file()  # sealed: what curate_final_status curates
    curate_run(run_dir, tmp_path, manifest)
    refresh_views(tmp_path)
    before = {t: _duckdb_count(tmp_path, t) for t in FINAL_STATUS_TABLES}
    for _ in range(int(lake.TABLE_PROPERTIES["write.metadata.previous-versions-max"]) + 1):
        assert curate_final_status(tmp_path, "run-a")
    assert {t: _duckdb_count(tmp_path, t) for t in FINAL_STATUS_TABLES} == before


def test_a_damaged_file_left_out_does_not_fail_the_view_when_the_rest_predate_a_column(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback read_parquet selected every column of the snapshot's schema: with the only file
    holding ``unit`` damaged, the others lacked it and every query failed (BinderException)."""
    new = TABLES[T]
    old = new.remove(new.get_field_index("unit"))
    with monkeypatch.context() as m:
        m.setitem(schemas.TABLES, T, old)
        lake.commit_run(tmp_path, T, "r1", [_rows("r1", schema=old)], START - dt.timedelta(days=1))
    lake.commit_run(tmp_path, T, "r2", [_rows("r2").set_column(new.get_field_index("unit"), "unit", pa.array(["s"]))],
                    START)
    damaged = next((tmp_path / "warehouse" / "iceberg" / "benchrun" / T / "data").rglob(
        f"run_day={START.date()}/**/*.parquet"))
    damaged.write_bytes(damaged.read_bytes()[:100])  # r2's file truncated
    got = query(f"SELECT run_id, unit FROM {T}", tmp_path)
    assert got.table.to_pylist() == [{"run_id": "r1", "unit": None}]
    assert any(str(damaged) in note and "damaged data file left out" in note for note in got.notes)


def test_maintenance_claiming_between_a_writers_claim_and_its_commit_does_not_duplicate_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table of an older benchrun (nobody claimed its runs): a writer re-curating one of them
    claimed it, maintenance then marked the table's claims complete (the run already claimed, so
    not by maintenance), the writer saw them complete, skipped the delete, and the run's rows
    were there twice."""
    from sqlalchemy import text

    lake.commit_run(tmp_path, T, "r-old", [_rows("r-old")], START)
    cat = lake.catalog(tmp_path)
    with cat.engine.begin() as con:
        con.execute(text(f"DELETE FROM {laketx.MARKER_TABLE}"))
    real, interleaved = laketx._claim, []

    def claim_then_maintenance(cat_, table, run_id, *, probe=False):
        got = real(cat_, table, run_id, probe=probe)
        if run_id == "r-old" and not probe and not interleaved:
            interleaved.append(None)  # once (claim_existing claims r-old too)
            interleaved[0] = laketx.claim_existing(cat_, table, lambda: lake.run_ids(tmp_path, table))
        return got

    monkeypatch.setattr(laketx, "_claim", claim_then_maintenance)
    lake.commit_run(tmp_path, T, "r-old", [_rows("r-old")], START)
    assert interleaved == [0]  # maintenance ran between the writer's claim and its commit
    assert _table(tmp_path).scan().to_arrow().num_rows == 1


def _many(run_id: str, n: int = 2000) -> pa.Table:
    """``n`` rows of one run in one partition (gemm): some 280 KiB in memory, 13 KiB on disk."""
    rows = _rows(run_id).take([0] * n)
    return rows.set_column(rows.schema.get_field_index("request_id"), "request_id",
                           pa.array([f"{run_id}-req-{i:06d}" for i in range(n)]))


def _partition_files(home: Path) -> dict[str, int]:
    """The table's live data files by partition path: how many each."""
    out: dict[str, int] = {}
    for f in _files(home):
        key = f.rsplit("/", 1)[0]
        out[key] = out.get(key, 0) + 1
    return out


def test_a_partition_compaction_split_by_the_writers_in_memory_size_is_not_rewritten_again(
        tmp_path: Path) -> None:
    """pyiceberg's writer splits a file by in-memory Arrow bytes and the parquet is several times smaller
    on disk: a partition compaction wrote as several files looked, by its on-disk size, like one needing
    a single file, and every maintenance rewrote it again (two snapshots a time, pushing the runs' out)."""
    for i in range(4):  # four runs of one day: one partition of four files
        lake.commit_run(tmp_path, T, f"r{i}", [_many(f"r{i}")], START + dt.timedelta(minutes=i))
    with laketx.Transaction(_table(tmp_path)) as tx:  # the writer splits a partition at 256 KiB in memory
        tx.set_properties({"write.target-file-size-bytes": str(256 << 10)})
    mem = pa.concat_tables([_many(f"r{i}") for i in range(4)]).nbytes
    disk = sum(t.file.file_size_in_bytes for t in _table(tmp_path).scan().plan_files())
    assert mem > 2 * (256 << 10) > (256 << 10) > disk  # several files in memory, under one on disk
    far = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)  # expires nothing
    before, split = lake.maintain(tmp_path, T, far)[:2]
    assert before == 4 and split > 1  # compacted: 8,000 rows as the writer splits them
    head, snapshots = _table(tmp_path).current_snapshot().snapshot_id, len(_table(tmp_path).snapshots())
    for _ in range(2):  # compact as compaction wrote it: no commit
        assert lake.maintain(tmp_path, T, far)[:2] == (split, split)
        assert _table(tmp_path).current_snapshot().snapshot_id == head
        assert len(_table(tmp_path).snapshots()) == snapshots
    # a run curated after the compaction adds a file: compacted again, once
    lake.commit_run(tmp_path, T, "r4", [_rows("r4")], START + dt.timedelta(hours=1))
    assert lake.maintain(tmp_path, T, far)[:2] == (split + 1, split)
    snapshots = len(_table(tmp_path).snapshots())
    assert lake.maintain(tmp_path, T, far)[:2] == (split, split) and len(_table(tmp_path).snapshots()) == snapshots
    # the compaction's snapshots expired (another day's run made since): still not rewritten
    lake.commit_run(tmp_path, T, "r5", [_rows("r5")], START + dt.timedelta(days=1))
    time.sleep(0.01)
    now = dt.datetime.now(dt.timezone.utc)
    assert len(lake.maintain(tmp_path, T, now)[2]) == snapshots
    head = _table(tmp_path).current_snapshot().snapshot_id
    assert lake.maintain(tmp_path, T, now)[:3] == (split + 1, split + 1, [])
    assert _table(tmp_path).current_snapshot().snapshot_id == head and len(_table(tmp_path).snapshots()) == 1
    assert sorted(_partition_files(tmp_path).values()) == [1, split]
    assert query(f"SELECT count(*) FROM {T}", tmp_path).table.column(0)[0].as_py() == 4 * 2000 + 2
