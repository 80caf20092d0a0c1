"""RBAC from the code: every API call each component makes on the harness, as its own
ServiceAccount, is allowed by the Roles in deploy/ (the harness enforces them: a missing
rule is a 403 there as on a cluster)."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from benchrun.launch.kubernetes import KubernetesLauncher, delete_run_jobs, sweep
from benchrun.launch.podspec import Placement
from conftest import ROOT
from helpers import QUEUED, stopped
from kharness.rbac import Call, Policy, deploy_rbac_docs, sa_user, unused_grants
from test_launch_kubernetes_harness import RUN_ID, make_inv, script_for

RUNS = "benchrun-runs"
RUN_WORKER = (RUNS, "benchrun-run")  # Dagster run workers: the launcher, status writes
DAGSTER = ("benchrun", "benchrun-dagster")  # the chart's daemon and webserver: K8sRunLauncher
CODE_LOCATION = ("benchrun", "benchrun")  # the code location: the BenchmarkRun sensor
OPERATOR = ("benchrun", "benchrun-operator")  # the BenchmarkRun operator (deploy/.../operator.yaml)
CRD = ROOT / "deploy/kustomize/base/benchmarkrun-crd.yaml"
CR = ("benchmarking.aisp.dev", "v1alpha1", "benchmarkruns")
BASE = ROOT / "deploy/kustomize/base"
CR_KIND = "/".join(CR)
STUCK = "registry.invalid/benchrun:0.1.0"  # never pulls: that run worker never runs
CRASHES = "registry.example/benchrun:crashes"  # its `python` exits 3 at once (harness image)


def chart_run_k8s_config() -> dict[str, Any]:
    """The run workers' security contexts from deploy/helm/values.yaml (runK8sConfig), which the
    runs namespace's Pod Security level (restricted) requires of their pods."""
    import yaml

    run = yaml.safe_load((ROOT / "deploy/helm/values.yaml").read_text())["runLauncher"]["config"]["k8sRunLauncher"][
        "runK8sConfig"]
    return {"pod_spec_config": {"security_context": run["podSpecConfig"]["securityContext"]},
            "container_config": {"security_context": run["containerConfig"]["securityContext"]}}


@pytest.fixture(scope="module")
def deploy_policy() -> Policy:
    return Policy(deploy_rbac_docs(BASE))


@pytest.fixture
def rbac_cluster(kcluster_factory, deploy_policy, tmp_path, monkeypatch):
    """The runs namespace of deploy/, with deploy/'s RBAC enforced; PVC "home" is the run volume."""
    from kharness import Image

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    bindir = tmp_path / "crash-bin"
    bindir.mkdir()
    (bindir / "python").write_text("#!/bin/sh\necho 'run worker crashed' >&2\nexit 3\n")
    (bindir / "python").chmod(0o755)
    cluster = kcluster_factory(namespace=RUNS, crds=[CRD], rbac=deploy_policy, host_env={"PYTHONPATH": str(ROOT)},
                               images={CRASHES: Image(env={"PATH": f"{bindir}:/usr/bin:/bin"})})
    home = tmp_path / "runhome"
    (home / "runs" / RUN_ID).mkdir(parents=True)
    cluster.bind_pvc("home", home)
    return cluster, home


def assert_all_granted(cluster, policy: Policy, account: tuple[str, str]) -> None:
    """Every call the account made is allowed by deploy/'s Roles (the refused ones listed)."""
    calls = cluster.calls(sa_user(*account))
    assert calls, f"no call recorded for {account}: the scenario did not run as that account"
    refused = [c.what for c in policy.denied(calls)]
    assert not refused, f"{account[0]}/{account[1]} made calls deploy/ does not grant: " + "; ".join(refused)


