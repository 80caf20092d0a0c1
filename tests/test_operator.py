"""The BenchmarkRun operator on the cluster harness, with a real Dagster instance (runs queued
for the daemon, not executed): one run per (uid, generation) however often an event comes,
status written with resourceVersion preconditions and never back to an earlier phase, the
finalizer cancels the run of a deleted object, a watch that gets 410 Gone lists again, the
start rate is capped, one replica leads through a Lease."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from benchrun.controller import status as status_mod
from benchrun.controller.dagster_runs import DagsterRuns
from benchrun.controller.lease import LeaseElector
from benchrun.controller.operator import FINALIZER, Operator, Settings
from benchrun.controller.resources import TAG_UID
from benchrun.controller.status import ResourceRef
from helpers import tiny_spec
import test_store_helpers

NS = "benchruns"
ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "deploy/kustomize/base/benchmarkrun-crd.yaml"
KIND = "benchmarking.aisp.dev/v1alpha1/benchmarkruns"
CR = ("benchmarking.aisp.dev", "v1alpha1")
GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [32], "iterations": 2}}
s3_env = test_store_helpers.s3_env  # a fixture: a real S3 API server (moto) on loopback
QUEUED = {"run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}}


@pytest.fixture
def harness(kcluster_factory: Any, bench_home: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return kcluster_factory(namespace=NS, crds=[CRD])


@pytest.fixture
def instance(bench_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test(overrides=QUEUED) as inst:
        yield inst


@pytest.fixture(scope="module")
def location_cache() -> dict[str, Any]:
    return {}


@pytest.fixture
def runs(instance: dg.DagsterInstance) -> DagsterRuns:
    return DagsterRuns(instance)


def api_of(harness: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(harness.api_client())


def operator(harness: Any, runs: DagsterRuns, **settings: Any) -> Operator:
    return Operator(api_of(harness), runs, Settings(namespace=NS, page_size=2, watch_timeout_s=1, **settings))


def doc(canary_doc: dict[str, Any], name: str) -> dict[str, Any]:
    out = copy.deepcopy(canary_doc)
    out["metadata"] = {"name": name, "namespace": NS}
    tiny_spec(out, [GEMM])
    return out


def create(harness: Any, body: dict[str, Any]) -> dict[str, Any]:
    return api_of(harness).create_namespaced_custom_object(*CR, NS, "benchmarkruns", body)


def runs_of(instance: dg.DagsterInstance, uid: str) -> list[dg.DagsterRun]:
    return list(instance.get_runs(filters=dg.RunsFilter(tags={TAG_UID: uid})))


def phases(harness: Any, name: str) -> list[str]:
    out: list[str] = []
    for version in harness.history(KIND, name, NS):
        phase = ((version or {}).get("status") or {}).get("phase")
        if phase and (not out or out[-1] != phase):
            out.append(phase)
    return out


def test_one_queued_run_per_generation_however_often_the_event_comes(harness, instance, runs, canary_doc) -> None:
    obj = create(harness, doc(canary_doc, "a"))
    uid = obj["metadata"]["uid"]
    op = operator(harness, runs)
    op.relist()
    [run] = runs_of(instance, uid)
    assert run.status == dg.DagsterRunStatus.QUEUED
    assert run.tags["dagster/run_key"] == f"cr:{NS}/a:{uid}:1"
    live = harness.get(KIND, "a", NS)
    assert live["metadata"]["finalizers"] == [FINALIZER]
    assert live["status"]["phase"] == "Pending" and live["status"]["runId"] == run.tags["dagster/partition"]
    # The same event again, the stale copy from before the operator's writes, and a restarted
    # operator that remembers nothing: still the one run.
    op.reconcile(obj)
    op.reconcile(live)
    operator(harness, DagsterRuns(instance)).relist()
    assert [r.run_id for r in runs_of(instance, uid)] == [run.run_id]
    # A new generation is a new run.
    api_of(harness).patch_namespaced_custom_object(*CR, NS, "benchmarkruns", "a",
                                                   {"spec": {"trials": {**canary_doc["spec"]["trials"], "minReplicates": 4}}})
    op.step()
    assert len(runs_of(instance, uid)) == 2
    assert harness.get(KIND, "a", NS)["status"]["observedGeneration"] == 2


def test_two_status_writers_never_move_a_phase_back(harness, instance, runs, canary_doc) -> None:
    obj = create(harness, doc(canary_doc, "w"))
    ref = ResourceRef.of(obj)
    api = api_of(harness)
    base = {"observedGeneration": 1, "runId": "w-1", "conditions": []}
    assert status_mod.write(api, ref, {**base, "phase": "Pending"})
    stale = harness.get(KIND, "w", NS)  # both writers read this version
    assert status_mod.write(api, ref, {**base, "phase": "Running"}, current=stale)  # the run worker
    # The second writer's precondition is stale: 409, it reads again, sees Running and writes nothing.
    assert not status_mod.write(api, ref, {**base, "phase": "Pending"}, current=stale)
    assert phases(harness, "w") == ["Pending", "Running"]
    assert status_mod.write(api, ref, {**base, "phase": "Succeeded"}, current=stale)
    assert not status_mod.write(api, ref, {**base, "phase": "Failed"})  # a final phase is final
    assert phases(harness, "w") == ["Pending", "Running", "Succeeded"]


def test_a_run_whose_submit_failed_is_submitted_on_the_next_pass(harness, instance, runs, canary_doc,
                                                                  monkeypatch) -> None:
    """start creates the run, then submits it; a submit that raised (or a process that died in
    between) left it NOT_STARTED, found by every retry and never queued. The retry submits it."""
    obj = create(harness, doc(canary_doc, "sub"))
    uid = obj["metadata"]["uid"]
    real, calls = instance.submit_run, []

    def busy_once(run_id, workspace):
        calls.append(run_id)
        if len(calls) == 1:
            raise RuntimeError("database is locked")
        return real(run_id, workspace)

    monkeypatch.setattr(instance, "submit_run", busy_once)
    op = operator(harness, runs)
    op.relist()
    [run] = runs_of(instance, uid)
    assert run.status == dg.DagsterRunStatus.NOT_STARTED and uid in op.waiting
    op.retry_waiting()
    [again] = runs_of(instance, uid)
    assert (again.run_id, again.status) == (run.run_id, dg.DagsterRunStatus.QUEUED)  # was: NOT_STARTED
    assert calls == [run.run_id, run.run_id] and not op.waiting
    assert harness.get(KIND, "sub", NS)["status"]["runId"] == run.tags["dagster/partition"]
    op.relist()  # a queued run is not submitted again
    assert len(calls) == 2 and op.stats.started == 0 and op.stats.reused == 1


def test_deleting_a_benchmarkrun_cancels_its_run_through_the_finalizer(harness, instance, runs, canary_doc) -> None:
    obj = create(harness, doc(canary_doc, "d"))
    uid = obj["metadata"]["uid"]
    operator(harness, runs).relist()
    [run] = runs_of(instance, uid)
    # Deleted while no operator runs: the finalizer holds the object until one cancels the run.
    api_of(harness).delete_namespaced_custom_object(*CR, NS, "benchmarkruns", "d")
    held = harness.get(KIND, "d", NS)
    assert held is not None and held["metadata"].get("deletionTimestamp")
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.QUEUED
    op = operator(harness, DagsterRuns(instance))
    op.relist()
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
    assert harness.get(KIND, "d", NS) is None and op.stats.cancelled == 1


def test_deleting_a_finished_benchmarkrun_leaves_its_run_succeeded(harness, instance, runs, canary_doc, s3_env,
                                                                    monkeypatch, tmp_path) -> None:
    """The run's worker (its own home) made it Succeeded while this operator's copy still read
    Pending (a restart, a failover, between catch-ups); the user then deletes the object. The
    finalizer pulls the run's status first: nothing is marked and nothing is written."""
    import uuid

    import boto3

    from benchrun.rundir import RunDir
    from benchrun.sharedstate import pull_run, shared_state

    bucket = f"benchrun-final-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket=bucket)
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", f"s3://{bucket}/benchrun")
    create(harness, doc(canary_doc, "ok"))
    operator(harness, runs).relist()
    run_id = harness.get(KIND, "ok", NS)["status"]["runId"]
    pull_run(run_id, tmp_path)
    worker = RunDir.for_run(run_id, tmp_path)
    for phase in ("Running", "Analyzing", "Succeeded"):
        worker.set_phase(phase)
    finished = worker.read_status()
    api_of(harness).delete_namespaced_custom_object(*CR, NS, "benchmarkruns", "ok")
    op = operator(harness, DagsterRuns(instance))
    op.relist()
    assert harness.get(KIND, "ok", NS) is None  # the finalizer is removed
    assert shared_state().read_status(run_id) == finished  # was: Canceled, outcome canceled
    assert RunDir.for_run(run_id).read_status() == finished


