"""The warehouse on Apache Iceberg tables (issue 23): one commit per run per table, idempotent re-curation,
concurrent writers on sqlite and on a real Postgres catalog, a writer killed mid-commit, time travel,
a second reader (pyiceberg's own scan) agreeing with `benchrun query`, and an S3 location on a real
S3 API server (moto) on loopback."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.store import open_store
from benchrun.warehouse import TABLES, curate_run, lake, lakeviews, query
from benchrun.warehouse.migrate import migrate_parquet
from benchrun.warehouse.schemas import DIMENSIONS
from test_postgres_instance import pg_server  # noqa: F401  (fixture: a real Postgres on loopback)
from test_store_helpers import make_run_dir, s3_env  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[1]
# rows per table of make_run_dir's run (3 replicates, 20 requests each)
PER_RUN = {"measurement_fact": 9, "serving_request_fact": 60, "benchmark_run_fact": 1, "launch_fact": 6,
           "serving_outcome_fact": 3, "artifact_lineage_dim": 1}


@pytest.fixture(autouse=True)
def iceberg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    for env in (lake.CATALOG_ENV, lake.LOCATION_ENV):
        monkeypatch.delenv(env, raising=False)
    lake._CATALOGS.clear()


def _stored_run(home: Path, run_id: str, *, in_status: bool = False, **kw) -> tuple[Path, object]:
    run_dir = make_run_dir(home, run_id, **kw)
    manifest = open_store(None, home).put_run_dir(run_dir, run_id)
    if in_status:  # a child process loads the manifest itself
        status = json.loads((run_dir / "status.json").read_text())
        status["artifact_manifest_digest"] = manifest.digest
        (run_dir / "status.json").write_text(json.dumps(status))
    return run_dir, manifest


def _count(home: Path, sql: str, **kw) -> int:
    return query(sql, home, **kw).table.column(0)[0].as_py()


def _snapshots(home: Path, table: str) -> list[int]:
    tbl = lake.catalog(home).load_table(f"{lake.NAMESPACE}.{table}")
    return [s.snapshot_id for s in tbl.snapshots()]


def test_every_table_is_partitioned_by_run_day_and_suite_not_run_id(tmp_path: Path) -> None:
    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    cat = lake.catalog(tmp_path)
    for table, schema in TABLES.items():
        tbl = cat.load_table(f"{lake.NAMESPACE}.{table}")
        names = [f.name for f in tbl.schema().fields]
        assert names[: len(schema.names)] == schema.names  # the same columns, lineage digests included
        spec = [(f.name, str(f.transform)) for f in tbl.spec().fields]
        expected = [("run_day", "day")] + ([("suite", "identity")] if "suite" in schema.names else [])
        assert spec == expected, table
    files = list((tmp_path / "warehouse" / "iceberg").rglob("*.parquet"))
    assert files and all("run_day=2026-11-30" in str(f) and "run_id=" not in str(f) for f in files)


def test_recuration_is_one_commit_per_table_idempotent_and_time_travels(tmp_path: Path) -> None:
    run_a, man_a = _stored_run(tmp_path, "run-a")
    run_b, man_b = _stored_run(tmp_path, "run-b")
    curate_run(run_a, tmp_path, man_a)
    first = query("SELECT count(*) FROM measurement_fact", tmp_path)
    assert first.table.column(0)[0].as_py() == 9
    at_a = first.snapshot_ids["measurement_fact"]
    commits_before = len(lake.catalog(tmp_path).load_table("benchrun.measurement_fact").metadata.metadata_log)
    curate_run(run_a, tmp_path, man_a)  # again: the same rows, not twice
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    assert len(tbl.metadata.metadata_log) == commits_before + 1  # one commit (a delete and an append in it)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9
    time.sleep(0.01)
    between = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.01)
    curate_run(run_b, tmp_path, man_b)
    now = query("SELECT count(*), count(DISTINCT run_id) FROM measurement_fact", tmp_path)
    assert now.table.to_pylist() == [{"count_star()": 18, "count(DISTINCT run_id)": 2}]
    assert now.snapshot_ids["measurement_fact"] != at_a
    # time travel: by a snapshot id, and by a time (the last commit at or before it, never half a commit)
    old = query("SELECT count(*) FROM measurement_fact", tmp_path, as_of=at_a)
    assert old.table.column(0)[0].as_py() == 9 and old.snapshot_ids["measurement_fact"] == at_a
    # a snapshot of one table reads the others as they were at its commit (the run's last table: all of run-a)
    cat = lake.catalog(tmp_path)
    last_of_a = max((cat.load_table(f"benchrun.{t}").snapshot_by_id(s).timestamp_ms, s)
                    for t, s in first.snapshot_ids.items() if s is not None)[1]
    assert _count(tmp_path, "SELECT count(DISTINCT run_id) FROM serving_request_fact", as_of=last_of_a) == 1
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact", as_of=between) == 9
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE run_id = 'run-b'", as_of=between) == 0
    with pytest.raises(BenchrunError, match="no table has that snapshot"):
        query("SELECT 1", tmp_path, as_of=12345)


def test_a_first_curation_appends_without_a_delete_and_a_second_replaces(tmp_path: Path) -> None:
    from benchrun.warehouse import laketx

    run_a, man_a = _stored_run(tmp_path, "run-a")
    run_b, man_b = _stored_run(tmp_path, "run-b")
    curate_run(run_a, tmp_path, man_a)
    seen = set(_snapshots(tmp_path, "measurement_fact"))

    def new_operations() -> list[str]:
        tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
        new = [s for s in tbl.snapshots() if s.snapshot_id not in seen]
        seen.update(s.snapshot_id for s in new)
        return [s.summary.operation.value for s in new]

    curate_run(run_b, tmp_path, man_b)  # a table with rows, a run it never had: append only
    assert new_operations() == ["append"]
    assert not laketx.first_curation(lake.catalog(tmp_path), "measurement_fact", "run-b")  # claimed
    curate_run(run_b, tmp_path, man_b)  # again: its rows are deleted and written once more
    assert "append" in (ops := new_operations()) and set(ops) - {"append"} <= {"delete", "overwrite"} and len(ops) == 2
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE run_id = 'run-b'") == 9
    # the transaction's metadata: built once per staged change, and it follows the changes
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    tx = laketx.Transaction(tbl)
    assert tx.table_metadata is tx.table_metadata
    tx.set_properties({"benchrun.test": "1"})
    assert tx.table_metadata.properties.get("benchrun.test") == "1"
    assert tbl.metadata.properties.get("benchrun.test") is None


@pytest.mark.slow
def test_cli_as_of_and_snapshot_ids_in_json(tmp_path: Path) -> None:
    run_a, man_a = _stored_run(tmp_path, "run-a")
    curate_run(run_a, tmp_path, man_a)
    at_a = query("SELECT 1", tmp_path).snapshot_ids["measurement_fact"]
    run_b, man_b = _stored_run(tmp_path, "run-b")
    curate_run(run_b, tmp_path, man_b)
    env = {**os.environ, "BENCHRUN_HOME": str(tmp_path), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "benchrun.entry", "query", "SELECT count(*) AS n FROM measurement_fact",
                          "--json", "--as-of", str(at_a)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["rows"] == [{"n": 9}] and doc["snapshot_ids"]["measurement_fact"] == str(at_a)  # a string: jq rounds
    bad = subprocess.run([sys.executable, "-m", "benchrun.entry", "query", "SELECT 1", "--as-of", "yesterday"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    # not a snapshot id nor a time: read as a tag name, which no table has; the error says how to make one
    assert bad.returncode != 0 and "--as-of yesterday: no table has that tag" in bad.stderr
    assert "benchrun tag-warehouse yesterday" in bad.stderr and "Traceback" not in bad.stderr


def test_second_reader_agrees_on_every_table(tmp_path: Path) -> None:
    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    cat = lake.catalog(tmp_path)
    for table, schema in TABLES.items():
        ours = query(f'SELECT * FROM "{table}"', tmp_path).table
        theirs = cat.load_table(f"{lake.NAMESPACE}.{table}").scan(selected_fields=tuple(schema.names)).to_arrow()
        if table in DIMENSIONS:  # the view is one row per key; the table holds each run's copy
            key = schema.names[0]
            theirs = theirs.group_by(key).aggregate([]).join(theirs, key).select(schema.names)
            seen: set = set()
            rows = []
            for row in theirs.to_pylist():
                if row[key] not in seen:
                    seen.add(row[key])
                    rows.append(row)
        else:
            rows = theirs.to_pylist()

        def canon(rs: list[dict]) -> list[str]:
            return sorted(json.dumps(r, sort_keys=True, default=str) for r in rs)

        assert ours.num_rows == len(rows), table
        assert canon(ours.to_pylist()) == canon(rows), table
        if table in PER_RUN:
            assert ours.num_rows == 2 * PER_RUN[table], table


def test_read_stays_confined_to_the_warehouse(tmp_path: Path) -> None:
    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    (tmp_path / "secret.txt").write_text("nope")
    for sql in (f"SELECT * FROM read_text('{tmp_path / 'secret.txt'}')",
                "SELECT * FROM iceberg_scan('/etc/passwd')",
                "SELECT * FROM read_parquet('http://127.0.0.1:9/x.parquet')"):
        with pytest.raises(BenchrunError, match="query failed"):
            query(sql, tmp_path)
    with pytest.raises(BenchrunError, match="refused"):
        query("LOAD iceberg", tmp_path)


_CURATE = r"""
import sys, pathlib
from benchrun.warehouse import curate_run
home = pathlib.Path(sys.argv[1])
curate_run(home / "runs" / sys.argv[2], home, None)
"""


def _curate_in_parallel(home: Path, runs: list[str], env: dict[str, str]) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", _CURATE, str(home), r], cwd=REPO, env=env, stderr=subprocess.PIPE)
             for r in runs]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-3000:]


def _assert_eight_runs_exact(home: Path, runs: list[str]) -> None:
    for table, n in PER_RUN.items():
        got = query(f'SELECT run_id, count(*) AS n FROM "{table}" GROUP BY run_id ORDER BY run_id', home).table.to_pylist()
        assert got == [{"run_id": r, "n": n} for r in sorted(runs)], table
    assert _count(home, "SELECT count(*) FROM software_version_dim") == 1  # shared by all eight runs


def _child_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), lake.FORMAT_ENV: "iceberg", **extra}


@pytest.mark.slow
def test_eight_processes_curate_eight_runs_into_one_sqlite_catalog(tmp_path: Path) -> None:
    runs = [f"run-{i}" for i in range(8)]
    for r in runs:
        _stored_run(tmp_path, r, in_status=True)
    _curate_in_parallel(tmp_path, runs, _child_env())
    _assert_eight_runs_exact(tmp_path, runs)


@pytest.mark.slow
def test_eight_processes_curating_one_new_run_at_once_write_it_once(tmp_path: Path) -> None:
    """Every writer races for the run's first-curation claim; the one that wins skips the delete, the
    rest delete and append: whatever the order, the run's rows are there exactly once."""
    _stored_run(tmp_path, "run-a", in_status=True)
    _curate_in_parallel(tmp_path, ["run-a"] * 8, _child_env())
    _assert_eight_runs_exact(tmp_path, ["run-a"])


