"""rebuild-warehouse never leaves a run without rows (one commit per table replaces them), never writes
back a run `benchrun delete` or retention removed, and a retention pass stopped half-way is finished
by the next one."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyiceberg.expressions import EqualTo
from typer.testing import CliRunner

from benchrun.warehouse import TABLES, curate_run, lake
from benchrun.warehouse.rebuild import rebuild_warehouse
from benchrun.warehouse.retention import apply_retention, plan_retention
from test_warehouse_iceberg import _stored_run, iceberg  # noqa: F401 (iceberg: the autouse fixture)


def _rows(home: Path, run_id: str) -> dict[str, int]:
    cat = lake.catalog(home)
    return {t: len(lake.load_or_create(cat, t).scan(row_filter=EqualTo("run_id", run_id)).to_arrow()) for t in TABLES}


def _curated(home: Path, *run_ids: str, **kw) -> dict[str, dict[str, int]]:
    for run_id in run_ids:
        run_dir, manifest = _stored_run(home, run_id, in_status=True, **kw)
        curate_run(run_dir, home, manifest)
    return {r: _rows(home, r) for r in run_ids}


def _stored_as_it_is(home: Path, run_id: str) -> None:
    """The run directory stored again as it is now, its status naming that evidence: damaged before it
    was stored (a file damaged only in the directory is curated from the stored copy instead)."""
    import json

    from benchrun.store import open_store

    run_dir = home / "runs" / run_id
    manifest = open_store(None, home).put_run_dir(run_dir, run_id, exclude=("status.json",))
    status = json.loads((run_dir / "status.json").read_text())
    (run_dir / "status.json").write_text(json.dumps({**status, "artifact_manifest_digest": manifest.digest}))


def test_a_rebuild_whose_source_does_not_read_leaves_the_runs_rows(tmp_path: Path) -> None:
    """It deleted the run's rows of every table first (12 commits), then curation failed on the truncated
    environment: measurement_fact 720 rows -> 0, benchmark_run_fact 1 -> 0."""
    before = _curated(tmp_path, "run-a")["run-a"]
    assert before["measurement_fact"] and before["benchmark_run_fact"] == 1
    (tmp_path / "runs" / "run-a" / "structured" / "run-a_environment.json").write_text('{"truncated')
    _stored_as_it_is(tmp_path, "run-a")
    report = rebuild_warehouse(tmp_path, ["run-a"])
    assert "run-a_environment.json" in report.failed["run-a"] and not report.rebuilt
    assert _rows(tmp_path, "run-a") == before


def test_a_rebuild_killed_between_tables_leaves_each_table_old_or_new_rows(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Each table's commit deletes the run's rows (of every day) and appends the new ones together: a
    rebuild stopped after three commits leaves no table without the run's rows."""
    before = _curated(tmp_path, "run-a")["run-a"]
    commit = lake.commit_run
    done: list[str] = []

    def dies_after_three(home, table, run_id, batches, started, **kw):
        if len(done) == 3:
            raise KeyboardInterrupt("killed")  # not a BenchrunError: the rebuild stops here, as when killed
        done.append(table)
        return commit(home, table, run_id, batches, started, **kw)

    monkeypatch.setattr(lake, "commit_run", dies_after_three)
    with pytest.raises(KeyboardInterrupt):
        rebuild_warehouse(tmp_path, ["run-a"])
    assert len(done) == 3
    assert _rows(tmp_path, "run-a") == before  # the rows are the same: old in 9 tables, new in 3