def test_a_deletion_whose_status_pull_failed_is_tried_again(harness, instance, runs, canary_doc, s3_env,
                                                            monkeypatch) -> None:
    """The shared state cannot be read when the object is deleted: nothing is marked on this
    home's possibly stale copy, the finalizer stays, and the next pass cancels (the sensor does
    the same through its cursor: test_controller)."""
    from benchrun.rundir import RunDir

    create(harness, doc(canary_doc, "pf"))
    operator(harness, runs).relist()
    run_id = harness.get(KIND, "pf", NS)["status"]["runId"]
    api_of(harness).delete_namespaced_custom_object(*CR, NS, "benchmarkruns", "pf")
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", "s3://no-such-bucket/benchrun")  # every pull fails
    op = operator(harness, DagsterRuns(instance))
    op.relist()
    assert harness.get(KIND, "pf", NS)["metadata"]["finalizers"]
    assert RunDir.for_run(run_id).read_status()["phase"] == "Pending"
    monkeypatch.delenv("BENCHRUN_SHARED_STATE")  # reachable again (here: this home is the state)
    op.retry_waiting()
    assert harness.get(KIND, "pf", NS) is None
    st = RunDir.for_run(run_id).read_status()
    assert (st["phase"], st["outcome"]) == ("Canceled", "canceled") and "was deleted" in st["message"]


