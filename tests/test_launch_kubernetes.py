"""The Kubernetes launcher: pod manifests (pure), the pod lifecycle against an in-test fake of
the four CoreV1Api calls (no API server can run here), and one real-cluster test."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from benchrun.errors import BenchrunError
from benchrun.launch.kubernetes import RESULT_KEY, KubernetesLauncher
from benchrun.launch.podspec import (
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    Placement,
    SLURM_BRIDGE_SCHEDULER,
    pod_manifest,
    pod_name_prefix,
)
from benchrun.plan import Invocation
from benchrun.suites.result import SCHEMA, metric

RUN_ID = "canary-20261130100000-abcdef12"
DIGEST_IMAGE = "ghcr.io/example/benchrun@sha256:" + "ab" * 32
CASE = "bc-0123456789abcdef"


def make_inv(run_dir: str = "/srv/benchrun/runs/" + RUN_ID, **over: Any) -> Invocation:
    env = {
        "PATH": "/work/main/.venv/bin:/usr/bin",
        "HOME": "/home/someone",
        "TMPDIR": "/tmp/host",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "BENCHRUN_RUN_ID": RUN_ID,
        "BENCHRUN_RUN_DIR": run_dir,
        "BENCHRUN_SUITE": "gemm",
        "BENCHRUN_REPLICATE": "2",
        "BENCHRUN_CASE_ID": CASE,
        "BENCHRUN_PARAMS": '{"n": 256}',
    }
    fields: dict[str, Any] = dict(
        run_id=RUN_ID, layer="micro", suite="gemm", replicate=2, benchmark_case_id=CASE,
        argv=(sys.executable, "-m", "benchrun.suites.gemm", "--note", "a b; rm -rf /"),
        env=env, timeout_s=90.0, parameters={"n": 256}, image=DIGEST_IMAGE,
    )
    fields.update(over)
    return Invocation(**fields)


PLACE = Placement(queue_name="bench-lq")


# -- pod manifests (pure) ------------------------------------------------------------------

def test_labels_queue_and_identity() -> None:
    pod = pod_manifest(make_inv(), namespace="bench", run_labels={"benchrun.dev/cadence": "nightly"},
                       placement=Placement(queue_name="bench-lq", priority_class="nightly-low"))
    labels = pod["metadata"]["labels"]
    assert labels == {
        "app.kubernetes.io/managed-by": "benchrun",
        "benchrun.dev/run-id": RUN_ID,
        "benchrun.dev/layer": "micro",
        "benchrun.dev/suite": "gemm",
        "benchrun.dev/replicate": "2",
        "benchrun.dev/benchmark-case-id": CASE,
        "benchrun.dev/cadence": "nightly",
        KUEUE_QUEUE_LABEL: "bench-lq",
        KUEUE_PRIORITY_LABEL: "nightly-low",
    }
    assert pod["metadata"]["namespace"] == "bench"
    assert pod["metadata"]["generateName"] == f"{RUN_ID}-gemm-r2-"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 90
    assert "schedulerName" not in spec and "affinity" not in spec
    assert "annotations" not in pod["metadata"]
    # No priority class asked for: no label.
    plain = pod_manifest(make_inv(), namespace="bench", placement=PLACE)
    assert KUEUE_PRIORITY_LABEL not in plain["metadata"]["labels"]


def test_argv_runs_directly_with_image_python() -> None:
    c = pod_manifest(make_inv(), namespace="bench", placement=PLACE)["spec"]["containers"][0]
    assert c["image"] == DIGEST_IMAGE
    assert c["command"] == ["python"]
    # Each argument stays one argument: nothing is joined into a shell string.
    assert c["args"] == ["-m", "benchrun.suites.gemm", "--note", "a b; rm -rf /"]
    other = make_inv(argv=("/opt/tools/fio", "--output-format=json"))
    c2 = pod_manifest(other, namespace="bench", placement=PLACE)["spec"]["containers"][0]
    assert c2["command"] == ["/opt/tools/fio"] and c2["args"] == ["--output-format=json"]


def test_env_is_the_invocations_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_SECRET_TOKEN", "s3cret")
    inv = make_inv()
    c = pod_manifest(inv, namespace="bench", placement=PLACE,
                     extra_env={"DAGSTER_PIPES_CONTEXT": "ctx"})["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert "LAUNCHER_SECRET_TOKEN" not in env
    # Host-only values would break the image (its PATH, its HOME): left to the image.
    assert not {"PATH", "HOME", "TMPDIR"} & set(env)
    assert env["BENCHRUN_RUN_ID"] == RUN_ID and env["BENCHRUN_PARAMS"] == '{"n": 256}'
    assert env["BENCHRUN_RESULT_STDOUT"] == "1"
    assert env["DAGSTER_PIPES_CONTEXT"] == "ctx"
    assert set(env) == (set(inv.env) - {"PATH", "HOME", "TMPDIR"}) | {"BENCHRUN_RESULT_STDOUT", "DAGSTER_PIPES_CONTEXT"}
    # The run directory the invocation names exists in the pod (an emptyDir), and is the cwd.
    assert c["workingDir"] == inv.env["BENCHRUN_RUN_DIR"]
    assert c["volumeMounts"] == [{"name": "run-dir", "mountPath": inv.env["BENCHRUN_RUN_DIR"]}]


def test_gpu_limits_selector_tolerations() -> None:
    place = Placement(
        queue_name="gpu-lq", gpus=8, cpu="32", memory="256Gi",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    )
    pod = pod_manifest(make_inv(), namespace="bench", placement=place)
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    bad = Placement(queue_name="gpu-lq", tolerations=({"key": "x", "efect": "NoSchedule"},))
    with pytest.raises(BenchrunError, match=r"placement\.tolerations\[0\].*efect"):
        pod_manifest(make_inv(), namespace="bench", placement=bad)


def test_publication_grade_is_topology_exclusive() -> None:
    place = Placement(
        queue_name="pub-lq", gpus=8, publication_grade=True,
        node_selector={"benchrun.dev/dedicated": "true"},
        tolerations=({"key": "benchrun.dev/dedicated", "operator": "Exists", "effect": "NoSchedule"},),
        topology_label="topology.kubernetes.io/zone", topology_values=("rack-a",),
        scheduler_name=SLURM_BRIDGE_SCHEDULER, slurm_partition="h200",
    )
    pod = pod_manifest(make_inv(), namespace="bench", placement=place)
    aff = pod["spec"]["affinity"]
    anti = aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{
        "labelSelector": {"matchExpressions": [{"key": "benchrun.dev/run-id", "operator": "Exists"}]},
        "topologyKey": "kubernetes.io/hostname",
    }]
    terms = aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["rack-a"]}]}]
    assert pod["spec"]["schedulerName"] == "slurm-bridge-scheduler"
    assert pod["metadata"]["annotations"] == {
        "slurmjob.slinky.slurm.net/timelimit": "2",  # 90 s rounded up to whole minutes
        "slurmjob.slinky.slurm.net/partition": "h200",
        "slurmjob.slinky.slurm.net/exclusive": "true",
    }
    # Realism grade: no anti-affinity, no exclusivity annotation.
    real = pod_manifest(make_inv(), namespace="bench",
                        placement=Placement(queue_name="lq", scheduler_name=SLURM_BRIDGE_SCHEDULER))
    assert "affinity" not in real["spec"]
    assert real["metadata"]["annotations"] == {"slurmjob.slinky.slurm.net/timelimit": "2"}


def test_publication_grade_refuses_what_it_cannot_guarantee() -> None:
    place = Placement(queue_name="pub-lq", publication_grade=True, node_selector={"pool": "bench"})
    with pytest.raises(BenchrunError, match=r"spec\.layers\[micro\]\.suites\[gemm\]\.image: .*digest"):
        pod_manifest(make_inv(image="ghcr.io/example/benchrun:latest"), namespace="bench", placement=place)
    with pytest.raises(BenchrunError, match=r"placement\.node_selector: publication grade needs dedicated nodes"):
        pod_manifest(make_inv(), namespace="bench",
                     placement=Placement(queue_name="pub-lq", publication_grade=True))


def test_missing_image_names_the_field() -> None:
    with pytest.raises(BenchrunError, match=r"spec\.layers\[micro\]\.suites\[gemm\]\.image: a Kubernetes launch needs"):
        pod_manifest(make_inv(image=None), namespace="bench", placement=PLACE)


@pytest.mark.parametrize(
    ("inv_over", "place", "labels", "field"),
    [
        ({"suite": "s" * 64}, PLACE, None, r"spec\.layers\[micro\]\.suites\[s+\]\.name"),
        ({}, Placement(queue_name="team/queue"), None, r"placement\.queue_name"),
        ({}, Placement(queue_name="lq", priority_class="-high"), None, r"placement\.priority_class"),
        ({}, PLACE, {"benchrun.dev/cadence": "night ly"}, r"run label benchrun\.dev/cadence"),
        ({}, PLACE, {"Bad_Prefix.io/x": "v"}, r"run label key"),
        ({}, Placement(queue_name="lq", node_selector={"pool": "a/b"}), None, r"placement\.node_selector\[pool\]"),
    ],
)
def test_bad_label_values_name_the_field(inv_over: dict, place: Placement, labels: Any, field: str) -> None:
    with pytest.raises(BenchrunError, match=field):
        pod_manifest(make_inv(**inv_over), namespace="bench", run_labels=labels, placement=place)


def test_long_names_stay_dns_labels() -> None:
    long_run = "a-very-long-benchmark-run-name-that-fills-63-20261130100000-ab"
    inv = make_inv(run_id=long_run, suite="Serving_Latency_Sweep_With_A_Long_Name")
    prefix = pod_name_prefix(inv)
    assert len(prefix) <= 58 and prefix.endswith("-serving-latency-sweep-wi-r2-")
    assert prefix.startswith("a-very-long") and prefix.islower()
    # Two long run ids that differ only where they were cut keep different prefixes.
    assert pod_name_prefix(make_inv(run_id=long_run)) != pod_name_prefix(make_inv(run_id=long_run[:-1] + "c"))


def test_manifest_is_a_valid_v1_pod() -> None:
    """The Kubernetes 1.34 OpenAPI schema (strict: no unknown fields) and the client model."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    place = Placement(
        queue_name="pub-lq", gpus=8, cpu="16", memory="64Gi", publication_grade=True,
        node_selector={"pool": "bench"}, tolerations=({"key": "pool", "operator": "Equal", "value": "bench", "effect": "NoSchedule"},),
        topology_label="topology.kubernetes.io/zone", topology_values=("z1",),
        scheduler_name=SLURM_BRIDGE_SCHEDULER, slurm_partition="gpu", service_account="bench-runner",
    )
    pod = pod_manifest(make_inv(), namespace="bench", placement=place, extra_env={"DAGSTER_PIPES_CONTEXT": "x"})
    kubernetes_validate.validate(pod, "1.34.0", strict=True)
    client = ApiClient()
    model = client._ApiClient__deserialize(pod, "V1Pod")  # the client's own decoder
    assert client.sanitize_for_serialization(model) == pod  # nothing misspelled, nothing dropped


