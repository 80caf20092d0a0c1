"""Shared state on a real S3 API server (moto) on loopback: a run pinned in one pod's home is run
in another's and read in a third; unset, nothing leaves $BENCHRUN_HOME."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from benchrun import sharedstate
from benchrun.errors import BenchrunError
from helpers import tiny_spec
from test_store_helpers import s3_env  # noqa: F401  (fixture)
from resources.launcher import LauncherResource

ROOT = Path(__file__).resolve().parents[1]
GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [32], "iterations": 2}}


def _spec_bytes() -> bytes:
    doc = yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text())
    doc["metadata"]["name"] = "shared-canary"
    tiny_spec(doc, [GEMM])
    return yaml.safe_dump(doc, sort_keys=False).encode()


def _files(home: Path) -> dict[str, bytes]:
    return {p.relative_to(home).as_posix(): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def test_unset_means_local_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchrun.submit import prepare

    monkeypatch.delenv(sharedstate.ENV, raising=False)
    # an endpoint nobody listens on: any S3 call would fail the prepare
    monkeypatch.setenv("BENCHRUN_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    assert sharedstate.shared_state() is None
    prepared = prepare(_spec_bytes(), home=tmp_path)
    before = _files(tmp_path)
    sharedstate.push_run(prepared.run_dir, tmp_path)
    sharedstate.pull_run(prepared.run_id, tmp_path, warehouse=True)
    assert _files(tmp_path) == before


def test_bad_setting_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sharedstate.ENV, "/var/lib/benchrun")
    with pytest.raises(BenchrunError, match="use s3://bucket/prefix"):
        sharedstate.shared_state()


@pytest.mark.slow
def test_one_run_across_three_homes(parquet_layout: None, tmp_path: Path, s3_env: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The mirror of the per-run parquet layout; with the Iceberg default the pods share the catalog
    and its location instead (test_deploy_walkthrough runs that with a real Postgres and S3 API)."""
    from bench_assets.definitions import defs
    from benchrun import submit as sub
    from benchrun.rundir import RunDir
    from benchrun.warehouse import query

    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    client.create_bucket(Bucket="bench-shared")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-shared/team-a")
    sensor_home, worker_home, reader_home = (tmp_path / n for n in ("sensor", "worker", "reader"))

    # the sensor's pod pins the run
    prepared = sub.prepare(_spec_bytes(), home=sensor_home)
    keys = {o["Key"] for o in client.list_objects_v2(Bucket="bench-shared")["Contents"]}
    assert f"team-a/runs/{prepared.run_id}/status.json" in keys
    assert f"team-a/specs/sha256/{prepared.pinned_path.name}" in keys

    # the run worker's pod starts empty and runs it (pinned_spec pulls it)
    monkeypatch.setenv("BENCHRUN_HOME", str(worker_home))
    monkeypatch.setenv("DAGSTER_HOME", str(worker_home / "dagster_home"))
    instance = sub.get_instance(worker_home)
    sub.register_partition(instance, prepared.run_id)
    result = defs.resolve_job_def(sub.JOB_NAME).execute_in_process(
        instance=instance, partition_key=prepared.run_id, raise_on_error=False)
    assert result.success
    # the worker's views were written through dagster-duckdb's DuckDBResource connection
    import duckdb

    with duckdb.connect(str(worker_home / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from benchmark_run_fact where run_id = ?", [prepared.run_id]).fetchone() == (1,)
    pinned = worker_home / "specs" / "sha256" / prepared.pinned_path.name
    assert pinned.read_bytes() == prepared.pinned_path.read_bytes()

    # the sensor's pod sees the phase the worker wrote
    sharedstate.pull_run(prepared.run_id, sensor_home, status_only=True)
    assert RunDir.for_run(prepared.run_id, sensor_home).read_status()["phase"] == "Succeeded"

    # a third pod reads the whole run and queries its warehouse partitions with DuckDB
    sharedstate.pull_run(prepared.run_id, reader_home, warehouse=True)
    worker_rd, reader_rd = RunDir.for_run(prepared.run_id, worker_home), RunDir.for_run(prepared.run_id, reader_home)
    manifest = reader_rd.path / "manifest.json"
    assert manifest.read_bytes() == (worker_rd.path / "manifest.json").read_bytes()
    assert _relative_files(reader_rd.path) == _relative_files(worker_rd.path)
    rows: Any = query(f"select run_id, count(*) as n from benchmark_run_fact where run_id = '{prepared.run_id}' group by run_id",
                      reader_home)
    assert _first_count(rows) == 1


def _relative_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def _first_count(result: Any) -> int:
    return int(result.table.to_pylist()[0]["n"])


def test_pulls_refuse_keys_that_leave_the_home(tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    client.create_bucket(Bucket="bench-evil")
    client.put_object(Bucket="bench-evil", Key="p/runs/run-a/../../../escape.txt", Body=b"x")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-evil/p")
    with pytest.raises(BenchrunError):
        sharedstate.shared_state().pull_tree(tmp_path / "home", "runs/run-a/")
    assert not (tmp_path / "escape.txt").exists()
    assert not os.path.exists(tmp_path.parent / "escape.txt")


def test_a_folder_marker_key_is_no_file_to_pull(tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Found in review: a key such as ``runs/<id>/raw/`` (a console's "create folder") aborted every pull of the run."""
    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    client.create_bucket(Bucket="bench-dirs")
    client.put_object(Bucket="bench-dirs", Key="p/runs/run-a/raw/", Body=b"")
    client.put_object(Bucket="bench-dirs", Key="p/runs/run-a/raw/a.log", Body=b"x")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-dirs/p")
    sharedstate.shared_state().pull_tree(tmp_path / "home", "runs/run-a/")
    assert (tmp_path / "home" / "runs" / "run-a" / "raw" / "a.log").read_bytes() == b"x"


def test_the_orphan_sweep_knows_other_pods_runs_through_the_shared_state(
        tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A run worker's home holds only its own run: the sweep's ``is_running`` asks the shared
    state about any other run, so a dead worker's finished run has its Jobs swept while a
    running one, or one the shared state never heard of, is left alone."""
    import json

    from benchrun.launch.k8s_cleanup import finished_here

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="shared")
    monkeypatch.setenv(sharedstate.ENV, "s3://shared/benchrun")
    writer = tmp_path / "dead-worker-home"
    for run_id, phase in (("k8s-20261201000000-aaaaaaaa", "Failed"), ("k8s-20261201000000-bbbbbbbb", "Running")):
        rd = writer / "runs" / run_id
        rd.mkdir(parents=True)
        (rd / "status.json").write_text(json.dumps({"run_id": run_id, "phase": phase}))
        sharedstate.push_run(rd, writer, status_only=True)
    mine = tmp_path / "this-worker-home"
    (mine / "runs" / "k8s-20261201000000-cccccccc").mkdir(parents=True)
    (mine / "runs" / "k8s-20261201000000-cccccccc" / "status.json").write_text(json.dumps({"phase": "Succeeded"}))
    is_running = finished_here(mine)
    assert is_running("k8s-20261201000000-aaaaaaaa") is False  # finished elsewhere: its Jobs go
    assert is_running("k8s-20261201000000-bbbbbbbb") is True   # still running elsewhere
    assert is_running("k8s-20261201000000-dddddddd") is True   # unknown to all: left alone
    assert is_running("k8s-20261201000000-cccccccc") is False  # this home's own, finished
    assert not (mine / "runs" / "k8s-20261201000000-aaaaaaaa").exists()  # asked, not pulled
    monkeypatch.delenv(sharedstate.ENV)
    assert finished_here(mine)("k8s-20261201000000-aaaaaaaa") is True  # without shared state: unknown


def test_a_push_never_follows_a_link_out_of_the_run_directory(tmp_path: Path, s3_env: str,  # noqa: F811
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # a suite's raw/ link to the home's signing key uploaded the key to the bucket every pod reads
    home = tmp_path / "home"
    (home / "keys").mkdir(parents=True)
    (home / "keys" / "ed25519.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (home / "elsewhere").mkdir()
    (home / "elsewhere" / "secret.txt").write_text("s")
    raw = home / "runs" / "run-a" / "raw"
    raw.mkdir(parents=True)
    (raw / "run-a_gemm_r1.log").write_text("ok\n")
    (raw / "suite_output.log").symlink_to(home / "keys" / "ed25519.pem")
    (raw / "more").symlink_to(home / "elsewhere", target_is_directory=True)
    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    client.create_bucket(Bucket="bench-links")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-links/p")
    assert sharedstate.shared_state().push_tree(home, "runs/run-a") == 1
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="bench-links").get("Contents", [])]
    assert keys == ["p/runs/run-a/raw/run-a_gemm_r1.log"]
    # nor is a link sealed into the manifest as evidence
    from benchrun.rundir import RunDir

    manifest = RunDir(home, "run-a").write_manifest(status="succeeded", issues=[], suite_steps={})
    assert "raw/suite_output.log" not in manifest["files"] and "raw/run-a_gemm_r1.log" in manifest["files"]


def test_a_pull_never_replaces_a_later_local_status(tmp_path: Path, s3_env: str,  # noqa: F811
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # the controller wrote status.resource locally and its next catch-up pulled the older shared
    # copy over it: the resource (how a retried tick finds the run) was gone
    import json

    from benchrun.rundir import RunDir

    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    client.create_bucket(Bucket="bench-seq")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-seq/p")
    home, worker = tmp_path / "home", tmp_path / "worker"
    rd = RunDir(home, "run-a").create()
    rd.write_status({"run_id": "run-a", "phase": "Pending", "conditions": []})
    sharedstate.push_run(rd.path, home)
    rd.update_status(resource={"name": "br-1"})  # written here, not pushed
    sharedstate.pull_run("run-a", home, status_only=True)
    assert rd.read_status()["resource"] == {"name": "br-1"}  # was: gone
    # a later status written in another home does replace it
    sharedstate.pull_run("run-a", worker)
    wd = RunDir(worker, "run-a")
    for phase in ("Running", "Analyzing", "Succeeded"):
        wd.update_status(phase=phase)
    sharedstate.push_run(wd.path, worker, status_only=True)
    sharedstate.pull_run("run-a", home, status_only=True)
    assert rd.read_status()["phase"] == "Succeeded"
    assert json.loads((home / "runs/run-a/status.json").read_text())["status_seq"] == 4


def test_a_full_push_uploads_status_json_last(parquet_layout: None, tmp_path: Path, s3_env: str,  # noqa: F811
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # a pod that pulled during the push read a Succeeded status.json while structured/ and the
    # warehouse partitions were not there yet: status.json was uploaded before them (sorted order)
    from benchrun.fsio import atomic_write_json
    from benchrun.rundir import RunDir

    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    client.create_bucket(Bucket="bench-order")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-order/p")
    home = tmp_path / "home"
    rd = RunDir(home, "run-a").create()
    pinned = home / "specs" / "sha256" / f"{'c' * 64}.yaml"
    pinned.parent.mkdir(parents=True)
    pinned.write_text("kind: BenchmarkRun\n")
    rd.write_status({"run_id": "run-a", "phase": "Succeeded", "conditions": [], "pinned_spec": str(pinned)})
    for rel in ("structured/run-a_results.json", "reports/run-a_report.html", "raw/run-a_gemm_r1.log",
                "zz/last.json"):
        atomic_write_json(rd.path / rel, {"rel": rel})
    atomic_write_json(home / "warehouse" / "run_fact" / "run_id=run-a" / "part.json", {})
    uploaded: list[str] = []
    real = sharedstate.shared_state

    def recording() -> sharedstate.SharedState:
        shared = real()
        shared.client.meta.events.register(
            "before-parameter-build.s3.PutObject", lambda params, **_: uploaded.append(params["Key"]))
        return shared

    monkeypatch.setattr(sharedstate, "shared_state", recording)
    sharedstate.push_run(rd.path, home)
    assert uploaded[-1] == "p/runs/run-a/status.json"
    assert sorted(uploaded) == sorted({
        "p/runs/run-a/status.json", "p/runs/run-a/structured/run-a_results.json", "p/runs/run-a/zz/last.json",
        "p/runs/run-a/reports/run-a_report.html", "p/runs/run-a/raw/run-a_gemm_r1.log",
        "p/warehouse/run_fact/run_id=run-a/part.json", f"p/specs/sha256/{'c' * 64}.yaml"})


def _status_pod_homes(tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch, bucket: str) -> tuple[Any, Any]:
    """Run ``run-a`` in a worker's home (pushed, status_seq 3) and pulled into the controller's."""
    from benchrun.rundir import RunDir

    boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1").create_bucket(Bucket=bucket)
    monkeypatch.setenv(sharedstate.ENV, f"s3://{bucket}/p")
    worker, controller = RunDir(tmp_path / "worker", "run-a").create(), RunDir(tmp_path / "controller", "run-a")
    worker.write_status({"run_id": "run-a", "phase": "Pending", "conditions": []})
    sharedstate.push_run(worker.path, worker.home)
    worker.set_phase("Running")
    sharedstate.pull_run("run-a", controller.home, status_only=True)
    assert controller.read_status()["status_seq"] == 2
    return worker, controller


def test_a_stale_home_never_replaces_a_later_shared_status(tmp_path: Path, s3_env: str,  # noqa: F811
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # the controller's copy was one write behind when the worker finished the run; its push of
    # status.resource then set the shared run back from Succeeded to Running for every pod
    worker, controller = _status_pod_homes(tmp_path, s3_env, monkeypatch, "bench-stale")
    shared = sharedstate.shared_state()
    worker.set_phase("Succeeded")  # status_seq 3, the whole run pushed
    controller.update_status(resource={"name": "br-1"})  # status_seq 3 too, from the Running copy
    with pytest.raises(sharedstate.StaleStatus, match=r"status_seq 3; this home.s 3\) was written by another pod"):
        sharedstate.push_run(controller.path, controller.home, status_only=True)
    assert shared.read_status("run-a")["phase"] == "Succeeded"  # was: Running
    assert "resource" not in shared.read_status("run-a")
    # with a merge (what RunDir.set_phase and the controller's _own pass): both changes are kept
    sharedstate.push_run(controller.path, controller.home, status_only=True, merge=controller.merge_shared_status)
    after = shared.read_status("run-a")
    assert (after["phase"], after["resource"], after["status_seq"]) == ("Succeeded", {"name": "br-1"}, 4)
    assert controller.read_status() == after
    # and the worker, one write behind now, merges in turn when it sets its next phase
    worker.update_status(outcome="succeeded")  # status_seq 4 from its own 3
    worker.set_phase("Succeeded", message="published")
    after = shared.read_status("run-a")
    assert (after["resource"], after["outcome"], after["message"]) == ({"name": "br-1"}, "succeeded", "published")
    assert after["status_seq"] == 6 and worker.read_status() == after


def test_a_stale_home_never_replaces_the_files_of_a_run_another_pod_wrote_since(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: a home holding a mid-run copy that marked the run Failed pushed its files first and
    only then found the status conflict: the shared status stayed Succeeded (merged), beside this home's
    stale result files."""
    worker, stale = _status_pod_homes(tmp_path, s3_env, monkeypatch, "bench-files")
    shared = sharedstate.shared_state()
    (worker.path / "structured").mkdir(parents=True, exist_ok=True)
    (worker.path / "structured" / "r.json").write_text("final")
    worker.set_phase("Succeeded")  # the whole run pushed, status last
    (stale.path / "structured").mkdir(parents=True, exist_ok=True)
    (stale.path / "structured" / "r.json").write_text("partial, mid-run")
    stale.set_phase("Failed")  # a full push from the stale copy
    assert shared._get("runs/run-a/structured/r.json")[1] == b"final"  # was: "partial, mid-run"
    assert shared.read_status("run-a")["phase"] == "Succeeded"
    # a home that pulled the run since pushes its files as before
    sharedstate.pull_run("run-a", stale.home)
    (stale.path / "structured" / "extra.json").write_text("later")
    stale.update_status(message="re-read")
    sharedstate.push_run(stale.path, stale.home, merge=stale.merge_shared_status)
    assert shared._get("runs/run-a/structured/extra.json")[1] == b"later"


def test_a_status_written_between_the_read_and_the_write_is_kept(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the status_seq check alone reads, then writes: a pod writing in between was overwritten.
    # The write is conditional on the ETag read (If-Match), so the other pod's status stays.
    import json

    worker, controller = _status_pod_homes(tmp_path, s3_env, monkeypatch, "bench-between")
    other = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    later = {**worker.read_status(), "phase": "Canceled", "status_seq": 9}
    real = sharedstate.shared_state

    def interleaved() -> sharedstate.SharedState:
        shared = real()

        def write_first(params: dict[str, Any], **_: Any) -> None:
            if params["Key"] == "p/runs/run-a/status.json" and "IfMatch" in params and not interleaved.done:
                interleaved.done = True  # the other pod's write lands after this pod read the ETag
                other.put_object(Bucket="bench-between", Key=params["Key"], Body=json.dumps(later).encode())

        shared.client.meta.events.register("before-parameter-build.s3.PutObject", write_first)
        return shared

    interleaved.done = False
    monkeypatch.setattr(sharedstate, "shared_state", interleaved)
    controller.update_status(resource={"name": "br-1"})  # status_seq 3 > the shared 2: a plain push
    with pytest.raises(sharedstate.StaleStatus, match="status_seq 9"):
        sharedstate.push_run(controller.path, controller.home, status_only=True)
    assert interleaved.done
    assert real().read_status("run-a") == later  # was: replaced by the controller's seq 3


def test_merge_status_keeps_both_homes_changes() -> None:
    base = {"phase": "Running", "message": "m", "n": 1, "status_seq": 2,
            "conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}
    local = {"phase": "Running", "n": 2, "resource": {"name": "r"}, "status_seq": 3,
             "conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "True"},
                            {"type": "C", "status": "True"}]}
    shared = {"phase": "Succeeded", "message": "m", "n": 1, "outcome": "succeeded", "status_seq": 5,
              "conditions": [{"type": "B", "status": "False"}, {"type": "D", "status": "True"}]}
    merged = sharedstate.merge_status(base, local, shared)
    assert merged == {
        "phase": "Succeeded",  # changed there only
        "n": 2, "resource": {"name": "r"},  # changed here only
        "outcome": "succeeded",
        "status_seq": 5,  # write_status makes it 6
        # B changed there, D added there; A changed here, C added here (message removed here)
        "conditions": [{"type": "B", "status": "False"}, {"type": "D", "status": "True"},
                       {"type": "A", "status": "False"}, {"type": "C", "status": "True"}],
    }


def test_merge_status_never_lets_a_stale_phase_change_replace_a_final_one() -> None:
    # the operator's copy was Pending when the object was deleted; the worker had made it
    # Succeeded meanwhile: the local Canceled (and what came with it) is dropped, Succeeded stands
    base = {"phase": "Pending", "resource": {"name": "r"}, "status_seq": 1, "conditions": []}
    local = {"phase": "Canceled", "message": "BenchmarkRun ns/r was deleted", "outcome": "canceled",
             "finished_utc": "t-local", "resource": {"name": "r"}, "note": "kept", "status_seq": 4,
             "conditions": [{"type": "Canceled", "status": "True"}]}
    shared = {"phase": "Succeeded", "message": "done", "outcome": "succeeded", "finished_utc": "t-worker",
              "resource": {"name": "r"}, "status_seq": 4, "conditions": [{"type": "Complete", "status": "True"}]}
    merged = sharedstate.merge_status(base, local, shared)
    assert merged == {**shared, "note": "kept"}  # a field unrelated to the phase still merges
    # a home that had seen the final phase still moves it on (publication failing after Succeeded)
    seen = {**shared, "status_seq": 4}
    failed = {**seen, "phase": "Failed", "outcome": "failed", "status_seq": 6,
              "conditions": [{"type": "Failed", "status": "True"}]}
    assert sharedstate.merge_status(seen, failed, {**seen, "status_seq": 5})["phase"] == "Failed"


def test_a_cancel_from_a_stale_home_never_replaces_a_succeeded_run(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from benchrun.rundir import mark_run_canceled

    worker, controller = _status_pod_homes(tmp_path, s3_env, monkeypatch, "bench-final")
    for phase in ("Analyzing", "Succeeded"):
        worker.set_phase(phase)
    mark_run_canceled(controller.home, "run-a", "BenchmarkRun ns/x was deleted")  # its copy says Running
    after = sharedstate.shared_state().read_status("run-a")
    assert (after["phase"], after.get("outcome")) == ("Succeeded", None)  # was: Canceled, canceled
    assert "Canceled" not in {c["type"] for c in after["conditions"]}
    assert controller.read_status()["phase"] == "Succeeded"


def test_a_pull_during_a_push_never_sees_a_finished_status_beside_missing_files(
        tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # the pull listed the run (status.json and a few files), the push then uploaded the rest and the
    # Succeeded status, and the pull downloaded that status beside the files of its earlier listing
    import json

    from benchrun.fsio import atomic_write_json
    from benchrun.rundir import RunDir

    boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1").create_bucket(Bucket="bench-pull")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-pull/p")
    worker, reader = RunDir(tmp_path / "worker", "run-a").create(), tmp_path / "reader"
    worker.write_status({"run_id": "run-a", "phase": "Pending", "conditions": []})
    sharedstate.push_run(worker.path, worker.home)
    worker.set_phase("Running")
    names = [f"structured/run-a_gemm_r{k}.json" for k in range(1, 6)]
    for rel in names:
        atomic_write_json(worker.path / rel, {"rel": rel})
    real = sharedstate.shared_state

    def push_after_first_listing() -> sharedstate.SharedState:
        shared = real()

        def finish(**_: Any) -> None:
            if not push_after_first_listing.done:  # the worker finishes while the reader pulls
                push_after_first_listing.done = True
                worker.update_status(phase="Succeeded")
                sharedstate.push_run(worker.path, worker.home, merge=worker.merge_shared_status)

        shared.client.meta.events.register("after-call.s3.ListObjectsV2", finish)
        return shared

    push_after_first_listing.done = False
    monkeypatch.setattr(sharedstate, "shared_state", push_after_first_listing)
    sharedstate.pull_run("run-a", reader)
    assert push_after_first_listing.done
    pulled = reader / "runs" / "run-a"
    phase = json.loads((pulled / "status.json").read_text())["phase"]
    missing = [rel for rel in names if not (pulled / rel).is_file()]
    assert phase != "Succeeded" or not missing, f"a Succeeded status beside missing {missing}"
    # a pull after the push has everything
    monkeypatch.setattr(sharedstate, "shared_state", real)
    sharedstate.pull_run("run-a", reader)
    assert json.loads((pulled / "status.json").read_text())["phase"] == "Succeeded"
    assert all((pulled / rel).is_file() for rel in names)


def _stale_here(home: Path, worker_home: Path, name: str, attempt: str, *phases: str) -> str:
    """A run pinned in ``home`` and pushed; its worker pod then records ``attempt`` and ``phases``
    and pushes them: ``home`` still reads it Pending."""
    from benchrun.rundir import RunDir
    from benchrun.submit import prepare

    doc = yaml.safe_load(_spec_bytes())
    doc["metadata"]["name"] = name
    prepared = prepare(yaml.safe_dump(doc, sort_keys=False).encode(), home=home)
    sharedstate.push_run(prepared.run_dir, home)
    sharedstate.pull_run(prepared.run_id, worker_home)
    worker = RunDir.for_run(prepared.run_id, worker_home)
    worker.update_status(dagster_run_id=attempt)
    for phase in phases:
        worker.set_phase(phase)
    assert RunDir.for_run(prepared.run_id, home).read_status()["phase"] == "Pending"
    return prepared.run_id


def test_cancel_and_the_failure_sensor_read_the_shared_status_first(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from benchrun import runend
    from benchrun.automation.failures import record_orchestrator_failure
    from benchrun.automation.settings import JOB_NAME
    from benchrun.rundir import RunDir
    from benchrun.runctl import cancel_run

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="benchrun-stale")
    monkeypatch.setenv(sharedstate.ENV, "s3://benchrun-stale/state")
    home, worker_home = tmp_path / "ctl", tmp_path / "worker"
    done = _stale_here(home, worker_home, "shared-done", "attempt-1", "Running", "Analyzing", "Succeeded")
    again = _stale_here(home, worker_home, "shared-again", "attempt-2", "Running")

    # marking on the stale copy: the merge keeps the worker's Succeeded, and says it did not mark
    # (was: True, "marked", and the run's facts curated again for a phase it never took)
    assert runend.cancel_run(home, done, "stale") is False
    assert RunDir.for_run(done, home).read_status()["phase"] == "Succeeded"
    # `benchrun cancel` on a run finished elsewhere: decided on the shared status, refused
    # (was: decided on this home's Pending, "not started: marked Canceled", phase Succeeded printed)
    fresh = _stale_here(home, worker_home, "shared-fresh", "attempt-1", "Running", "Analyzing", "Succeeded")
    with pytest.raises(BenchrunError, match="already ended in phase Succeeded"):
        cancel_run(fresh, home=home)
    # the failure sensor hears of attempt-1 failing while attempt-2 runs: this home's copy names no
    # attempt, the shared one names attempt-2, so the late event is ignored (was: the run marked
    # Failed under its running second attempt)
    late = SimpleNamespace(job_name=JOB_NAME, run_id="attempt-1", tags={"dagster/partition": again})
    why = record_orchestrator_failure(late, "terminated", home)
    assert why is not None and "not run" in why and "attempt-2" in why
    assert sharedstate.shared_state().read_status(again)["phase"] == "Running"
    assert sharedstate.shared_state().read_status(fresh)["phase"] == "Succeeded"
    # the worker finishes between the pull and the mark: the merge keeps its phase, and cancel says so
    # (was: "phase Succeeded (not started: marked Canceled)")
    raced = _stale_here(home, worker_home, "shared-raced", "attempt-1", "Running", "Analyzing", "Succeeded")
    monkeypatch.setattr(sharedstate, "pull_run", lambda *a, **k: None)
    out = cancel_run(raced, home=home)
    assert out.phase == "Succeeded" and "nothing canceled" in out.how and "marked Canceled" not in out.how


def test_a_step_re_executed_in_a_fresh_pod_pulls_the_run_first(tmp_path: Path, s3_env: str,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: only pinned_spec pulled the run, so a layer or run_evidence re-executed from a failure
    in a new run-worker pod (an empty home) failed with "no such run"."""
    from benchrun import lifecycle
    from benchrun.rundir import RunDir

    boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1").create_bucket(Bucket="bench-resume")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-resume/p")
    first = RunDir(tmp_path / "first-pod", "run-a").create()
    first.write_status({"run_id": "run-a", "phase": "Pending", "conditions": [], "dagster_run_id": "d-1"})
    (first.path / "structured" / "run-a_gemm_r1.json").write_text("{}")
    first.set_phase("Running")
    sharedstate.push_run(first.path, first.home)
    fresh = RunDir(tmp_path / "fresh-pod", "run-a")
    assert not fresh.exists()
    assert lifecycle.pull_if_absent(fresh) is True
    assert (fresh.path / "structured" / "run-a_gemm_r1.json").is_file()
    assert lifecycle.resume_attempt(fresh, "d-2") and fresh.read_status()["dagster_run_id"] == "d-2"
    assert lifecycle.pull_if_absent(fresh) is False  # held: nothing pulled over it


def test_a_run_started_again_in_another_pod_leaves_no_earlier_attempt_files_at_their_first_paths(
        tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Found in review: set_earlier_attempt_aside moved the first attempt's files only in the home that
    started the run again; the shared prefix kept them at their first paths, so a third pod pulled attempt
    1's manifest (success) and report beside attempt 2's files and a Failed status."""
    from benchrun.lifecycle import set_earlier_attempt_aside
    from benchrun.rundir import RunDir

    boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1").create_bucket(Bucket="bench-attempts")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-attempts/p")
    first = RunDir(tmp_path / "a", "run-a").create()
    first.write_status({"run_id": "run-a", "phase": "Running", "conditions": []})
    (first.path / "structured" / "run-a_gemm_r1.json").write_text('{"attempt": 1}')
    (first.path / "reports").mkdir(exist_ok=True)
    (first.path / "reports" / "run-a_report.html").write_text("attempt 1")
    (first.path / "manifest.json").write_text('{"success": true}')
    first.set_phase("Succeeded")
    second = RunDir(tmp_path / "b", "run-a")
    sharedstate.pull_run("run-a", second.home)
    assert set_earlier_attempt_aside(second)
    (second.path / "structured" / "run-a_gemm_r1.json").write_text('{"attempt": 2}')
    second.set_phase("Failed")
    third = RunDir(tmp_path / "c", "run-a")
    sharedstate.pull_run("run-a", third.home)
    assert third.read_status()["phase"] == "Failed"
    assert not (third.path / "manifest.json").exists() and not (third.path / "reports" / "run-a_report.html").exists()
    assert (third.path / "attempts" / "1" / "manifest.json").is_file()
    assert (third.path / "structured" / "run-a_gemm_r1.json").read_text() == '{"attempt": 2}'


def test_a_home_that_read_only_the_status_never_prunes_the_runs_files(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: the failure sensor pulls only status.json into its home, then marks the run
    Failed; the final phase made a full push from that home, which held none of the worker's files,
    and its prune deleted every shared file it did not hold: the failed run's logs and results."""
    from types import SimpleNamespace

    from benchrun.automation.failures import record_orchestrator_failure
    from benchrun.automation.settings import JOB_NAME
    from benchrun.rundir import RunDir
    from benchrun.submit import prepare

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="benchrun-prune")
    monkeypatch.setenv(sharedstate.ENV, "s3://benchrun-prune/state")
    sensor_home, worker_home = tmp_path / "sensor", tmp_path / "worker"
    prepared = prepare(_spec_bytes(), home=sensor_home)
    sharedstate.pull_run(prepared.run_id, worker_home)
    worker = RunDir.for_run(prepared.run_id, worker_home)
    worker.update_status(dagster_run_id="d-1")
    worker.set_phase("Running")
    evidence = [f"structured/{prepared.run_id}_gemm_r1.json", f"raw/{prepared.run_id}_gemm_r1_stdout.log"]
    for rel in evidence:
        (worker.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (worker.path / rel).write_text("evidence")
    sharedstate.push_run(worker.path, worker.home, merge=worker.merge_shared_status)  # as a layer step does
    shared = sharedstate.shared_state()
    failed = SimpleNamespace(job_name=JOB_NAME, run_id="d-1", tags={"dagster/partition": prepared.run_id})
    assert record_orchestrator_failure(failed, "Dagster run failed: boom", sensor_home) is None
    assert shared.read_status(prepared.run_id)["phase"] == "Failed"
    for rel in evidence:
        got = shared._get(f"runs/{prepared.run_id}/{rel}")
        assert got is not None and got[1] == b"evidence", rel  # was: deleted
    # a home that pulls the whole run again pushes (and prunes) as before
    sharedstate.pull_run(prepared.run_id, sensor_home)
    assert not sharedstate.files_behind(sensor_home, prepared.run_id)


def test_a_worker_pods_comparison_reads_the_alias_and_baseline_promoted_in_another_home(
        tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Found in review: promote wrote published/<alias> only into the promoting home and nothing
    pulled the baseline run, so a run worker's fresh home found no alias, took the run for a first
    run and compared it with nothing: no RegressionDetected, no_gating_regression green."""
    import json

    import dagster as dg
    import numpy as np

    from bench_assets.stats_assets import ConfirmRoundResource, baseline_comparison, no_gating_regression
    from benchrun.stats.baseline import promote
    from benchrun.stats.synthetic import lognormal_replicates, make_run

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="benchrun-alias")
    monkeypatch.setenv(sharedstate.ENV, "s3://benchrun-alias/state")
    key = tmp_path / "signing.pem"  # every pod signs and verifies with the deployment's key
    key.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    monkeypatch.setenv("BENCHRUN_SIGNING_KEY", str(key))
    promoter, worker = tmp_path / "promoter", tmp_path / "worker"
    base_id, cand_id = "base-20261201000000-abcdef12", "cand-20261202000000-abcdef12"
    rng = np.random.default_rng(3)
    metrics = {("gemm", "", "tflops"): (lognormal_replicates(rng, 100.0, 0.02, 5), "TFLOP/s", "higher")}
    spec = {"spec": {"metrics": {"micro": {"primary": ["tflops"]}},
                     "layers": [{"name": "micro", "enabled": True,
                                 "suites": [{"name": "gemm", "repoCommand": "python -m x"}]}]}}
    base = make_run(promoter, base_id, metrics, spec=spec, sealed=True)
    sharedstate.push_run(base, promoter)
    promote(base_id, promoter)
    monkeypatch.setenv("BENCHRUN_HOME", str(worker))
    make_run(worker, cand_id, metrics,
             spec={"spec": {**spec["spec"], "comparison": {"baseline": {"artifactRef": "local/published/current"}}}},
             status={"phase": "Analyzing", "outcome": "succeeded"})
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", [cand_id])
    res = dg.materialize([baseline_comparison, no_gating_regression], instance=inst, partition_key=cand_id,
                         resources={"confirm_round": ConfirmRoundResource(enabled=False), "launcher": LauncherResource()},
                         raise_on_error=True)
    [mat] = [e for e in res.get_asset_materialization_events()]
    meta = mat.materialization.metadata
    assert meta["compared"].value is True and meta["baseline"].value == base_id, meta["gate"].value  # was: compared False
    status = json.loads((worker / "runs" / cand_id / "status.json").read_text())
    assert [c["reason"] for c in status["conditions"] if c["type"] == "RegressionDetected"]


def test_an_analysis_step_re_executed_in_a_fresh_pod_pulls_the_run_first(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: only the run's own steps (pinned_spec, the layers, run_evidence) pulled the run,
    so trial_statistics, the comparison, the report, the warehouse tables, the playbooks or run_status
    re-executed from a failure in a new run-worker pod (an empty home) found no run."""
    import dagster as dg
    import numpy as np

    from bench_assets.stats_assets import trial_statistics
    from benchrun.stats.synthetic import lognormal_replicates, make_run

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="bench-reexec")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-reexec/p")
    run_id = "rerun-20261201000000-abcdef12"
    metrics = {("gemm", "", "tflops"): (lognormal_replicates(np.random.default_rng(2), 100.0, 0.02, 5), "TFLOP/s",
                                        "higher")}
    first = make_run(tmp_path / "first-pod", run_id, metrics, status={"phase": "Analyzing"})
    sharedstate.push_run(first, tmp_path / "first-pod")
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path / "fresh-pod"))
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", [run_id])
    res = dg.materialize([trial_statistics], instance=inst, partition_key=run_id, raise_on_error=False)
    assert res.success  # was: no such run
    assert (tmp_path / "fresh-pod" / "runs" / run_id / "structured" / f"{run_id}_trial_statistics.json").is_file()
