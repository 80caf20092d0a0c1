"""Evictions are not failures: the Job's podFailurePolicy ignores a disrupted pod and replaces
it, the launcher follows the new attempt (its own log and result, never merged), up to a budget;
a suite's own non-zero exit fails the Job at once."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from benchrun.launch.podspec import EVICTION_POLICY, Placement, job_manifest, layer_job_manifest
from conftest import ROOT
from test_launch_kubernetes_harness import RUN_ID, TINY_R1, launcher_for, make_inv, script_for


def test_jobs_carry_the_eviction_policy_and_validate(tmp_path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    inv = make_inv(tmp_path)
    job = job_manifest(inv, namespace="bench", placement=Placement(queue_name="q"))
    assert job["spec"]["podReplacementPolicy"] == "Failed"
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"] == {
        "containerName": "suite", "operator": "NotIn", "values": [0]}
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # podFailurePolicy requires it
    kubernetes_validate.validate(job, kubernetes_validate.latest_version(), strict=True)
    # a publication layer is one observation: an eviction fails it, no replacement reruns the layer
    image = "registry.example/bench@sha256:" + "b" * 64
    layer = layer_job_manifest([make_inv(tmp_path, image=image, cpu="1", memory="1Gi")], namespace="bench",
                               placement=Placement(queue_name="q", publication_grade=True, node_selector={"p": "b"}))
    assert not set(EVICTION_POLICY) & set(layer["spec"])


def evict_when_working(cluster, launcher, times: int) -> list[str]:
    """Evict the replicate's pod (as the kubelet does under pressure) each time it has printed
    'working', ``times`` times; returns the evicted pods' names."""
    evicted: list[str] = []
    orig = launcher._sleep

    def sleep(s: float) -> None:
        for p in cluster.list("pods"):
            name = p["metadata"]["name"]
            if len(evicted) < times and name not in evicted and p["status"].get("phase") == "Running":
                try:
                    working = "working" in (cluster.scratch(name) / "logs" / "suite.log").read_text()
                except (KeyError, OSError):
                    working = False
                if working:
                    evicted.append(name)
                    cluster.evict_pod(name)
        orig(s)

    launcher._sleep = sleep
    return evicted


def attempt_code(marker: Path, settle_s: float = 0.0) -> str:
    """The first attempt prints 'working' (after ``settle_s``) and hangs (until evicted); the next
    one reports."""
    return script_for(1, before=textwrap.dedent(f"""
        import pathlib, time
        marker = pathlib.Path({str(marker)!r})
        if not marker.exists():
            marker.write_text("1")
            time.sleep({settle_s})
            print("attempt 1 working", flush=True)
            time.sleep(60)
        print("attempt 2", flush=True)
    """))


def hold_until_replaced(cluster, launcher, evicted: list[str]) -> None:
    """Hold the launcher's next poll after an eviction until the Job has made the replacement pod
    (a slow poll, a busy API: the replacement exists by the time the launcher looks)."""
    polled = launcher._sleep

    def slow_poll(s: float) -> None:
        polled(s)
        if evicted:
            cluster.wait_for(lambda: len(cluster.list("pods")) >= 2, what="the replacement pod")
    launcher._sleep = slow_poll


def test_an_evicted_replicate_is_retried_as_a_new_attempt(kcluster_factory, tmp_path):
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster)
    evicted = evict_when_working(cluster, launcher, times=1)
    res = launcher.launch(make_inv(run_dir, code=attempt_code(tmp_path / "marker")), run_dir)
    assert res.status == "ok", res.reason
    assert len(evicted) == 1 and res.messages[0]["pod_name"] != evicted[0]
    log_text = (run_dir / res.log).read_text()
    assert "attempt 2" in log_text and "attempt 1" not in log_text  # the new attempt's log only, never merged
    job = [v for v in cluster.history("jobs", TINY_R1) if v][-1]
    assert not [c for c in job["status"].get("conditions") or [] if c["type"] == "Failed"]
    assert job["status"].get("failed", 0) == 0  # the eviction did not count against backoffLimit: 0
    assert cluster.errors == []


