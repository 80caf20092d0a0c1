"""The Kubernetes launcher's Job manifests (pure) and one real-cluster test (marked k8s).
The Job lifecycle against an API server is in test_launch_kubernetes_harness.py."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from benchrun.errors import BenchrunError
from benchrun.launch.kubernetes import RESULT_KEY, KubernetesLauncher
from benchrun.launch.podspec import (
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    Placement,
    SLURM_BRIDGE_SCHEDULER,
    job_manifest,
    job_name,
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


# -- Job manifests (pure) ------------------------------------------------------------------

def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a Job, shaped like a pod (metadata + spec)."""
    return job["spec"]["template"]

def test_labels_queue_and_identity() -> None:
    job = job_manifest(make_inv(), namespace="bench", run_labels={"benchrun.dev/cadence": "nightly"},
                       placement=Placement(queue_name="bench-lq", priority_class="nightly-low"))
    labels = job["metadata"]["labels"]
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
    assert job["metadata"]["namespace"] == "bench"
    # Fixed name from run id, suite and replicate: a retried launch adopts the Job.
    assert re.fullmatch(rf"{RUN_ID}-gemm-r2-[0-9a-f]{{8}}", job["metadata"]["name"])
    assert "generateName" not in job["metadata"]
    # Kueue: created suspended, labels on the Job; the pods carry the run's labels only.
    assert job["spec"]["suspend"] is True
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] == 3600
    # (timeout + pull allowance) for the first attempt and each of the 2 evictions allowed, + pending timeout
    assert job["spec"]["activeDeadlineSeconds"] == 3 * (90 + 600) + 1800
    pod = pod_of(job)
    assert pod["metadata"]["labels"] == {k: v for k, v in labels.items() if not k.startswith("kueue.x-k8s.io/")}
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 90 + 600  # from startTime, which is before the pull
    assert "schedulerName" not in spec and "affinity" not in spec
    assert "annotations" not in pod["metadata"]
    # No priority class asked for: no label.
    plain = job_manifest(make_inv(), namespace="bench", placement=PLACE)
    assert KUEUE_PRIORITY_LABEL not in plain["metadata"]["labels"]


def test_argv_runs_directly_with_image_python() -> None:
    c = pod_of(job_manifest(make_inv(), namespace="bench", placement=PLACE))["spec"]["containers"][0]
    assert c["image"] == DIGEST_IMAGE
    assert c["command"] == ["python"]
    # Each argument stays one argument: nothing is joined into a shell string.
    assert c["args"] == ["-m", "benchrun.suites.gemm", "--note", "a b; rm -rf /"]
    other = make_inv(argv=("/opt/tools/fio", "--output-format=json"))
    c2 = pod_of(job_manifest(other, namespace="bench", placement=PLACE))["spec"]["containers"][0]
    assert c2["command"] == ["/opt/tools/fio"] and c2["args"] == ["--output-format=json"]


def test_env_is_the_invocations_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_SECRET_TOKEN", "s3cret")
    inv = make_inv()
    c = pod_of(job_manifest(inv, namespace="bench", placement=PLACE,
                            extra_env={"DAGSTER_PIPES_CONTEXT": "ctx"}))["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e}
    assert downward == {"BENCHRUN_NODE_NAME": "spec.nodeName", "BENCHRUN_POD_NAME": "metadata.name",
                        "BENCHRUN_POD_NAMESPACE": "metadata.namespace", "BENCHRUN_POD_UID": "metadata.uid"}
    assert "LAUNCHER_SECRET_TOKEN" not in env
    # Host-only values would break the image (its PATH, its TMPDIR): left to the image; HOME is the
    # pod's own writable /tmp (benchrun.launch.podsecurity), never the host's
    assert not {"PATH", "TMPDIR"} & set(env) and env["HOME"] == "/tmp"
    assert env["BENCHRUN_RUN_ID"] == RUN_ID and env["BENCHRUN_PARAMS"] == '{"n": 256}'
    assert env["BENCHRUN_RESULT_STDOUT"] == "1"
    assert env["DAGSTER_PIPES_CONTEXT"] == "ctx"
    assert set(env) == (set(inv.env) - {"PATH", "HOME", "TMPDIR"}) | {
        "BENCHRUN_RESULT_STDOUT", "DAGSTER_PIPES_CONTEXT", "BENCHRUN_CAPTURE_ENVIRONMENT", "NVIDIA_VISIBLE_DEVICES", "HOME"}
    # No GPU asked for: the NVIDIA runtime must not hand this pod every GPU of the node.
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    # The image's own working directory is kept (relative repoCommands resolve there).
    assert "workingDir" not in c
    # Without a run volume the run directory is an emptyDir; /dev/shm is memory-backed.
    assert c["volumeMounts"] == [{"name": "run-dir", "mountPath": inv.env["BENCHRUN_RUN_DIR"]},
                                 {"name": "dshm", "mountPath": "/dev/shm"}]
    vols = pod_of(job_manifest(inv, namespace="bench", placement=PLACE))["spec"]["volumes"]
    assert vols[1] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}


