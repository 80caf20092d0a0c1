"""The history-level jobs on Kubernetes, where each runs in a fresh run-worker pod whose home is empty:
change_points reads the runs the shared state holds (a real S3 API server, moto, on loopback) and shares
its fact; retention keeps a baseline whose alias only the shared state holds, and shares its record."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import boto3
import dagster as dg
import numpy as np
import pandas as pd
import pytest

from benchrun import sharedstate
from benchrun.stats.synthetic import make_run
from test_store_helpers import s3_env, shared_bucket, shared_keys  # noqa: F401  (fixture)

CP_KEY = "warehouse/change_point_fact/change_points.parquet"


@pytest.fixture
def bucket(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    """A fresh bucket (moto keeps buckets in the process, across servers) named by BENCHRUN_SHARED_STATE."""
    return shared_bucket(s3_env, monkeypatch)



def _nightly_runs(home: Path, n: int = 24) -> list[Path]:
    """``n`` Succeeded nightly runs (a 20 % step at night 18), a canary, a Failed nightly and one whose
    suite judged a replicate invalid and whose launcher failed another: every rule of the history."""
    rng = np.random.default_rng(4)
    made = []
    for i in range(n):
        made.append(make_run(
            home, f"n-{i:02d}", {("serve", "", "tokens_per_second"): (rng.normal(100 if i < 18 else 80, 1, 3), "tok/s",
                                                                     "higher"),
                                 ("membw", "", "gbps"): (rng.normal(50, 0.5, 3), "GB/s", "higher")},
            status={"cadence": "nightly", "created_utc": f"2026-11-{i + 1:02d}T00:00:00Z"},
            spec={"spec": {"comparison": {"deltaPct": 4.0}}},
            contexts={"membw": {"verdict": "invalid", "verdict_reasons": ["arrays fit in the LLC"]}} if i == 5 else None,
            launches={"serve": ["ok", "failed", "ok"], "membw": ["ok"] * 3} if i == 7 else None, sealed=False))
    made.append(make_run(home, "canary-x", {("serve", "", "tokens_per_second"): ([1, 2, 3], "tok/s", "higher")},
                         status={"cadence": "canary"}, sealed=False))
    made.append(make_run(home, "failed-x", {("serve", "", "tokens_per_second"): ([1, 2, 3], "tok/s", "higher")},
                         status={"cadence": "nightly", "phase": "Failed"}, sealed=False))
    return made


def _push_all(runs: list[Path], home: Path) -> None:
    for rd in runs:
        sharedstate.push_run(rd, home)


def test_the_shared_history_is_the_local_history_and_pulls_no_raw_file(
        tmp_path: Path, s3_env: str, bucket: str) -> None:  # noqa: F811
    from benchrun.stats.changepoint import gather_history, history_table
    from benchrun.stats.cphistory import pull_history

    writer = tmp_path / "writer"
    _push_all(_nightly_runs(writer), writer)
    boto3.client("s3", endpoint_url=s3_env).put_object(  # a damaged run there is skipped, not fatal
        Bucket=bucket, Key="team/runs/broken-x/status.json", Body=b"{not json")
    local = history_table(writer).reset_index(drop=True)
    assert local["run_id"].nunique() == 24

    shared = gather_history(tmp_path / "fresh").reset_index(drop=True)
    pd.testing.assert_frame_equal(shared, local)  # the same series and the same medians
    assert not (tmp_path / "fresh").exists()  # the scratch folder is not the home

    pulled = pull_history(sharedstate.shared_state(), tmp_path / "scratch")
    assert pulled and not [p for p in pulled if "/raw/" in p or p.endswith("manifest.json")]
    assert {p.split("/")[1] for p in pulled} == {f"n-{i:02d}" for i in range(24)}  # the kept runs only
    assert "runs/n-07/structured/n-07_launches.json" in pulled


def test_change_points_in_a_fresh_pod_reads_the_shared_runs_and_shares_its_fact(
        tmp_path: Path, s3_env: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """history_job in a run-worker pod read its empty home: runs 0, change points 0, every night, and the
    fact it wrote went with the pod."""
    from bench_assets.stats_assets import change_points

    writer = tmp_path / "writer"
    _push_all(_nightly_runs(writer), writer)

    def materialize_in(home: Path) -> dict:
        monkeypatch.setenv("BENCHRUN_HOME", str(home))
        with dg.instance_for_test() as instance:  # entered (see test_warehouse_iceberg's maintenance test)
            res = dg.materialize([change_points], instance=instance)
        return res.get_asset_materialization_events()[0].materialization.metadata

    meta = materialize_in(tmp_path / "pod-1")
    assert meta["runs"].value == 24 and meta["change_points"].value == 1 and meta["new_change_points"].value == 1
    assert CP_KEY in shared_keys(s3_env, bucket)
    # the UI names the shared copy, not a path into a pod that is gone when the job ends (found in review)
    assert meta["path"].value == f"s3://{bucket}/team/{CP_KEY}"
    assert not (tmp_path / "pod-1" / "runs").exists()  # no partial run copies in the home
    # the next night's pod: the same change, not announced again (the previous fact came from the shared state)
    again = materialize_in(tmp_path / "pod-2")
    assert again["change_points"].value == 1 and again["new_change_points"].value == 0
    # a run worker's first pull (pinned_spec) brings the fact to its views (benchrun.warehouse.views reads
    # that file; the Iceberg tables beside it need the shared catalog, which this test has not)
    reader = tmp_path / "reader"
    sharedstate.pull_run("n-00", reader, warehouse=True)
    fact = pd.read_parquet(reader / CP_KEY)
    assert fact[["run_id", "kind"]].to_dict(orient="records") == [{"run_id": "n-18", "kind": "regression"}]


def test_retention_in_a_fresh_pod_keeps_a_baseline_only_the_shared_state_names(
        parquet_layout: None, tmp_path: Path, s3_env: str, bucket: str) -> None:  # noqa: F811
    """The pod's home has no published/: a baseline past coldDays had its rows deleted. (The parquet
    layout: with shared state the Iceberg tables need a Postgres catalog; the aliases are read alike.)"""
    from benchrun.store import open_store
    from benchrun.warehouse import curate_run
    from benchrun.warehouse.retention import apply_retention, plan_retention
    from test_store_helpers import make_run_dir

    now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.timezone.utc)
    pod = tmp_path / "pod"
    store = open_store(None, pod)
    for run_id, age_days in (("run-old", 800), ("run-older", 900), ("run-new", 1)):
        run_dir = make_run_dir(pod, run_id, finished_utc=(now - dt.timedelta(days=age_days)).isoformat())
        curate_run(run_dir, pod, store.put_run_dir(run_dir, run_id))
    promoter = tmp_path / "promoter"  # `benchrun promote` ran elsewhere and pushed the alias
    (promoter / "published").mkdir(parents=True)
    (promoter / "published" / "current").write_text("run-old\n{}\n")
    sharedstate.push_alias(promoter, "current")
    client = boto3.client("s3", endpoint_url=s3_env)
    client.put_object(Bucket=bucket, Key="team/warehouse/_deleted/gone-x.json",  # `benchrun delete`, elsewhere
                      Body=json.dumps({"run_id": "gone-x", "deleted_utc": now.isoformat(), "retention": None}))

    plan = plan_retention(pod, now)
    tiers = {r.run_id: r.tier for r in plan.runs}
    assert tiers["run-old"] == "published" and tiers["run-older"] == "expired"
    assert {p["run_id"] for p in plan.partitions} == {"run-older"}
    assert any("run-old: published (current)" in n for n in plan.notes)
    assert any("run gone-x: deleted" in n for n in plan.notes)  # the tombstone was read

    record = apply_retention(pod, plan)
    keys = shared_keys(s3_env, bucket)
    assert f"warehouse/_retention/{record.name}" in keys and "warehouse/_deleted/gone-x.json" in keys
    shared_record = json.loads(client.get_object(Bucket=bucket, Key=f"team/warehouse/_retention/{record.name}")
                               ["Body"].read())
    assert shared_record["applied"] is True and {p["run_id"] for p in shared_record["partitions"]} == {"run-older"}


@pytest.mark.parametrize("layout", ["iceberg", "parquet"])
def test_a_query_from_a_home_that_never_ran_change_points_reads_the_shared_fact(
        tmp_path: Path, s3_env: str, bucket: str, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:  # noqa: F811
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.sharedstate import CHANGE_POINTS, pull_paths, push_paths

    writer = tmp_path / "writer"
    (writer / CHANGE_POINTS).parent.mkdir(parents=True)
    pd.DataFrame({"metric": ["tokens_per_second"], "change_pct": [-20.0]}).to_parquet(writer / CHANGE_POINTS)
    push_paths(writer, CHANGE_POINTS)
    monkeypatch.setenv("BENCHRUN_WAREHOUSE_FORMAT", layout)
    cli = tmp_path / "cli"
    cli.mkdir()
    monkeypatch.setenv("BENCHRUN_HOME", str(cli))
    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(sharedstate, "pull_paths", lambda home, *rels: (asked.append(rels), pull_paths(home, *rels)))
    if layout == "iceberg":  # the tables are the catalog's (a Postgres one with shared state): not set up here
        import benchrun.warehouse.views as views

        monkeypatch.setattr(views, "connect", _fact_only)
    out = CliRunner().invoke(app, ["query", "--csv", "SELECT metric, change_pct FROM change_point_fact"])
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines() == ["metric,change_pct", "tokens_per_second,-20.0"]
    assert asked == [(CHANGE_POINTS,)]  # the fact only: not the parquet layout's whole warehouse, every query
    # the shared state unreachable: a read-only command reads what this home holds, and says so
    monkeypatch.setenv("BENCHRUN_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    out = CliRunner().invoke(app, ["query", "--csv", "SELECT metric, change_pct FROM change_point_fact"])
    assert out.exit_code == 0, out.output
    assert "warning: shared state" in out.stderr and out.stdout.splitlines()[1] == "tokens_per_second,-20.0"


def _fact_only(home: Path, notes: list[str], **_: object) -> object:
    """The views' connection without the Iceberg tables: the change-point fact's view as the views make it."""
    import duckdb

    from benchrun.warehouse.views import _change_point_view

    con = duckdb.connect()
    _change_point_view(con, Path(home), notes)
    return con


def test_the_reports_history_in_a_fresh_pod_is_the_shared_history_of_its_workload(
        tmp_path: Path, s3_env: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # review: the report's history figure read only the run worker's home, which holds this run alone
    import benchrun.report.content as C
    from benchrun.stats.analysis import trial_statistics_for_run
    from benchrun.stats.load import load_run

    writer = tmp_path / "writer"
    runs = _nightly_runs(writer, n=6)
    runs.append(make_run(writer, "other-x", {("serve", "", "tokens_per_second"): ([1, 2, 3], "tok/s", "higher")},
                         status={"cadence": "nightly", "workload_spec_digest": "o" * 64}, sealed=False))
    _push_all(runs, writer)
    pod = tmp_path / "pod"  # a run worker's home: this run only, still Analyzing
    rd = make_run(pod, "this-x", {("serve", "", "tokens_per_second"): ([90, 91, 92], "tok/s", "higher")},
                  status={"cadence": "nightly", "phase": "Analyzing", "created_utc": "2026-12-01T00:00:00Z"},
                  sealed=False)
    hist = C.history_for(load_run(rd), trial_statistics_for_run(rd), pod)
    serve = hist[hist.suite == "serve"]
    # the 6 nightly runs and the canary of this workload (any cadence, Succeeded), then this run; not the
    # Failed one, nor the other workload's
    assert sorted(serve["run_id"]) == ["canary-x"] + [f"n-{i:02d}" for i in range(6)] + ["this-x"], serve["run_id"]
    assert not (pod / "runs" / "n-00").exists()  # read through a scratch folder, never into the home
    # the shared state unreachable: the figure reads this home's runs, and the report (and run) go on (review)
    monkeypatch.setenv("BENCHRUN_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    alone = C.history_for(load_run(rd), trial_statistics_for_run(rd), pod)
    assert sorted(alone[alone.suite == "serve"]["run_id"]) == ["this-x"]


def test_asset_metadata_names_a_mirrored_file_by_its_shared_key_and_any_other_by_its_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench_assets.tables import path

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    run_file = tmp_path / "runs" / "r-1" / "reports" / "r-1_report.html"
    monkeypatch.delenv(sharedstate.ENV, raising=False)
    assert path(run_file).value == str(run_file)  # the embedded default: unchanged
    monkeypatch.setenv(sharedstate.ENV, "s3://bench//team/")  # keys as sharedstate makes them: team/runs/...
    assert path(run_file).value == "s3://bench/team/runs/r-1/reports/r-1_report.html"
    monkeypatch.setenv(sharedstate.ENV, "s3://bench")
    assert path(run_file).value == "s3://bench/runs/r-1/reports/r-1_report.html"
    monkeypatch.setenv(sharedstate.ENV, "s3://bench/team")
    assert path(tmp_path / "runs" / "r-1").value == "s3://bench/team/runs/r-1"
    assert path(tmp_path / "warehouse" / "_retention" / "retention-1.json").value == \
        "s3://bench/team/warehouse/_retention/retention-1.json"
    for local in (tmp_path / "warehouse" / "warehouse.duckdb", tmp_path / "hot" / "r-1.prom", Path("/elsewhere/x")):
        assert path(local).value == str(local)  # never mirrored: its path


def test_a_workloads_history_reads_its_runs_through_the_index_once_a_full_pass_made_it_complete(
        tmp_path: Path, s3_env: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # review: the report's history read every shared run's status, one GET each, on every report
    from benchrun.stats.cphistory import gather_history
    from benchrun.stats.cpindex import COMPLETE, INDEX

    wd, other = "a" * 64, "0" * 64  # (a digest as benchrun writes one: hex)
    writer = tmp_path / "writer"
    runs = _nightly_runs(writer, n=6)
    for rd in runs:
        st = json.loads((rd / "status.json").read_text())
        (rd / "status.json").write_text(json.dumps({**st, "workload_spec_digest": wd}))
    runs.append(make_run(writer, "other-x", {("serve", "", "tokens_per_second"): ([1, 2, 3], "tok/s", "higher")},
                         status={"cadence": "nightly", "workload_spec_digest": other}, sealed=False))
    _push_all(runs, writer)
    mine = [f"n-{i:02d}" for i in range(6)] + ["canary-x"]
    indexed = {k for k in shared_keys(s3_env, bucket) if k.startswith(INDEX)}
    assert indexed == {f"{INDEX}{wd}/{r}" for r in mine} | {f"{INDEX}{other}/other-x"}  # at push; not Failed ones
    reads: list[str] = []
    real = sharedstate.SharedState.read_status
    monkeypatch.setattr(sharedstate.SharedState, "read_status", lambda self, r: (reads.append(r), real(self, r))[1])
    # not complete yet (runs pushed before the index are not in it): every run read, and the index healed
    client = boto3.client("s3", endpoint_url=s3_env)
    client.delete_object(Bucket=bucket, Key=f"team/{INDEX}{wd}/n-00")  # as if pushed before the index existed
    first = gather_history(tmp_path / "a", cadences=None, workload=wd)
    assert len(reads) == 9 and f"{INDEX}{wd}/n-00" in shared_keys(s3_env, bucket) and COMPLETE in shared_keys(s3_env, bucket)
    reads.clear()
    again = gather_history(tmp_path / "b", cadences=None, workload=wd)
    assert sorted(reads) == sorted(mine)  # its runs only
    pd.testing.assert_frame_equal(first.reset_index(drop=True), again.reset_index(drop=True))
    # a run that succeeds later is indexed as it is pushed
    sharedstate.push_run(make_run(writer, "late-x", {("serve", "", "tokens_per_second"): ([5, 6, 7], "tok/s", "higher")},
                                  status={"cadence": "nightly", "workload_spec_digest": wd}, sealed=False), writer)
    assert "late-x" in set(gather_history(tmp_path / "c", cadences=None, workload=wd)["run_id"])


def test_retention_in_a_fresh_pod_pulls_the_records_of_earlier_passes(
        tmp_path: Path, s3_env: str, bucket: str) -> None:  # noqa: F811
    # the re-read: a run an earlier pass removed ages on from that pass's record (retention._retention_ages),
    # which a fresh pod's home did not have: the pass pulled the aliases and tombstones only
    from benchrun.warehouse import retention

    client = boto3.client("s3", endpoint_url=s3_env)
    client.put_object(Bucket=bucket, Key="team/warehouse/_retention/retention-1.json", Body=b'{"applied": true}')
    client.put_object(Bucket=bucket, Key="team/warehouse/_deleted/gone-x.json", Body=b"{}")
    pod = tmp_path / "pod"
    retention._pull_shared(pod)
    assert (pod / "warehouse" / "_retention" / "retention-1.json").is_file()
    assert (pod / "warehouse" / "_deleted" / "gone-x.json").is_file()