def test_evictions_past_the_budget_fail_the_replicate_saying_so(kcluster_factory, tmp_path):
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster, eviction_retries=0)
    evict_when_working(cluster, launcher, times=1)
    res = launcher.launch(make_inv(run_dir, code=attempt_code(tmp_path / "marker")), run_dir)
    assert res.status == "failed"
    assert res.reason.startswith("evicted 1 times, more than eviction_retries=0 (last: TerminationByKubelet: "), res.reason
    cluster.wait_for(lambda: not cluster.list("jobs"), what="the Job deleted")


def test_a_suites_own_failure_fails_the_job_at_once(kcluster):
    """FailJob on the suite's non-zero exit code: the harness's Job controller says so."""
    from kubernetes import client

    inv = make_inv(Path("/tmp/unused"), code="import sys; sys.exit(3)")
    job = job_manifest(inv, namespace="default", placement=Placement(queue_name="benchrun"))
    client.BatchV1Api(kcluster.api_client()).create_namespaced_job("default", job)
    name = job["metadata"]["name"]
    t0 = time.monotonic()
    failed = kcluster.wait_for(lambda: [c for c in ((kcluster.get("jobs", name) or {}).get("status") or {}).get(
        "conditions") or [] if c["type"] == "Failed" and c["status"] == "True"], what="the Job failed")[0]
    assert failed["reason"] == "PodFailurePolicy"
    assert "failed with exit code 3 matching FailJob rule at index 1" in failed["message"]
    assert time.monotonic() - t0 < 20


def test_an_eviction_replaced_before_the_launcher_looks_still_counts(kcluster_factory, tmp_path):
    # before: the launcher read only the Job's newest pod, so when the replacement existed by its
    # next poll (a slow poll, a busy API) the evicted pod was never seen: the eviction was not
    # counted against eviction_retries and the replicate came back "ok" (seen once in CI-like load).
    # The first attempt works for over a second first, so its pod and the replacement differ in
    # creationTimestamp (whole seconds): the replacement is then the newest pod, every time.
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster, eviction_retries=0)
    hold_until_replaced(cluster, launcher, evict_when_working(cluster, launcher, times=1))
    res = launcher.launch(make_inv(run_dir, code=attempt_code(tmp_path / "marker", 1.2)), run_dir)
    assert res.status == "failed", res.reason
    assert res.reason.startswith("evicted 1 times, more than eviction_retries=0 (last: TerminationByKubelet: "), res.reason
    # the replicate's log is the evicted attempt's, not its replacement's (which printed "attempt 2")
    kept = (run_dir / res.log).read_text()
    assert "attempt 1 working" in kept and "attempt 2" not in kept, kept
    # with a budget, the missed eviction is one attempt of the replicate's history and it goes on
    (tmp_path / "marker").unlink()
    cluster.wait_for(lambda: not cluster.list("jobs"), what="the Job deleted")
    launcher = launcher_for(cluster, eviction_retries=1)
    hold_until_replaced(cluster, launcher, evict_when_working(cluster, launcher, times=1))
    res = launcher.launch(make_inv(run_dir, code=attempt_code(tmp_path / "marker", 1.2)), run_dir)
    assert res.status == "ok", res.reason
    assert [a["cause"] for a in res.messages[0]["attempts"]] == ["eviction"], res.messages[0].get("attempts")


@pytest.mark.slow
def test_a_replacement_the_launcher_finds_already_made_gets_its_own_clock(kcluster_factory, tmp_path):
    """Found in review: when the Job had replaced an evicted pod before the next poll (the usual case on a
    real cluster, whose Job controller replaces it within milliseconds), the replacement kept the evicted
    attempt's clock: it had the timeout minus the first attempt's time, and timed out."""
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster, eviction_retries=1)
    evicted = evict_when_working(cluster, launcher, times=1)
    hold_until_replaced(cluster, launcher, evicted)
    marker = tmp_path / "marker"
    code = script_for(1, before=textwrap.dedent(f"""
        import pathlib, time
        marker = pathlib.Path({str(marker)!r})
        if not marker.exists():
            marker.write_text("1")
            time.sleep(3.5)
            print("attempt 1 working", flush=True)
            time.sleep(60)
        time.sleep(5.0)
        print("attempt 2", flush=True)
    """))
    t0 = time.monotonic()
    res = launcher.launch(make_inv(run_dir, code=code, timeout_s=8.0), run_dir)
    assert evicted and time.monotonic() - t0 > 8.0  # the two attempts together outlast one timeout
    assert res.status == "ok", res.reason


