"""Tests for retention: expired curated partitions go, raw objects inside any run's retention stay."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from benchrun.store import open_store
from benchrun.warehouse.schemas import TABLES
from benchrun.warehouse import curate_run, query
from benchrun.warehouse.retention import apply_retention, plan_retention
from test_store_helpers import make_run_dir

REPO = Path(__file__).resolve().parents[1]


def _count(home: Path, sql: str) -> int:
    return query(sql, home).table.column(0)[0].as_py()


def _setup(home: Path, now: dt.datetime):
    store = open_store(None, home)
    manifests = {}
    for run_id, age_days in (("run-old", 800), ("run-warm", 200), ("run-new", 1)):
        finished = (now - dt.timedelta(days=age_days)).isoformat()
        run_dir = make_run_dir(home, run_id, finished_utc=finished)
        manifests[run_id] = store.put_run_dir(run_dir, run_id)
        curate_run(run_dir, home, manifests[run_id])
    return store, manifests


def test_dry_run_lists_and_apply_removes_only_expired(parquet_layout: None, tmp_path: Path) -> None:
    now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    store, manifests = _setup(tmp_path, now)
    plan = plan_retention(tmp_path, now)
    tiers = {r.run_id: r.tier for r in plan.runs}
    assert tiers == {"run-old": "expired", "run-warm": "cold", "run-new": "hot"}
    assert {p["run_id"] for p in plan.partitions} == {"run-old"}
    # every table's partition of the expired run, one each
    assert sorted(p["table"] for p in plan.partitions) == sorted(TABLES)
    old_keys = {o.key for o in manifests["run-old"].objects}
    needed = {o.key for r in ("run-warm", "run-new") for o in manifests[r].objects}
    listed = {o["key"] for o in plan.objects}
    assert listed == old_keys - needed and listed  # only objects no younger run needs
    shared = manifests["run-old"].entry("raw/run-old_gemm_r1.log").key
    assert shared in needed and shared not in listed  # identical log bytes are kept for the younger runs
    # dry run removed nothing
    assert _count(tmp_path, "SELECT count(DISTINCT run_id) FROM measurement_fact") == 3
    assert all(store.exists(k) for k in listed)
    assert not (tmp_path / "warehouse" / "_retention").exists()

    record = apply_retention(tmp_path, plan)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE run_id = 'run-old'") == 0
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact") == 18
    assert not any(store.exists(k) for k in listed)
    assert store.exists(shared)
    for run_id in ("run-warm", "run-new"):
        assert store.verify(manifests[run_id]) == len(manifests[run_id].objects)
    doc = json.loads(record.read_text())
    assert doc["applied"] is True and record.parent == tmp_path / "warehouse" / "_retention"
    assert {o["key"] for o in doc["objects"]} == listed
    # a second pass finds nothing more to do
    again = plan_retention(tmp_path, now)
    assert again.partitions == [] and again.objects == []


def test_cli_retention_dry_run(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    _setup(tmp_path, now)
    env = {**os.environ, "BENCHRUN_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "benchrun.cli", "retention"], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "would remove partition measurement_fact/run_id=run-old" in out.stdout
    assert "(dry run; --apply to remove)" in out.stdout
    assert _count(tmp_path, "SELECT count(DISTINCT run_id) FROM measurement_fact") == 3


def test_a_published_baseline_is_never_expired(parquet_layout: None, tmp_path: Path) -> None:
    # delete refused the baseline, retention removed its rows and every stored object of it:
    # verify then failed and promote could not be run again
    now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    store, manifests = _setup(tmp_path, now)
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "current").write_text("run-old\n{}\n")
    plan = plan_retention(tmp_path, now)
    assert {r.run_id: r.tier for r in plan.runs}["run-old"] == "published"
    assert plan.partitions == [] and plan.objects == []
    assert any("run-old: published (current)" in n for n in plan.notes)
    apply_retention(tmp_path, plan)
    assert store.verify(manifests["run-old"]) == len(manifests["run-old"].objects)
    assert _count(tmp_path, "SELECT count(*) FROM measurement_fact WHERE run_id = 'run-old'") > 0


def test_a_run_stored_between_plan_and_apply_keeps_the_objects_it_shares(parquet_layout: None, tmp_path: Path) -> None:
    # identical bytes are one object: a run stored after the plan reused the expired run's
    # objects and apply deleted them under it
    now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    store, manifests = _setup(tmp_path, now)
    plan = plan_retention(tmp_path, now)
    assert plan.objects
    late_dir = make_run_dir(tmp_path, "run-late", finished_utc=now.isoformat())
    listed = {o["key"] for o in plan.objects}
    old = next(e for e in manifests["run-old"].objects if e.key in listed)
    (late_dir / "raw" / "run-late_same_bytes.bin").write_bytes((tmp_path / "runs" / "run-old" / old.path).read_bytes())
    late = store.put_run_dir(late_dir, "run-late")
    shared = {o.key for o in late.objects} & {o["key"] for o in plan.objects}
    assert shared  # the late run reuses objects the plan lists
    record = apply_retention(tmp_path, plan)
    assert store.verify(late) == len(late.objects)  # was: "stored object(s) fail verification"
    assert any("now also held by run-late" in n for n in plan.notes)
    gone = listed - shared
    assert not any(store.exists(k) for k in gone)  # the rest still went
    # found in review: the record listed the kept objects as removed too (and the CLI counted them)
    doc = json.loads(record.read_text())
    assert doc["objects"] and not any(store.exists(o["key"]) for o in doc["objects"])
    assert {o["key"] for o in doc["kept_after_plan"]} == shared


def test_a_deleted_runs_stored_evidence_still_ages_out(parquet_layout: None, tmp_path: Path) -> None:
    """`benchrun delete` said retention ages the run's stored evidence out, but with its run row gone
    retention never planned its objects: they were kept forever."""
    from benchrun.runctl import delete_run

    now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    store, manifests = _setup(tmp_path, now)
    out = delete_run("run-old", home=tmp_path)
    assert any(k.startswith("its evidence in the artifact store") for k in out.kept), out.kept  # it was sealed
    delete_run("run-new", home=tmp_path)  # deleted, but young: its objects stay
    plan = plan_retention(tmp_path, now)
    assert {r.run_id for r in plan.runs} == {"run-warm"}
    needed = {o.key for o in manifests["run-warm"].objects} | {o.key for o in manifests["run-new"].objects}
    listed = {o["key"] for o in plan.objects}
    assert listed == {o.key for o in manifests["run-old"].objects} - needed and listed
    apply_retention(tmp_path, plan)
    assert not any(store.exists(k) for k in listed) and all(store.exists(k) for k in needed)


def test_both_layouts_under_one_root_age_out(parquet_layout: None, tmp_path: Path) -> None:
    """A run stored per run (objects/${RUN_ID}/) beside runs stored flat under the same root was
    planned through the flat store, which lists only its own manifests: 0 of its objects went."""
    now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    store, manifests = _setup(tmp_path, now)
    template = "objects/${RUN_ID}/"
    finished = (now - dt.timedelta(days=900)).isoformat()
    run_dir = make_run_dir(tmp_path, "run-prefixed", finished_utc=finished)
    spec = run_dir / "structured" / "run-prefixed_spec.yaml"
    spec.write_text(spec.read_text().replace("pathTemplate: null", f"pathTemplate: '{template}'"))
    prefixed = open_store(template, tmp_path)
    manifest = prefixed.put_run_dir(run_dir, "run-prefixed")
    curate_run(run_dir, tmp_path, manifest)
    plan = plan_retention(tmp_path, now)
    listed = {o["key"] for o in plan.objects}
    mine = {o.key for o in manifest.objects}
    assert mine and mine <= listed
    assert {o.key for o in manifests["run-old"].objects} & listed  # the flat layout's expired run too
    apply_retention(tmp_path, plan)
    assert not any(prefixed.exists(k) for k in mine)