def test_catch_up_keeps_the_report_ref_the_worker_recorded(harness, instance, runs, canary_doc, monkeypatch) -> None:
    """The operator's pod pulls only status.json, never reports/: reportRef comes from status.json
    (where the report writer records it), and a status without one never erases a known one."""
    import shutil

    from benchrun.report.html import write_report
    from benchrun.rundir import RunDir

    create(harness, doc(canary_doc, "rr"))
    op = operator(harness, runs)
    op.relist()
    run_id = harness.get(KIND, "rr", NS)["status"]["runId"]
    monkeypatch.setattr(status_mod, "on_phase_change", lambda st: None)  # the worker's own writes fail
    worker = RunDir.for_run(run_id)
    worker.set_phase("Running")
    worker.set_phase("Analyzing")
    report = write_report(worker.path, figures_pending=False)
    worker.set_phase("Succeeded")
    shutil.rmtree(worker.path / "reports")  # what the operator's home holds
    op.catch_up()
    st = harness.get(KIND, "rr", NS)["status"]
    assert (st["phase"], st["reportRef"]) == ("Succeeded", str(report))  # was: null
    worker.drop_status_fields("report_ref")  # a later status from a writer that knows no report...
    worker.set_condition("Signed", True, "Signed", "signed")  # ...and something to write
    op.catch_up()
    st = harness.get(KIND, "rr", NS)["status"]
    assert st["statusSeq"] == worker.read_status()["status_seq"] and st["reportRef"] == str(report)