# -- the pod lifecycle against a fake API --------------------------------------------------

T_CREATED = "2026-11-30T10:00:00Z"


class FakeLogResponse:
    """What ``read_namespaced_pod_log(..., _preload_content=False)`` returns: a stream."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.released = False

    def stream(self, amt: int):
        for i in range(0, len(self.data), 7):  # small chunks: lines cross chunk borders
            yield self.data[i:i + 7]

    def release_conn(self) -> None:
        self.released = True


class FakeCoreV1:
    """The four CoreV1Api calls the launcher makes. ``statuses`` are pod statuses in the
    server's JSON spelling, one per read (the last one repeats); every object handed back is
    decoded by the real client's model decoder, as ``CoreV1Api`` would."""

    def __init__(self, statuses: list[dict[str, Any]], log: bytes = b"", *, create_error: ApiException | None = None,
                 log_error: ApiException | None = None) -> None:
        self.statuses = statuses
        self.log = log
        self.create_error = create_error
        self.log_error = log_error
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str]] = []
        self.reads = 0
        self.log_reads = 0
        self.client = ApiClient()

    def _pod(self, status: dict[str, Any]) -> Any:
        body = self.created[-1]
        data = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {**body["metadata"], "name": body["metadata"]["generateName"] + "x7k2q",
                         "uid": "6f1c9a7e-0000-4000-8000-000000000001", "creationTimestamp": T_CREATED},
            "spec": {**body["spec"], "nodeName": "gpu-node-3" if status.get("phase") != "Pending" else None},
            "status": status,
        }
        return self.client._ApiClient__deserialize(data, "V1Pod")

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any], **kw: Any) -> Any:
        if self.create_error:
            raise self.create_error
        assert namespace == body["metadata"]["namespace"]
        self.created.append(json.loads(json.dumps(body)))
        return self._pod({"phase": "Pending"})

    def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Any:
        if self.deleted:
            raise ApiException(status=404, reason="Not Found")
        status = self.statuses[min(self.reads, len(self.statuses) - 1)]
        self.reads += 1
        return self._pod(status)

    def read_namespaced_pod_log(self, name: str, namespace: str, container: str, _preload_content: bool = True, **kw: Any) -> Any:
        assert container == "suite" and _preload_content is False
        self.log_reads += 1
        if self.log_error:
            raise self.log_error
        return FakeLogResponse(self.log)

    def delete_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Any:
        self.deleted.append((namespace, name))
        return None


