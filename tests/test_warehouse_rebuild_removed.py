"""rebuild-warehouse never leaves a run without rows (one commit per table replaces them), and a
retention pass stopped half-way is finished by the next one."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyiceberg.expressions import EqualTo

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


def test_a_rebuild_whose_source_does_not_read_leaves_the_runs_rows(tmp_path: Path) -> None:
    """It deleted the run's rows of every table first (12 commits), then curation failed on the truncated
    environment: measurement_fact 720 rows -> 0, benchmark_run_fact 1 -> 0."""
    before = _curated(tmp_path, "run-a")["run-a"]
    assert before["measurement_fact"] and before["benchmark_run_fact"] == 1
    (tmp_path / "runs" / "run-a" / "structured" / "run-a_environment.json").write_text('{"truncated')
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