def test_an_interrupted_retention_is_finished_by_the_next_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmark_run_fact, what the plan ages runs from, was deleted second: a pass stopped after it left
    the run's rows in the other tables and its raw objects, and no later plan found the run again."""
    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    _curated(tmp_path, "run-old", finished_utc="2023-11-30T09:00:00+00:00")
    new = _curated(tmp_path, "run-new", finished_utc="2026-11-30T09:00:00+00:00")["run-new"]
    plan = plan_retention(tmp_path, now)
    held = {p["table"] for p in plan.partitions}
    assert "benchmark_run_fact" in held and len(held) > 3 and plan.objects
    delete = lake.delete_run
    calls: list[str] = []

    def fails_on_the_third(home, table, run_id):
        calls.append(table)
        if len(calls) == 3:
            raise RuntimeError("catalog went away")
        return delete(home, table, run_id)

    monkeypatch.setattr(lake, "delete_run", fails_on_the_third)
    with pytest.raises(RuntimeError):
        apply_retention(tmp_path, plan)
    monkeypatch.setattr(lake, "delete_run", delete)
    again = plan_retention(tmp_path, now)
    assert {p["run_id"] for p in again.partitions} == {"run-old"}
    assert {p["table"] for p in again.partitions} == held - set(calls[:2])
    apply_retention(tmp_path, again)
    assert set(_rows(tmp_path, "run-old").values()) == {0}
    assert _rows(tmp_path, "run-new") == new
    assert not plan_retention(tmp_path, now).partitions
    # a home an earlier release's pass left so: the rows it cannot age are named, with the repair
    lake.delete_run(tmp_path, "benchmark_run_fact", "run-new")
    notes = plan_retention(tmp_path, now).notes
    assert any(n.startswith("run run-new: rows in the warehouse but none in benchmark_run_fact") and
               "rebuild-warehouse run-new" in n for n in notes), notes


def test_rebuild_skips_runs_retention_or_delete_removed(bench_home: Path) -> None:
    """rebuild-warehouse wrote back the run retention had removed (its directory is still there), and
    once the run was deleted too it failed on every rebuild: `stored object is missing`."""
    from benchrun.cli import app
    from benchrun.runctl import delete_run

    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    _curated(bench_home, "run-old", finished_utc="2023-11-30T09:00:00+00:00")
    _curated(bench_home, "run-new", "run-gone")
    apply_retention(bench_home, plan_retention(bench_home, now))
    delete_run("run-gone", home=bench_home)
    report = rebuild_warehouse(bench_home)
    assert list(report.rebuilt) == ["run-new"] and not report.failed
    assert "removed by retention" in report.skipped["run-old"]
    assert "removed by `benchrun delete`" in report.skipped["run-gone"]
    assert (bench_home / "warehouse" / "_deleted" / "run-gone.json").is_file()
    assert set(_rows(bench_home, "run-old").values()) == set(_rows(bench_home, "run-gone").values()) == {0}
    delete_run("run-old", home=bench_home)  # both: its directory gone, its raw objects too
    out = CliRunner().invoke(app, ["rebuild-warehouse", "run-old", "run-gone"])
    assert out.exit_code == 0, out.output + str(out.exception)
    assert "skipped run-old: removed by" in out.output and "skipped run-gone: removed by" in out.output
    assert "0 run(s) rebuilt, 0 failed, 2 skipped" in out.output
    assert set(_rows(bench_home, "run-old").values()) == {0}