def test_catch_up_renews_the_lease_per_run_and_stops_following_settled_runs(harness, instance, runs, canary_doc,
                                                                             monkeypatch) -> None:
    """Found in review: catch-up re-pulled and re-read every BenchmarkRun that still existed every pass,
    forever, with no Lease renewal in the pass (800 finished runs: a 20 s pass against a 15 s Lease)."""
    from benchrun.rundir import RunDir

    for name in ("a", "b", "c"):
        create(harness, doc(canary_doc, name))
    op = operator(harness, runs)
    op.relist()
    assert len(op.known) == 3
    monkeypatch.setattr(status_mod, "on_phase_change", lambda st: None)  # the worker's own writes fail
    ids = {name: harness.get(KIND, name, NS)["status"]["runId"] for name in ("a", "b", "c")}
    for name in ("a", "b"):
        worker = RunDir.for_run(ids[name])
        worker.set_phase("Running")
        worker.set_phase("Succeeded")
    RunDir.for_run(ids["c"]).set_phase("Running")  # still going
    renewals: list[int] = []
    monkeypatch.setattr(op, "keep_lease", lambda: renewals.append(1))
    op.catch_up()  # writes a's and b's final status
    assert len(renewals) == 3 and harness.get(KIND, "a", NS)["status"]["phase"] == "Succeeded"
    op.catch_up()  # nothing to write: noted
    assert len(op.known) == 3
    op.catch_up()  # still nothing, and status.json did not move: a and b are settled
    assert sorted(ref.name for ref, _ in op.known.values()) == ["c"] and op.stats.settled == 2
    RunDir.for_run(ids["c"]).set_phase("Succeeded")
    op.catch_up()
    assert harness.get(KIND, "c", NS)["status"]["phase"] == "Succeeded" and len(op.known) == 1


def test_a_watch_that_gets_410_gone_lists_again(harness, instance, runs, canary_doc) -> None:
    create(harness, doc(canary_doc, "first"))
    op = operator(harness, runs)
    op.relist()
    later = create(harness, doc(canary_doc, "later"))  # while the operator is between watches
    harness.compact(KIND)  # ...and its resourceVersion is compacted away
    op.step()
    assert op.stats.gone == 1 and op.version is None
    op.step()
    assert op.stats.relists == 2
    assert len(runs_of(instance, later["metadata"]["uid"])) == 1
    assert harness.get(KIND, "later", NS)["status"]["phase"] == "Pending"


def test_starts_are_rate_limited_and_the_rest_wait_their_turn(harness, instance, runs, canary_doc) -> None:
    for i in range(4):
        create(harness, doc(canary_doc, f"r{i}"))
    op = operator(harness, runs, starts_per_s=0.001, start_burst=2)
    op.relist()
    assert op.stats.started == 2 and len(op.waiting) == 2
    op.bucket.tokens = 2.0  # time passes
    op.retry_waiting()
    assert op.stats.started == 4 and not op.waiting
    assert len(instance.get_runs()) == 4


def test_an_invalid_benchmarkrun_is_rejected_without_a_run(harness, instance, runs, canary_doc) -> None:
    bad = doc(canary_doc, "bad")
    bad["spec"]["trials"]["minReplicates"] = 1
    obj = create(harness, bad)
    op = operator(harness, runs)
    op.relist()
    st = harness.get(KIND, "bad", NS)["status"]
    assert st["phase"] == "Rejected" and "minReplicates" in st["conditions"][0]["message"]
    assert runs_of(instance, obj["metadata"]["uid"]) == []
    op.relist()
    assert len(harness.history(KIND, "bad", NS)) == 3  # created, finalizer, Rejected: nothing more