def scheduled(at: str = "2026-11-30T10:00:02Z") -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}


def running() -> dict[str, Any]:
    return {"phase": "Running", "startTime": "2026-11-30T10:00:02Z", "conditions": [scheduled()],
            "containerStatuses": [{"name": "suite", "image": DIGEST_IMAGE, "imageID": "sha-x", "ready": True,
                                   "restartCount": 0,
                                   "state": {"running": {"startedAt": "2026-11-30T10:00:05Z"}}}]}


def finished(code: int, reason: str = "Completed", phase: str | None = None) -> dict[str, Any]:
    return {"phase": phase or ("Succeeded" if code == 0 else "Failed"), "startTime": "2026-11-30T10:00:02Z",
            "conditions": [scheduled()], "qosClass": "Guaranteed",
            "containerStatuses": [{"name": "suite", "image": DIGEST_IMAGE, "imageID": "sha-x", "ready": False,
                                   "restartCount": 0,
                                   "state": {"terminated": {"exitCode": code, "reason": reason,
                                                            "startedAt": "2026-11-30T10:00:05Z",
                                                            "finishedAt": "2026-11-30T10:00:09Z"}}}]}


def result_doc(status: str = "ok", reason: str | None = None, replicate: int = 2) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "run_id": RUN_ID, "suite": "gemm", "replicate": replicate,
        "benchmark_case_id": CASE, "status": status, "reason": reason, "synthetic": False,
        "started_utc": "2026-11-30T10:00:05Z", "finished_utc": "2026-11-30T10:00:09Z",
        "parameters": {"n": 256}, "context": {}, "samples": {},
        "metrics": [metric("gemm_tflops", 12.5, "TFLOP/s", "higher", "n=256")] if status == "ok" else [],
    }