@pytest.mark.slow
def test_eight_processes_curate_eight_runs_into_a_postgres_catalog(tmp_path: Path, pg_server, monkeypatch) -> None:
    db = f"iceberg_{os.getpid()}"
    pg_server.sql("postgres", f'CREATE DATABASE "{db}"')  # the name is ours, not data
    url = f"postgresql+psycopg2://{pg_server.user}@{pg_server.host}:{pg_server.port}/{db}"
    monkeypatch.setenv(lake.CATALOG_ENV, url)
    runs = [f"run-{i}" for i in range(8)]
    for r in runs:
        _stored_run(tmp_path, r, in_status=True)
    _curate_in_parallel(tmp_path, runs, _child_env(**{lake.CATALOG_ENV: url}))
    _assert_eight_runs_exact(tmp_path, runs)
    assert not (tmp_path / "warehouse" / lake.CATALOG_FILE).exists()  # the catalog is Postgres, not the home
    rows = pg_server.sql(db, "SELECT count(*) FROM iceberg_tables WHERE table_namespace = 'benchrun'")
    assert rows == [(len(TABLES),)]


_KILLED = r"""
import os, sys, pathlib, time
from pyiceberg.catalog.sql import SqlCatalog
from benchrun.warehouse import curate_run
real = SqlCatalog.commit_table
def commit_then_hang(self, table, requirements, updates):
    if table.name()[-1] == "measurement_fact":
        pathlib.Path(sys.argv[3]).write_text("in commit")  # data and manifests written, catalog not yet moved
        time.sleep(600)
    return real(self, table, requirements, updates)
SqlCatalog.commit_table = commit_then_hang
home = pathlib.Path(sys.argv[1])
curate_run(home / "runs" / sys.argv[2], home, None)
"""