def assert_all_used(cluster, role: str, account: tuple[str, str]) -> None:
    """Every verb the role grants was called by the account: nothing is granted that no code calls."""
    [doc] = [d for d in deploy_rbac_docs(BASE) if d["kind"] in ("Role", "ClusterRole") and d["metadata"]["name"] == role]
    unused = unused_grants(doc, cluster.calls(sa_user(*account)))
    assert not unused, f"{role} grants what {account[1]} never calls: " + "; ".join(unused)


def launcher_as(cluster, account: tuple[str, str], home: Path, **placement: Any) -> KubernetesLauncher:
    from kubernetes import client

    api = cluster.api_client(account)
    place = Placement(queue_name="benchrun", run_volume_claim="home", run_home=str(home),
                      **{"pending_timeout_s": 20.0, **placement})
    return KubernetesLauncher(client.BatchV1Api(api), client.CoreV1Api(api), RUNS, place, poll_s=0.05,
                              custom_api=client.CustomObjectsApi(api))


def a_benchmarkrun(cluster, canary_doc: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    """A valid BenchmarkRun (the canary spec, one tiny suite) applied by a user in ``namespace``."""
    from kubernetes import client

    from helpers import tiny_spec

    doc = copy.deepcopy(canary_doc)
    doc["metadata"] = {"name": "nightly-cr", "namespace": namespace}
    tiny_spec(doc, [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm",
                                          "parameters": {"sizes": [32], "iterations": 2}}])
    admin = client.CustomObjectsApi(cluster.api_client())
    return admin.create_namespaced_custom_object(*CR[:2], namespace, CR[2], doc)


@pytest.mark.slow
def test_run_worker_calls_are_all_granted(rbac_cluster, deploy_policy, monkeypatch, canary_doc):
    """The run worker's account: a replicate (Job), a gang (JobSet), cancellation, the sweep,
    the owner lookup and the BenchmarkRun status write; every call allowed, every replicate ok."""
    from kubernetes import client

    from benchrun.controller.resources import ResourceRef
    from benchrun.controller.status import write
    from resources.launcher import LauncherResource

    cluster, home = rbac_cluster
    run_dir = home / "runs" / RUN_ID
    launcher = launcher_as(cluster, RUN_WORKER, home)
    # admission: the run's LocalQueue exists
    from benchrun.launch.queues import check_queue

    check_queue(launcher.custom_api, RUNS, "benchrun")
    res = launcher.launch(make_inv(run_dir), run_dir)
    assert res.status == "ok", res.reason
    gang = make_inv(run_dir, replicate=2, code=script_for(2), nodes=2, ranks_per_node=1)
    res = launcher.launch(gang, run_dir)
    assert res.status == "ok", res.reason
    batch, custom = launcher.batch_api, launcher.custom_api
    from benchrun.launch.k8s_objects import RUN_ID_LABEL

    third = launcher.manifest(make_inv(run_dir, replicate=3))
    batch.create_namespaced_job(RUNS, third)
    # the gang's child Jobs may still be listed: the JobSet was deleted in the background and
    # the garbage collector removes them in its own time, as on a real cluster
    assert delete_run_jobs(batch, RUNS, RUN_ID, custom) >= 1
    left = [j.metadata.name for j in batch.list_namespaced_job(RUNS, label_selector=f"{RUN_ID_LABEL}={RUN_ID}").items
            if not j.metadata.deletion_timestamp]
    assert third["metadata"]["name"] not in left
    assert sweep(batch, RUNS, lambda run_id: False, custom) == []
    # the Jobs' owner: the run worker's own pod (in-cluster)
    admin = client.CoreV1Api(cluster.api_client())
    admin.create_namespaced_pod(RUNS, {"metadata": {"name": "run-worker-pod"},
                                       "spec": {"containers": [{"name": "w", "image": "registry.invalid/x:1"}]}})
    monkeypatch.setenv("HOSTNAME", "run-worker-pod")
    owner = LauncherResource(kind="kubernetes", namespace=RUNS)._owner(launcher.core_api, True)
    assert owner is not None and owner["name"] == "run-worker-pod"
    # the run's phase change patches its BenchmarkRun (any namespace)
    obj = a_benchmarkrun(cluster, canary_doc)
    assert write(custom, ResourceRef.of(obj), {"phase": "Running"}) is True
    # The launcher lists a Job's FailedCreate events only while a poll finds it short of pods, which
    # depends on how fast the harness makes them (a clean-clone run's replicates never were): asked
    # here once through the launcher's own function, as the run worker, so the grant is used every time
    from benchrun.launch.k8s_watches import failed_create_messages

    assert failed_create_messages(launcher.core_api, RUNS, None, {"no-such-job-uid"}) == []
    assert_all_granted(cluster, deploy_policy, RUN_WORKER)
    assert_all_used(cluster, "benchrun-run-worker", RUN_WORKER)


