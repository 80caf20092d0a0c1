"""The cluster harness itself: the real kubernetes client and dagster-k8s against kmock + the
harness control plane (Kueue, Job/JobSet controllers, scheduler, kubelet, TTL, GC)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch

from kharness import GPU, QUEUE_LABEL, Node, has_condition
from kharness.control import JOBS

PY = sys.executable


@pytest.fixture
def kcluster_factory(kcluster_factory):
    """The harness's own tests make bare pods: their namespace enforces no Pod Security level
    (tests/test_pod_security.py covers the enforcement, and every launcher test runs under it)."""
    def make(**kw: Any):
        return kcluster_factory(**{"pod_security": None, **kw})
    return make


@pytest.fixture
def kcluster(kcluster_factory):
    return kcluster_factory()


def job(name: str, code: str, *, queue: str | None = "benchrun", gpus: int = 0, image: str = "python:3.11", **spec: Any) -> dict[str, Any]:
    labels = {QUEUE_LABEL: queue} if queue else {}
    resources = {"limits": {GPU: str(gpus)}, "requests": {"cpu": "1", GPU: str(gpus)}} if gpus else {"requests": {"cpu": "1"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            **spec,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": image, "command": [PY, "-c", code], "resources": resources}],
                }
            },
        },
    }


def test_kueue_job_runs_streams_its_log_and_is_cleaned_up(kcluster):
    batch = client.BatchV1Api(kcluster.api_client())
    core = client.CoreV1Api(kcluster.api_client())
    code = "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.3)"
    created = batch.create_namespaced_job("default", job("hello", code, ttlSecondsAfterFinished=3))
    assert created.spec.suspend is True  # Kueue's webhook suspends queued Jobs
    assert created.metadata.uid
    pod = kcluster.wait_for(
        lambda: [p for p in core.list_namespaced_pod("default", label_selector="job-name=hello").items
                 if p.status.phase in ("Running", "Succeeded")], what="a running pod")[0]
    wl_name = [w for w in kcluster.list("workloads") if "hello" in w["metadata"]["name"]][0]["metadata"]["name"]
    lines = []
    stream = core.read_namespaced_pod_log(pod.metadata.name, "default", follow=True, timestamps=True, _preload_content=False)
    for chunk in stream.stream():
        lines.extend(chunk.decode().splitlines())
    assert [line.split(" ", 1)[1] for line in lines] == ["line 0", "line 1", "line 2"]
    assert lines[0].split(" ", 1)[0].endswith("Z")
    # Read stored versions, not live objects: on a loaded machine the TTL (3 s after completion) and
    # garbage collection may remove the Job, its Workload and its pod before a poll of them sees the end.
    def last(kind: str, name: str, ok) -> dict:
        return kcluster.wait_for(lambda: [v for v in kcluster.history(kind, name) if v is not None and ok(v)],
                                 what=f"{kind}/{name}")[-1]

    done = last("jobs", "hello", lambda v: (v.get("status") or {}).get("succeeded"))
    assert done["status"]["succeeded"] == 1
    wl = last("workloads", wl_name, lambda v: has_condition(v, "Finished"))
    for cond in ("QuotaReserved", "Admitted", "PodsReady", "Finished"):
        assert has_condition(wl, cond), cond
    final = last("pods", pod.metadata.name, lambda v: (v.get("status") or {}).get("phase") in ("Succeeded", "Failed"))
    term = final["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], final["status"]["phase"]) == (0, "Completed", "Succeeded")
    assert final["spec"]["nodeName"] in ("node-a", "node-b")
    assert final["status"]["containerStatuses"][0]["imageID"] == kcluster.image_id("python:3.11")
    kcluster.wait_for(lambda: not kcluster.list("jobs"), what="TTL deletion")
    kcluster.wait_for(lambda: not kcluster.list("pods") and not kcluster.list("workloads"), what="garbage collection")
    assert kcluster.errors == []


def test_quota_queues_then_preemption_evicts_the_lower_priority(kcluster_factory):
    c = kcluster_factory(queues={"benchrun": {"cpu": "8", GPU: "8"}})
    batch = client.BatchV1Api(c.api_client())
    sleeper = "import time\ntime.sleep(60)"
    batch.create_namespaced_job("default", job("low", sleeper, gpus=8))
    c.wait_for(lambda: c.list("pods", labels={"job-name": "low"}), what="low runs")
    batch.create_namespaced_job("default", job("other", sleeper, gpus=8))
    wl = c.wait_for(lambda: [w for w in c.list("workloads") if "other" in w["metadata"]["name"] and w["status"]["conditions"]])[0]
    assert not has_condition(wl, "QuotaReserved") and "insufficient quota" in wl["status"]["conditions"][0]["message"]
    hi = job("high", sleeper, gpus=8)
    hi["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
    batch.create_namespaced_job("default", hi)
    c.wait_for(lambda: c.list("pods", labels={"job-name": "high"}), what="high admitted")
    low_wl = [w for w in c.list("workloads") if "-low-" in w["metadata"]["name"]][0]
    evicted = [x for x in low_wl["status"]["conditions"] if x["type"] == "Evicted"][0]
    assert evicted["reason"] == "Preempted"
    assert c.get("jobs", "low")["spec"]["suspend"] is True
    c.wait_for(lambda: not c.list("pods", labels={"job-name": "low"}), what="low's pod gone")
    gone = [v for v in c.history("pods", low_pod_name(c)) if v is not None]
    # the Job controller deletes a suspended Job's pods after removing their tracking finalizer
    # (deleteJobPods): a plain DELETE, no DisruptionTarget, and never counted as a failure
    assert not any(x["type"] == "DisruptionTarget" for x in gone[-1]["status"].get("conditions") or [])
    assert not (c.get("jobs", "low").get("status") or {}).get("failed")
    # Explicit preemption from the test:
    # Kueue requeues a preempted Workload and, the quota free again, admits the highest priority
    # at once: "high" may be suspended and resumed between two polls, so its history is read
    before = len(c.history("jobs", "high"))
    c.preempt("high")
    c.wait_for(lambda: any(v is not None and v["spec"].get("suspend") for v in c.history("jobs", "high")[before:]),
               what="high suspended")
    assert c.errors == []


def low_pod_name(c):
    for ev in c.list("events"):
        if ev["involvedObject"]["name"] == "low" and ev["reason"] == "SuccessfulCreate":
            return ev["message"].split(": ", 1)[1]
    raise AssertionError("no pod created for low")


def test_image_pull_failure_and_unschedulable(kcluster):
    core = client.CoreV1Api(kcluster.api_client())
    batch = client.BatchV1Api(kcluster.api_client())
    batch.create_namespaced_job("default", job("badimg", "print(1)", image="registry.invalid/nope:1", queue=None))
    batch.create_namespaced_job("default", job("huge", "print(1)", gpus=64, queue=None))

    def waiting_reason():
        for p in core.list_namespaced_pod("default", label_selector="job-name=badimg").items:
            for s in p.status.container_statuses or []:
                if s.state.waiting:
                    return s.state.waiting.reason
        return None

    assert kcluster.wait_for(lambda: waiting_reason() in ("ErrImagePull", "ImagePullBackOff") and waiting_reason())
    pod = kcluster.wait_for(lambda: kcluster.list("pods", labels={"job-name": "huge"}))[0]
    cond = kcluster.wait_for(lambda: [x for x in (kcluster.get("pods", pod["metadata"]["name"])["status"].get("conditions") or [])
                                      if x["type"] == "PodScheduled"])[0]
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in cond["message"]


def test_tolerations_node_selector_and_mount_rewriting(kcluster_factory, tmp_path):
    c = kcluster_factory(
        nodes=[Node("gpu-0", labels={"pool": "gpu"}, taints=[{"key": GPU, "value": "present", "effect": "NoSchedule"}])]
    )
    batch = client.BatchV1Api(c.api_client())
    spec = job("mounts", "import os,sys; open(os.environ['OUT'] + '/x.txt','w').write(sys.argv[1])", queue=None)
    cont = spec["spec"]["template"]["spec"]["containers"][0]
    cont["args"] = ["/data/in"]
    cont["env"] = [{"name": "OUT", "value": "/out"}, {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    cont["volumeMounts"] = [{"name": "out", "mountPath": "/out"}]
    spec["spec"]["template"]["spec"]["volumes"] = [{"name": "out", "persistentVolumeClaim": {"claimName": "results"}}]
    spec["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "gpu"}
    batch.create_namespaced_job("default", spec)
    pod = c.wait_for(lambda: [p for p in c.list("pods") if has_condition(p, "PodScheduled", "False")], what="an unschedulable pod")[0]
    assert not pod["spec"].get("nodeName")  # the taint is not tolerated yet
    batch.delete_namespaced_job("mounts", "default", propagation_policy="Background")
    spec["spec"]["template"]["spec"]["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    c.wait_for(lambda: not c.list("pods"), what="GC of the first pod")
    batch.create_namespaced_job("default", spec)
    c.wait_for(lambda: (c.get("jobs", "mounts") or {}).get("status", {}).get("succeeded"), what="success")
    assert (c.pvc_dir("results") / "x.txt").read_text() == "/data/in"
    assert c.errors == []


def test_custom_resources_list_watch_patch_status(kcluster_factory):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}}],
        },
    }
    c = kcluster_factory(crds=[crd])
    api = client.CustomObjectsApi(c.api_client())
    api.create_namespaced_custom_object("example.dev", "v1", "default", "widgets", {
        "apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "w1", "labels": {"team": "a"}}, "spec": {"size": 1}})
    seen = []

    def later():
        time.sleep(0.3)
        c.create("example.dev/v1/widgets", {"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {"name": "w2", "labels": {"team": "a"}}})

    threading.Thread(target=later).start()
    w = watch.Watch()
    for ev in w.stream(api.list_namespaced_custom_object, "example.dev", "v1", "default", "widgets",
                       label_selector="team=a", timeout_seconds=20):
        seen.append((ev["type"], ev["object"]["metadata"]["name"]))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "w1"), ("ADDED", "w2")]
    api.patch_namespaced_custom_object_status("example.dev", "v1", "default", "widgets", "w1", {"status": {"phase": "Ready"}})
    got = api.get_namespaced_custom_object("example.dev", "v1", "default", "widgets", "w1")
    assert got["status"] == {"phase": "Ready"} and got["spec"] == {"size": 1}
    assert int(got["metadata"]["resourceVersion"]) > 0


def test_jobset_children_run_under_one_workload(kcluster):
    api = client.CustomObjectsApi(kcluster.api_client())
    child = job("x", "import os; print('idx', os.environ['JOB_COMPLETION_INDEX'])", queue=None)["spec"]
    child.update(parallelism=2, completions=2, completionMode="Indexed")
    api.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "labels": {QUEUE_LABEL: "benchrun"}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": child}}]},
    })
    done = kcluster.wait_for(lambda: has_condition(kcluster.get("jobsets", "js"), "Completed") and kcluster.get("jobsets", "js"))
    assert sorted(j["metadata"]["name"] for j in kcluster.list("jobs")) == ["js-workers-0", "js-workers-1"]
    assert done["status"]["replicatedJobsStatus"][0]["succeeded"] == 2
    [wl] = kcluster.list("workloads")
    assert wl["spec"]["podSets"][0]["count"] == 4 and has_condition(wl, "Admitted")
    pods = kcluster.list("pods")
    assert len(pods) == 4
    core = client.CoreV1Api(kcluster.api_client())
    logs = sorted(core.read_namespaced_pod_log(p["metadata"]["name"], "default").strip() for p in pods)
    assert logs == ["idx 0", "idx 0", "idx 1", "idx 1"]


def test_dagster_k8s_client_waits_against_the_harness(kcluster):
    from dagster_k8s.client import DagsterKubernetesClient

    api = kcluster.api_client()
    dk = DagsterKubernetesClient(client.BatchV1Api(api), client.CoreV1Api(api), __import__("logging").getLogger("t"), time.sleep, time.time)
    client.BatchV1Api(api).create_namespaced_job("default", job("dk", "print('ok')"))
    dk.wait_for_job_success("dk", "default", wait_time_between_attempts=0.1, wait_timeout=30)
    [pod] = dk.get_pod_names_in_job("dk", "default")
    assert dk.retrieve_pod_logs(pod, "default") == "ok\n"
    client.BatchV1Api(api).create_namespaced_job("default", job("dkfail", "raise SystemExit(3)"))
    with pytest.raises(Exception, match="dkfail"):
        dk.wait_for_job_success("dkfail", "default", wait_time_between_attempts=0.1, wait_timeout=30)


def test_ttl_waits_for_kueue_to_see_the_job_finished(kcluster):
    """A condition's time has whole seconds: when the rest of a control-plane tick takes a second after
    the Job completes, the TTL must still not delete it before Kueue marks its Workload Finished
    (a race that failed CI once under load)."""
    batch = client.BatchV1Api(kcluster.api_client())
    control = kcluster.control
    kubelet = control.kubelet
    slowed: list[bool] = []

    async def slow_kubelet() -> None:
        await kubelet()
        done = [raw for _k, raw in control.api.live(JOBS) if has_condition(raw, "Complete")]
        if done and not slowed:
            slowed.append(True)
            await asyncio.sleep(1.2)

    control.kubelet = slow_kubelet
    batch.create_namespaced_job("default", job("quick", "print('ok')", ttlSecondsAfterFinished=1))
    wl_name = kcluster.wait_for(lambda: [w["metadata"]["name"] for w in kcluster.list("workloads")], what="a Workload")[0]
    kcluster.wait_for(lambda: not kcluster.list("jobs") and not kcluster.list("workloads"), what="TTL deletion and GC")
    assert slowed
    assert any(v is not None and has_condition(v, "Finished") for v in kcluster.history("workloads", wl_name))
    assert kcluster.errors == []


def test_the_kubelet_rotates_a_container_log_at_a_size(kcluster_factory):
    """Rotation at ``log_max_bytes`` (the kubelet's containerLogMaxSize): a plain read serves the
    newest file only, a follow started at the beginning keeps streaming across the rotations."""
    cluster = kcluster_factory(log_max_bytes=1024)
    core = client.CoreV1Api(cluster.api_client())
    code = "import time\ntime.sleep(0.5)\nfor i in range(100):\n    print('line %03d' % i, flush=True)"
    client.BatchV1Api(cluster.api_client()).create_namespaced_job("default", job("rot", code, queue=None))
    pod = cluster.wait_for(lambda: [p for p in core.list_namespaced_pod("default", label_selector="job-name=rot").items
                                    if p.status.phase == "Running"], what="a running pod")[0]
    followed = b"".join(core.read_namespaced_pod_log(pod.metadata.name, "default", follow=True,
                                                    _preload_content=False).stream()).decode().splitlines()
    assert followed == ["line %03d" % i for i in range(100)]
    plain = core.read_namespaced_pod_log(pod.metadata.name, "default").splitlines()
    assert plain and plain[-1] == "line 099" and "line 000" not in plain and len(plain) < 40
    rotated = sorted(p.name for p in (cluster.scratch(pod.metadata.name) / "logs").iterdir())
    assert rotated[:3] == ["main.log", "main.log.1", "main.log.2"]