def test_a_writer_killed_mid_commit_leaves_the_previous_snapshot(tmp_path: Path) -> None:
    run_a, man_a = _stored_run(tmp_path, "run-a")
    curate_run(run_a, tmp_path, man_a)
    before = _snapshots(tmp_path, "measurement_fact")
    _stored_run(tmp_path, "run-b", in_status=True)
    flag = tmp_path / "flag"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path), "run-b", str(flag)], cwd=REPO,
                            env=_child_env(), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flag.exists(), proc.stderr.read().decode()[-2000:] if proc.poll() is not None else "never reached"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    lake._CATALOGS.clear()
    assert _snapshots(tmp_path, "measurement_fact") == before
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE run_id = 'run-b'") == 0
    # tables committed before the kill hold run-b already; curating it again makes it whole, once
    curate_run(tmp_path / "runs" / "run-b", tmp_path, None)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 18
    assert _count(tmp_path, "SELECT count(*) FROM launch_fact WHERE run_id = 'run-b'") == 6


@pytest.mark.slow
def test_an_s3_location_on_the_loopback_s3_server(tmp_path: Path, s3_env: str, monkeypatch) -> None:  # noqa: F811
    import boto3

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="lake")
    monkeypatch.setenv(lake.LOCATION_ENV, "s3://lake/warehouse")
    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    keys = [o["Key"] for o in boto3.client("s3", endpoint_url=s3_env).list_objects_v2(Bucket="lake")["Contents"]]
    assert any(k.endswith(".parquet") and "measurement_fact/data/run_day=2026-11-30" in k for k in keys)
    assert not (tmp_path / "warehouse" / "iceberg").exists()
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 60
    with pytest.raises(BenchrunError, match="query failed"):  # other buckets stay out of reach
        query("SELECT * FROM read_parquet('s3://other/x.parquet')", tmp_path)
    # warehouse.duckdb's views (what the Dagster asset and a user's duckdb CLI read) are built
    # through the same store and endpoint, not against AWS's
    import duckdb

    from benchrun.warehouse.views import refresh_views

    db = refresh_views(tmp_path)
    with duckdb.connect(str(db), read_only=True) as con:
        assert "measurement_fact" in {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}


def test_bad_settings_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lake.FORMAT_ENV, "delta")
    with pytest.raises(BenchrunError, match=lake.FORMAT_ENV):
        lake.enabled()
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    monkeypatch.setenv(lake.LOCATION_ENV, "/somewhere")
    with pytest.raises(BenchrunError, match="s3://bucket/prefix"):
        lake.table_location(tmp_path)
    monkeypatch.delenv(lake.LOCATION_ENV)
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", "s3://bucket/state")
    with pytest.raises(BenchrunError, match="must be shared too"):  # a sqlite file per pod would diverge
        lake.catalog(tmp_path)
    monkeypatch.setenv(lake.CATALOG_ENV, "mysql://x")
    with pytest.raises(BenchrunError, match="postgresql"):
        lake.catalog_uri(tmp_path)


@pytest.mark.slow
def test_a_parquet_home_migrates_with_every_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lake.FORMAT_ENV, "parquet")
    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    before = {t: _count(tmp_path, f'SELECT count(*) FROM "{t}"') for t in TABLES}
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    done = migrate_parquet(tmp_path)
    assert done.counts["measurement_fact"] == (18, 18) and done.counts["serving_request_fact"] == (120, 120)
    assert not done.differ and not done.left_out
    after = {t: _count(tmp_path, f'SELECT count(*) FROM "{t}"') for t in TABLES}
    assert after == before
    again = migrate_parquet(tmp_path)  # again: nothing copied twice
    assert again.already["measurement_fact"] == 2 and again.counts["measurement_fact"] == (0, 0)
    assert {t: _count(tmp_path, f'SELECT count(*) FROM "{t}"') for t in TABLES} == before


def test_a_migration_never_puts_older_rows_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A home that used the tables before Iceberg was the default (no marker) keeps what they hold:
    a run curated again there, and a run retention deleted from them, stay as they are; the read-back
    counts are the tables' own."""
    from benchrun.warehouse import migrate

    monkeypatch.setenv(lake.FORMAT_ENV, "parquet")
    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    migrate_parquet(tmp_path)  # the earlier release's command: no marker
    run_a, man_a = _stored_run(tmp_path, "run-a", gflops=(99.0, 99.0, 99.0))
    curate_run(run_a, tmp_path, man_a)  # newer rows for run-a
    lake.delete_run(tmp_path, "measurement_fact", "run-b")  # removed on purpose
    monkeypatch.setattr(migrate, "_CHECKED", set())  # a new process of this release
    rows = query("SELECT run_id, value FROM measurement_fact WHERE metric = 'gflops' ORDER BY ALL", tmp_path).table
    assert rows.to_pylist() == [{"run_id": "run-a", "value": 99.0}] * 3  # no automatic copy over existing tables
    assert not (tmp_path / "warehouse" / migrate.MARKER).exists()
    done = migrate_parquet(tmp_path)  # and the command copies only what no table holds: run-b's measurements
    assert done.already["measurement_fact"] == 1 and done.counts["measurement_fact"] == (9, 9)
    values = query("SELECT run_id, value FROM measurement_fact WHERE metric = 'gflops' ORDER BY ALL", tmp_path)
    assert [r["value"] for r in values.table.to_pylist() if r["run_id"] == "run-a"] == [99.0] * 3
    monkeypatch.setattr(migrate, "commit_run",  # a commit that says it wrote the rows and landed nothing
                        lambda home, table, run_id, batches, started: lake.Commit(table, 60, None, 1, 0.0))
    lake.delete_run(tmp_path, "serving_request_fact", "run-b")
    assert migrate_parquet(tmp_path).differ == ["serving_request_fact"]  # read back, not taken from the writer