def pod_log(doc: dict[str, Any] | None, extra: str = "") -> bytes:
    pipes = {"__dagster_pipes_version": "0.1", "method": "report_custom_message",
             "params": {"payload": {"kind": "metric", "name": "gemm_tflops", "value": 12.5}}}
    lines = ["warming up", json.dumps(pipes), "n=256 12.5 TFLOP/s", extra]
    if doc is not None:
        lines.append(json.dumps({RESULT_KEY: doc}))
    return ("\n".join(line for line in lines if line) + "\n").encode()


def launch(api: FakeCoreV1, tmp_path: Path, inv: Invocation | None = None, **kw: Any):
    launcher = KubernetesLauncher(api, "bench", PLACE, poll_s=0.0, sleep=lambda s: None, **kw)
    run_dir = tmp_path / "runs" / RUN_ID
    return launcher.launch(inv or make_inv(), run_dir,
                           extra_env={"DAGSTER_PIPES_CONTEXT": "e30=", "DAGSTER_PIPES_MESSAGES": "local-file"}), run_dir


def test_success_writes_log_result_and_pod_timeline(tmp_path: Path) -> None:
    api = FakeCoreV1([{"phase": "Pending"}, running(), running(), finished(0)], pod_log(result_doc()))
    res, run_dir = launch(api, tmp_path)
    assert (res.status, res.reason, res.exit_code) == ("ok", None, 0)
    assert res.log == f"raw/{RUN_ID}_gemm_r2.log"
    assert (run_dir / res.log).read_bytes() == api.log
    assert res.result == f"structured/{RUN_ID}_gemm_r2.json"
    assert json.loads((run_dir / res.result).read_text()) == result_doc()
    assert [m["name"] for m in res.metrics] == ["gemm_tflops"] and res.metrics[0]["value"] == 12.5
    timeline = res.messages[0]
    assert timeline["kind"] == "pod" and timeline["node_name"] == "gpu-node-3"
    assert timeline["pod_uid"] == "6f1c9a7e-0000-4000-8000-000000000001"
    assert (timeline["scheduled_s"], timeline["started_s"], timeline["run_s"]) == (2.0, 5.0, 4.0)
    assert timeline["qos_class"] == "Guaranteed"
    assert res.messages[1] == {"kind": "metric", "name": "gemm_tflops", "value": 12.5}
    assert json.loads((run_dir / f"raw/{RUN_ID}_gemm_r2_pod.json").read_text()) == timeline
    assert res.t_spawned == pytest.approx(1796032805.0)  # 2026-11-30T10:00:05Z
    assert api.deleted == [("bench", f"{RUN_ID}-gemm-r2-x7k2q")]
    # Pipes messages are redirected to the pod log; the context passes through.
    env = {e["name"]: e["value"] for e in api.created[0]["spec"]["containers"][0]["env"]}
    from dagster_pipes import decode_env_var
    assert decode_env_var(env["DAGSTER_PIPES_MESSAGES"]) == {"stdio": "stderr"}
    assert env["DAGSTER_PIPES_CONTEXT"] == "e30="