@pytest.mark.slow
def test_a_drained_pod_gone_before_the_launcher_looks_still_counts_and_the_replacement_gets_its_clock(
        kcluster_factory, tmp_path):
    """Review 2026-12-07: a drain (the Eviction API) deletes the pod; when the launcher's next poll (backed
    off to seconds) came after the object was gone and the replacement made, the eviction was never
    counted and the replacement ran on the evicted attempt's clock: `timed out after 6s` either way."""
    from benchrun.launch.k8s_wait import VANISHED

    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    code = script_for(1, before=textwrap.dedent(f"""
        import pathlib, time
        marker = pathlib.Path({str(tmp_path / "marker")!r})
        if not marker.exists():
            marker.write_text("1")
            print("attempt 1 working", flush=True)
            time.sleep(60)
        time.sleep(5.0)
        print("attempt 2", flush=True)
    """))
    for retries in (1, 0):
        (tmp_path / "marker").unlink(missing_ok=True)
        launcher = launcher_for(cluster, eviction_retries=retries)
        drained: list[str] = []
        polled = launcher._sleep

        def sleep(s: float, drained=drained, polled=polled) -> None:
            for p in cluster.list("pods") if not drained else []:
                name = p["metadata"]["name"]
                try:
                    working = "working" in (cluster.scratch(name) / "logs" / "suite.log").read_text()
                except (KeyError, OSError):
                    working = False
                if p["status"].get("phase") == "Running" and working:
                    time.sleep(3.0)  # the first attempt has run 3 s of the 6 s timeout
                    cluster.drain_pod(name)
                    drained.append(name)
                    cluster.wait_for(lambda: name not in [q["metadata"]["name"] for q in cluster.list("pods")]
                                     and cluster.list("pods"), what="the drained pod gone and replaced")
            polled(s)

        launcher._sleep = sleep
        res = launcher.launch(make_inv(run_dir, code=code, timeout_s=6.0), run_dir)
        assert drained, "the pod was never drained"
        if retries:
            assert res.status == "ok", res.reason  # the replacement had its own 6 s
            assert [(a["cause"], a["reason"]) for a in res.messages[0]["attempts"]] == [("eviction", f"evicted: {VANISHED}")]
            assert "attempt 2" in (run_dir / res.log).read_text()
        else:
            assert res.status == "failed" and res.reason.startswith("evicted 1 times, more than eviction_retries=0"), res.reason
        cluster.wait_for(lambda: not cluster.list("jobs"), what="the Job deleted")


def test_a_pod_whose_node_is_lost_ends_its_replicate_naming_the_disruption(kcluster, tmp_path, monkeypatch):
    """Review 2026-12-07: the taint manager deletes a pod of an unreachable node (DisruptionTarget,
    deletionTimestamp) and nothing reports it again: Terminating, phase Running, no replacement (the Job
    replaces only a stopped pod). The launcher waited out the whole timeout and said `timed out`."""
    from benchrun.launch import k8s_status

    monkeypatch.setattr(k8s_status, "STUCK_TERMINATING_S", 1.0)
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(kcluster)
    polled, lost = launcher._sleep, []

    def sleep(s: float) -> None:
        for p in kcluster.list("pods") if not lost else []:
            if p["status"].get("phase") == "Running":
                kcluster.lose_node_of(p["metadata"]["name"])
                lost.append(time.monotonic())
        polled(s)

    launcher._sleep = sleep
    res = launcher.launch(make_inv(run_dir, code="import time; print('working', flush=True); time.sleep(60)",
                                   timeout_s=30.0), run_dir)
    assert lost and res.status == "failed", res.reason
    assert res.reason.startswith("its pod was disrupted (DeletionByTaintManager: Taint manager: deleting due to "
                                 "NoExecute taint node.kubernetes.io/unreachable) and had not stopped 1s after its "
                                 "grace period (its node unreachable?)"), res.reason
    assert time.monotonic() - lost[0] < 15.0  # not the 30 s timeout