def test_a_parquet_home_is_migrated_once_on_first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Iceberg is the default: a home of an earlier release (the parquet layout) is copied into the
    tables by the first process that opens them, with the counts recorded, and only once."""
    from benchrun.warehouse import migrate

    monkeypatch.setenv(lake.FORMAT_ENV, "parquet")
    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    before = {t: _count(tmp_path, f'SELECT count(*) FROM "{t}"') for t in TABLES}
    monkeypatch.delenv(lake.FORMAT_ENV)  # the default, as after an upgrade: a new process
    assert lake.enabled()
    monkeypatch.setattr(migrate, "_CHECKED", set())
    assert {t: _count(tmp_path, f'SELECT count(*) FROM "{t}"') for t in TABLES} == before  # no command was run
    marker = json.loads((tmp_path / "warehouse" / migrate.MARKER).read_text())
    assert marker["tables"]["serving_request_fact"] == {"parquet_rows": 120, "iceberg_rows": 120,
                                                         "runs_already_in_the_table": 0}
    assert marker["left_out"] == []
    assert all(c["parquet_rows"] == c["iceberg_rows"] for c in marker["tables"].values())
    assert (tmp_path / "warehouse" / "measurement_fact" / "run_id=run-a" / "part.parquet").is_file()  # kept
    monkeypatch.setattr(migrate, "_CHECKED", set())  # another new process: the marker says it is done
    monkeypatch.setattr(migrate, "migrate_parquet", lambda home: pytest.fail("migrated twice"))
    lake._CATALOGS.clear()
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == before["measurement_fact"]
    run_c, man_c = _stored_run(tmp_path, "run-c")
    curate_run(run_c, tmp_path, man_c)  # new runs go to the tables only
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == before["measurement_fact"] + 9
    assert not (tmp_path / "warehouse" / "measurement_fact" / "run_id=run-c").exists()


def test_a_moved_home_is_refused_then_rebuilt_with_the_runs_only_parquet_held(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Iceberg names files by absolute path: a moved home is refused with the fix, and the rebuild
    keeps a run that only the migrated parquet layout still held (no run directory, nothing stored)."""
    import shutil

    from benchrun.warehouse import migrate
    from benchrun.warehouse.rebuild import rebuild_warehouse

    old, new = tmp_path / "old", tmp_path / "new"
    monkeypatch.setenv(lake.FORMAT_ENV, "parquet")
    run_a, man_a = _stored_run(old, "run-a", in_status=True)
    curate_run(run_a, old, man_a)
    run_b = make_run_dir(old, "run-b")
    curate_run(run_b, old, None)
    shutil.rmtree(run_b)  # run-b lives on in the parquet layout only
    monkeypatch.delenv(lake.FORMAT_ENV)
    monkeypatch.setattr(migrate, "_CHECKED", set())
    assert _count(old, "SELECT count(DISTINCT run_id) FROM measurement_fact") == 2  # migrated on first use
    shutil.move(str(old), str(new))
    lake._CATALOGS.clear()
    with pytest.raises(BenchrunError, match=f"written under {old}/warehouse/iceberg.*moved or copied"):
        query("SELECT 1 FROM measurement_fact", new)
    report = rebuild_warehouse(new)
    assert list(report.rebuilt) == ["run-a"] and not report.failed
    got = query("SELECT run_id, count(*) AS n FROM measurement_fact GROUP BY run_id ORDER BY run_id", new)
    assert got.table.to_pylist() == [{"run_id": "run-a", "n": 9}, {"run_id": "run-b", "n": 9}]
    assert json.loads((new / "warehouse" / migrate.MARKER).read_text())["tables"]["measurement_fact"]["iceberg_rows"] == 18


def test_compaction_and_expiry_keep_the_rows(tmp_path: Path) -> None:
    for run_id in ("run-a", "run-b", "run-c"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    rows = _count(tmp_path, "SELECT count(*) FROM serving_request_fact")
    old = query("SELECT 1", tmp_path).snapshot_ids["serving_request_fact"]
    assert lake.compact(tmp_path, "serving_request_fact") == (3, 1)  # three runs' files of one day and suite: one
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == rows == 180
    listed = lake.expire_snapshots(tmp_path, "serving_request_fact", dt.datetime.now(dt.timezone.utc), dry_run=True)
    assert old in listed and _snapshots(tmp_path, "serving_request_fact")  # a dry run keeps them
    assert lake.expire_snapshots(tmp_path, "serving_request_fact", dt.datetime.now(dt.timezone.utc)) == listed
    assert old not in _snapshots(tmp_path, "serving_request_fact")
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 180


def test_expiry_then_maintenance_removes_the_files_only_expired_snapshots_held(tmp_path: Path) -> None:
    """Found in review: pyiceberg's expiry deletes no file, so rebuilds piled files up forever and a deleted
    run's rows stayed on disk after `delete` and expiry. Maintenance now removes what no kept snapshot
    references (past a grace period), and nothing a kept or tagged snapshot still reads."""
    import pyarrow.parquet as pq

    from benchrun.runctl import delete_run

    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        for _ in range(3):  # rebuilt: each re-curation leaves the previous files behind
            curate_run(run_dir, tmp_path, manifest)
    lake.tag_tables(tmp_path, "kept-b")  # a tag keeps its snapshot's files (run-a's among them)
    delete_run("run-a", home=tmp_path)
    root = tmp_path / "warehouse" / "iceberg"

    def files_holding(run_id: str) -> list[Path]:
        return [p for p in root.rglob("*.parquet") if run_id in pq.ParquetFile(p).read(columns=["run_id"]).column(0).to_pylist()]

    assert files_holding("run-a")
    future = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
    dry = lake.maintain(tmp_path, "serving_request_fact", future, dry_run=True, grace=dt.timedelta(0))
    assert dry[3] > 0 and files_holding("run-a")  # a dry run counts, removes nothing
    lake.maintain(tmp_path, "serving_request_fact", future, grace=dt.timedelta(0))
    assert files_holding("run-a")  # the tag still reads them
    for table in lake.current_tables(tmp_path):
        tbl = lake.catalog(tmp_path).load_table(f"benchrun.{table}")
        if "kept-b" in tbl.metadata.refs:
            tbl.manage_snapshots().remove_tag("kept-b").commit()
    for table in TABLES:
        lake.maintain(tmp_path, table, future, grace=dt.timedelta(0))
    assert files_holding("run-a") == []  # before: the deleted run's rows still lay in its old files
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 60  # run-b's rows read whole
    tbl = lake.catalog(tmp_path).load_table("benchrun.serving_request_fact")
    assert tbl.scan().to_arrow().num_rows == 60
    live = {Path(t.file.file_path.removeprefix("file://")) for t in tbl.scan().plan_files()}
    assert set(root.glob("benchrun/serving_request_fact/data/**/*.parquet")) == live
    recent = lake.maintain(tmp_path, "serving_request_fact", future)  # the default grace: an hour
    assert recent[3] == 0


def test_a_compaction_that_loses_the_race_to_a_new_run_keeps_that_runs_rows(tmp_path: Path, monkeypatch) -> None:
    """A run curated into the day while its files are being compacted: the compaction's commit loses the
    race and is planned again on the new snapshot (pyiceberg's own retry would re-stage the overwrite)."""
    from pyiceberg.catalog.sql import SqlCatalog

    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    run_c, man_c = _stored_run(tmp_path, "run-c")
    real, raced = SqlCatalog.commit_table, []

    def commit_after_a_new_run(self, table, requirements, updates):
        if table.name()[-1] == "serving_request_fact" and not raced:
            raced.append(True)
            curate_run(run_c, tmp_path, man_c)  # lands first
        return real(self, table, requirements, updates)

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_after_a_new_run)
    lake.compact(tmp_path, "serving_request_fact")
    monkeypatch.setattr(SqlCatalog, "commit_table", real)
    assert raced
    got = query("SELECT run_id, count(*) AS n FROM serving_request_fact GROUP BY run_id ORDER BY run_id", tmp_path)
    assert got.table.to_pylist() == [{"run_id": r, "n": 60} for r in ("run-a", "run-b", "run-c")]