def k8s_run_launcher(cluster, account: tuple[str, str], job_image: str) -> Any:
    from dagster_k8s import K8sRunLauncher

    return K8sRunLauncher(
        service_account_name="benchrun-run", instance_config_map="dagster-instance", dagster_home="/opt/dagster",
        job_image=job_image, load_incluster_config=False, kubeconfig_file=str(cluster.kubeconfig_for(*account)),
        job_namespace=RUNS, run_k8s_config=chart_run_k8s_config())


def started_run(instance: Any, job_image: str, tags: dict[str, str] | None = None) -> Any:
    import dagster as dg
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._core.test_utils import create_run_for_test

    origin = JobPythonOrigin("benchmark_run", RepositoryPythonOrigin(
        executable_path="python", code_pointer=ModuleCodePointer("bench_assets.definitions", "defs", None),
        container_image=job_image))
    return create_run_for_test(instance, job_name="benchmark_run", status=dg.DagsterRunStatus.STARTING,
                               job_code_origin=origin, tags=tags or {})


@pytest.mark.slow
def test_dagster_and_the_sensor_calls_are_all_granted(rbac_cluster, deploy_policy, bench_home, monkeypatch,
                                                       canary_doc, tmp_path):
    """The chart's account (K8sRunLauncher in the daemon): launch a run worker, monitor it
    (jobs/status), read a crashed one's debug info (pods, logs, events; the Job's when its pods
    are gone), terminate it (Job and pods). The code location's account (the sensor): list
    BenchmarkRuns everywhere, write their status and, when one is deleted, terminate its run,
    so the run worker's Job goes (and its GPUs with it)."""
    import dagster as dg
    from dagster._core.launcher import LaunchRunContext
    from kubernetes import client

    from bench_assets.definitions import defs as code_location
    from benchrun.controller.resources import TAG_UID
    from sensors.benchmarkrun import benchmarkrun_resource_sensor

    cluster, _home = rbac_cluster
    admin_core = client.CoreV1Api(cluster.api_client())
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig_for(*CODE_LOCATION)))
    monkeypatch.delenv("BENCHRUN_CR_NAMESPACE", raising=False)
    obj = a_benchmarkrun(cluster, canary_doc)
    config = {"service_account_name": "benchrun-run", "instance_config_map": "dagster-instance",
              "dagster_home": "/opt/dagster", "job_image": STUCK, "load_incluster_config": False,
              "kubeconfig_file": str(cluster.kubeconfig_for(*CODE_LOCATION)), "job_namespace": RUNS,
              "run_k8s_config": chart_run_k8s_config()}
    overrides = {"run_launcher": {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": config}}
    with dg.instance_for_test(overrides=overrides) as instance:
        def tick(cursor: str | None) -> Any:
            context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=code_location,
                                              instance_ref=instance.get_ref())
            return benchmarkrun_resource_sensor.evaluate_tick(context)

        first = tick(None)
        [request] = first.run_requests
        assert request.tags[TAG_UID] == obj["metadata"]["uid"]
        assert cluster.get(CR_KIND, "nightly-cr", "team-a")["status"]["phase"] == "Pending"

        # the daemon launches the requested run; its worker waits for its image
        daemon = k8s_run_launcher(cluster, DAGSTER, STUCK)
        daemon.register_instance(instance)
        run = started_run(instance, STUCK, tags=dict(request.tags))
        daemon.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
        cluster.wait_for(lambda: cluster.list("pods", RUNS, labels={"job-name": f"dagster-run-{run.run_id}"}),
                         what="the run worker's pod")
        health = daemon.check_run_worker_health(instance.get_run_by_id(run.run_id))
        assert health.status.name == "RUNNING", health.msg  # UNKNOWN with a 403 on jobs/status before the fix

        # another run's worker crashes: run monitoring reads why, then terminates it
        crashed = started_run(instance, CRASHES)
        crashing = k8s_run_launcher(cluster, DAGSTER, CRASHES)  # the launcher's job_image wins over the run's
        crashing.register_instance(instance)
        crashing.launch_run(LaunchRunContext(dagster_run=crashed, workspace=None))
        job = f"dagster-run-{crashed.run_id}"
        cluster.wait_for(lambda: (cluster.get("jobs", job, RUNS) or {}).get("status", {}).get("failed"),
                         what="the crashed run worker's Job failed")
        assert "run worker crashed" in (daemon.get_run_worker_debug_info(instance.get_run_by_id(crashed.run_id)) or "")
        for pod in cluster.list("pods", RUNS, labels={"job-name": job}):
            admin_core.delete_namespaced_pod(pod["metadata"]["name"], RUNS)
        assert job in (daemon.get_run_worker_debug_info(instance.get_run_by_id(crashed.run_id)) or "")
        assert daemon.terminate(crashed.run_id) is True
        assert cluster.get("jobs", job, RUNS) is None
        # a run cancelled from the UI: its waiting worker's Job and pod go
        cancelled = started_run(instance, STUCK)
        daemon.launch_run(LaunchRunContext(dagster_run=cancelled, workspace=None))
        job = f"dagster-run-{cancelled.run_id}"
        cluster.wait_for(lambda: cluster.list("pods", RUNS, labels={"job-name": job}), what="its pod")
        assert daemon.terminate(cancelled.run_id) is True
        assert cluster.get("jobs", job, RUNS) is None and not cluster.list("pods", RUNS, labels={"job-name": job})

        # the BenchmarkRun is deleted: the sensor terminates its run (as the code location)
        client.CustomObjectsApi(cluster.api_client()).delete_namespaced_custom_object(
            *CR[:2], "team-a", CR[2], "nightly-cr")
        second = tick(first.cursor)
        assert "1 deleted" in (second.skip_message or ""), second.skip_message
        # terminate() deleted the worker; run monitoring marks it CANCELED later
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELING
    cluster.wait_for(lambda: not cluster.list("jobs", RUNS) and not cluster.list("pods", RUNS), timeout=10,
                     what="the deleted BenchmarkRun's run worker (Job and pod) gone")
    assert_all_granted(cluster, deploy_policy, DAGSTER)
    assert_all_used(cluster, "benchrun-run-launcher", DAGSTER)
    assert_all_granted(cluster, deploy_policy, CODE_LOCATION)
    assert_all_used(cluster, "benchrun-run-terminator", CODE_LOCATION)
    assert_all_used(cluster, "benchrun-benchmarkrun-status", CODE_LOCATION)


def test_a_missing_permission_fails_the_replicate_with_the_403(rbac_cluster, deploy_policy):
    """Enforced RBAC without ``jobs/status get``: the launcher fails the replicate after its
    retries, naming the refusal, and still deletes its Job."""
    cluster, home = rbac_cluster
    docs = copy.deepcopy(deploy_rbac_docs(BASE))
    for doc in docs:
        if doc["kind"] == "Role" and doc["metadata"]["name"] == "benchrun-run-worker":
            for rule in doc["rules"]:
                rule["resources"] = [r for r in rule["resources"] if r != "jobs/status"]
    cluster.enforce(Policy(docs))
    run_dir = home / "runs" / RUN_ID
    t0 = time.monotonic()
    res = launcher_as(cluster, RUN_WORKER, home).launch(make_inv(run_dir), run_dir)
    assert res.status == "failed"
    assert "lost the Job: 5 reads in a row failed" in res.reason and "403" in res.reason, res.reason
    assert time.monotonic() - t0 < 15
    cluster.wait_for(lambda: not cluster.list("jobs", RUNS), what="the Job deleted")
    refused = [c for c in cluster.calls(sa_user(*RUN_WORKER)) if not Policy(docs).allows(c)]
    assert {(c.verb, c.resource, c.subresource) for c in refused} == {("get", "jobs", "status")}


def test_the_operator_calls_are_all_granted(rbac_cluster, deploy_policy, bench_home, canary_doc):
    """The operator's account: lead through the Lease (create, then get and update), list
    BenchmarkRuns page by page in every namespace and watch them, add its finalizer (patch),
    write the status, read one again after a rate-limited wait (get), and on deletion cancel the
    queued run and remove the finalizer; every call allowed, every grant used."""
    import dagster as dg
    from kubernetes import client

    from benchrun.controller.dagster_runs import DagsterRuns
    from benchrun.controller.lease import LeaseElector
    from benchrun.controller.operator import Operator, Settings

    cluster, _home = rbac_cluster
    first = a_benchmarkrun(cluster, canary_doc)
    second = copy.deepcopy(first)
    second["metadata"] = {"name": "second-cr", "namespace": "team-b"}
    client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(*CR[:2], "team-b", CR[2], second)
    api_client = cluster.api_client(OPERATOR)
    with dg.instance_for_test(overrides=QUEUED) as instance:
        elector = LeaseElector(api_client, "benchrun", "benchrun-operator", "replica-a", duration_s=5)
        op = Operator(client.CustomObjectsApi(api_client), DagsterRuns(instance),
                      Settings(namespace=None, page_size=1, watch_timeout_s=1, starts_per_s=0.001, start_burst=1),
                      elector=elector)
        assert elector.try_acquire() and elector.try_acquire()  # create, then get + update
        op.step()  # list (two pages), one start, one waits; watch
        op.bucket.tokens = 1.0
        op.step()  # the waiting one is read again (get) and started
        assert op.stats.started == 2, op.stats.errors
        admin = client.CustomObjectsApi(cluster.api_client())
        admin.delete_namespaced_custom_object(*CR[:2], "team-a", CR[2], "nightly-cr")
        op.step()  # the watch sees the deletionTimestamp: cancel, remove the finalizer
        assert cluster.get(CR_KIND, "nightly-cr", "team-a") is None
        assert [r.status for r in instance.get_runs()].count(dg.DagsterRunStatus.CANCELED) == 1
        op.run(stopped())  # a clean stop releases the Lease
        assert not op.stats.errors, op.stats.errors
    assert_all_granted(cluster, deploy_policy, OPERATOR)
    assert_all_used(cluster, "benchrun-operator", OPERATOR)
    assert_all_used(cluster, "benchrun-operator-lease", OPERATOR)


def test_policy_follows_kubernetes_rbac_rules() -> None:
    """RoleBindings grant in their namespace only; subresources are their own resource."""
    role = {"kind": "Role", "metadata": {"name": "r", "namespace": "a"},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}]}
    crole = {"kind": "ClusterRole", "metadata": {"name": "c"},
             "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"], "resourceNames": ["p"]}]}
    sa = {"kind": "ServiceAccount", "name": "s", "namespace": "a"}
    docs = [role, crole,
            {"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "a"}, "subjects": [sa],
             "roleRef": {"kind": "Role", "name": "r"}},
            {"kind": "RoleBinding", "metadata": {"name": "rb2", "namespace": "b"}, "subjects": [sa],
             "roleRef": {"kind": "ClusterRole", "name": "c"}}]
    p = Policy(docs)
    user = sa_user("a", "s")
    assert p.allows(Call(user, "get", "batch", "jobs", None, "a", "j"))
    assert not p.allows(Call(user, "get", "batch", "jobs", "status", "a", "j"))  # a subresource is not the resource
    assert not p.allows(Call(user, "get", "batch", "jobs", None, "b", "j"))  # another namespace
    assert not p.allows(Call(user, "list", "batch", "jobs", None, "a"))
    assert p.allows(Call(user, "get", "", "pods", "log", "b", "p"))
    assert not p.allows(Call(user, "get", "", "pods", "log", "b", "q"))  # resourceNames
    assert not p.allows(Call(user, "get", "", "pods", "log", "a", "p"))  # ClusterRole bound in b only
    assert not p.allows(Call(sa_user("a", "other"), "get", "batch", "jobs", None, "a", "j"))
    c = Call(user, "get", "batch", "jobs", "status", "a", "j")
    assert c.forbidden_message() == ('jobs.batch "j" is forbidden: User "system:serviceaccount:a:s" cannot get '
                                     'resource "jobs/status" in API group "batch" in the namespace "a"')


