"""The BenchmarkRun controller on the cluster harness (tests/kharness): apply → run → Succeeded,
invalid → Rejected, edit → a new run, delete → the run is cancelled."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import jsonschema
import pytest

from bench_assets.definitions import defs as code_location
from benchrun.automation.settings import JOB_NAME
from benchrun.controller.resources import TAG_UID, document_bytes
from benchrun.rundir import RunDir
from benchrun.spec.crd import open_api_schema
from helpers import tiny_spec
from sensors.benchmarkrun import benchmarkrun_resource_sensor
from test_store_helpers import s3_env  # noqa: F401  (fixture: a real S3 API server on loopback)

NS = "benchruns"
ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "deploy/kustomize/base/benchmarkrun-crd.yaml"
KIND = "benchmarking.aisp.dev/v1alpha1/benchmarkruns"
GROUP, VERSION, PLURAL = KIND.split("/")


class Cluster:
    """BenchmarkRuns on a harness cluster, through the real client (``kubectl apply`` / ``delete``)."""

    def __init__(self, harness: Any) -> None:
        from kubernetes import client, config

        self.harness = harness
        self.api = client.CustomObjectsApi(config.new_client_from_config(str(harness.kubeconfig)))

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.harness.get(KIND, name, namespace)

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Create, or patch the spec. The harness stamps uid and generation 1 on create; it does
        not bump generation on a spec change, so this does, as the API server would."""
        namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
        current = self.get(namespace, name)
        if current is None:
            return self.api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)
        if current.get("spec") == doc["spec"]:
            return current
        patch = {"spec": doc["spec"], "metadata": {"generation": int(current["metadata"]["generation"]) + 1}}
        return self.api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, patch)

    def delete(self, namespace: str, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def phases(self, name: str) -> list[str]:
        """The phases the object's status went through, in order (consecutive repeats merged)."""
        out: list[str] = []
        for version in self.harness.history(KIND, name, NS):
            phase = ((version or {}).get("status") or {}).get("phase")
            if phase and (not out or out[-1] != phase):
                out.append(phase)
        return out

    def writes(self, name: str) -> int:
        return len(self.harness.history(KIND, name, NS))
GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [32], "iterations": 2}}


