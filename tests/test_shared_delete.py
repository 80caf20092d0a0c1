"""`benchrun delete` with shared state (a real S3 API server, moto, on loopback): the run's shared copy goes
with it and its tombstone is shared, so no pod's change-point history or rebuild takes the run back; a run
another pod still runs, or a baseline only the shared state names, is refused as it is locally."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from benchrun import sharedstate
from benchrun.errors import BenchrunError
from benchrun.stats.synthetic import make_run
from test_store_helpers import s3_env, shared_bucket, shared_keys  # noqa: F401  (fixture)


@pytest.fixture
def bucket(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    monkeypatch.setenv("BENCHRUN_WAREHOUSE_FORMAT", "parquet")
    return shared_bucket(s3_env, monkeypatch)



def _nightly(home: Path, run_id: str, value: float, phase: str = "Succeeded") -> Path:
    rd = make_run(home, run_id, {("serve", "", "tokens_per_second"): ([value, value + 1, value - 1], "tok/s",
                                                                       "higher")},
                  status={"cadence": "nightly", "phase": phase, "created_utc": "2026-12-01T00:00:00Z",
                          "workload_spec_digest": "a" * 64},
                  sealed=False)
    sharedstate.push_run(rd, home)
    return rd


def _delete_cut_short_after_the_shared_status(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """``benchrun delete gone-x`` from ``home``, its connection lost after the shared status.json went."""
    from benchrun import runctl

    real = sharedstate.SharedState.prune
    calls: list[str] = []

    def cut(self: sharedstate.SharedState, rel: str, keep: set[str]) -> list[str]:
        calls.append(rel)
        if len(calls) > 1 and calls[-2].endswith("/status.json"):  # after the status went, before the rest
            raise BenchrunError("shared state: connection reset")
        return real(self, rel, keep)

    monkeypatch.setattr(sharedstate.SharedState, "prune", cut)
    with pytest.raises(BenchrunError, match="connection reset"):
        runctl.delete_run("gone-x", home=home)
    monkeypatch.setattr(sharedstate.SharedState, "prune", real)


def test_a_delete_from_another_home_removes_the_shared_copy_and_every_history_leaves_it_out(
        tmp_path: Path, s3_env: str, bucket: str) -> None:  # noqa: F811
    from benchrun.runctl import delete_run
    from benchrun.stats.cphistory import gather_history

    pod = tmp_path / "pod"
    _nightly(pod, "keep-x", 100.0)
    gone = _nightly(pod, "gone-x", 50.0)
    (pod / "warehouse" / "measurement_fact" / "run_id=gone-x").mkdir(parents=True)  # a parquet-layout partition
    (pod / "warehouse" / "measurement_fact" / "run_id=gone-x" / "part.parquet").write_bytes(b"PAR1")
    sharedstate.push_run(gone, pod)
    assert any(k.startswith("warehouse/measurement_fact/run_id=gone-x/") for k in shared_keys(s3_env, bucket))

    cli = tmp_path / "cli"  # a person's machine that never held the run: it is read from the shared state
    out = delete_run("gone-x", home=cli)
    assert any("shared copy" in r for r in out.removed), out.removed
    keys = shared_keys(s3_env, bucket)
    assert not any(k.startswith("runs/gone-x/") for k in keys), keys
    assert not any("run_id=gone-x" in k for k in keys), keys
    assert "warehouse/_deleted/gone-x.json" in keys and any(k.startswith("runs/keep-x/") for k in keys)
    # its workload index key went with it (the kept run's stays)
    assert [k.rsplit("/", 1)[1] for k in keys if k.startswith("index/workload/")] == ["keep-x"], keys
    assert set(gather_history(tmp_path / "fresh")["run_id"]) == {"keep-x"}

    # a step of the run that ends late in its pod pushes the run again: the shared tombstone still keeps it out
    sharedstate.push_run(gone, pod)
    assert set(gather_history(tmp_path / "fresh2")["run_id"]) == {"keep-x"}


def test_a_delete_cut_short_after_the_shared_status_went_is_finished_by_deleting_again(
        tmp_path: Path, s3_env: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from benchrun import runctl

    pod, cli = tmp_path / "pod", tmp_path / "cli"
    _nightly(pod, "gone-x", 50.0)
    _delete_cut_short_after_the_shared_status(monkeypatch, cli)
    keys = shared_keys(s3_env, bucket)
    assert "runs/gone-x/status.json" not in keys and any(k.startswith("runs/gone-x/") for k in keys)
    assert (cli / "runs" / "gone-x").is_dir()  # still listed here: deleting again finishes it
    runctl.delete_run("gone-x", home=cli)
    assert not any(k.startswith("runs/gone-x/") for k in shared_keys(s3_env, bucket))

    # and from a home where the run directory went too: the tombstone names it, the shared leftovers go
    _nightly(pod, "gone-y", 50.0)
    runctl.delete_run("gone-y", home=cli)
    for k in ("structured/gone-y_spec.yaml", "structured/extra.json"):  # what a late push left behind
        boto3.client("s3", endpoint_url=s3_env).put_object(Bucket=bucket, Key=f"team/runs/gone-y/{k}", Body=b"x")
    out = runctl.delete_run("gone-y", home=cli)
    assert out.removed and "shared copy: 2 object(s)" in out.removed[0]
    assert not any(k.startswith("runs/gone-y/") for k in shared_keys(s3_env, bucket))


def test_a_run_another_pod_runs_or_a_shared_baseline_is_refused_and_nothing_shared_goes(
        tmp_path: Path, s3_env: str, bucket: str) -> None:  # noqa: F811
    from benchrun.runctl import delete_run

    pod, cli = tmp_path / "pod", tmp_path / "cli"
    _nightly(pod, "base-x", 100.0)
    (pod / "published").mkdir()
    (pod / "published" / "nightly").write_text("base-x\n")
    sharedstate.push_alias(pod, "nightly")
    _nightly(pod, "live-x", 100.0, phase="Running")
    before = shared_keys(s3_env, bucket)
    with pytest.raises(BenchrunError, match="baseline published/nightly"):
        delete_run("base-x", home=cli)
    with pytest.raises(BenchrunError, match="live-x is Running; cancel it first"):
        delete_run("live-x", home=cli)
    assert shared_keys(s3_env, bucket) == before
    # nothing of the live run written here: a copy left behind would be reaped as Failed and pushed (review)
    assert not (cli / "runs" / "live-x").exists() and not (cli / "runs" / "base-x").exists()

    # this home's own copy says Succeeded; the shared status (another pod re-ran it) says Running
    rd = _nightly(cli, "again-x", 100.0)
    status = json.loads((rd / "status.json").read_text())
    status.update(phase="Running", status_seq=int(status.get("status_seq") or 0) + 5)
    boto3.client("s3", endpoint_url=s3_env).put_object(Bucket=bucket, Key="team/runs/again-x/status.json",
                                                       Body=json.dumps(status).encode())
    with pytest.raises(BenchrunError, match="again-x is Running"):
        delete_run("again-x", home=cli)


def test_rebuild_in_a_home_that_holds_a_run_another_home_deleted_does_not_write_it_back(
        tmp_path: Path, s3_env: str, bucket: str) -> None:  # noqa: F811
    from benchrun.runctl import delete_run
    from benchrun.warehouse.rebuild import rebuild_warehouse

    pod, cli = tmp_path / "pod", tmp_path / "cli"
    _nightly(pod, "gone-x", 50.0)
    delete_run("gone-x", home=cli)
    report = rebuild_warehouse(pod, ["gone-x"])  # the pod still holds the run's directory
    assert "gone-x" in report.skipped and "benchrun delete" in report.skipped["gone-x"], report
    assert not report.rebuilt


def test_another_home_finishes_a_delete_cut_short_and_keeps_the_retention_the_first_recorded(
        tmp_path: Path, s3_env: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # review: the shared tombstone was not read first: a second home's delete wrote `retention: null` over the
    # first home's record (the stored evidence then never aged out), and only the first home could finish
    from benchrun import runctl
    from benchrun.warehouse.removed import deleted_records

    pod, first, second = tmp_path / "pod", tmp_path / "first", tmp_path / "second"
    _nightly(pod, "gone-x", 50.0)
    aged = {"t": "2026-12-01T00:00:00+00:00", "retention_class": "nightly"}
    monkeypatch.setattr("benchrun.warehouse.retention.age_record",
                        lambda home, run_id: aged if Path(home) == first else None)
    _delete_cut_short_after_the_shared_status(monkeypatch, first)
    out = runctl.delete_run("gone-x", home=second)  # a machine that never held the run, nor started the delete
    assert out.removed and "shared copy" in out.removed[0]
    assert not any(k.startswith("runs/gone-x/") for k in shared_keys(s3_env, bucket))
    runctl.delete_run("gone-x", home=pod)  # the pod that still holds its own copy cleans it up
    assert not (pod / "runs" / "gone-x").exists()
    shared_record = json.loads(boto3.client("s3", endpoint_url=s3_env).get_object(
        Bucket=bucket, Key="team/warehouse/_deleted/gone-x.json")["Body"].read())
    assert shared_record["retention"] == aged and deleted_records(pod)["gone-x"]["retention"] == aged


def test_a_run_created_after_a_tombstone_of_its_id_is_a_new_run_in_the_history(
        tmp_path: Path, s3_env: str, bucket: str) -> None:  # noqa: F811
    # review: the history left every run whose id had a tombstone out, where rebuild-warehouse and retention
    # take a run created after the tombstone for a new run under the same id
    from benchrun.stats.cphistory import gather_history

    pod = tmp_path / "pod"
    _nightly(pod, "keep-x", 100.0)
    client = boto3.client("s3", endpoint_url=s3_env)
    client.put_object(Bucket=bucket, Key="team/warehouse/_deleted/keep-x.json",
                      Body=json.dumps({"run_id": "keep-x", "deleted_utc": "2026-11-01T00:00:00+00:00"}).encode())
    assert set(gather_history(tmp_path / "fresh")["run_id"]) == {"keep-x"}  # created 2026-12-01: after it
    client.put_object(Bucket=bucket, Key="team/warehouse/_deleted/keep-x.json",
                      Body=json.dumps({"run_id": "keep-x", "deleted_utc": "2026-12-02T00:00:00+00:00"}).encode())
    assert gather_history(tmp_path / "fresh2").empty
