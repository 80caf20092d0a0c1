"""benchrun preflight against the harness: ok on the shipped deploy, and each missing piece named."""

from __future__ import annotations

import copy
import os

import pytest

from benchrun.preflight import LAUNCHER_ACCESS, preflight
from conftest import ROOT
from kharness.rbac import Policy, deploy_rbac_docs
from test_store_helpers import s3_env  # noqa: F401  (fixture)

BASE = ROOT / "deploy/kustomize/base"
CRD = BASE / "benchmarkrun-crd.yaml"
EXAMPLE = ROOT / "deploy/examples/canary-gpu.yaml"
LANES = {"canary": 100, "nightly": 200, "pre-release": 300, "publication": 1000}


def report(checks) -> dict[str, tuple[bool | None, str]]:
    return {c.name: (c.ok, c.line()) for c in checks}


@pytest.fixture
def deployed(kcluster_factory, monkeypatch):
    """The harness with what deploy/ installs: CRD, RBAC, the lanes' queues and priority classes."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("BENCHRUN_SHARED_STATE", raising=False)
    for key in [k for k in os.environ if k.startswith("BENCHRUN_LAUNCHER_")]:
        monkeypatch.delenv(key)
    cluster = kcluster_factory(namespace="benchrun-runs", crds=[CRD], rbac=Policy(deploy_rbac_docs(BASE)),
                               queues={q: {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "16"} for q in LANES},
                               priority_classes={f"benchrun-{q}": v for q, v in LANES.items()})
    return cluster


def test_preflight_is_ok_on_the_shipped_deploy_and_names_what_is_removed(deployed, bench_home):
    checks = report(preflight(EXAMPLE))
    missing = [line for ok, line in checks.values() if ok is False]
    assert not missing, missing
    assert checks["LocalQueue canary"][0] and checks["WorkloadPriorityClass benchrun-canary"][0]
    assert checks["GPU nodes"][0] and "2 node(s) with >= 1 allocatable nvidia.com/gpu" in checks["GPU nodes"][1]
    assert checks["access of benchrun-run"][0]
    assert checks["JobSet (v1alpha2)"][0] is None or checks["JobSet (v1alpha2)"][0]

    from kubernetes import client

    admin = client.CustomObjectsApi(deployed.api_client())
    # a Role rule removed: the launcher's call is named
    docs = copy.deepcopy(deploy_rbac_docs(BASE))
    for doc in docs:
        if doc["kind"] == "Role" and doc["metadata"]["name"] == "benchrun-run-worker":
            for rule in doc["rules"]:
                rule["resources"] = [r for r in rule["resources"] if r != "jobs/status"]
    deployed.enforce(Policy(docs))
    ok, line = report(preflight(EXAMPLE))["access of benchrun-run"]
    assert ok is False and "not allowed: get jobs/status.batch" in line and "Role benchrun-run-worker" in line
    # the run's LocalQueue removed
    admin.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "benchrun-runs", "localqueues", "canary")
    ok, line = report(preflight(EXAMPLE))["LocalQueue canary"]
    assert ok is False and "not in benchrun-runs" in line and "kueue.yaml" in line
    # no GPU left on any node
    core = client.CoreV1Api(deployed.api_client())
    for node in ("node-a", "node-b"):
        core.patch_node_status(node, {"status": {"allocatable": {"nvidia.com/gpu": "0"}}})
    ok, line = report(preflight(EXAMPLE))["GPU nodes"]
    assert ok is False and "0 node(s) with >= 1 allocatable nvidia.com/gpu" in line


def test_preflight_names_a_missing_crd_and_exits_non_zero(kcluster_factory, bench_home, monkeypatch):
    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kcluster_factory(namespace="benchrun-runs")  # no BenchmarkRun CRD, no deploy queues
    out = CliRunner().invoke(app, ["preflight", str(EXAMPLE)])
    assert out.exit_code == 1, out.output
    assert "missing   the BenchmarkRun CRD: benchmarking.aisp.dev/v1alpha1 benchmarkruns not served" in out.output
    assert "kubectl apply -k deploy/kustomize/base" in out.output and "missing   LocalQueue canary" in out.output


def test_the_access_preflight_checks_is_the_run_worker_role() -> None:
    [role] = [d for d in deploy_rbac_docs(BASE) if d["kind"] == "Role" and d["metadata"]["name"] == "benchrun-run-worker"]
    granted = {(v, g, r.partition("/")[0], r.partition("/")[2]) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert granted == set(LAUNCHER_ACCESS)


def test_preflight_checks_the_way_back_for_the_suites_files(deployed, bench_home, monkeypatch, s3_env):  # noqa: F811
    """With the Helm values' launcher env: the outputs bucket and the pods' credentials Secret."""
    import boto3
    import yaml

    [code] = yaml.safe_load((ROOT / "deploy/helm/values.yaml").read_text())["dagster-user-deployments"]["deployments"]
    for e in code["env"]:
        if e["name"].startswith("BENCHRUN_LAUNCHER_"):
            monkeypatch.setenv(e["name"], e["value"])
    assert report(preflight(EXAMPLE))["suite outputs"][0] is False  # no bucket yet
    s3 = boto3.client("s3", endpoint_url=s3_env)
    s3.create_bucket(Bucket="benchrun-artifacts")
    ok, line = report(preflight(EXAMPLE))["suite outputs"]  # the Pipes messages' bucket of its own is missing
    assert ok is False and "Pipes messages' bucket benchrun-pipes" in line and "step 1" in line, line
    s3.create_bucket(Bucket="benchrun-pipes")
    ok, line = report(preflight(EXAMPLE))["suite outputs"]
    assert ok is False and "Secret benchrun-runs/benchrun-s3-pods (the pods' S3 credentials) is missing" in line
    assert "kubectl -n benchrun-runs create secret generic benchrun-s3-pods" in line
    deployed.create("secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "benchrun-s3-pods"},
                                "stringData": {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}})
    ok, line = report(preflight(EXAMPLE))["suite outputs"]
    assert ok is True and "s3://benchrun-artifacts/benchrun" in line, line


def test_preflight_reviews_every_account_of_the_deployment_and_names_a_removed_role(deployed, bench_home):
    """Issue 22: preflight reviewed only the run workers' calls; removing the operator's, Dagster's
    or the sensor's Roles went unreported. Each account is reviewed and each missing grant named."""
    checks = report(preflight(EXAMPLE))
    for account in ("benchrun-run", "benchrun-operator", "benchrun-dagster", "benchrun"):
        assert checks[f"access of {account}"][0] is True, (account, checks[f"access of {account}"])
    removed = {"benchrun-operator-lease", "benchrun-run-launcher", "benchrun-benchmarkrun-status"}
    docs = [d for d in copy.deepcopy(deploy_rbac_docs(BASE)) if d["metadata"]["name"] not in removed]
    deployed.enforce(Policy(docs))
    checks = report(preflight(EXAMPLE))
    ok, line = checks["access of benchrun-operator"]
    assert ok is False and "create leases.coordination.k8s.io in benchrun" in line
    assert "update leases.coordination.k8s.io benchrun-operator in benchrun" in line and "list benchmarkruns" not in line
    ok, line = checks["access of benchrun-dagster"]
    assert ok is False and "create jobs.batch in benchrun-runs" in line and "Role benchrun-run-launcher" in line
    ok, line = checks["access of benchrun"]
    assert ok is False and "list benchmarkruns.benchmarking.aisp.dev (all namespaces)" in line
    ok, line = checks["access of benchrun-run"]
    assert ok is False and "patch benchmarkruns/status" in line and "get jobs/status.batch" not in line


