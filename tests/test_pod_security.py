"""The suites' pods under Pod Security admission (benchrun.launch.podsecurity): every kind of pod
benchrun makes meets the ``restricted`` standard, as the harness's own reading of the standard
(tests/kharness/podsecurity.py) judges it; a pod the namespace refuses fails its replicate at
once, with the API server's message and what to change, instead of waiting out the pending
timeout; the deployment's runs namespace enforces ``restricted`` and its run workers meet it."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import pytest
import yaml

from benchrun.errors import BenchrunError
from benchrun.launch.jobset import jobset_manifest
from benchrun.launch.loadjob import load_job_manifest
from benchrun.launch.podspec import Placement, job_manifest, layer_job_manifest
from benchrun.launch.settings import LauncherSettings
from benchrun.plan import plan_run
from benchrun.spec import load_spec
from conftest import ROOT
from kharness.podsecurity import ENFORCE_LABEL, forbidden_message, violations
from test_launch_kubernetes_harness import RUN_ID, home, launcher_for, make_inv  # noqa: F401 - home is a fixture

IMAGE = "registry.example/bench@sha256:" + "a" * 64


def _pod_specs(inv, placement: Placement) -> dict[str, dict]:
    serving = replace(inv, suite="serving_sweep", parameters={"endpoint": "http://server:8000", "load_pods": 2})
    gang = replace(inv, nodes=2)
    publication = replace(placement, publication_grade=True, node_selector={"pool": "bench"})
    return {
        "Job": job_manifest(inv, namespace="bench", placement=placement)["spec"]["template"]["spec"],
        "JobSet node": jobset_manifest(gang, namespace="bench", placement=placement)[
            "spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"],
        "load Job": load_job_manifest(serving, namespace="bench", placement=replace(
            placement, outputs_uri="s3://bucket/out"))["spec"]["template"]["spec"],
        "layer Job": layer_job_manifest([replace(inv, image=IMAGE, cpu="1", memory="1Gi")], namespace="bench",
                                        placement=publication)["spec"]["template"]["spec"],
    }


def test_every_pod_benchrun_makes_meets_the_restricted_standard(tmp_path):
    inv = make_inv(tmp_path)
    specs = _pod_specs(inv, Placement(queue_name="q"))
    for kind, spec in specs.items():
        assert violations(spec, "restricted") == [], kind
        ctx = spec["securityContext"]
        assert (ctx["runAsNonRoot"], ctx["runAsUser"], ctx["fsGroup"]) == (True, 10001, 10001), kind
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert env["HOME"] == "/tmp", kind  # a home this uid can write, whatever the image's user
    # the setting's uid is the one used
    assert _pod_specs(inv, Placement(queue_name="q", run_as_user=4242))["Job"]["securityContext"]["runAsUser"] == 4242
    # pod_security none: the image's own context, which restricted refuses (the check is not vacuous)
    bare = _pod_specs(inv, Placement(queue_name="q", pod_security="none"))
    for kind, spec in bare.items():
        assert "securityContext" not in spec, kind
        found = violations(spec, "restricted")
        assert [v.split(" (")[0] for v in found] == [
            "allowPrivilegeEscalation != false", "unrestricted capabilities", "runAsNonRoot != true", "seccompProfile"], kind


def test_the_harness_refuses_as_the_api_server_words_it():
    """The message Kubernetes gives for a bare container in a restricted namespace (as kubectl shows it)."""
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    assert forbidden_message("p", spec, "restricted") == (
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
        '(container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container '
        '"c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')
    assert forbidden_message("p", spec, "baseline") is None
    rdma = {"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}]}
    assert violations(rdma, "baseline") == [
        'non-default capabilities (container "c" must not include "IPC_LOCK" in securityContext.capabilities.add)']
    assert violations(rdma, "privileged") == []


def test_a_pod_the_namespace_refuses_fails_the_replicate_at_once(kcluster, home):
    """Before: the Job controller's create failed at every try, the Job showed only FailedCreate
    events, and the launcher waited the whole pending timeout (30 min by default) for a pod."""
    run_dir = home / "runs" / RUN_ID
    t0 = time.monotonic()
    res = launcher_for(kcluster, pod_security="none", pending_timeout_s=60.0).launch(make_inv(run_dir), run_dir)
    took = time.monotonic() - t0
    assert res.status == "failed"
    assert res.reason.startswith("pod refused by Pod Security admission"), res.reason
    assert 'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false' in res.reason
    assert "BENCHRUN_LAUNCHER_POD_SECURITY" in res.reason and res.reason.endswith("; Job deleted")
    assert took < 30, took  # not the pending timeout
    assert not kcluster.list("pods")
    kcluster.wait_for(lambda: not kcluster.list("jobs"), what="the Job deleted")
    # the same replicate with the default context runs
    ok = launcher_for(kcluster).launch(make_inv(run_dir, replicate=2), run_dir)
    assert ok.status == "ok", ok.reason


def test_an_rdma_gang_in_a_restricted_namespace_says_what_to_change(kcluster_factory, tmp_path):
    """IPC_LOCK (RDMA) is allowed only at the privileged level: the gang fails at once, naming it."""
    from kharness import GPU, Node

    nodes = [Node(f"node-{i}", capacity={"cpu": "64", "memory": "256Gi", GPU: "8", "rdma/ib": "1", "pods": "110"})
             for i in "ab"]
    quota = {"cpu": "128", "memory": "512Gi", GPU: "16", "rdma/ib": "2"}
    cluster = kcluster_factory(queues={"benchrun": quota}, nodes=nodes)
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    plans = plan_run(load_spec(ROOT / "specs/local/training.yaml").run, RUN_ID, run_dir)
    inv = next(i for p in plans for i in p.invocations if i.suite == "training" and i.replicate == 1)
    inv = replace(inv, network="rdma", argv=(sys.executable, "-c", "pass"), image="python:3.11")
    t0 = time.monotonic()
    res = launcher_for(cluster, pending_timeout_s=60.0).launch(inv, run_dir)
    assert res.status == "failed" and time.monotonic() - t0 < 30
    assert 'must not include "IPC_LOCK" in securityContext.capabilities.add' in res.reason, res.reason
    assert "pod-security.kubernetes.io/enforce=privileged" in res.reason
    assert cluster.errors == []


def test_an_rdma_gang_runs_as_its_images_user_so_ipc_lock_is_held(tmp_path):
    """Under runAsNonRoot a capability added is granted and not held (Kubernetes sets no ambient
    capabilities): an RDMA node's pod keeps the image's user and IPC_LOCK, outside the restricted
    context; every other gang stays in it."""
    plans = plan_run(load_spec(ROOT / "specs/local/training.yaml").run, RUN_ID, tmp_path)
    inv = next(i for p in plans for i in p.invocations if i.suite == "training" and i.replicate == 1)

    def pod(network):
        return jobset_manifest(replace(inv, network=network, image="python:3.11"), namespace="bench",
                               placement=Placement(queue_name="q"))["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"]["spec"]

    rdma = pod("rdma")
    assert "securityContext" not in rdma
    assert rdma["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert violations(rdma, "privileged") == [] and violations(pod(None), "restricted") == []


def test_an_account_that_may_not_list_events_loses_only_the_early_verdicts():
    """A 403 on events (an install whose Role predates the grant): the wait goes on to the pending
    timeout, and a failing pull is judged on the pod alone. Before, the launcher set a field of its
    frozen Watch and every replicate failed with FrozenInstanceError."""
    from types import SimpleNamespace

    from kubernetes.client.exceptions import ApiException

    from benchrun.launch.k8s_wait import Watch, wait

    calls = {"events": 0}

    def refused(*_a):
        calls["events"] += 1
        raise ApiException(status=403, reason="Forbidden")

    job = SimpleNamespace(spec=SimpleNamespace(suspend=False), status=SimpleNamespace(conditions=None),
                          metadata=SimpleNamespace(resource_version="1", uid="u"))
    watch = Watch(kind="Job", name="j", read=lambda obj: (job, None, {}), nodes=1, ended_by=("Complete",),
                  pod_end_ends=True, no_pod_note=lambda _o: "no pod created", name_the_node=False,
                  failed_creates=refused, pull_errors=refused)
    _o, _w, _p, verdict = wait(watch, job, time.perf_counter(), timeout_s=10, pending_timeout_s=0.2, poll_s=0.01,
                               sleep=time.sleep)
    assert verdict == "not started within 0.2s (no pod created); Job deleted"
    assert calls["events"] == 1  # asked once, then not again

    pulling = SimpleNamespace(
        metadata=SimpleNamespace(uid="p", name="pod", creation_timestamp=None, deletion_timestamp=None),
        status=SimpleNamespace(phase="Pending", conditions=None, container_statuses=[SimpleNamespace(
            name="suite", state=SimpleNamespace(waiting=SimpleNamespace(
                reason="ImagePullBackOff", message='Back-off pulling image "r.example/b:1"'), terminated=None,
                running=None))]))
    watch2 = Watch(kind="Job", name="j", read=lambda obj: (job, None, {0: pulling}), nodes=1, ended_by=("Complete",),
                   pod_end_ends=True, no_pod_note=lambda _o: "no pod created", name_the_node=False,
                   failed_creates=refused, pull_errors=refused)
    _o, _w, _p, verdict = wait(watch2, job, time.perf_counter(), timeout_s=10, pending_timeout_s=60, poll_s=0.01,
                               sleep=time.sleep, pull_allowance_s=0.2)
    assert verdict.startswith("image pull failed: ImagePullBackOff for 0s, beyond pull_allowance_s=0.2"), verdict


def test_refusals_that_may_pass_wait_and_are_named_at_the_timeout():
    """A FailedCreate that is not Pod Security's (a ResourceQuota) may pass: the launcher waits, and
    its pending-timeout reason quotes it (before: "no pod created")."""
    from types import SimpleNamespace

    from benchrun.launch.k8s_wait import Watch, wait
    from benchrun.launch.podsecurity import refusal_reason

    quota = 'Error creating: pods "x" is forbidden: exceeded quota: q, requested: cpu=4, used: cpu=60, limited: cpu=64'
    assert refusal_reason(quota) is None
    job = SimpleNamespace(spec=SimpleNamespace(suspend=False), status=SimpleNamespace(conditions=None),
                          metadata=SimpleNamespace(resource_version="1", uid="u"))
    watch = Watch(kind="Job", name="j", read=lambda obj: (job, None, {}), nodes=1, ended_by=("Complete",),
                  pod_end_ends=True, no_pod_note=lambda _o: "no pod created", name_the_node=False,
                  failed_creates=lambda _o: [quota])
    _obj, _wl, _pods, verdict = wait(watch, job, time.perf_counter(), timeout_s=10, pending_timeout_s=0.2,
                                     poll_s=0.01, sleep=time.sleep)
    assert verdict == f"not started within 0.2s (pods not created: {quota}); Job deleted"


def test_settings_refuse_a_bad_level_or_root(monkeypatch):
    assert LauncherSettings.from_env({}).placement(cadence="nightly").pod_security == "restricted"
    s = LauncherSettings.from_env({"BENCHRUN_LAUNCHER_POD_SECURITY": "none", "BENCHRUN_LAUNCHER_RUN_AS_USER": "1000"})
    assert (s.placement(cadence="nightly").pod_security, s.placement(cadence="nightly").run_as_user) == ("none", 1000)
    with pytest.raises(BenchrunError, match=r"pod_security \(BENCHRUN_LAUNCHER_POD_SECURITY\)"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_POD_SECURITY": "baseline"})
    with pytest.raises(BenchrunError, match=r"run_as_user \(BENCHRUN_LAUNCHER_RUN_AS_USER\)"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_RUN_AS_USER": "0"})


def test_the_runs_namespace_enforces_restricted():
    """Its run workers meet it: tests/test_deploy_runworker.py checks the pod dagster-k8s builds."""
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/kustomize/base/namespaces.yaml").read_text()) if d]
    runs = next(d for d in docs if d["metadata"]["name"] == "benchrun-runs")
    assert runs["metadata"]["labels"][ENFORCE_LABEL] == "restricted"