def test_a_run_made_after_its_ids_tombstone_is_rebuilt(tmp_path: Path) -> None:
    """The tombstone is the deleted run's: a run created later under the same id is curated as any other."""
    from benchrun.warehouse.removed import record_deleted, removed_runs

    with pytest.raises(Exception, match="not valid"):
        record_deleted(tmp_path, "../escape")
    record_deleted(tmp_path, "run-a", now=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    assert "run-a" in removed_runs(tmp_path)
    rows = _curated(tmp_path, "run-a")["run-a"]  # created 2026-11-30
    report = rebuild_warehouse(tmp_path)
    assert list(report.rebuilt) == ["run-a"] and not report.skipped and _rows(tmp_path, "run-a") == rows


def test_a_damaged_requests_file_fails_its_run_only_and_leaves_its_rows(tmp_path: Path) -> None:
    """A truncated raw/*_requests.parquet raised pyarrow's ArrowInvalid out of rebuild-warehouse (a
    traceback; the runs after it were not rebuilt), and only once the tables before serving_request_fact
    in the run's order had been committed. Now the streamed files' footers are read before the first
    commit: the run fails naming the file, its rows stay in every table, the other runs are rebuilt."""
    before = _curated(tmp_path, "run-a", "run-b")
    damaged = sorted((tmp_path / "runs" / "run-a" / "raw").glob("*_requests.parquet"))[-1]
    damaged.write_bytes(damaged.read_bytes()[:100])  # truncated: no footer
    _stored_as_it_is(tmp_path, "run-a")
    report = rebuild_warehouse(tmp_path, ["run-a", "run-b"])
    assert damaged.name in report.failed["run-a"] and "does not read" in report.failed["run-a"]
    assert list(report.rebuilt) == ["run-b"]
    assert _rows(tmp_path, "run-a") == before["run-a"] and _rows(tmp_path, "run-b") == before["run-b"]


def test_a_requests_file_that_fails_mid_stream_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Damage past the footer shows only while the batches stream: a BenchrunError naming the file,
    not pyarrow's error, so the rebuild reports the run and goes on."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _curated(tmp_path, "run-a")

    def broken(self, *a, **kw):
        raise pa.ArrowInvalid("Couldn't deserialize thrift: page header damaged")
        yield  # a generator, as iter_batches is

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", broken)
    report = rebuild_warehouse(tmp_path, ["run-a"])
    assert "_requests.parquet" in report.failed["run-a"] and "page header damaged" in report.failed["run-a"]


def test_a_rebuild_leaves_a_run_that_is_still_going_to_its_own_process(tmp_path: Path) -> None:
    """`rebuild-warehouse` with no run ids, while another run was mid-suite, curated that live run's
    partial results (52 rows, phase Running) into the warehouse."""
    from benchrun.liveness import beat

    _curated(tmp_path, "run-a")
    run_dir, _ = _stored_run(tmp_path, "run-live")
    status = run_dir / "status.json"
    import json

    status.write_text(json.dumps({**json.loads(status.read_text()), "phase": "Running"}))
    beat(tmp_path, "run-live")  # this process claims it, as `benchrun run` does
    report = rebuild_warehouse(tmp_path)
    assert "run-a" in report.rebuilt and "run-live" not in report.rebuilt
    assert report.skipped["run-live"].startswith("still Running: pid ")
    assert _rows(tmp_path, "run-live")["measurement_fact"] == 0


def test_a_run_canceled_before_it_was_sealed_is_not_curated_by_a_rebuild(tmp_path: Path) -> None:
    """New-user trial: `benchrun playbook <canceled run>` advised `benchrun rebuild-warehouse <id>`, which then
    curated the canceled run's partial, unsigned files (1,522 rows, phase Canceled) that the run itself had
    left out."""
    from benchrun.errors import BenchrunError
    from benchrun.playbooks.base import check_runs
    from benchrun.stats.synthetic import make_run

    make_run(tmp_path, "run-c", {("s", "c", "tps"): ([1.0, 2.0], "tok/s", "higher")}, status={"phase": "Canceled"},
             manifest=False)
    for report in (rebuild_warehouse(tmp_path), rebuild_warehouse(tmp_path, ["run-c"])):
        assert "run-c" not in report.rebuilt and "canceled before its evidence was sealed" in report.skipped["run-c"]
    assert _rows(tmp_path, "run-c")["measurement_fact"] == 0
    with pytest.raises(BenchrunError, match="ended Canceled") as caught:
        check_runs(tmp_path, "run-c", None)
    assert "rebuild-warehouse" not in str(caught.value)
    # a canceled run that was sealed (its evidence stored) is curated as before
    make_run(tmp_path, "run-s", {("s", "c", "tps"): ([1.0, 2.0], "tok/s", "higher")}, status={"phase": "Canceled"})
    assert "run-s" in rebuild_warehouse(tmp_path, ["run-s"]).rebuilt


def test_a_retention_pass_interrupted_after_its_removals_keeps_its_runs_out_of_a_rebuild(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CLI review: Ctrl-C during `retention --apply`'s views refresh (after every removal) left no record, so
    `rebuild-warehouse` wrote the expired run back, its stored objects gone."""
    from benchrun.warehouse import retention as ret

    now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    _curated(tmp_path, "run-old", finished_utc="2023-11-30T09:00:00+00:00")
    plan = plan_retention(tmp_path, now)

    def interrupted(_home):
        raise KeyboardInterrupt

    monkeypatch.setattr(ret, "refresh_views", interrupted)
    with pytest.raises(KeyboardInterrupt):
        apply_retention(tmp_path, plan)
    monkeypatch.undo()
    report = rebuild_warehouse(tmp_path)
    assert "run-old" not in report.rebuilt and "removed by retention" in report.skipped["run-old"]
    assert set(_rows(tmp_path, "run-old").values()) == {0}