@pytest.mark.slow
def test_maintenance_asset_compacts_and_expires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from bench_assets.definitions import defs
    from bench_assets.warehouse_assets import warehouse_maintenance
    from resources.warehouse import WarehouseResource

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    assert defs.get_schedule_def("warehouse_maintenance_schedule").job_name == "warehouse_maintenance_job"
    # An entered instance: run after tests/test_schedules_cadences.py's storage-failure tick in one process,
    # Dagster's definitions load found a defs-state storage whose instance was gone ("Attempted to resolve
    # undefined DagsterInstance weakref") with an ephemeral instance that was never entered.
    with dg.instance_for_test() as instance:
        result = dg.materialize([warehouse_maintenance], resources={"warehouse": WarehouseResource()},
                                run_config={"ops": {"warehouse_maintenance": {"config": {"expire_days": 0}}}},
                                instance=instance)
    assert result.success
    md = result.asset_materializations_for_node("warehouse_maintenance")[0].metadata["tables"].value
    assert "| serving_request_fact | 2 | 1 |" in md
    assert lake.table_files(tmp_path, "serving_request_fact") == 1
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 120


def test_retention_is_iceberg_deletes_with_a_dry_run(tmp_path: Path) -> None:
    from benchrun.warehouse.retention import apply_retention, plan_retention
    from test_retention import _setup

    now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    _setup(tmp_path, now)
    plan = plan_retention(tmp_path, now)
    assert {p["run_id"] for p in plan.partitions} == {"run-old"}
    assert {p["table"] for p in plan.partitions} >= set(PER_RUN)
    assert all(p["path"].startswith("iceberg:benchrun.") for p in plan.partitions)
    snaps = _snapshots(tmp_path, "measurement_fact")
    assert _count(tmp_path, "SELECT count(DISTINCT run_id) FROM measurement_fact") == 3  # the dry run removed nothing
    assert _snapshots(tmp_path, "measurement_fact") == snaps
    apply_retention(tmp_path, plan)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE run_id = 'run-old'") == 0
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 18
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 120
    old = query("SELECT 1", tmp_path).snapshot_ids["measurement_fact"]
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact", as_of=snaps[-1]) == 27  # still in history
    assert old != snaps[-1]
    assert plan_retention(tmp_path, now).partitions == []


@pytest.mark.slow
def test_a_tables_history_stays_bounded_and_its_manifests_merge(tmp_path: Path, monkeypatch) -> None:
    """Commit cost grew with history (every snapshot and manifest rewritten per commit): new tables
    merge manifests and drop superseded metadata files, and a writer expires the oldest untagged
    snapshots past BENCHRUN_LAKE_MAX_SNAPSHOTS; a tagged snapshot (a decision's) is kept."""
    from benchrun.warehouse.writer import rows_to_table

    monkeypatch.setenv(lake.MAX_SNAPSHOTS_ENV, "10")
    started = dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc)

    def rows(run_id: str):
        return rows_to_table("benchmark_run_fact", [dict(run_id=run_id, name="n", phase="Succeeded",
                                                         started_utc=started, selected_scheduler_path="local")])

    lake.commit_run(tmp_path, "benchmark_run_fact", "run-0000", [rows("run-0000")], started)
    tbl = lake.load_or_create(lake.catalog(tmp_path), "benchmark_run_fact")
    assert {k: tbl.properties.get(k) for k in lake.TABLE_PROPERTIES if k != "format-version"} == \
        {k: v for k, v in lake.TABLE_PROPERTIES.items() if k != "format-version"}
    first = tbl.current_snapshot().snapshot_id
    tbl.manage_snapshots().create_tag(first, "decision-1").commit()
    for i in range(1, 45):
        lake.commit_run(tmp_path, "benchmark_run_fact", f"run-{i:04d}", [rows(f"run-{i:04d}")], started)
    kept = _snapshots(tmp_path, "benchmark_run_fact")
    assert len(kept) <= 12 and first in kept  # 10 + a batch of 1, and the tagged one
    assert _count(tmp_path, "SELECT count(*) FROM benchmark_run_fact") == 45  # rows are never expired
    tbl = lake.load_or_create(lake.catalog(tmp_path), "benchmark_run_fact")
    manifests = tbl.current_snapshot().manifests(tbl.io)
    assert len(manifests) < 32  # merged past 32: a fast append keeps one manifest per commit (45)
    monkeypatch.setenv(lake.MAX_SNAPSHOTS_ENV, "3")
    with pytest.raises(BenchrunError, match="BENCHRUN_LAKE_MAX_SNAPSHOTS"):
        lake.max_snapshots()


def test_maintenance_brings_an_older_table_to_the_properties(tmp_path: Path) -> None:
    run_dir, manifest = _stored_run(tmp_path, "run-a")
    curate_run(run_dir, tmp_path, manifest)
    tbl = lake.load_or_create(lake.catalog(tmp_path), "measurement_fact")
    with tbl.transaction() as tx:  # as a table made before the properties existed
        tx.remove_properties("commit.manifest-merge.enabled", "write.metadata.delete-after-commit.enabled")
    assert set(lake.apply_table_properties(tmp_path, "measurement_fact")) == {
        "commit.manifest-merge.enabled", "write.metadata.delete-after-commit.enabled"}
    assert lake.apply_table_properties(tmp_path, "measurement_fact") == {}


def _one_row(run_id: str, value: float) -> "pa.Table":
    import pyarrow as pa

    schema = TABLES["measurement_fact"]
    cols = {f.name: pa.nulls(1, f.type) for f in schema}
    cols.update(run_id=pa.array([run_id]), suite=pa.array(["s"]), metric=pa.array(["m"]), value=pa.array([value]))
    return pa.table(cols, schema=schema)