def test_last_result_line_wins_and_stale_result_is_removed(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / RUN_ID
    stale = run_dir / f"structured/{RUN_ID}_gemm_r2.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    early = json.dumps({RESULT_KEY: result_doc("failed", "first try")})
    api = FakeCoreV1([finished(0)], pod_log(result_doc(), extra=early))
    res, _ = launch(api, tmp_path)
    assert res.status == "ok" and json.loads(stale.read_text())["status"] == "ok"


def test_nonzero_exit_reports_code_and_suite_reason(tmp_path: Path) -> None:
    api = FakeCoreV1([running(), finished(3, reason="Error")],
                     pod_log(result_doc("failed", "ValueError: matrix too large")))
    res, run_dir = launch(api, tmp_path)
    assert res.status == "failed" and res.exit_code == 3
    assert res.reason == "exited with code 3: ValueError: matrix too large"
    assert res.result is not None and res.metrics == []
    assert api.deleted


def test_killed_by_signal_names_it(tmp_path: Path) -> None:
    api = FakeCoreV1([finished(143, reason="Error")], pod_log(None))
    res, _ = launch(api, tmp_path)
    assert res.reason == "exited with code 143 (SIGTERM)" and res.result is None


def test_oomkilled(tmp_path: Path) -> None:
    api = FakeCoreV1([running(), finished(137, reason="OOMKilled")], pod_log(None))
    res, run_dir = launch(api, tmp_path)
    assert res.status == "failed" and res.exit_code == 137
    assert res.reason == "OOMKilled (exit code 137): the container exceeded its memory limit"
    assert (run_dir / res.log).read_bytes() == api.log


def test_evicted(tmp_path: Path) -> None:
    evicted = {"phase": "Failed", "reason": "Evicted",
               "message": "The node was low on resource: memory.", "conditions": [scheduled()]}
    res, _ = launch(FakeCoreV1([running(), evicted], b""), tmp_path)
    assert res.status == "failed" and res.reason == "evicted: The node was low on resource: memory."


def test_timeout_deletes_the_pod_after_keeping_its_log(tmp_path: Path) -> None:
    api = FakeCoreV1([running()], b"step 1\nstep 2\n")
    launcher = KubernetesLauncher(api, "bench", PLACE, poll_s=0.01)
    t0 = time.perf_counter()
    res = launcher.launch(make_inv(timeout_s=0.2), tmp_path / "runs" / RUN_ID)
    assert time.perf_counter() - t0 >= 0.2
    assert res.status == "failed" and res.reason == "timed out after 0.2s; pod deleted"
    assert api.deleted == [("bench", f"{RUN_ID}-gemm-r2-x7k2q")]
    assert api.log_reads == 1
    assert (tmp_path / "runs" / RUN_ID / res.log).read_bytes() == b"step 1\nstep 2\n"


def test_deadline_exceeded_is_a_timeout(tmp_path: Path) -> None:
    gone = {"phase": "Failed", "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline", "conditions": [scheduled()]}
    res, _ = launch(FakeCoreV1([running(), gone], b"partial\n"), tmp_path)
    assert res.reason == "timed out after 90s (activeDeadlineSeconds); pod deleted"


def test_image_pull_failure(tmp_path: Path) -> None:
    waiting = {"phase": "Pending", "conditions": [scheduled()],
               "containerStatuses": [{"name": "suite", "image": DIGEST_IMAGE, "imageID": "", "ready": False,
                                      "restartCount": 0, "state": {"waiting": {
                                          "reason": "ImagePullBackOff",
                                          "message": f'Back-off pulling image "{DIGEST_IMAGE}"'}}}]}
    err = ApiException(status=400, reason="Bad Request")
    err.body = json.dumps({"message": 'container "suite" in pod is waiting to start: trying and failing to pull image'})
    api = FakeCoreV1([{"phase": "Pending"}, waiting], log_error=err)
    res, run_dir = launch(api, tmp_path)
    assert res.status == "failed" and res.exit_code is None
    assert res.reason == f'image pull failed: ImagePullBackOff: Back-off pulling image "{DIGEST_IMAGE}"'
    assert api.deleted
    assert (run_dir / res.log).read_text().startswith("benchrun: no container log (400 Bad Request: container")


def test_never_scheduled_reports_why(tmp_path: Path) -> None:
    gated = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                 "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}
    api = FakeCoreV1([gated], log_error=ApiException(status=400, reason="Bad Request"))
    launcher = KubernetesLauncher(api, "bench", PLACE, poll_s=0.01, pending_timeout_s=0.1)
    res = launcher.launch(make_inv(), tmp_path / "runs" / RUN_ID)
    assert res.reason == ("not started within 0.1s (Unschedulable: 0/4 nodes are available: "
                          "4 Insufficient nvidia.com/gpu.); pod deleted")
    assert api.deleted


def test_exit_zero_without_result_line(tmp_path: Path) -> None:
    res, _ = launch(FakeCoreV1([finished(0)], b"done\n"), tmp_path)
    assert res.status == "failed" and res.result is None
    assert res.reason == f"exited 0 but printed no {RESULT_KEY} line (see raw/{RUN_ID}_gemm_r2.log)"


def test_result_line_must_be_this_replicates_and_valid(tmp_path: Path) -> None:
    res, run_dir = launch(FakeCoreV1([finished(0)], pod_log(result_doc(replicate=1))), tmp_path)
    assert res.status == "failed" and "not ('canary-20261130100000-abcdef12', 'gemm', 2)" in res.reason
    assert not (run_dir / f"structured/{RUN_ID}_gemm_r2.json").exists()
    bad = result_doc()
    bad["metrics"][0]["value"] = "fast"
    res, run_dir = launch(FakeCoreV1([finished(0)], pod_log(bad)), tmp_path / "b")
    assert res.status == "failed" and "lacks a numeric value" in res.reason
    assert not (run_dir / f"structured/{RUN_ID}_gemm_r2.json").exists()


def test_unavailable_is_passed_through(tmp_path: Path) -> None:
    doc = result_doc("unavailable", "unavailable: no CUDA device")
    res, _ = launch(FakeCoreV1([finished(0)], pod_log(doc)), tmp_path)
    assert (res.status, res.reason) == ("unavailable", "unavailable: no CUDA device")


def test_create_refused(tmp_path: Path) -> None:
    err = ApiException(status=403, reason="Forbidden")
    err.body = json.dumps({"message": 'pods is forbidden: User "bench" cannot create resource "pods"'})
    res, run_dir = launch(FakeCoreV1([], create_error=err), tmp_path)
    assert res.status == "failed"
    assert res.reason == 'cannot create pod: 403 Forbidden: pods is forbidden: User "bench" cannot create resource "pods"'
    assert (run_dir / res.log).read_text().startswith("benchrun: cannot create pod")


def test_preflight_rejects_before_any_pod_is_created() -> None:
    api = FakeCoreV1([finished(0)])
    launcher = KubernetesLauncher(api, "bench", PLACE)
    launcher.preflight([make_inv(replicate=1), make_inv(replicate=2)])
    with pytest.raises(BenchrunError, match=r"spec\.layers\[component\]\.suites\[fio\]\.image"):
        launcher.preflight([make_inv(), make_inv(layer="component", suite="fio", image=None)])
    assert api.created == []


def test_unreachable_api_gives_up_and_deletes(tmp_path: Path) -> None:
    from urllib3.exceptions import MaxRetryError

    class Flaky(FakeCoreV1):
        def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Any:
            self.reads += 1
            raise MaxRetryError(None, "/api/v1/namespaces/bench/pods", "connection refused")

    api = Flaky([], log_error=ApiException(status=0, reason="unreachable"))
    res, _ = launch(api, tmp_path)
    assert api.reads == 5 and api.deleted
    assert res.status == "failed" and res.reason.startswith("lost the pod: 5 reads in a row failed, last MaxRetryError")


def test_cancellation_deletes_the_pod(tmp_path: Path) -> None:
    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    api = FakeCoreV1([running()])
    launcher = KubernetesLauncher(api, "bench", PLACE, poll_s=0.01, sleep=interrupt)
    with pytest.raises(KeyboardInterrupt):
        launcher.launch(make_inv(), tmp_path / "runs" / RUN_ID)
    assert api.deleted == [("bench", f"{RUN_ID}-gemm-r2-x7k2q")]


def test_keep_finished_pods_when_asked(tmp_path: Path) -> None:
    api = FakeCoreV1([finished(0)], pod_log(result_doc()))
    res, _ = launch(api, tmp_path, delete_finished=False)
    assert res.status == "ok" and api.deleted == []


# -- a real cluster ------------------------------------------------------------------------

def _real_api() -> Any:
    from kubernetes import client, config

    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config()
        api = client.CoreV1Api()
        client.VersionApi().get_code(_request_timeout=5)
    except Exception as exc:  # noqa: BLE001 - any failure here means: no cluster to test against
        pytest.skip(f"no Kubernetes API server reachable: set KUBECONFIG to run it ({type(exc).__name__})")
    return api


@pytest.mark.k8s
def test_real_cluster_runs_a_tiny_suite_pod(tmp_path: Path) -> None:
    """A pod that prints a result line; BENCHRUN_K8S_NAMESPACE / _QUEUE / _IMAGE adapt it."""
    api = _real_api()
    doc = result_doc()
    script = "import json, sys; print('hello from the pod'); print(json.dumps({%r: %s}))" % (RESULT_KEY, json.dumps(doc))
    inv = make_inv(argv=("python", "-c", script), timeout_s=300.0,
                   image=os.environ.get("BENCHRUN_K8S_IMAGE", "python:3.12-slim"))
    place = Placement(queue_name=os.environ.get("BENCHRUN_K8S_QUEUE", "benchrun"))
    launcher = KubernetesLauncher(api, os.environ.get("BENCHRUN_K8S_NAMESPACE", "default"), place, poll_s=1.0,
                                  pending_timeout_s=600.0)
    res = launcher.launch(inv, tmp_path / "runs" / RUN_ID)
    assert (res.status, res.exit_code) == ("ok", 0), res.reason
    assert "hello from the pod" in (tmp_path / "runs" / RUN_ID / res.log).read_text()
    assert res.metrics[0]["value"] == 12.5
    assert res.messages[0]["node_name"] and res.messages[0]["started_s"] is not None
