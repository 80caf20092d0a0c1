"""Iceberg warehouse defects found in review: a table made by an earlier release (a column the code
added since), time travel past deletes and tags, and the damaged inputs of the lake's commands."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pytest

from benchrun.errors import BenchrunError
from benchrun.store import open_store
from benchrun.warehouse import TABLES, curate_run, lake, lakeviews, query
from benchrun.warehouse import schemas
from test_store_helpers import make_run_dir


from test_warehouse_iceberg import _count, _stored_run, iceberg  # noqa: F401 (iceberg: the autouse fixture)


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


def _one_row(run_id: str, value: float) -> pa.Table:
    schema = TABLES["measurement_fact"]
    cols = {f.name: pa.nulls(1, f.type) for f in schema}
    cols.update(run_id=pa.array([run_id]), suite=pa.array(["s"]), metric=pa.array(["m"]), value=pa.array([value]))
    return pa.table(cols, schema=schema)


def _now_between() -> dt.datetime:
    time.sleep(0.01)
    when = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.01)
    return when


STARTED = dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc)
IDS = "SELECT string_agg(run_id, ',' ORDER BY run_id) FROM measurement_fact"


@pytest.mark.slow
def test_a_deleted_run_stays_deleted_as_of_a_time_past_the_metadata_log(tmp_path: Path) -> None:
    """``benchrun delete r2`` (a delete-only commit), then r2 curated again (its delete matches nothing:
    an append only, carrying the same run id): two commits, not one, however old."""
    for i in range(4):
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], STARTED)
    lake.commit_run(tmp_path, "measurement_fact", "r2", [], STARTED)
    between = _now_between()
    lake.commit_run(tmp_path, "measurement_fact", "r2", [_one_row("r2", 2.0)], STARTED)
    assert _count(tmp_path, IDS, as_of=between) == "r0,r1,r3"
    for i in range(4, 4 + int(lake.TABLE_PROPERTIES["write.metadata.previous-versions-max"]) + 2):
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], STARTED)
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    assert min(e.timestamp_ms for e in tbl.metadata.metadata_log) > between.timestamp() * 1000
    assert _count(tmp_path, IDS, as_of=between) == "r0,r1,r3"


@pytest.mark.slow
def test_a_tagged_snapshot_does_not_hide_the_expired_history_after_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lake.MAX_SNAPSHOTS_ENV, "10")
    for i in range(3):
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], STARTED)
    lake.tag_tables(tmp_path, "decision-1")
    when = None
    for i in range(3, 30):
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], STARTED)
        if i == 12:
            when = _now_between()
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    assert len(tbl.snapshots()) < 20  # r3..r12's snapshots expired; the tagged one (r2's) is kept
    with pytest.raises(BenchrunError, match="measurement_fact's snapshots before .* have expired.*"
                                            "the earliest time available for measurement_fact after"):
        query(IDS, tmp_path, as_of=when)  # was: r0,r1,r2 (the tagged state), silently
    assert _count(tmp_path, IDS, as_of=lakeviews.Tag("decision-1")) == "r0,r1,r2"
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact", as_of=_now_between()) == 30


def test_retention_on_a_migrated_home_stays_removed_after_migrate_warehouse(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A home of the parquet layout, migrated on first use: retention removes the expired run's rows from
    the tables and its parquet partitions, and a migration (run again, as documented) never copies it back,
    not even from partitions an earlier release's retention left behind."""
    import shutil

    from benchrun.warehouse.migrate import migrate_parquet
    from benchrun.warehouse.retention import apply_retention, plan_retention

    monkeypatch.setenv(lake.FORMAT_ENV, "parquet")
    for run_id, finished in (("run-old", "2023-11-30T09:00:00+00:00"), ("run-new", "2026-11-30T09:00:00+00:00")):
        run_dir, manifest = _stored_run(tmp_path, run_id, finished_utc=finished)
        curate_run(run_dir, tmp_path, manifest)
    kept = tmp_path / "kept-partition"
    shutil.copytree(tmp_path / "warehouse" / "measurement_fact" / "run_id=run-old", kept)
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    by_run = "SELECT string_agg(DISTINCT run_id, ',' ORDER BY run_id) FROM measurement_fact"
    assert _count(tmp_path, by_run) == "run-new,run-old"  # migrated on first use
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    apply_retention(tmp_path, plan_retention(tmp_path, now))
    assert _count(tmp_path, by_run) == "run-new"
    assert not (tmp_path / "warehouse" / "measurement_fact" / "run_id=run-old").exists()
    done = migrate_parquet(tmp_path)
    assert _count(tmp_path, by_run) == "run-new"
    # a partition an earlier release's retention left in place: the retention record keeps it out
    shutil.copytree(kept, tmp_path / "warehouse" / "measurement_fact" / "run_id=run-old")
    done = migrate_parquet(tmp_path)
    assert done.expired["measurement_fact"] == 1 and done.counts["measurement_fact"] == (0, 0)
    assert _count(tmp_path, by_run) == "run-new"