@pytest.mark.slow
def test_deleting_a_benchmarkrun_whose_run_worker_runs_frees_its_job(rbac_cluster, deploy_policy, bench_home,
                                                                    canary_doc):
    """A BenchmarkRun deleted after the daemon launched its run worker: the operator's finalizer
    cancels the run through the instance's K8sRunLauncher, as the operator's account, so the run
    worker's Job and pod go (and the GPUs its suites hold with them); then the finalizer is
    removed. Every call allowed by deploy/'s Roles (enforced)."""
    import dagster as dg
    from dagster._core.launcher import LaunchRunContext
    from kubernetes import client

    from helpers import dequeue, leading_operator

    cluster, _home = rbac_cluster
    a_benchmarkrun(cluster, canary_doc)
    # the operator pod's instance: its run launcher is the chart's K8sRunLauncher, with the
    # operator's own credentials (its ServiceAccount in the pod)
    config = {"service_account_name": "benchrun-run", "instance_config_map": "dagster-instance",
              "dagster_home": "/opt/dagster", "job_image": STUCK, "load_incluster_config": False,
              "kubeconfig_file": str(cluster.kubeconfig_for(*OPERATOR)), "job_namespace": RUNS,
              "run_k8s_config": chart_run_k8s_config()}
    overrides = {**QUEUED, "run_launcher": {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": config}}
    with dg.instance_for_test(overrides=overrides) as instance:
        op = leading_operator(cluster, instance, OPERATOR)
        op.step()
        [run] = instance.get_runs()
        # the daemon dequeues it and launches its run worker (as the chart's account); its
        # image never pulls, so the worker holds its pod
        daemon = k8s_run_launcher(cluster, DAGSTER, STUCK)
        daemon.register_instance(instance)
        daemon.launch_run(LaunchRunContext(dagster_run=dequeue(instance, run), workspace=None))
        job = f"dagster-run-{run.run_id}"
        cluster.wait_for(lambda: cluster.list("pods", RUNS, labels={"job-name": job}), what="the run worker's pod")
        client.CustomObjectsApi(cluster.api_client()).delete_namespaced_custom_object(
            *CR[:2], "team-a", CR[2], "nightly-cr")
        op.step()  # the watch sees the deletionTimestamp: terminate the launched run, remove the finalizer
        assert op.stats.cancelled == 1 and not op.stats.errors, op.stats.errors
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELING
        assert cluster.get("jobs", job, RUNS) is None
        assert cluster.get(CR_KIND, "nightly-cr", "team-a") is None
        op.run(stopped())
    cluster.wait_for(lambda: not cluster.list("pods", RUNS, labels={"job-name": job}), timeout=10,
                     what="the run worker's pod gone")
    assert_all_granted(cluster, deploy_policy, OPERATOR)