def test_run_volume_and_per_suite_resources() -> None:
    inv = make_inv(gpus=2, cpu="4", memory="16Gi", shm_size="8Gi")
    place = Placement(queue_name="lq", gpus=8, cpu="32", memory="256Gi", run_volume_claim="benchrun-home",
                      run_home="/srv/benchrun", service_account="bench", image_pull_secrets=("regcred",))
    pod = pod_of(job_manifest(inv, namespace="bench", placement=place))
    c = pod["spec"]["containers"][0]
    # The suite's own resources win over the launcher's defaults; requests = limits.
    assert c["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in c["env"]}
    # The run directory comes from the shared volume, at the orchestrator's path.
    assert c["volumeMounts"][0] == {"name": "run-dir", "mountPath": f"/srv/benchrun/runs/{RUN_ID}",
                                    "subPath": f"runs/{RUN_ID}"}
    assert pod["spec"]["volumes"][0] == {"name": "run-dir", "persistentVolumeClaim": {"claimName": "benchrun-home"}}
    assert pod["spec"]["volumes"][1]["emptyDir"]["sizeLimit"] == "8Gi"
    assert pod["spec"]["serviceAccountName"] == "bench"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    # Defaults apply to a suite that sets nothing.
    c2 = pod_of(job_manifest(make_inv(), namespace="bench", placement=place))["spec"]["containers"][0]
    assert c2["resources"]["limits"] == {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}
    with pytest.raises(BenchrunError, match=r"launcher\.run_home"):
        job_manifest(make_inv(), namespace="bench", placement=Placement(queue_name="lq", run_volume_claim="x",
                                                                        run_home="/elsewhere"))


def test_gpu_limits_selector_tolerations() -> None:
    place = Placement(
        queue_name="gpu-lq", gpus=8, cpu="32", memory="256Gi",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
    )
    pod = pod_of(job_manifest(make_inv(), namespace="bench", placement=place))
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"}
    assert c["resources"]["requests"] == c["resources"]["limits"]
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    bad = Placement(queue_name="gpu-lq", tolerations=({"key": "x", "efect": "NoSchedule"},))
    with pytest.raises(BenchrunError, match=r"placement\.tolerations\[0\].*efect"):
        job_manifest(make_inv(), namespace="bench", placement=bad)


def test_publication_grade_is_topology_exclusive() -> None:
    place = Placement(
        queue_name="pub-lq", gpus=8, cpu="16", memory="64Gi", publication_grade=True,
        node_selector={"benchrun.dev/dedicated": "true"},
        tolerations=({"key": "benchrun.dev/dedicated", "operator": "Exists", "effect": "NoSchedule"},),
        topology_label="topology.kubernetes.io/zone", topology_values=("rack-a",),
        scheduler_name=SLURM_BRIDGE_SCHEDULER, slurm_partition="h200",
    )
    job = job_manifest(make_inv(), namespace="bench", placement=place)
    pod = pod_of(job)
    aff = pod["spec"]["affinity"]
    anti = aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{
        "labelSelector": {"matchExpressions": [{"key": "benchrun.dev/run-id", "operator": "Exists"}]},
        "topologyKey": "kubernetes.io/hostname",
    }]
    terms = aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["rack-a"]}]}]
    assert pod["spec"]["schedulerName"] == "slurm-bridge-scheduler"
    # slurm-bridge reads a Job's own annotations, never its pod template's (docs/workload.md)
    assert job["metadata"]["annotations"] == {
        "slurmjob.slinky.slurm.net/timelimit": "12",  # the pod's deadline, 90 s + the 600 s pull allowance
        "slurmjob.slinky.slurm.net/partition": "h200",
        "slurmjob.slinky.slurm.net/exclusive": "true",
    }
    assert "annotations" not in pod["metadata"]
    # Realism grade: no anti-affinity, no exclusivity annotation.
    real_job = job_manifest(make_inv(), namespace="bench",
                            placement=Placement(queue_name="lq", scheduler_name=SLURM_BRIDGE_SCHEDULER))
    assert "affinity" not in pod_of(real_job)["spec"]
    assert real_job["metadata"]["annotations"] == {"slurmjob.slinky.slurm.net/timelimit": "12"}