def test_a_run_rebuilt_from_the_store_keeps_its_facts_and_lineage(tmp_path: Path) -> None:
    """status.json is never stored: a run whose directory is gone is rebuilt with the fields its stored
    evidence holds (the pinned spec's digests and intent, manifest.json's outcome and sealing time, the
    environment's capture time, the creation time its minted id carries), its store URI relative to the
    home as curation from the directory writes it; retention can then age it."""
    import json
    import shutil

    import yaml

    from benchrun.fsio import atomic_write_json
    from benchrun.spec.digest import spec_digest, workload_spec_digest
    from benchrun.warehouse.rebuild import rebuild_warehouse
    from benchrun.warehouse.retention import plan_retention
    from test_store_helpers import SPEC_YAML

    pinned = yaml.safe_load(SPEC_YAML)
    run_id = f"wh-test-20261130085900-{spec_digest(pinned)[:8]}"
    run_dir = make_run_dir(tmp_path, run_id)
    status = json.loads((run_dir / "status.json").read_text())
    status.update(spec_digest=spec_digest(pinned), workload_spec_digest=workload_spec_digest(pinned), outcome="succeeded")
    atomic_write_json(run_dir / "status.json", status)
    atomic_write_json(run_dir / "manifest.json", {"manifest_version": 2, "run_id": run_id, "status": "succeeded",
                                                  "timestamp_utc": status["finished_utc"]})
    env_path = run_dir / "structured" / f"{run_id}_environment.json"
    atomic_write_json(env_path, {**json.loads(env_path.read_text()), "captured_utc": status["started_utc"]})
    manifest = open_store(None, tmp_path).put_run_dir(run_dir, run_id)
    curate_run(run_dir, tmp_path, manifest)
    facts = ("SELECT phase, outcome, created_utc, started_utc, finished_utc, spec_digest, workload_spec_digest, name "
             "FROM benchmark_run_fact")
    lineage = "SELECT store_uri, manifest_uri, spec_digest, workload_spec_digest FROM artifact_lineage_dim"
    measured = "SELECT count(*) FROM measurement_fact WHERE workload_spec_digest = '%s'" % status["workload_spec_digest"]
    before = [query(sql, tmp_path).table.to_pylist() for sql in (facts, lineage, measured)]
    assert before[0][0]["phase"] == "Succeeded" and before[1][0]["store_uri"] == "objects/"
    shutil.rmtree(run_dir)
    report = rebuild_warehouse(tmp_path, [run_id])
    assert not report.failed and "no run directory" in report.source[run_id]
    assert [query(sql, tmp_path).table.to_pylist() for sql in (facts, lineage, measured)] == before
    now = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    assert [r.tier for r in plan_retention(tmp_path, now).runs] == ["expired"]


def test_delete_of_a_run_whose_status_is_damaged_deletes_its_rows_in_every_day(tmp_path: Path) -> None:
    from benchrun.runctl import delete_run

    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    status = tmp_path / "runs" / "run-a" / "status.json"
    status.write_text(status.read_text()[:40])  # truncated
    delete_run("run-a", home=tmp_path)
    assert "run-a" not in lake.run_ids(tmp_path, "measurement_fact")
    assert _count(tmp_path, "SELECT string_agg(DISTINCT run_id, ',') FROM measurement_fact") == "run-b"