@pytest.mark.slow
def test_time_travel_past_the_metadata_log_and_after_expiry(tmp_path: Path) -> None:
    started = dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc)
    for i in range(5):
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], started)
    lake.commit_run(tmp_path, "measurement_fact", "r2", [_one_row("r2", 20.0)], started)  # a delete and an append
    time.sleep(0.005)
    after_six = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.005)
    for i in range(5, 106):
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], started)
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    # the metadata log holds only the last commits (20 with benchrun's table properties, pyiceberg's
    # default 100): it no longer reaches back to commit 6
    assert len(tbl.metadata.metadata_log) == int(lake.TABLE_PROPERTIES["write.metadata.previous-versions-max"])
    assert min(e.timestamp_ms for e in tbl.metadata.metadata_log) > after_six.timestamp() * 1000
    sql = ("SELECT count(*) AS n, sum(value) AS s, max(CASE WHEN run_id = 'r2' THEN value END) AS r2 "
           "FROM measurement_fact")
    assert query(sql, tmp_path, as_of=after_six).table.to_pylist() == [{"n": 5, "s": 0 + 1 + 20 + 3 + 4, "r2": 20.0}]
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 106
    # a time inside commit 6 (its delete's snapshot, before its append) reads commit 5: never half a commit
    snaps = list(tbl.snapshots())
    delete, append = snaps[5], snaps[6]
    assert delete.summary.operation.value in ("delete", "overwrite") and append.parent_snapshot_id == delete.snapshot_id
    assert append.timestamp_ms > delete.timestamp_ms
    inside = dt.datetime.fromtimestamp(delete.timestamp_ms / 1000, dt.timezone.utc)
    assert query(sql, tmp_path, as_of=inside).table.to_pylist() == [{"n": 5, "s": 10.0, "r2": 2.0}]
    with pytest.raises(BenchrunError, match="before the warehouse's first commit"):
        query("SELECT 1", tmp_path, as_of=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))
    # expire the first 51 snapshots (commit 50 is the earliest kept): a time before it is an error naming
    # the table and the earliest time available, never an empty view
    keep_from = snaps[51]
    kept = dt.datetime.fromtimestamp(keep_from.timestamp_ms / 1000, dt.timezone.utc)
    lake.expire_snapshots(tmp_path, "measurement_fact", kept)
    earliest = re.escape(kept.isoformat(timespec="milliseconds"))
    named = f"measurement_fact.*earliest time available for measurement_fact is {earliest}"
    with pytest.raises(BenchrunError, match=named):
        query(sql, tmp_path, as_of=after_six)
    later = dt.datetime.fromtimestamp((keep_from.timestamp_ms + 1) / 1000, dt.timezone.utc)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact", as_of=later) == 50


def test_delete_removes_the_runs_rows_from_every_iceberg_table(tmp_path: Path) -> None:
    from benchrun.runctl import delete_run

    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    had = {t for t in TABLES if "run-a" in lake.run_ids(tmp_path, t)}
    assert had >= set(PER_RUN)
    out = delete_run("run-a", home=tmp_path)
    assert any("Iceberg" in line and "measurement_fact" in line for line in out.removed), out.removed
    for table in TABLES:
        assert "run-a" not in lake.run_ids(tmp_path, table), table
        if table in had:
            assert "run-b" in lake.run_ids(tmp_path, table), table
    for table, n in PER_RUN.items():
        assert query(f'SELECT run_id, count(*) AS n FROM "{table}" GROUP BY run_id', tmp_path).table.to_pylist() \
            == [{"run_id": "run-b", "n": n}], table
    assert not (tmp_path / "runs" / "run-a").exists()


def test_a_run_rerun_on_a_later_day_replaces_its_rows_and_delete_removes_them(tmp_path: Path, monkeypatch) -> None:
    """Re-materializing a run sets its latest start to now; its rows stay filed under its first start's
    day, so the re-curation replaces them (before: a re-run after midnight doubled every table, and
    `delete` then left the first copy behind)."""
    from benchrun import rundir as rundir_mod
    from benchrun.runctl import delete_run

    manifests = {}
    for run_id in ("run-a", "run-b"):
        run_dir, manifests[run_id] = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifests[run_id])
    rd = rundir_mod.RunDir(tmp_path, "run-a")
    monkeypatch.setattr(rundir_mod, "utc_now", lambda: "2026-12-01T00:10:00+00:00")  # the next day
    rd.set_phase("Running")
    rd.set_phase("Succeeded")
    status = rd.read_status()
    assert status["started_utc"] == "2026-12-01T00:10:00+00:00"
    assert status["first_started_utc"] == "2026-11-30T08:59:10+00:00"  # the start it was curated with
    curate_run(rd.path, tmp_path, manifests["run-a"])
    for table, n in PER_RUN.items():
        got = query(f'SELECT run_id, count(*) AS n FROM "{table}" GROUP BY run_id ORDER BY run_id', tmp_path)
        assert got.table.to_pylist() == [{"run_id": "run-a", "n": n}, {"run_id": "run-b", "n": n}], table
    assert query("SELECT started_utc FROM benchmark_run_fact WHERE run_id = 'run-a'", tmp_path).table.to_pylist() \
        == [{"started_utc": dt.datetime(2026, 12, 1, 0, 10, tzinfo=dt.timezone.utc)}]  # the latest attempt's
    rd.set_phase("Running")  # a third attempt keeps the first start
    assert rd.read_status()["first_started_utc"] == "2026-11-30T08:59:10+00:00"
    rd.set_phase("Succeeded")
    delete_run("run-a", home=tmp_path)
    for table in TABLES:
        assert "run-a" not in lake.run_ids(tmp_path, table), table


def test_the_runs_own_row_is_committed_last_whatever_the_turn(tmp_path: Path, monkeypatch) -> None:
    """A curation killed part-way leaves facts without their benchmark_run_fact row (before: the tables'
    turn could commit the run row first, and a half-curated run read as curated)."""
    from benchrun.warehouse import curate as curate_mod

    order: list[tuple[str, str]] = []
    real = curate_mod.store_rows
    monkeypatch.setattr(curate_mod, "store_rows", lambda home, table, run_id, *a, **k: (
        order.append((run_id, table)), real(home, table, run_id, *a, **k))[1])
    runs = [f"run-{c}" for c in "abcdefgh"]
    for run_id in runs:
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    firsts = {next(t for r, t in order if r == run_id) for run_id in runs}
    assert len(firsts) > 1  # the turn still spreads concurrent runs over the tables
    for run_id in runs:
        assert [t for r, t in order if r == run_id][-1] == "benchmark_run_fact", run_id