@pytest.fixture
def cluster(kcluster_factory: Any, bench_home: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """A harness cluster serving the CRD from deploy/; $KUBECONFIG points at it."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # never the real in-cluster config
    monkeypatch.delenv("BENCHRUN_CR_NAMESPACE", raising=False)
    return Cluster(kcluster_factory(namespace=NS, crds=[CRD]))


@pytest.fixture
def instance(bench_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def resource_doc(canary_doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(canary_doc)
    doc["metadata"] = {"name": "canary-cr", "namespace": NS, "labels": {"team": "perf"}}
    tiny_spec(doc, [GEMM])
    return doc


def tick(instance: dg.DagsterInstance, cursor: str | None) -> Any:
    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=code_location,
                                      instance_ref=instance.get_ref())
    return benchmarkrun_resource_sensor.evaluate_tick(context)


def status_schema() -> dict[str, Any]:
    return open_api_schema()["properties"]["status"]


def queued_run(instance: dg.DagsterInstance, request: dg.RunRequest) -> Any:
    """The run the daemon created for ``request``, not yet launched."""
    from dagster._core.test_utils import create_run_for_test

    return create_run_for_test(instance, job_name=JOB_NAME, status=dg.DagsterRunStatus.NOT_STARTED,
                               tags={**request.tags, "dagster/partition": request.partition_key})


def run_request(data: Any) -> dg.RunRequest:
    [request] = data.run_requests
    assert [k for r in data.dynamic_partitions_requests for k in r.partition_keys] == [request.partition_key]
    return request


@pytest.mark.slow
def test_applied_benchmarkrun_runs_and_its_status_reads_succeeded(cluster: Cluster, instance: dg.DagsterInstance,
                                                                  resource_doc: dict[str, Any]) -> None:
    obj = cluster.apply(resource_doc)
    uid = obj["metadata"]["uid"]
    data = tick(instance, None)
    request = run_request(data)
    assert request.run_key == f"cr:{NS}/canary-cr:{uid}:1"
    assert request.tags[TAG_UID] == uid
    run_id = request.partition_key
    pending = cluster.get(NS, "canary-cr")["status"]
    assert pending["phase"] == "Pending" and pending["runId"] == run_id and pending["observedGeneration"] == 1
    assert [c["type"] for c in pending["conditions"]] == ["Validated", "SpecPinned"]
    # the pinned bytes are the authored document, the same digest `benchrun submit` gives
    rd = RunDir.for_run(run_id)
    assert rd.file("structured", "spec", "", "yaml").read_bytes() == document_bytes(obj)

    # the run worker's part: the job for the requested partition, in this process
    instance.add_dynamic_partitions("benchmark_run", [run_id])
    result = code_location.resolve_job_def(JOB_NAME).execute_in_process(
        instance=instance, partition_key=run_id, tags=request.tags, raise_on_error=False)
    assert result.success

    status = cluster.get(NS, "canary-cr")["status"]
    assert status["phase"] == "Succeeded", status
    assert status["observedGeneration"] == 1 and status["runId"] == run_id
    assert status["benchmarkClassGranted"] == "realism_grade" and status["selectedSchedulerPath"] == "local"
    assert status["verdicts"]["outcome"] == "succeeded"
    assert status["verdicts"]["Complete"] == "True: Succeeded"
    assert len(status["artifactManifestDigest"].removeprefix("sha256:")) == 64
    assert status["reportRef"].endswith(".html") and Path(status["reportRef"]).is_file()
    assert status["startTime"] <= status["completionTime"]
    assert {"Validated", "SpecPinned", "Admitted", "Complete"} <= {c["type"] for c in status["conditions"]}
    jsonschema.Draft4Validator(status_schema()).validate(status)
    # written at every phase change, in order (the sensor wrote Pending; the run the rest)
    assert cluster.phases("canary-cr") == ["Pending", "Running", "Analyzing", "Succeeded"]

    # the next tick submits nothing and has nothing to catch up
    writes = cluster.writes("canary-cr")
    again = tick(instance, data.cursor)
    assert not again.run_requests and again.skip_message == "no new BenchmarkRun generation"
    assert cluster.writes("canary-cr") == writes


def test_invalid_benchmarkrun_is_rejected_with_every_error(cluster: Cluster, instance: dg.DagsterInstance,
                                                           resource_doc: dict[str, Any]) -> None:
    resource_doc["spec"]["trials"]["minReplicates"] = 2
    resource_doc["spec"]["intent"]["cadence"] = "weekly"
    cluster.apply(resource_doc)
    data = tick(instance, None)
    assert not data.run_requests
    assert "1 rejected" in data.skip_message
    status = cluster.get(NS, "canary-cr")["status"]
    assert status["phase"] == "Rejected" and status["observedGeneration"] == 1
    [validated] = status["conditions"]
    assert (validated["type"], validated["status"], validated["reason"]) == ("Validated", "False", "AdmissionRulesFailed")
    assert "spec.trials.minReplicates" in validated["message"] and "spec.intent.cadence" in validated["message"]
    jsonschema.Draft4Validator(status_schema()).validate(status)
    assert not list((Path(RunDir.for_run("x-20260101000000-00000000").home) / "runs").glob("*"))
    # rejected once: the next tick neither submits nor writes it again
    writes = cluster.writes("canary-cr")
    again = tick(instance, data.cursor)
    assert not again.run_requests and cluster.writes("canary-cr") == writes
    # a Rejected status that never arrived (lost write) is written again by the next tick
    cluster.api.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "canary-cr", {"status": {"phase": None}})
    third = tick(instance, again.cursor)
    assert not third.run_requests and cluster.get(NS, "canary-cr")["status"]["phase"] == "Rejected"


def test_edit_is_a_new_generation_and_a_new_run(cluster: Cluster, instance: dg.DagsterInstance,
                                                resource_doc: dict[str, Any]) -> None:
    obj = cluster.apply(resource_doc)
    first = tick(instance, None)
    first_run = run_request(first).partition_key
    edited = copy.deepcopy(resource_doc)
    edited["spec"]["layers"][0]["suites"][0]["parameters"]["iterations"] = 3
    assert cluster.apply(edited)["metadata"]["generation"] == 2
    second = tick(instance, first.cursor)
    request = run_request(second)
    assert request.run_key == f"cr:{NS}/canary-cr:{obj['metadata']['uid']}:2"
    assert request.partition_key != first_run
    status = cluster.get(NS, "canary-cr")["status"]
    assert status["runId"] == request.partition_key and status["observedGeneration"] == 2
    # the first generation's run no longer writes the object's status
    RunDir.for_run(first_run).set_phase("Running")
    assert cluster.get(NS, "canary-cr")["status"]["runId"] == request.partition_key


def test_deleted_benchmarkrun_cancels_its_run(cluster: Cluster, instance: dg.DagsterInstance,
                                              resource_doc: dict[str, Any]) -> None:
    cluster.apply(resource_doc)
    data = tick(instance, None)
    request = run_request(data)
    run = queued_run(instance, request)
    cluster.delete(NS, "canary-cr")
    gone = tick(instance, data.cursor)
    assert "1 deleted" in gone.skip_message
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
    st = RunDir.for_run(request.partition_key).read_status()
    # a deletion is a cancel, as the operator records it
    assert (st["phase"], st["outcome"]) == ("Canceled", "canceled") and "was deleted" in st["message"]
    # re-applied under the same name it is a new object (new uid): a new run
    cluster.apply(resource_doc)
    again = tick(instance, gone.cursor)
    assert run_request(again).tags[TAG_UID] != request.tags[TAG_UID]


def test_deleting_a_finished_benchmarkrun_leaves_its_run_succeeded(cluster: Cluster, instance: dg.DagsterInstance,
                                                                    resource_doc: dict[str, Any], s3_env: str,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    # the run's worker (its own home) finished it after this home last pulled; deleting the object
    # then pulls the run's status first: nothing is marked Canceled, nothing written
    import uuid

    import boto3

    from benchrun.sharedstate import pull_run, shared_state

    bucket = f"benchrun-final-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket=bucket)
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", f"s3://{bucket}/benchrun")
    cluster.apply(resource_doc)
    data = tick(instance, None)
    run_id = run_request(data).partition_key
    pull_run(run_id, tmp_path)
    worker = RunDir.for_run(run_id, tmp_path)
    for phase in ("Running", "Analyzing", "Succeeded"):
        worker.set_phase(phase)
    finished = worker.read_status()
    cluster.delete(NS, "canary-cr")
    assert "1 deleted" in tick(instance, data.cursor).skip_message
    assert shared_state().read_status(run_id) == finished  # was: Canceled, outcome canceled
    assert RunDir.for_run(run_id).read_status() == finished


def test_a_deletion_whose_status_pull_failed_is_tried_again(cluster: Cluster, instance: dg.DagsterInstance,
                                                            resource_doc: dict[str, Any], s3_env: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # the shared state cannot be read when the object is deleted: nothing is marked on this home's
    # possibly stale copy, and the deletion is tried again on the next tick, as the operator keeps
    # its finalizer (test_operator); was: a warning, the object dropped from the cursor, the run
    # left Pending for good
    cluster.apply(resource_doc)
    data = tick(instance, None)
    run_id = run_request(data).partition_key
    cluster.delete(NS, "canary-cr")
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", "s3://no-such-bucket/benchrun")  # every pull fails
    failed = tick(instance, data.cursor)
    assert RunDir.for_run(run_id).read_status()["phase"] == "Pending"
    monkeypatch.delenv("BENCHRUN_SHARED_STATE")  # reachable again (here: this home is the state)
    again = tick(instance, failed.cursor)
    assert "1 deleted" in again.skip_message
    st = RunDir.for_run(run_id).read_status()
    assert (st["phase"], st["outcome"]) == ("Canceled", "canceled") and "was deleted" in st["message"]
    assert "deleted" not in tick(instance, again.cursor).skip_message  # done: not tried a third time


def _succeed(run_id: str) -> dict[str, Any]:
    """The run worker's part, shortened: Running, evidence stored, Complete, Succeeded."""
    rd = RunDir.for_run(run_id)
    rd.set_phase("Running")
    rd.update_status(outcome="succeeded", artifact_manifest_digest="sha256:" + "a" * 64)
    rd.set_condition("Complete", True, "Succeeded", "every replicate succeeded")
    return rd.set_phase("Succeeded")


def test_a_publication_failure_after_succeeded_reads_failed(cluster: Cluster, instance: dg.DagsterInstance,
                                                            resource_doc: dict[str, Any],
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    """run_status finalizes (Succeeded), then signing or the push fails: status.json goes Failed
    (mark_run_failed over_succeeded) and so does the resource; was: Succeeded for good."""
    from benchrun.controller.status import on_phase_change
    from benchrun.rundir import mark_run_failed

    cluster.apply(resource_doc)
    data = tick(instance, None)
    run_id = run_request(data).partition_key
    succeeded = _succeed(run_id)
    assert cluster.get(NS, "canary-cr")["status"]["phase"] == "Succeeded"
    assert mark_run_failed(None, run_id, "run_status: publishing failed", over_succeeded=True)
    status = cluster.get(NS, "canary-cr")["status"]
    assert (status["phase"], status["verdicts"]["outcome"]) == ("Failed", "failed")
    # a stale writer (the Succeeded status, written late) never moves it back
    on_phase_change(succeeded)
    assert cluster.get(NS, "canary-cr")["status"]["phase"] == "Failed"
    # the catch-up tick has nothing to write
    writes = cluster.writes("canary-cr")
    tick(instance, data.cursor)
    assert cluster.writes("canary-cr") == writes
    # a status it may not write (a later one is there) is not logged as written (was: "status Failed"
    # at every tick)
    cluster.api.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "canary-cr",
                                                      {"status": {"phase": "Canceled", "statusSeq": 10**9}})
    capfd.readouterr()
    tick(instance, data.cursor)
    assert cluster.get(NS, "canary-cr")["status"]["phase"] == "Canceled"
    assert "generation 1: status" not in capfd.readouterr().err  # the sensor's context.log


def test_a_retried_failed_run_is_followed(cluster: Cluster, instance: dg.DagsterInstance,
                                          resource_doc: dict[str, Any]) -> None:
    """A Failed run re-executed (admit: Running, ..., Succeeded): the resource follows it; was:
    Failed for good. A stale Failed status written afterwards does not win."""
    from benchrun.controller.status import on_phase_change
    from benchrun.rundir import mark_run_failed

    cluster.apply(resource_doc)
    data = tick(instance, None)
    run_id = run_request(data).partition_key
    RunDir.for_run(run_id).set_phase("Running")
    assert mark_run_failed(None, run_id, "Dagster run failed: step crashed")
    failed = RunDir.for_run(run_id).read_status()
    assert cluster.get(NS, "canary-cr")["status"]["phase"] == "Failed"
    RunDir.for_run(run_id).remove_conditions("Failed")  # admit() of the retry
    RunDir.for_run(run_id).set_phase("Running")
    assert cluster.get(NS, "canary-cr")["status"]["phase"] == "Running"
    on_phase_change(failed)  # the earlier attempt's Failed, late
    assert cluster.get(NS, "canary-cr")["status"]["phase"] == "Running"
    _succeed(run_id)
    tick(instance, data.cursor)
    status = cluster.get(NS, "canary-cr")["status"]
    assert status["phase"] == "Succeeded" and status["verdicts"]["outcome"] == "succeeded"
    assert "Failed" not in {c["type"] for c in status["conditions"]}
    jsonschema.Draft4Validator(status_schema()).validate(status)


OLD_RUN_KEYS = ("runId", "artifactManifestDigest", "verdicts", "startTime", "reportRef", "benchmarkClassGranted",
                "statusSeq")


def test_a_rejected_generation_keeps_nothing_of_the_earlier_run(cluster: Cluster, instance: dg.DagsterInstance,
                                                                 resource_doc: dict[str, Any]) -> None:
    """Generation 1 succeeded, generation 2 is invalid: its status says Rejected and nothing else of
    generation 1's run (was: its runId, manifest digest, verdicts and completionTime stayed)."""
    cluster.apply(resource_doc)
    data = tick(instance, None)
    finished = _succeed(run_request(data).partition_key)["finished_utc"]
    edited = copy.deepcopy(resource_doc)
    edited["spec"]["intent"]["cadence"] = "weekly"
    assert cluster.apply(edited)["metadata"]["generation"] == 2
    second = tick(instance, data.cursor)
    status = cluster.get(NS, "canary-cr")["status"]
    assert (status["phase"], status["observedGeneration"]) == ("Rejected", 2)
    assert {k: status.get(k) for k in OLD_RUN_KEYS} == dict.fromkeys(OLD_RUN_KEYS)
    assert status["completionTime"] != finished  # the rejection's time
    assert [c["type"] for c in status["conditions"]] == ["Validated"]
    writes = cluster.writes("canary-cr")
    tick(instance, second.cursor)
    assert cluster.writes("canary-cr") == writes


def test_a_new_generation_keeps_nothing_of_the_earlier_run(cluster: Cluster, instance: dg.DagsterInstance,
                                                           resource_doc: dict[str, Any]) -> None:
    """Generation 2's Pending run carries no verdicts, digest or completionTime of generation 1's
    run, and idle ticks write nothing (was: the left-over keys made every tick patch again)."""
    cluster.apply(resource_doc)
    data = tick(instance, None)
    _succeed(run_request(data).partition_key)
    edited = copy.deepcopy(resource_doc)
    edited["spec"]["layers"][0]["suites"][0]["parameters"]["iterations"] = 3
    assert cluster.apply(edited)["metadata"]["generation"] == 2
    second = tick(instance, data.cursor)
    run2 = run_request(second).partition_key
    status = cluster.get(NS, "canary-cr")["status"]
    assert (status["phase"], status["observedGeneration"], status["runId"]) == ("Pending", 2, run2)
    left = [k for k in ("artifactManifestDigest", "verdicts", "completionTime", "startTime", "reportRef")
            if status.get(k) is not None]
    assert left == []
    jsonschema.Draft4Validator(status_schema()).validate(status)
    writes, cursor = cluster.writes("canary-cr"), second.cursor
    for _ in range(3):
        cursor = tick(instance, cursor).cursor
    assert cluster.writes("canary-cr") == writes


def test_no_cluster_is_a_skip_with_the_reason(bench_home: Path, instance: dg.DagsterInstance, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    data = tick(instance, "kept")
    assert not data.run_requests and "no Kubernetes credentials" in data.skip_message
    assert data.cursor == "kept"


def test_the_helm_values_switch_the_controller_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchrun.automation.settings import starts_on

    assert starts_on("benchmarkrun_resource_sensor", False) is False  # off by default
    monkeypatch.setenv("BENCHRUN_AUTOMATION_ON", "benchmarkrun_resource_sensor")  # as deploy/helm/values.yaml
    assert starts_on("benchmarkrun_resource_sensor", False) is True
    assert benchmarkrun_resource_sensor.default_status == dg.DefaultSensorStatus.STOPPED


def _real_cluster() -> None:
    from kubernetes import client, config

    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
        client.VersionApi().get_code(_request_timeout=5)
    except Exception as exc:  # noqa: BLE001 - any failure here means: no cluster to test against
        pytest.skip(f"no Kubernetes API server reachable: set KUBECONFIG to run it ({type(exc).__name__})")


@pytest.mark.k8s
def test_real_cluster_accepts_the_base_and_reads_a_rejection(bench_home: Path, instance: dg.DagsterInstance,
                                                             resource_doc: dict[str, Any]) -> None:
    """On a real cluster with Kueue and the base applied (`kubectl apply -k deploy/kustomize/base`):
    the base passes server-side validation, and an invalid BenchmarkRun reads Rejected in
    `kubectl get benchmarkruns`. BENCHRUN_K8S_NAMESPACE picks the namespace (benchrun-runs)."""
    import shutil
    import subprocess

    from kubernetes import client

    _real_cluster()
    kubectl = shutil.which("kubectl") or pytest.skip("kubectl is not installed")
    subprocess.run([kubectl, "apply", "--dry-run=server", "-k", str(ROOT / "deploy/kustomize/base")],
                   check=True, capture_output=True, timeout=120)
    namespace = os.environ.get("BENCHRUN_K8S_NAMESPACE", "benchrun-runs")
    api = client.CustomObjectsApi()
    resource_doc["metadata"] = {"name": f"reject-{os.getpid()}", "namespace": namespace}
    resource_doc["spec"]["trials"]["confidenceLevel"] = 0.85
    resource_doc["spec"]["comparison"]["compareOneVariableAtATime"] = False  # admitted by the CRD, refused by benchrun
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, resource_doc)
    try:
        os.environ["BENCHRUN_CR_NAMESPACE"] = namespace
        tick(instance, None)
        shown = subprocess.run([kubectl, "get", "benchmarkruns", "-n", namespace, resource_doc["metadata"]["name"]],
                               check=True, capture_output=True, text=True, timeout=60).stdout.splitlines()
        assert shown[0].split() == ["NAME", "PHASE", "CLASS", "AGE"]  # the CRD's printer columns
        assert shown[1].split()[:2] == [resource_doc["metadata"]["name"], "Rejected"]
    finally:
        os.environ.pop("BENCHRUN_CR_NAMESPACE", None)
        api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, resource_doc["metadata"]["name"])


def test_an_api_server_that_refuses_the_list_fails_the_tick(instance: dg.DagsterInstance, monkeypatch) -> None:
    """Dagster review: a 403 from RBAC (or the API server down) read as a skipped tick on every tick, and
    no alert fires on skips; the tick now fails with the answer (its cursor is not moved, nothing is lost)."""
    from kubernetes.client.exceptions import ApiException

    import sensors.benchmarkrun as sensor_mod

    def forbidden(*_a, **_k):
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(sensor_mod.kube, "custom_objects_api", lambda: object())
    monkeypatch.setattr(sensor_mod.kube, "list_benchmarkruns", forbidden)
    with pytest.raises(Exception, match="cannot list BenchmarkRuns: .*403"):
        tick(instance, None)