def test_one_replica_leads_through_the_lease(harness) -> None:
    a = LeaseElector(harness.api_client(), NS, "benchrun-operator", "a", duration_s=3)
    b = LeaseElector(harness.api_client(), NS, "benchrun-operator", "b", duration_s=3)
    assert a.try_acquire() and not b.try_acquire()
    assert a.try_acquire()  # renewal
    lease = harness.get("leases", "benchrun-operator", NS)
    assert lease["spec"]["holderIdentity"] == "a"
    a.release()
    assert b.try_acquire() and not a.try_acquire()
    assert harness.get("leases", "benchrun-operator", NS)["spec"]["leaseTransitions"] == 1


def test_a_lease_api_error_is_waited_out_not_fatal(harness, instance, runs, canary_doc) -> None:
    """The API server answers the Lease read 503 once: the loop counts it as not leading, waits
    and asks again, then leads and starts the run (it used to end the operator)."""
    import threading

    from kubernetes.client.exceptions import ApiException

    obj = create(harness, doc(canary_doc, "blip"))
    elector = LeaseElector(harness.api_client(), NS, "benchrun-operator", "me", duration_s=3)
    real_read, reads = elector.api.read_namespaced_lease, []

    def unavailable_once(*args, **kwargs):
        reads.append(args)
        if len(reads) == 1:
            raise ApiException(status=503, reason="Service Unavailable")
        return real_read(*args, **kwargs)

    elector.api.read_namespaced_lease = unavailable_once
    op = Operator(api_of(harness), runs, Settings(namespace=NS, watch_timeout_s=1), elector=elector)
    stop, real_step = threading.Event(), op.step

    def one_pass() -> None:
        real_step()
        stop.set()

    op.step = one_pass
    guard = threading.Timer(60.0, stop.set)
    guard.start()
    try:
        op.run(stop)  # was: ApiException(503) out of run()
    finally:
        guard.cancel()
    assert any("Lease" in e and "503" in e for e in op.stats.errors), op.stats.errors
    assert len(reads) >= 2 and op.stats.started == 1
    assert len(runs_of(instance, obj["metadata"]["uid"])) == 1


def test_a_replica_that_loses_the_lease_mid_pass_stops_acting(harness, instance, runs, canary_doc) -> None:
    for i in range(3):
        create(harness, doc(canary_doc, f"l{i}"))
    mine = LeaseElector(harness.api_client(), NS, "benchrun-operator", "mine", duration_s=3)
    op = Operator(api_of(harness), runs, Settings(namespace=NS, watch_timeout_s=1), elector=mine)
    assert mine.try_acquire()
    # Another replica takes the Lease (this one stalled past its duration), then this one renews mid-pass.
    lease = harness.get("leases", "benchrun-operator", NS)
    from kubernetes import client

    coord = client.CoordinationV1Api(harness.api_client())
    lease_obj = coord.read_namespaced_lease("benchrun-operator", NS)
    lease_obj.spec.holder_identity = "other"
    coord.replace_namespaced_lease("benchrun-operator", NS, lease_obj)
    assert lease["spec"]["holderIdentity"] == "mine"
    op._renewed -= 10  # a third of the duration has passed
    with pytest.raises(Exception) as err:
        op.relist()
    assert type(err.value).__name__ == "LostLease"
    assert instance.get_runs() == []  # nothing started after the Lease was lost


@pytest.mark.slow
def test_the_benchrun_operator_command_queues_a_run_and_stops_on_sigterm(harness, bench_home, canary_doc, tmp_path) -> None:
    """`benchrun operator` as the Deployment runs it: $DAGSTER_HOME with a queued coordinator,
    $KUBECONFIG, the Lease in the watched namespace; SIGTERM releases the Lease."""
    import os
    import signal
    import subprocess
    import sys
    import time

    dagster_home = tmp_path / "dh"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: QueuedRunCoordinator\n")
    obj = create(harness, doc(canary_doc, "cli"))
    env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "KUBECONFIG": str(harness.kubeconfig),
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "benchrun.cli", "operator", "--namespace", NS,
                             "--lease-namespace", NS], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        harness.wait_for(lambda: ((harness.get(KIND, "cli", NS) or {}).get("status") or {}).get("runId"),
                         timeout=120, what="the operator's status write")
    finally:
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    with dg.DagsterInstance.from_config(str(dagster_home)) as inst:
        [run] = inst.get_runs(filters=dg.RunsFilter(tags={TAG_UID: obj["metadata"]["uid"]}))
        assert run.status == dg.DagsterRunStatus.QUEUED
    assert not harness.get("leases", "benchrun-operator", NS)["spec"].get("holderIdentity")  # released