def test_a_damaged_data_file_is_left_out_with_a_note(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from pyiceberg.expressions import EqualTo

    for run_id, gflops in (("run-a", (10.0, 12.0, 11.0)), ("run-b", (20.0, 22.0, 21.0))):
        run_dir, manifest = _stored_run(tmp_path, run_id, gflops=gflops)
        curate_run(run_dir, tmp_path, manifest)
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    damaged = sorted(t.file.file_path for t in tbl.scan(row_filter=EqualTo("run_id", "run-a")).plan_files())[0]
    rest = [pq.ParquetFile(t.file.file_path).read(columns=["value"]).column("value").to_pylist()
            for t in tbl.scan().plan_files() if t.file.file_path != damaged]
    n, total = sum(len(v) for v in rest), sum(x for v in rest for x in v if x is not None)
    assert 9 <= n < 18  # run-b's rows and those of run-a's other files
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 18  # footers read (and remembered) whole
    path = Path(damaged.removeprefix("file://"))
    path.write_bytes(path.read_bytes()[:100])  # truncated: no footer
    with pytest.raises(Exception, match="magic bytes|Parquet|parquet"):  # what every query hit before
        tbl.scan().to_arrow()
    run_c, man_c = _stored_run(tmp_path, "run-c", gflops=(1.0, 1.0, 1.0))
    curate_run(run_c, tmp_path, man_c)  # a new commit: the views are rebuilt, the damage is seen by its size
    c_rows = lake.catalog(tmp_path).load_table("benchrun.measurement_fact").scan(
        row_filter=EqualTo("run_id", "run-c")).to_arrow().column("value").to_pylist()  # the damaged file is not read
    n, total = n + len(c_rows), total + sum(x for x in c_rows if x is not None)
    got = query("SELECT count(*) AS n, sum(value) AS s FROM measurement_fact", tmp_path)
    assert got.table.to_pylist() == [{"n": n, "s": pytest.approx(total)}]
    assert any(damaged in note and "left out of measurement_fact" in note for note in got.notes), got.notes
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 180  # other tables are whole


def test_rebuild_takes_a_damaged_data_file_out_and_writes_its_runs_again(tmp_path: Path, monkeypatch) -> None:
    """Found in review: after a data file was cut short, `rebuild-warehouse` (the fix the query's note
    gives) and `benchrun delete` failed with pyarrow's "magic bytes not found", naming no file. Run ids
    longer than Iceberg's 16-character bounds: a delete cannot tell from a file's metrics that every row
    is the run's, so it reads the file."""
    from pyiceberg.expressions import EqualTo
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.runctl import delete_run

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    a, b, c = (f"local-canary-20261206-{x}" for x in "abc")
    for run_id in (a, b, c):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)

    def damage(run_id: str) -> str:
        tbl = lake.catalog(tmp_path).load_table("benchrun.serving_request_fact")
        found = sorted(t.file.file_path for t in tbl.scan(row_filter=EqualTo("run_id", run_id)).plan_files())[0]
        path = Path(found.removeprefix("file://"))
        path.write_bytes(path.read_bytes()[:100])
        return found

    damaged = damage(a)
    out = CliRunner().invoke(app, ["rebuild-warehouse", c])  # before: ArrowInvalid, no file named
    assert out.exit_code == 0, out.output
    assert f"damaged data file {damaged}" in out.output and "taken out of the table" in out.output
    assert f"rebuilt {a}" in out.output  # the run the damaged file held, though only c was named
    got = query("SELECT run_id, count(*) AS n FROM serving_request_fact GROUP BY run_id ORDER BY run_id", tmp_path)
    assert got.table.to_pylist() == [{"run_id": r, "n": 60} for r in (a, b, c)] and not got.notes
    damaged = damage(b)
    with pytest.raises(BenchrunError, match=rf"serving_request_fact: a data file of run {b}'s day cannot be read.*"
                                            r"rebuild-warehouse"):
        delete_run(b, home=tmp_path)  # before: ArrowInvalid
    out = CliRunner().invoke(app, ["rebuild-warehouse"])
    assert out.exit_code == 0 and f"damaged data file {damaged}" in out.output and f"skipped {b}" in out.output, out.output
    delete_run(b, home=tmp_path)  # the delete, run again, finishes
    for table in TABLES:
        assert b not in lake.run_ids(tmp_path, table), table
    assert _count(tmp_path, "SELECT count(*) FROM serving_request_fact") == 120