def test_preflight_counts_gpu_nodes_by_the_launchers_gpu_resource(deployed, bench_home, monkeypatch):
    """Found in review: preflight counted nodes with nvidia.com/gpu only, while the launcher's pods ask for its
    gpu_resource (amd.com/gpu, ...): on an AMD cluster a spec needing GPUs was reported as asking for none."""
    from kubernetes import client

    core = client.CoreV1Api(deployed.api_client())
    for node, amd in (("node-a", "8"), ("node-b", "0")):
        core.patch_node_status(node, {"status": {"allocatable": {"nvidia.com/gpu": "0", "amd.com/gpu": amd}}})
    monkeypatch.setenv("BENCHRUN_LAUNCHER_GPU_RESOURCE", "amd.com/gpu")
    ok, line = report(preflight(EXAMPLE))["GPU nodes"]
    assert ok is True and "1 node(s) with >= 1 allocatable amd.com/gpu" in line, line
    core.patch_node_status("node-a", {"status": {"allocatable": {"amd.com/gpu": "0"}}})
    ok, line = report(preflight(EXAMPLE))["GPU nodes"]
    assert ok is False and "0 node(s) with >= 1 allocatable amd.com/gpu" in line and "amd.com/gpu" in line


def test_preflight_checks_the_queue_of_the_class_the_run_would_be_granted(deployed, bench_home):
    """A publication-grade spec the launcher cannot honour (here: a moving image tag, no dedicated nodes) runs as
    realism grade in its cadence's queue: that is the LocalQueue preflight checks, as admission does."""
    checks = report(preflight(ROOT / "specs/local/pre-release.yaml"))
    assert checks["LocalQueue pre-release"][0] is True and "LocalQueue publication" not in checks