def test_a_broken_watch_stream_is_watched_again_not_fatal(harness, instance, runs, canary_doc, monkeypatch) -> None:
    import urllib3

    op = operator(harness, runs)
    op.relist()
    version = op.version

    def broken() -> None:
        raise urllib3.exceptions.ProtocolError("Response ended prematurely")

    # a context, not monkeypatch.undo(): that also undid bench_home's BENCHRUN_HOME, and the run
    # below was then created in the checkout's own .benchrun (found in a clean clone after make test)
    with monkeypatch.context() as m:
        m.setattr(op, "watch_once", broken)
        op.step()  # seen in benchmarks/controller_scale.py: the stream ended mid-chunk under load
    assert op.version == version and not op.stats.errors
    create(harness, doc(canary_doc, "after"))
    op.step()
    assert (harness.get(KIND, "after", NS).get("status") or {}).get("runId")


def test_a_storage_failure_is_retried_not_rejected(harness, instance, runs, canary_doc, s3_env, monkeypatch) -> None:
    """A valid BenchmarkRun whose run cannot be pushed to the shared state (here: its bucket
    does not exist yet) stays Pending with Registered=False naming the failure, and is started,
    pushed and all, once the storage is back; only an invalid spec is Rejected (final)."""
    import uuid

    import boto3

    # moto keeps buckets in the process, across servers: a name no other test of this worker made
    bucket = f"benchrun-missing-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", f"s3://{bucket}/benchrun")
    obj = create(harness, doc(canary_doc, "s3"))
    uid = obj["metadata"]["uid"]
    op = operator(harness, runs)
    op.relist()
    st = harness.get(KIND, "s3", NS)["status"]
    [cond] = st["conditions"]
    assert st["phase"] == "Pending" and (cond["type"], cond["status"]) == ("Registered", "False"), st
    assert f"shared state s3://{bucket}/benchrun/" in cond["message"] and "NoSuchBucket" in cond["message"]
    assert runs_of(instance, uid) == [] and uid in op.waiting and op.stats.rejected == 0
    writes = len(harness.history(KIND, "s3", NS))
    op.retry_waiting()  # the same failure again: tried, nothing new to write
    assert uid in op.waiting and len(harness.history(KIND, "s3", NS)) == writes
    s3 = boto3.client("s3", endpoint_url=s3_env)
    s3.create_bucket(Bucket=bucket)
    op.retry_waiting()
    [run] = runs_of(instance, uid)
    st = harness.get(KIND, "s3", NS)["status"]
    assert st["phase"] == "Pending" and st["runId"] == run.tags["dagster/partition"] and not op.waiting
    assert [c["type"] for c in st["conditions"]] == ["Validated", "SpecPinned"]
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert f"benchrun/runs/{st['runId']}/status.json" in keys  # the retry pushed the run