def _benchrun(home: Path, *args: str, **env: str):
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    full = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(repo), lake.FORMAT_ENV: "iceberg", **env}
    return subprocess.run([sys.executable, "-m", "benchrun.entry", *args], cwd=repo, env=full, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_maintenance_reports_a_damaged_table_and_maintains_the_others(tmp_path: Path) -> None:
    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    damaged = Path(sorted(t.file.file_path for t in tbl.scan().plan_files())[0].removeprefix("file://"))
    damaged.write_bytes(damaged.read_bytes()[:100])  # truncated: no footer
    files = lake.table_files(tmp_path, "serving_request_fact")
    out = _benchrun(tmp_path, "maintain-warehouse")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert "measurement_fact: not maintained" in out.stderr and "rebuild-warehouse" in out.stderr
    assert "serving_request_fact: data files" in out.stdout  # a table after it in the order: maintained
    assert lake.table_files(tmp_path, "serving_request_fact") < files
    bad = _benchrun(tmp_path, "maintain-warehouse", "--expire-days", "-5")
    assert bad.returncode != 0 and "--expire-days -5" in bad.stderr and "Traceback" not in bad.stderr
    # the maintenance asset goes on past the damaged table too, and fails naming it
    import dagster as dg

    from bench_assets.warehouse_assets import warehouse_maintenance
    from resources.warehouse import WarehouseResource

    files = lake.table_files(tmp_path, "serving_outcome_fact")
    for run_id in ("run-c", "run-d"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    assert lake.table_files(tmp_path, "serving_outcome_fact") > files
    with dg.instance_for_test() as instance:  # entered: see test_warehouse_iceberg's maintenance test
        result = dg.materialize([warehouse_maintenance], resources={"warehouse": WarehouseResource(home=str(tmp_path))},
                                run_config={"ops": {"warehouse_maintenance": {"config": {"expire_days": 0}}}},
                                instance=instance, raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "1 table(s) not maintained (measurement_fact)" in str(failure.event_specific_data.error)
    assert lake.table_files(tmp_path, "serving_outcome_fact") == files  # maintained after the damaged one


@pytest.mark.slow
def test_bad_catalog_and_memory_settings_are_named_without_a_traceback(tmp_path: Path) -> None:
    out = _benchrun(tmp_path, "query", "SELECT 1", BENCHRUN_CATALOG_URI="postgresql+psycopg2://u:secret@127.0.0.1:1/db")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert "BENCHRUN_CATALOG_URI=postgresql+psycopg2://u:***@127.0.0.1:1/db cannot be opened" in out.stderr
    assert "secret" not in out.stderr
    out = _benchrun(tmp_path, "query", "SELECT 1", BENCHRUN_QUERY_MEMORY_LIMIT="lots")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert "BENCHRUN_QUERY_MEMORY_LIMIT='lots'" in out.stderr
    assert _benchrun(tmp_path, "query", "SELECT 1", BENCHRUN_QUERY_MEMORY_LIMIT="512MB").returncode == 0


def test_as_of_a_snapshot_inside_a_commit_is_refused_naming_the_commits_end(tmp_path: Path) -> None:
    for i in range(2):
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], STARTED)
    done = lake.commit_run(tmp_path, "measurement_fact", "r0", [_one_row("r0", 5.0)], STARTED)  # delete + append
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    inside = tbl.snapshot_by_id(done.snapshot_id).parent_snapshot_id
    assert tbl.snapshot_by_id(inside).summary.operation.value in ("delete", "overwrite")
    with pytest.raises(BenchrunError, match=f"inside a commit.*ended with snapshot {done.snapshot_id}: "
                                            f"give --as-of {done.snapshot_id}"):
        query(IDS, tmp_path, as_of=inside)
    assert _count(tmp_path, IDS, as_of=done.snapshot_id) == "r0,r1"


@pytest.mark.slow
def test_the_as_of_errors_point_to_a_command_that_lists_snapshot_ids(tmp_path: Path) -> None:
    import json

    lake.commit_run(tmp_path, "measurement_fact", "r0", [_one_row("r0", 0.0)], STARTED)
    with pytest.raises(BenchrunError) as err:
        query("SELECT 1", tmp_path, as_of=12345)
    with pytest.raises(BenchrunError) as tag_err:
        query("SELECT 1", tmp_path, as_of=lakeviews.Tag("nope"))
    for message in (str(err.value), str(tag_err.value)):  # there was no warehouse_snapshots view
        assert "warehouse_snapshots" not in message and '`benchrun query "SELECT 1" --json`' in message
    out = _benchrun(tmp_path, "query", "SELECT 1", "--json")
    assert out.returncode == 0, out.stderr
    snapshot = json.loads(out.stdout)["snapshot_ids"]["measurement_fact"]
    assert _count(tmp_path, IDS, as_of=int(snapshot)) == "r0"  # --json writes ids as strings (jq-safe)


@pytest.mark.slow
def test_warehouse_duckdb_still_opens_after_many_tags_and_a_maintenance(tmp_path: Path) -> None:
    """Its views name each table's metadata file; tag-warehouse and maintain-warehouse commit
    without refreshing them, and after about 20 commits the file's views failed to open
    ("Cannot open file .../metadata/00003-….metadata.json")."""
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.warehouse.duck import connect_with_extensions
    from benchrun.warehouse.views import refresh_views

    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    refresh_views(tmp_path)  # as the pipeline's warehouse_views asset does after curating

    def counts():
        con = connect_with_extensions(str(tmp_path / "warehouse.duckdb"), access_mode="READ_ONLY")
        try:
            return con.execute("SELECT (SELECT count(*) FROM measurement_fact), (SELECT count(*) FROM launch_fact)"
                               ).fetchone()
        finally:
            con.close()

    before = counts()
    env = {"BENCHRUN_HOME": str(tmp_path), lake.FORMAT_ENV: "iceberg"}
    for i in range(22):
        out = CliRunner().invoke(app, ["tag-warehouse", f"t{i}"], env=env)
        assert out.exit_code == 0, out.output
    assert counts() == before
    for _ in range(2):
        out = CliRunner().invoke(app, ["maintain-warehouse", "--expire-days", "0"], env=env)
        assert out.exit_code == 0, (out.output, out.exception)
    assert counts() == before
