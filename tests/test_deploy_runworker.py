"""The run worker Job that the Dagster chart's K8sRunLauncher creates with deploy/helm/values.yaml,
built by the installed dagster-k8s (its config schema, ``K8sRunLauncher.launch_run``: container
context resolution, ``construct_dagster_k8s_job``), with only the API call captured: for a run the
daemon launches from the code server's origin, and for one the BenchmarkRun operator queued. Each
starts in ``benchrun-runs`` as ``benchrun-run``, from the code location's image, with its
environment, and deploy/'s Roles (the harness's Policy) allow what the run worker and the accounts
that stop it call there.

No Helm here: what the chart renders from the values is written out below, each function naming
the chart template it follows (chart 1.13.27, the version values.yaml pins), and refusing a values
key it does not model.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Any, Iterator
from unittest import mock

import pytest
import yaml

from conftest import ROOT
from helpers import QUEUED
from kharness.rbac import Call, Policy, deploy_rbac_docs, sa_user

VALUES = ROOT / "deploy/helm/values.yaml"
BASE = ROOT / "deploy/kustomize/base"
RELEASE, RELEASE_NAMESPACE = "dagster", "benchrun"  # helm upgrade --install dagster ... -n benchrun
FULLNAME = RELEASE  # dagster.fullname: the release name already contains the chart's name, "dagster"
RUN_ID = "0b4f6c52-0000-4000-8000-000000000001"


def values() -> dict[str, Any]:
    return yaml.safe_load(VALUES.read_text())


def image_name(image: dict[str, Any]) -> str:
    return f"{image['repository']}:{image['tag']}"


def _names(refs: list[dict[str, Any]] | None) -> list[str]:
    return [r["name"] for r in refs or [] if "name" in r]


# -- what the chart renders --------------------------------------------------------------------

RUN_K8S_CONFIG = {"containerConfig": "container_config", "podSpecConfig": "pod_spec_config",
                  "podTemplateSpecMetadata": "pod_template_spec_metadata", "jobSpecConfig": "job_spec_config",
                  "jobMetadata": "job_metadata"}


def chart_run_launcher(v: dict[str, Any]) -> dict[str, Any]:
    """The instance's ``run_launcher`` as the chart writes it into dagster.yaml
    (templates/helpers/instance/_run-launcher.tpl, ``dagsterYaml.runLauncher.k8s``)."""
    assert v["runLauncher"]["type"] == "K8sRunLauncher"
    k = v["runLauncher"]["config"]["k8sRunLauncher"]
    modelled = {"loadInclusterConfig", "kubeconfigFile", "jobNamespace", "imagePullPolicy", "image", "envConfigMaps",
                "envSecrets", "envVars", "volumeMounts", "volumes", "labels", "resources", "failPodOnRunFailure",
                "schedulerName", "securityContext", "runK8sConfig"}
    assert set(k) <= modelled, f"values set {sorted(set(k) - modelled)}, which this model of the chart ignores"
    config: dict[str, Any] = {
        "load_incluster_config": k["loadInclusterConfig"],
        "job_namespace": k.get("jobNamespace") or RELEASE_NAMESPACE,
        "image_pull_policy": k["imagePullPolicy"],
        "service_account_name": v["serviceAccount"]["name"],  # dagster.serviceAccountName
        "dagster_home": v["global"]["dagsterHome"],
        "instance_config_map": f"{FULLNAME}-instance",
        "postgres_password_secret": v["global"]["postgresqlSecretName"],
    }
    if k.get("kubeconfigFile"):
        config["kubeconfig_file"] = k["kubeconfigFile"]
    if v.get("imagePullSecrets"):
        config["image_pull_secrets"] = v["imagePullSecrets"]
    if "image" in k:
        config["job_image"] = image_name(k["image"])
    for key, name in (("envConfigMaps", "env_config_maps"), ("envSecrets", "env_secrets")):
        if _names(k.get(key)):
            config[name] = _names(k.get(key))
    for key, name in (("envVars", "env_vars"), ("volumeMounts", "volume_mounts"), ("volumes", "volumes"),
                      ("labels", "labels"), ("resources", "resources"), ("securityContext", "security_context"),
                      ("schedulerName", "scheduler_name")):
        if k.get(key):
            config[name] = k[key]
    if k.get("failPodOnRunFailure"):
        config["fail_pod_on_run_failure"] = True
    run = k.get("runK8sConfig") or {}
    assert set(run) <= set(RUN_K8S_CONFIG), sorted(set(run) - set(RUN_K8S_CONFIG))
    if run:
        config["run_k8s_config"] = {snake: run[camel] for camel, snake in RUN_K8S_CONFIG.items() if run.get(camel)}
    return config


def chart_code_server_env(v: dict[str, Any]) -> dict[str, str]:
    """What the chart puts in the code server's environment that ends up on a run's origin
    (charts/dagster-user-deployments/templates/deployment-user.yaml): ``DAGSTER_CURRENT_IMAGE``
    always; ``DAGSTER_CONTAINER_CONTEXT`` when ``includeConfigInLaunchedRuns`` is on (its default),
    built as helpers/_helpers.tpl ``dagsterUserDeployments.k8sContainerContext`` does."""
    user = v["dagster-user-deployments"]
    [dep] = user["deployments"]
    env = {"DAGSTER_CURRENT_IMAGE": image_name(dep["image"])}
    include = dep.get("includeConfigInLaunchedRuns") or {"enabled": True}
    if not include.get("enabled"):
        return env
    k8s: dict[str, Any] = {"image_pull_policy": dep["image"]["pullPolicy"]}
    if v.get("imagePullSecrets"):
        k8s["image_pull_secrets"] = v["imagePullSecrets"]
    k8s["env_config_maps"] = [f"{FULLNAME}-{dep['name']}-user-env", *_names(dep.get("envConfigMaps"))]
    if _names(dep.get("envSecrets")):
        k8s["env_secrets"] = _names(dep.get("envSecrets"))
    for key, name in (("volumeMounts", "volume_mounts"), ("volumes", "volumes"), ("labels", "labels"),
                      ("resources", "resources"), ("schedulerName", "scheduler_name")):
        if dep.get(key):
            k8s[name] = dep[key]
    k8s["namespace"] = RELEASE_NAMESPACE
    k8s["service_account_name"] = ((v.get("global") or {}).get("serviceAccountName")
                                   or (user.get("serviceAccount") or {}).get("name")
                                   or f"{FULLNAME}-user-deployments")
    if isinstance(dep.get("env"), list) and dep["env"]:
        k8s["env"] = dep["env"]
    pod: dict[str, Any] = {}
    if dep.get("sidecarContainers"):
        pod["containers"] = dep["sidecarContainers"]
    if dep.get("initContainers"):
        pod["init_containers"] = dep["initContainers"]
    if pod:
        k8s["run_k8s_config"] = {"pod_spec_config": pod}
    env["DAGSTER_CONTAINER_CONTEXT"] = json.dumps({"k8s": k8s})
    return env


def kustomized() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run([kubectl, "kustomize", str(BASE)], capture_output=True, text=True, check=True, timeout=60)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


# -- dagster-k8s, with the chart's configuration ------------------------------------------------

@contextmanager
def chart_instance(v: dict[str, Any]) -> Iterator[Any]:
    """A Dagster instance whose run launcher is the chart's (through dagster's config schema) and
    whose coordinator queues (the chart's); its in-cluster credentials are not loaded."""
    import dagster as dg

    overrides = {**QUEUED, "run_launcher": {"module": "dagster_k8s", "class": "K8sRunLauncher",
                                            "config": chart_run_launcher(v)}}
    with mock.patch("kubernetes.config.load_incluster_config"), dg.instance_for_test(overrides=overrides) as inst:
        assert type(inst.run_launcher).__name__ == "K8sRunLauncher"
        yield inst


def launched_job(instance: Any, run: Any) -> tuple[str, dict[str, Any]]:
    """(namespace, Job) that ``K8sRunLauncher.launch_run`` sends to the API server for ``run``."""
    from dagster._core.launcher import LaunchRunContext
    from kubernetes.client import ApiClient

    launcher = instance.run_launcher
    with mock.patch.object(launcher._api_client, "create_namespaced_job_with_retries") as create:
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    [call] = create.call_args_list
    return call.kwargs["namespace"], ApiClient().sanitize_for_serialization(call.kwargs["body"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def code_server_origin(tmp_path_factory) -> Any:
    """The benchmark job's origin as the chart's code server gives it to the daemon: ``dagster
    code-server start`` with the values' arguments and the environment the chart sets."""
    import dagster as dg
    from dagster._core.remote_origin import GrpcServerCodeLocationOrigin

    from benchrun.submit import JOB_NAME

    v = values()
    [dep] = v["dagster-user-deployments"]["deployments"]
    port = free_port()
    home = tmp_path_factory.mktemp("code-server-home")
    env = {k: val for k, val in os.environ.items() if k not in ("DAGSTER_CURRENT_IMAGE", "DAGSTER_CONTAINER_CONTEXT")}
    env.update(chart_code_server_env(v), PYTHONPATH=str(ROOT), DAGSTER_HOME=str(home), BENCHRUN_HOME=str(home))
    cmd = [sys.executable, "-m", "dagster", "code-server", "start", "-h", "127.0.0.1", "-p", str(port),
           *dep["codeServerArgs"]]
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with dg.instance_for_test() as instance:
            origin = GrpcServerCodeLocationOrigin(host="127.0.0.1", port=port, location_name=dep["name"])
            deadline = time.monotonic() + 180
            while True:
                try:
                    with origin.create_location(instance) as location:
                        [job] = [r.get_full_job(JOB_NAME) for r in location.get_repositories().values()
                                 if r.has_job(JOB_NAME)]
                        yield job.get_python_origin(), job.get_remote_origin()
                        break
                except Exception:
                    if server.poll() is not None:
                        raise AssertionError(f"the code server exited: {server.stderr.read().decode()[-3000:]}")
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # never left running (its gRPC child ends on its heartbeat)
            server.kill()
            server.wait(timeout=30)


# -- what the run worker may call ---------------------------------------------------------------

def assert_rbac_allows_the_run_worker(namespace: str, job: dict[str, Any]) -> None:
    """deploy/'s Roles grant, to the run worker Job's service account in its namespace, the calls
    the launcher makes (tests/test_rbac_harness.py records them on the harness), in the namespace
    its env launches suites in; and to the accounts that stop run workers (the chart's, the
    code location's sensor, the operator) the calls K8sRunLauncher makes on that Job."""
    policy = Policy(deploy_rbac_docs(BASE))
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    suites = env["BENCHRUN_LAUNCHER_NAMESPACE"]
    worker = sa_user(namespace, pod["serviceAccountName"])
    calls = [Call(worker, verb, group, resource, sub, suites) for verb, group, resource, sub in (
        ("create", "batch", "jobs", None), ("get", "batch", "jobs", None), ("list", "batch", "jobs", None),
        ("delete", "batch", "jobs", None), ("get", "batch", "jobs", "status"),
        ("create", "jobset.x-k8s.io", "jobsets", None), ("get", "jobset.x-k8s.io", "jobsets", None),
        ("list", "jobset.x-k8s.io", "jobsets", None), ("delete", "jobset.x-k8s.io", "jobsets", None),
        ("list", "", "pods", None), ("get", "", "pods", "log"),
        ("list", "kueue.x-k8s.io", "workloads", None), ("get", "kueue.x-k8s.io", "localqueues", None))]
    calls.append(Call(worker, "get", "", "pods", None, namespace))  # its own pod: the suites' Jobs' owner
    calls.append(Call(worker, "patch", "benchmarking.aisp.dev", "benchmarkruns", "status", "team-a"))
    chart = sa_user(RELEASE_NAMESPACE, values()["serviceAccount"]["name"])
    calls += [Call(chart, verb, group, resource, sub, namespace) for verb, group, resource, sub in (
        ("create", "batch", "jobs", None), ("get", "batch", "jobs", "status"), ("delete", "batch", "jobs", None),
        ("list", "", "pods", None), ("delete", "", "pods", None))]
    for stopper in ("benchrun", "benchrun-operator"):  # terminate(): the sensor's and the operator's
        calls += [Call(sa_user(RELEASE_NAMESPACE, stopper), verb, group, resource, None, namespace)
                  for verb, group, resource in (("delete", "batch", "jobs"), ("list", "", "pods"),
                                                ("delete", "", "pods"))]
    refused = [c.what + f" as {c.user}" for c in policy.denied(calls)]
    assert not refused, "deploy/'s Roles refuse: " + "; ".join(refused)


def assert_a_run_worker(namespace: str, job: dict[str, Any], image: str) -> None:
    import kubernetes_validate

    v = values()
    k8s = v["runLauncher"]["config"]["k8sRunLauncher"]
    [code] = v["dagster-user-deployments"]["deployments"]
    kubernetes_validate.validate(job, kubernetes_validate.latest_version(), strict=True)
    assert namespace == k8s["jobNamespace"] == "benchrun-runs"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == k8s["runK8sConfig"]["podSpecConfig"]["serviceAccountName"] == "benchrun-run"
    [container] = pod["containers"]
    assert container["image"] == image
    env = {e["name"]: e for e in container.get("env") or []}
    for want in code["env"]:  # every variable of the code location, values and secret references alike
        assert env.get(want["name"]) == want, want["name"]
    assert env["BENCHRUN_LAUNCHER_NAMESPACE"]["value"] == namespace  # its suites beside it
    secrets = [f["secretRef"]["name"] for f in container.get("envFrom") or [] if "secretRef" in f]
    assert set(_names(code["envSecrets"])) <= set(secrets)
    assert "DAGSTER_PG_PASSWORD" in env  # the instance's Postgres, from the chart's Secret
    assert_rbac_allows_the_run_worker(namespace, job)
    # the namespace's Pod Security level (deploy/kustomize) admits the pod
    from kharness.podsecurity import ENFORCE_LABEL, violations

    [ns] = [d for d in kustomized() if d["kind"] == "Namespace" and d["metadata"]["name"] == namespace]
    assert violations(pod, ns["metadata"]["labels"][ENFORCE_LABEL]) == []


# -- the tests ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_run_the_daemon_launches_gets_its_worker_in_benchrun_runs_as_benchrun_run(code_server_origin, bench_home):
    """The daemon's runs (schedules, sensors, the UI) carry the code server's origin: the image the
    chart sets and, were ``includeConfigInLaunchedRuns`` on, a container context whose namespace
    and service account (the code location's) would win over the run launcher's."""
    import dagster as dg
    from dagster._core.test_utils import create_run_for_test

    from benchrun.submit import JOB_NAME

    python_origin, remote_origin = code_server_origin
    v = values()
    [dep] = v["dagster-user-deployments"]["deployments"]
    assert python_origin.repository_origin.container_image == image_name(dep["image"])
    with chart_instance(v) as instance:
        run = create_run_for_test(instance, job_name=JOB_NAME, run_id=RUN_ID, status=dg.DagsterRunStatus.STARTING,
                                  job_code_origin=python_origin, remote_job_origin=remote_origin)
        namespace, job = launched_job(instance, run)
    assert_a_run_worker(namespace, job, image_name(dep["image"]))


def test_a_run_the_operator_queues_gets_the_code_locations_image_and_env(bench_home, monkeypatch):
    """The operator creates runs from an in-process origin: with the operator Deployment's
    environment, the run worker the daemon then starts has the code location's image (none
    would be refused by the API server: the values set no launcher image) and its environment."""
    import dagster as dg

    from benchrun.controller.dagster_runs import DagsterRuns
    from benchrun.controller.status import ResourceRef
    from helpers import dequeue

    v = values()
    [dep] = v["dagster-user-deployments"]["deployments"]
    assert "image" not in v["runLauncher"]["config"]["k8sRunLauncher"]  # no fallback: the origin's or none
    [operator] = [d for d in kustomized() if d["kind"] == "Deployment" and d["metadata"]["name"] == "benchrun-operator"]
    [container] = operator["spec"]["template"]["spec"]["containers"]
    op_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert op_env["DAGSTER_CURRENT_IMAGE"] == container["image"] == image_name(dep["image"])
    for key in ("DAGSTER_CURRENT_IMAGE", "DAGSTER_CONTAINER_CONTEXT", "BENCHRUN_CODE_LOCATION"):
        if key in op_env:
            monkeypatch.setenv(key, op_env[key])
        else:
            monkeypatch.delenv(key, raising=False)
    with chart_instance(v) as instance:
        ref = ResourceRef("team-a", "nightly-cr", "0b4f6c52-aaaa-4000-8000-000000000003", 1)
        run, created = DagsterRuns(instance).start(ref, "nightly-cr-20260101000000-0b4f6c52")
        assert created and run.status == dg.DagsterRunStatus.QUEUED
        namespace, job = launched_job(instance, dequeue(instance, run))
    assert_a_run_worker(namespace, job, image_name(dep["image"]))


def test_the_operator_creates_no_run_that_would_start_from_no_image(bench_home, monkeypatch):
    """Without DAGSTER_CURRENT_IMAGE and with a K8sRunLauncher that has no image of its own, the
    run would be refused by the API server when the daemon launches it: none is created."""
    from benchrun.controller.dagster_runs import DagsterRuns, container_origin
    from benchrun.controller.status import ResourceRef
    from benchrun.errors import BenchrunError

    monkeypatch.delenv("DAGSTER_CURRENT_IMAGE", raising=False)
    monkeypatch.delenv("DAGSTER_CONTAINER_CONTEXT", raising=False)
    with chart_instance(values()) as instance:
        ref = ResourceRef("team-a", "nightly-cr", "0b4f6c52-aaaa-4000-8000-000000000004", 1)
        with pytest.raises(BenchrunError, match=r"K8sRunLauncher with no job_image, and DAGSTER_CURRENT_IMAGE is not set"):
            DagsterRuns(instance).start(ref, "nightly-cr-20260101000000-0b4f6c52")
        assert instance.get_runs() == []
    monkeypatch.setenv("DAGSTER_CURRENT_IMAGE", "registry.example.com/benchrun:1")
    monkeypatch.setenv("DAGSTER_CONTAINER_CONTEXT", json.dumps({"k8s": {"env_secrets": ["extra"]}}))
    assert container_origin() == ("registry.example.com/benchrun:1", {"k8s": {"env_secrets": ["extra"]}})
    monkeypatch.setenv("DAGSTER_CONTAINER_CONTEXT", "[1]")
    with pytest.raises(BenchrunError, match="must be a JSON object"):
        container_origin()


def test_with_include_config_in_launched_runs_workers_would_start_as_the_code_location(bench_home):
    """The reason includeConfigInLaunchedRuns is off, shown through dagster-k8s: with it on, the
    container context the chart gives the code server moves run workers to the code location's
    namespace and service account, whatever the run launcher says."""
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._core.test_utils import create_run_for_test

    v = values()
    [dep] = v["dagster-user-deployments"]["deployments"]
    dep["includeConfigInLaunchedRuns"] = {"enabled": True}
    env = chart_code_server_env(v)
    repo = RepositoryPythonOrigin(executable_path="python", code_pointer=ModuleCodePointer("m", "defs", None),
                                  container_image=env["DAGSTER_CURRENT_IMAGE"],
                                  container_context=json.loads(env["DAGSTER_CONTAINER_CONTEXT"]))
    with chart_instance(v) as instance:
        run = create_run_for_test(instance, job_name="benchmark_run", run_id=RUN_ID,
                                  job_code_origin=JobPythonOrigin("benchmark_run", repo))
        namespace, job = launched_job(instance, run)
    assert (namespace, job["spec"]["template"]["spec"]["serviceAccountName"]) == (RELEASE_NAMESPACE, "benchrun")
