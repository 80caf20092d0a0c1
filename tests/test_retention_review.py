"""Retention and warehouse-maintenance defects found in review: objects shared with a run an earlier
pass removed were kept forever, two passes in one second shared one record, the maintenance asset
skipped the first-use migration, and a run being run again was aged by its previous attempt."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from benchrun.store import open_store
from benchrun.warehouse import curate_run, query
from benchrun.warehouse.retention import apply_retention, plan_retention
from test_store_helpers import make_run_dir

NOW = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)


def _count(home: Path, sql: str) -> int:
    return query(sql, home).table.column(0)[0].as_py()


def _curated(home: Path, ages: dict[str, float]) -> dict:
    store = open_store(None, home)
    manifests = {}
    for run_id, age_days in ages.items():
        run_dir = make_run_dir(home, run_id, finished_utc=(NOW - dt.timedelta(days=age_days)).isoformat())
        manifests[run_id] = store.put_run_dir(run_dir, run_id)
        curate_run(run_dir, home, manifests[run_id])
    return manifests


def test_objects_shared_with_a_run_an_earlier_pass_removed_still_age_out(parquet_layout: None,
                                                                         tmp_path: Path) -> None:
    """Found in review: the first pass removed the old run's row but kept the objects it shares with
    the young run; from then on those objects counted as held by a run of unknown age and were kept
    forever (7 of the young run's 15 objects), though every run listing them is long past retention."""
    store = open_store(None, tmp_path)
    manifests = _curated(tmp_path, {"run-old": 800, "run-young": 1})
    shared = {o.key for o in manifests["run-old"].objects} & {o.key for o in manifests["run-young"].objects}
    assert shared
    apply_retention(tmp_path, plan_retention(tmp_path, NOW))
    assert all(store.exists(k) for k in shared)  # the young run still needs them
    later = plan_retention(tmp_path, NOW + dt.timedelta(days=2000))
    assert shared <= {o["key"] for o in later.objects}
    apply_retention(tmp_path, later)
    left = [o.key for m in manifests.values() for o in m.objects if store.exists(o.key)]
    assert left == []
    again = plan_retention(tmp_path, NOW + dt.timedelta(days=2000))
    assert again.objects == [] and again.partitions == []


def test_two_passes_in_one_second_keep_both_records(parquet_layout: None, tmp_path: Path) -> None:
    """Found in review: records were named by the plan's second, so a second pass in the same second
    overwrote the first one's; rebuild-warehouse then no longer knew the first pass removed its run."""
    from benchrun.warehouse.removed import retention_removed

    _curated(tmp_path, {"run-old": 800, "run-young": 1})
    first = apply_retention(tmp_path, plan_retention(tmp_path, NOW))
    assert "run-old" in retention_removed(tmp_path)
    second = apply_retention(tmp_path, plan_retention(tmp_path, NOW))
    assert "run-old" in retention_removed(tmp_path)  # was: gone, the second pass's record over the first's
    assert second != first and first.is_file()


def test_a_run_being_run_again_is_not_aged_by_its_previous_attempt(parquet_layout: None, tmp_path: Path) -> None:
    """Found in review: an old run materialized again (phase Running, its warehouse row still the old
    attempt's) was expired by its old finish time, its rows and its objects removed under it."""
    store = open_store(None, tmp_path)
    manifests = _curated(tmp_path, {"run-old": 800, "run-young": 1})
    status_path = tmp_path / "runs" / "run-old" / "status.json"
    status = json.loads(status_path.read_text())
    status.update(phase="Running", finished_utc=None)
    status_path.write_text(json.dumps(status))
    plan = plan_retention(tmp_path, NOW)
    assert {r.run_id: r.tier for r in plan.runs}["run-old"] == "active"
    assert plan.partitions == [] and plan.objects == []
    assert any("run-old: phase Running" in n for n in plan.notes)
    apply_retention(tmp_path, plan)
    assert store.verify(manifests["run-old"]) == len(manifests["run-old"].objects)


def test_a_run_stored_again_between_plan_and_apply_keeps_its_objects(parquet_layout: None, tmp_path: Path) -> None:
    """Found in review: the run's evidence stored again after the plan (a new attempt) reuses the
    planned objects of its earlier attempt; apply deleted them, and the new manifest failed to verify."""
    store = open_store(None, tmp_path)
    _curated(tmp_path, {"run-old": 800, "run-young": 1})
    plan = plan_retention(tmp_path, NOW)
    planned = {o["key"] for o in plan.objects}
    assert planned
    run_dir = tmp_path / "runs" / "run-old"
    (run_dir / "raw" / "run-old_attempt2.log").write_text("the second attempt\n")
    again = store.put_run_dir(run_dir, "run-old")
    assert planned & {o.key for o in again.objects}
    apply_retention(tmp_path, plan)
    assert store.verify(again) == len(again.objects)
    assert plan.objects == [] and {o["key"] for o in plan.kept_after_plan} == planned
    assert any("run-old stored again since the plan" in n for n in plan.notes)


def test_the_maintenance_asset_migrates_a_home_of_an_earlier_release_first(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: the asset maintained without the first-use migration the CLI runs first;
    maintenance made the (empty) tables, the migration was then skipped, and the home's runs no longer read."""
    import dagster as dg

    from bench_assets.warehouse_assets import MaintenanceConfig, warehouse_maintenance
    from benchrun.warehouse import lake, migrate
    from resources.warehouse import WarehouseResource

    monkeypatch.setenv(lake.FORMAT_ENV, "parquet")
    _curated(tmp_path, {"run-a": 1, "run-b": 2})
    before = _count(tmp_path, "SELECT count(*) FROM measurement_fact")
    assert before > 0
    monkeypatch.setenv(lake.FORMAT_ENV, "iceberg")
    for env in (lake.CATALOG_ENV, lake.LOCATION_ENV):
        monkeypatch.delenv(env, raising=False)
    lake._CATALOGS.clear()
    monkeypatch.setattr(migrate, "_CHECKED", set())  # the asset's process has not looked at the home yet
    # invoked directly (its context, config and resource as Dagster passes them): dg.materialize here
    # trips over Dagster state test_schedules_cadences leaves in the process when run after it
    result = warehouse_maintenance(context=dg.build_asset_context(), config=MaintenanceConfig(expire_days=0),
                                   warehouse=WarehouseResource(home=str(tmp_path)))
    assert "measurement_fact" in result.metadata["tables"].value
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == before