def test_publication_grade_refuses_what_it_cannot_guarantee() -> None:
    place = Placement(queue_name="pub-lq", publication_grade=True, node_selector={"pool": "bench"},
                      cpu="8", memory="32Gi")
    with pytest.raises(BenchrunError, match=r"publication grade needs Guaranteed QoS"):
        job_manifest(make_inv(), namespace="bench",
                     placement=Placement(queue_name="pub-lq", publication_grade=True, node_selector={"pool": "b"}))
    with pytest.raises(BenchrunError, match=r"spec\.layers\[micro\]\.suites\[gemm\]\.image: .*digest"):
        job_manifest(make_inv(image="ghcr.io/example/benchrun:latest"), namespace="bench", placement=place)
    with pytest.raises(BenchrunError, match=r"placement\.node_selector: publication grade needs dedicated nodes"):
        job_manifest(make_inv(), namespace="bench",
                     placement=Placement(queue_name="pub-lq", publication_grade=True))


def test_missing_image_names_the_field() -> None:
    with pytest.raises(BenchrunError, match=r"spec\.layers\[micro\]\.suites\[gemm\]\.image: a Kubernetes launch needs"):
        job_manifest(make_inv(image=None), namespace="bench", placement=PLACE)


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
        job_manifest(make_inv(**inv_over), namespace="bench", run_labels=labels, placement=place)


def test_long_names_stay_dns_labels() -> None:
    long_run = "a-very-long-benchmark-run-name-that-fills-63-20261130100000-ab"
    inv = make_inv(run_id=long_run, suite="Serving_Latency_Sweep_With_A_Long_Name")
    name = job_name(inv)
    assert len(name) <= 52 and re.fullmatch(r"a-very-long[a-z0-9-]*-serving-latency-r2-[0-9a-f]{8}", name), name
    assert name.startswith("a-very-long") and name.islower()
    # Two long run ids that differ only where they were cut keep different names.
    assert job_name(make_inv(run_id=long_run)) != job_name(make_inv(run_id=long_run[:-1] + "c"))
    assert job_name(inv) == job_name(inv)  # fixed: the same invocation, the same Job


def test_suites_that_shorten_alike_get_different_job_names() -> None:
    """The name is lowercased, [a-z0-9-] only, cut to fit: the digest of (run id, layer, suite,
    replicate) keeps apart suites that would otherwise share a Job (and one adopt the other's)."""
    pairs = [("gemm_fp16", "gemm.fp16"), ("GEMM", "gemm"),
             ("allreduce_bandwidth_large_v1", "allreduce_bandwidth_large_v2")]
    for a, b in pairs:
        assert job_name(make_inv(suite=a)) != job_name(make_inv(suite=b)), (a, b)
    assert job_name(make_inv(layer="micro")) != job_name(make_inv(layer="component"))
    names = [job_name(make_inv(suite=s, replicate=r)) for a, b in pairs for s in (a, b) for r in (1, 2)]
    assert len(set(names)) == len(names) and all(len(n) <= 52 and re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", n)
                                                  for n in names)