def test_a_tagged_decision_reads_the_same_numbers_after_its_snapshots_would_have_expired(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`benchrun tag-warehouse NAME` names every table's current snapshot; `--as-of NAME` reads
    exactly those later, after the writers' snapshot bound and the maintenance expiry have removed
    every untagged snapshot of that time; a taken name is refused unless --force."""
    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.setenv(lake.MAX_SNAPSHOTS_ENV, "10")
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    started = dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc)
    for i in range(3):
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], started)
    runner = CliRunner()
    done = runner.invoke(app, ["tag-warehouse", "decided-1", "--json"])
    assert done.exit_code == 0, done.output
    tagged = json.loads(done.output)["snapshots"]
    assert list(tagged) == ["measurement_fact"]
    for i in range(3, 40):  # far past the bound of 10 kept snapshots
        lake.commit_run(tmp_path, "measurement_fact", f"r{i}", [_one_row(f"r{i}", float(i))], started)
    lake.maintain(tmp_path, "measurement_fact", dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1))
    tbl = lake.catalog(tmp_path).load_table("benchrun.measurement_fact")
    kept = {s.snapshot_id for s in tbl.snapshots()}
    assert int(tagged["measurement_fact"]) in kept and len(kept) <= 3  # the tag's, the current one
    sql = "SELECT count(*) AS n, sum(value) AS s FROM measurement_fact"
    assert query(sql, tmp_path, as_of=lakeviews.parse_as_of("decided-1")).table.to_pylist() == [{"n": 3, "s": 3.0}]
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 40
    out = runner.invoke(app, ["query", "--as-of", "decided-1", "--json", sql])
    assert out.exit_code == 0 and '"n": 3' in out.output, out.output
    # a taken name is refused (exit 1, naming the fix); --force moves it to the current snapshots
    again = runner.invoke(app, ["tag-warehouse", "decided-1"])
    assert again.exit_code != 0 and "--force" in again.output + str(again.exception), again.output
    assert runner.invoke(app, ["tag-warehouse", "decided-1", "--force"]).exit_code == 0
    assert query(sql, tmp_path, as_of=lakeviews.parse_as_of("decided-1")).table.to_pylist()[0]["n"] == 40
    with pytest.raises(BenchrunError, match="no table has that tag"):
        query(sql, tmp_path, as_of=lakeviews.parse_as_of("never-made"))
    with pytest.raises(BenchrunError, match="a letter, then"):
        lake.tag_tables(tmp_path, "main")
    # --as-of main suggested `tag-warehouse main`, which is refused just above: it says what main is
    with pytest.raises(BenchrunError, match="--as-of main: main is the warehouse as it is now") as err:
        lakeviews.parse_as_of("main")
    assert "tag-warehouse" not in str(err.value)
    bad = runner.invoke(app, ["query", "--as-of", "2026-13-40", sql])
    assert bad.exit_code != 0 and "tag-warehouse" in bad.output + str(bad.exception)


def test_the_first_curation_claim_survives_a_catalog_database_made_anew(tmp_path: Path) -> None:
    """The claim table is made once per database: a catalog whose sqlite file was removed and made again
    under the same path (same URL, same process) gets it again instead of failing the curation."""
    from benchrun.warehouse import laketx

    run_a, man_a = _stored_run(tmp_path, "run-a")
    curate_run(run_a, tmp_path, man_a)
    cat = lake.catalog(tmp_path)
    cat.engine.dispose()
    (tmp_path / "warehouse" / lake.CATALOG_FILE).unlink()
    lake._CATALOGS.clear()
    fresh = lake.catalog(tmp_path)
    curate_run(run_a, tmp_path, man_a)  # a new database: the tables and their claims made again
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9
    assert not laketx.first_curation(fresh, "measurement_fact", "run-a")


def test_a_table_from_before_the_claims_keeps_its_deletes(tmp_path: Path) -> None:
    """Tables made before writers claimed their runs hold rows of runs nobody claimed: curating such a
    run again must still delete its rows first, not append beside them."""
    from sqlalchemy import text

    from benchrun.warehouse import laketx

    run_a, man_a = _stored_run(tmp_path, "run-a")
    curate_run(run_a, tmp_path, man_a)
    with lake.catalog(tmp_path).engine.begin() as con:  # as the tables of an older benchrun: no claims at all
        con.execute(text(f"DELETE FROM {laketx.MARKER_TABLE}"))
    curate_run(run_a, tmp_path, man_a)
    for table, n in PER_RUN.items():
        assert _count(tmp_path, f'SELECT count(*) FROM "{table}"') == n, table
    # maintenance claims what such a table holds: then a new run appends without the delete, an old one
    # is still replaced
    cat = lake.catalog(tmp_path)
    with cat.engine.begin() as con:  # no claims again: run-a is held and unclaimed
        con.execute(text(f"DELETE FROM {laketx.MARKER_TABLE}"))
    assert not laketx.first_curation(cat, "measurement_fact", "run-new")  # claims not complete yet
    lake.maintain(tmp_path, "measurement_fact", dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1))
    assert laketx.first_curation(cat, "measurement_fact", "run-newer")
    curate_run(run_a, tmp_path, man_a)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 9


def test_rebuilding_a_run_from_its_directory_or_the_store_never_doubles_its_rows(bench_home: Path) -> None:
    """From the store a run's status (its start) is not there: curation replaced the rows of an
    unknown day only, and the copy curated before kept its own — 3 measurement rows became 6."""
    import shutil

    from pyiceberg.expressions import EqualTo

    from benchrun.stats.synthetic import make_run
    from benchrun.warehouse.rebuild import rebuild_warehouse

    rd = make_run(bench_home, "run-a", {("s", "c", "tps"): ([1.0, 2.0, 3.0], "tok/s", "higher")},
                  created_utc="2026-01-05T10:00:00Z")
    curate_run(rd, bench_home)

    def counts() -> dict[str, int]:
        cat = lake.catalog(bench_home)
        return {t: len(lake.load_or_create(cat, t).scan(row_filter=EqualTo("run_id", "run-a")).to_arrow())
                for t in ("measurement_fact", "benchmark_run_fact")}

    want = {"measurement_fact": 3, "benchmark_run_fact": 1}
    assert counts() == want
    assert not rebuild_warehouse(bench_home, ["run-a"]).failed and counts() == want
    shutil.rmtree(rd)  # the run directory is gone; the store still has the run
    for _ in range(2):
        report = rebuild_warehouse(bench_home, ["run-a"])
        assert not report.failed and "no run directory" in report.source["run-a"] and counts() == want


@pytest.mark.slow
def test_a_first_use_migration_that_stopped_half_way_is_finished_by_the_next_use(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first commit the tables existed, so the next use skipped the migration (saying so
    only at info level) and every query read part of the layout: 40 launches, 0 measurements."""
    from benchrun.warehouse import migrate

    monkeypatch.setenv(lake.FORMAT_ENV, "parquet")
    for run_id in ("run-a", "run-b"):
        run_dir, manifest = _stored_run(tmp_path, run_id)
        curate_run(run_dir, tmp_path, manifest)
    before = {t: _count(tmp_path, f'SELECT count(*) FROM "{t}"') for t in TABLES}
    (tmp_path / "warehouse" / "measurement_fact" / "run_id=Old_Run").mkdir()  # a partition no run id names
    import shutil

    shutil.copy(tmp_path / "warehouse" / "measurement_fact" / "run_id=run-a" / "part.parquet",
                tmp_path / "warehouse" / "measurement_fact" / "run_id=Old_Run" / "part.parquet")
    monkeypatch.delenv(lake.FORMAT_ENV)
    real, calls = migrate.commit_run, []

    def dies_after_two(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process stops between commits
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(migrate, "commit_run", dies_after_two)
    monkeypatch.setattr(migrate, "_CHECKED", set())
    with pytest.raises(KeyboardInterrupt):
        migrate.migrate_on_first_use(tmp_path)
    assert len(calls) == 2 and not (tmp_path / "warehouse" / migrate.MARKER).exists()
    monkeypatch.setattr(migrate, "commit_run", real)
    monkeypatch.setattr(migrate, "_CHECKED", set())  # the next process
    lake._CATALOGS.clear()
    assert {t: _count(tmp_path, f'SELECT count(*) FROM "{t}"') for t in TABLES} == before
    marker = json.loads((tmp_path / "warehouse" / migrate.MARKER).read_text())
    assert not (tmp_path / "warehouse" / migrate.IN_PROGRESS).exists()
    [note] = marker["left_out"]
    assert "run_id=Old_Run: 'Old_Run' is not a valid run id" in note and "rename the directory" in note