def _stalling_replicas(harness, instance, monkeypatch, *, electors: bool) -> tuple[Any, Any, Any, Any, list]:
    """Replicas a and b (each its own DagsterRuns, as two processes) on a clock the test moves;
    a's first start stalls, after its check for an existing run, at the code-location load."""
    import datetime as dt

    from benchrun.controller import lease as lease_mod

    clock = [dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)]
    monkeypatch.setattr(lease_mod, "_now", lambda: clock[0])
    # expiry is timed on each replica's monotonic clock from when it saw the Lease unchanged: the same clock here
    monkeypatch.setattr(lease_mod, "_monotonic", lambda: (clock[0] - dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
                        .total_seconds())
    ea = LeaseElector(harness.api_client(), NS, "benchrun-operator", "a", duration_s=3) if electors else None
    eb = LeaseElector(harness.api_client(), NS, "benchrun-operator", "b", duration_s=3) if electors else None
    runs_a, runs_b = DagsterRuns(instance), DagsterRuns(instance)
    op_a = Operator(api_of(harness), runs_a, Settings(namespace=NS, watch_timeout_s=1), elector=ea)
    op_b = Operator(api_of(harness), runs_b, Settings(namespace=NS, watch_timeout_s=1), elector=eb)
    return op_a, op_b, runs_a, clock, [ea, eb]


def test_a_replica_that_stalls_past_its_lease_creates_no_second_run(harness, instance, canary_doc, monkeypatch) -> None:
    """a stalls inside start (its find saw no run) past its Lease; b takes the Lease and starts
    the run; a, resuming, checks the Lease right before creating and stops: one run."""
    import datetime as dt

    obj = create(harness, doc(canary_doc, "a"))
    uid = obj["metadata"]["uid"]
    op_a, op_b, runs_a, clock, (ea, eb) = _stalling_replicas(harness, instance, monkeypatch, electors=True)
    assert ea.try_acquire() and not eb.try_acquire()  # b sees a's Lease: it times its expiry from here
    real_job = runs_a._job

    def stalled() -> Any:
        clock[0] += dt.timedelta(seconds=4)  # past a's 3 s Lease
        op_a._renewed -= 4  # on a's own clock too
        assert eb.try_acquire()
        op_b.relist()
        assert len(runs_of(instance, uid)) == 1
        return real_job()

    runs_a._job = stalled
    with pytest.raises(Exception) as err:
        op_a.relist()
    assert type(err.value).__name__ == "LostLease"
    assert len(runs_of(instance, uid)) == 1 and op_a.stats.started == 0 and not op_a.waiting


def test_a_replica_that_lost_its_lease_while_stalled_creates_nothing(harness, instance, canary_doc, monkeypatch) -> None:
    """The Lease is checked right before the run is created, not only between objects."""
    import datetime as dt

    obj = create(harness, doc(canary_doc, "a"))
    op_a, _op_b, runs_a, clock, (ea, eb) = _stalling_replicas(harness, instance, monkeypatch, electors=True)
    assert ea.try_acquire() and not eb.try_acquire()  # b sees a's Lease: it times its expiry from here
    real_job = runs_a._job

    def stalled() -> Any:
        clock[0] += dt.timedelta(seconds=4)
        op_a._renewed -= 4
        assert eb.try_acquire()  # b leads now, and has not started anything yet
        return real_job()

    runs_a._job = stalled
    with pytest.raises(Exception) as err:
        op_a.relist()
    assert type(err.value).__name__ == "LostLease"
    assert runs_of(instance, obj["metadata"]["uid"]) == []


def test_two_processes_that_both_found_no_run_insert_one(harness, instance, canary_doc, monkeypatch) -> None:
    """The Dagster run id is derived from (uid, generation): of two inserts one is refused and
    that process takes the other's run, whatever the Lease says."""
    from benchrun.controller.dagster_runs import dagster_run_id

    obj = create(harness, doc(canary_doc, "a"))
    uid = obj["metadata"]["uid"]
    op_a, op_b, runs_a, _clock, _ = _stalling_replicas(harness, instance, monkeypatch, electors=False)
    real_job = runs_a._job

    def stalled() -> Any:
        op_b.relist()
        return real_job()

    runs_a._job = stalled
    op_a.relist()
    [run] = runs_of(instance, uid)
    assert run.run_id == dagster_run_id(ResourceRef.of(obj))
    assert (op_a.stats.started, op_a.stats.reused, op_b.stats.started) == (0, 1, 1) and not op_a.stats.errors
    assert harness.get(KIND, "a", NS)["status"]["runId"] == run.tags["dagster/partition"]