def test_manifest_is_a_valid_v1_job() -> None:
    """The Kubernetes 1.34 OpenAPI schema (strict: no unknown fields) and the client model."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    place = Placement(
        queue_name="pub-lq", gpus=8, cpu="16", memory="64Gi", publication_grade=True,
        node_selector={"pool": "bench"}, tolerations=({"key": "pool", "operator": "Equal", "value": "bench", "effect": "NoSchedule"},),
        topology_label="topology.kubernetes.io/zone", topology_values=("z1",),
        scheduler_name=SLURM_BRIDGE_SCHEDULER, slurm_partition="gpu", service_account="bench-runner",
        run_volume_claim="home", run_home="/srv/benchrun", image_pull_secrets=("regcred",), env_secret="s3-creds",
    )
    job = job_manifest(make_inv(), namespace="bench", placement=place, extra_env={"DAGSTER_PIPES_CONTEXT": "x"},
                       owner={"apiVersion": "v1", "kind": "Pod", "name": "run-worker", "uid": "u-1"})
    kubernetes_validate.validate(job, "1.34.0", strict=True)
    client = ApiClient()
    model = client._ApiClient__deserialize(job, "V1Job")  # the client's own decoder
    assert client.sanitize_for_serialization(model) == job  # nothing misspelled, nothing dropped
    assert job["spec"]["template"]["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    # and dagster-k8s's strict model builder accepts it (it names unknown keys)
    assert KubernetesLauncher._model(job).spec.template.spec.containers[0].name == "suite"
    bad = json.loads(json.dumps(job))
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(BenchrunError, match="imagePullPolcy"):
        KubernetesLauncher._model(bad)


def result_doc(status: str = "ok", reason: str | None = None, replicate: int = 2) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "run_id": RUN_ID, "suite": "gemm", "replicate": replicate,
        "benchmark_case_id": CASE, "status": status, "reason": reason, "synthetic": False,
        "started_utc": "2026-11-30T10:00:05Z", "finished_utc": "2026-11-30T10:00:09Z",
        "parameters": {"n": 256}, "context": {}, "samples": {},
        "metrics": [metric("gemm_tflops", 12.5, "TFLOP/s", "higher", "n=256")] if status == "ok" else [],
    }


def _real_api() -> Any:
    from kubernetes import client, config

    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
        else:
            config.load_kube_config()
        api = client.ApiClient()
        client.VersionApi(api).get_code(_request_timeout=5)
    except Exception as exc:  # noqa: BLE001 - any failure here means: no cluster to test against
        pytest.skip(f"no Kubernetes API server reachable: set KUBECONFIG to run it ({type(exc).__name__})")
    return api


@pytest.mark.k8s
def test_real_cluster_runs_a_tiny_suite_job(tmp_path: Path) -> None:
    """A Job that prints a result line, admitted by Kueue; BENCHRUN_K8S_NAMESPACE / _QUEUE /
    _IMAGE adapt it."""
    from kubernetes import client

    api = _real_api()
    doc = result_doc()
    script = "import json, sys; print('hello from the pod'); print(json.dumps({%r: %s}))" % (RESULT_KEY, json.dumps(doc))
    inv = make_inv(argv=("python", "-c", script), timeout_s=300.0,
                   image=os.environ.get("BENCHRUN_K8S_IMAGE", "python:3.12-slim"))
    place = Placement(queue_name=os.environ.get("BENCHRUN_K8S_QUEUE", "benchrun"), pending_timeout_s=600.0)
    launcher = KubernetesLauncher(client.BatchV1Api(api), client.CoreV1Api(api),
                                  os.environ.get("BENCHRUN_K8S_NAMESPACE", "default"), place, poll_s=1.0,
                                  custom_api=client.CustomObjectsApi(api))
    res = launcher.launch(inv, tmp_path / "runs" / RUN_ID)
    assert (res.status, res.exit_code) == ("ok", 0), res.reason
    assert "hello from the pod" in (tmp_path / "runs" / RUN_ID / res.log).read_text()
    assert res.metrics[0]["value"] == 12.5
    assert res.messages[0]["node_name"] and res.messages[0]["started_s"] is not None
    # Kueue admitted the Workload (its condition times are the scheduler timeline)
    assert res.messages[0]["admitted_utc"] and res.scheduler_run_id
