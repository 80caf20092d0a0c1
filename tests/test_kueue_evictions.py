"""Kueue's evictions on the cluster harness: each reason told apart from the Workload's Evicted
condition, requeued ones retried as new attempts within ``eviction_retries`` (recorded in the
replicate's history, an earlier attempt's files never merged), an inactive Workload failed at once."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT
from crdschemas import crd_validator
from test_launch_kubernetes_harness import RUN_ID, TINY_R1, launcher_for, make_inv, script_for
from test_outputs_store import URI, store_cluster  # noqa: F401  (fixture)
from test_store_helpers import s3_env  # noqa: F401  (fixture)


def evict_when(cluster, launcher, *, reason: str, ready, times: int = 1) -> list[str]:
    """Ask the harness's Kueue to evict the replicate's Workload for ``reason`` once ``ready(pod)``
    holds for its pod (``times`` times, once per pod); the pods it was asked for."""
    asked: list[str] = []
    orig = launcher._sleep

    def sleep(s: float) -> None:
        for p in cluster.list("pods"):
            name = p["metadata"]["name"]
            if len(asked) < times and name not in asked and ready(p):
                asked.append(name)
                cluster.preempt(TINY_R1, reason=reason)
        orig(s)

    launcher._sleep = sleep
    return asked


def working(cluster):
    def ready(p) -> bool:
        try:
            return "working" in (cluster.scratch(p["metadata"]["name"]) / "logs" / "suite.log").read_text()
        except (KeyError, OSError):
            return False
    return ready


def pulling(p) -> bool:
    waiting = [(c.get("state") or {}).get("waiting") for c in p["status"].get("containerStatuses") or []]
    return any(w and w.get("reason") == "ContainerCreating" for w in waiting)


def first_attempt_works_then_hangs(marker: Path) -> str:
    """The first attempt writes a file and hangs (until evicted); the next one writes its own and reports."""
    return script_for(1, before=textwrap.dedent(f"""
        import os, pathlib, time
        raw = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"], "raw"); raw.mkdir(parents=True, exist_ok=True)
        marker = pathlib.Path({str(marker)!r})
        if not marker.exists():
            marker.write_text("1")
            (raw / "{RUN_ID}_tiny_r1_attempt1.txt").write_text("half a measurement")
            print("attempt 1 working", flush=True)
            time.sleep(60)
        (raw / "{RUN_ID}_tiny_r1_attempt2.txt").write_text("a whole one")
        print("attempt 2", flush=True)
    """))


def test_preempted_mid_measurement_is_a_new_attempt_never_merged(store_cluster, tmp_path):  # noqa: F811
    cluster = store_cluster()
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster, outputs_uri=URI, env_secret="benchrun-s3")
    asked = evict_when(cluster, launcher, reason="Preempted", ready=working(cluster))
    res = launcher.launch(make_inv(run_dir, code=first_attempt_works_then_hangs(tmp_path / "marker")), run_dir)
    assert res.status == "ok", res.reason
    timeline = res.messages[0]
    assert timeline["attempt"] == 2 and len(timeline["attempts"]) == 1
    [first] = timeline["attempts"]
    assert first["cause"] == "kueue" and first["measured"] is True and first["pod_name"] == asked[0]
    assert first["reason"].startswith("preempted by Kueue (Preempted: Preempted by the harness")
    assert first["pod_uid"] != res.pod_uid
    assert json.loads((run_dir / f"raw/{RUN_ID}_tiny_r1_pod.json").read_text())["attempts"] == [first]
    # the new attempt's files and log only: the preempted one's are never merged in
    assert (run_dir / f"raw/{RUN_ID}_tiny_r1_attempt2.txt").is_file()
    assert not (run_dir / f"raw/{RUN_ID}_tiny_r1_attempt1.txt").exists()
    log_text = (run_dir / res.log).read_text()
    assert "attempt 2" in log_text and "attempt 1" not in log_text
    assert cluster.errors == []


def test_preempted_before_it_measured_is_retried_and_recorded_so(kcluster_factory, tmp_path):
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)}, pull_seconds=1.5)
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster, eviction_retries=1)
    evict_when(cluster, launcher, reason="PodsReadyTimeout", ready=pulling)
    res = launcher.launch(make_inv(run_dir), run_dir)
    assert res.status == "ok", res.reason
    [first] = res.messages[0]["attempts"]
    assert first["measured"] is False  # still pulling its image
    assert first["reason"].startswith("pods not ready within Kueue's waitForPodsReady timeout (PodsReadyTimeout: ")


@pytest.mark.slow  # Preempted past the budget: tests/test_launch_kubernetes_harness.py
@pytest.mark.parametrize("reason, said", [
    ("PodsReadyTimeout", "pods not ready within Kueue's waitForPodsReady timeout (PodsReadyTimeout: "),
    ("AdmissionCheck", "evicted by a Kueue admission check (AdmissionCheck: "),
])
def test_each_requeued_reason_is_named_past_the_budget(kcluster_factory, tmp_path, reason, said):
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster, eviction_retries=0)
    evict_when(cluster, launcher, reason=reason, ready=working(cluster))
    res = launcher.launch(make_inv(run_dir, code="import time; print('working', flush=True); time.sleep(30)"), run_dir)
    assert res.status == "failed" and res.reason.startswith(said), res.reason
    assert res.reason.endswith("ended 1 times by evictions or preemptions, more than eviction_retries=0; Job deleted")
    # what the harness's Kueue wrote is what the published v1beta2 Workload schema accepts
    validator = crd_validator("kueue.x-k8s.io_workloads.yaml", "v1beta2")
    versions = [v for v in cluster.history("workloads", res.messages[0]["workload_name"]) if v]
    assert any(c["type"] == "Evicted" and c["reason"] == reason for v in versions for c in v["status"]["conditions"])
    for wl in versions:
        validator.validate(wl)


def test_an_inactive_workload_fails_at_once_and_is_not_retried(kcluster_factory, tmp_path):
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster, eviction_retries=2)
    evict_when(cluster, launcher, reason="InactiveWorkload", ready=working(cluster))
    t0 = time.monotonic()
    res = launcher.launch(make_inv(run_dir, code="import time; print('working', flush=True); time.sleep(30)"), run_dir)
    assert res.status == "failed"
    assert res.reason.startswith("deactivated in Kueue (InactiveWorkload: InactiveWorkload by the harness"), res.reason
    assert "is not admitted again; Job deleted" in res.reason
    assert time.monotonic() - t0 < 15  # not left waiting pending_timeout_s for an admission that never comes
    assert res.messages[0]["attempts"] == []


def test_a_preempted_gang_is_admitted_again_as_a_new_attempt(kcluster_factory, tmp_path):
    """Kueue preempts a 2-node gang mid-measurement: it suspends the JobSet, the JobSet suspends
    its child Job, both nodes' pods go; re-admitted, the gang runs again with new pods. That is
    a new attempt within ``eviction_retries`` (recorded, its pods never followed again), not a
    failed replicate; past the budget it is failed, named."""
    home = tmp_path / "home"
    run_dir = home / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    cluster.bind_pvc("home", home)
    markers = tmp_path / "markers"
    markers.mkdir()
    node_code = script_for(1, before=textwrap.dedent(f"""
        import os, pathlib, time
        rank = os.environ["NODE_RANK"]
        marker = pathlib.Path({str(markers)!r}, "rank" + rank)
        if not marker.exists():
            marker.write_text("1")
            print("node", rank, "working", flush=True)
            time.sleep(60)
        print("node", rank, "attempt 2", flush=True)
    """))

    def both_working() -> bool:
        logs = []
        for p in cluster.list("pods"):
            try:
                logs.append((cluster.scratch(p["metadata"]["name"]) / "logs" / "suite.log").read_text())
            except (KeyError, OSError):
                pass
        return sum("working" in t for t in logs) >= 2

    def preempt_gang_once(launcher) -> list[str]:
        """Preempt the gang's Workload once both nodes are measuring (first attempt) and the launcher
        has read them so: at the sleep after the one that first saw both working (a read lies
        between; preempted at once, a slow read on a loaded machine had not yet seen them run)."""
        asked: list[str] = []
        seen: list[bool] = []
        orig = launcher._sleep

        def sleep(s: float) -> None:
            sets = cluster.list("jobsets")
            if sets and not asked and both_working():
                if seen:
                    asked.append(sets[0]["metadata"]["name"])
                    cluster.preempt(asked[0])
                seen.append(True)
            orig(s)

        launcher._sleep = sleep
        return asked

    launcher = launcher_for(cluster, run_volume_claim="home", run_home=str(home), eviction_retries=1)
    asked = preempt_gang_once(launcher)
    inv = make_inv(run_dir, code=node_code, nodes=2, ranks_per_node=1, timeout_s=90.0)
    res = launcher.launch(inv, run_dir)
    assert asked, "the harness never preempted the gang"
    assert res.status == "ok", res.reason
    timeline = res.messages[0]
    assert timeline["attempt"] == 2
    [first] = timeline["attempts"]
    assert first["cause"] == "kueue" and first["measured"] is True
    assert first["reason"].startswith("preempted by Kueue (Preempted: Preempted by the harness")
    # every node's log is the new attempt's: the preempted pods were never followed again
    for rank in (0, 1):
        text = (run_dir / inv.node_log_relpath(rank)).read_text()
        assert f"node {rank} attempt 2" in text and "working" not in text, text
    assert first["pod_uid"] not in {n["pod_uid"] for n in timeline["nodes"]}
    assert cluster.errors == []

    # past the budget: preempted once with eviction_retries=0 → failed, named
    for f in markers.iterdir():
        f.unlink()
    strict = launcher_for(cluster, run_volume_claim="home", run_home=str(home), eviction_retries=0)
    assert not cluster.list("pods") or cluster.wait_for(lambda: not cluster.list("pods"), what="the first gang's pods gone")
    preempt_gang_once(strict)
    res2 = strict.launch(make_inv(run_dir, replicate=2, code=node_code, nodes=2, ranks_per_node=1, timeout_s=90.0),
                         run_dir)
    assert res2.status == "failed"
    assert res2.reason.endswith("ended 1 times by evictions or preemptions, more than eviction_retries=0; "
                                "JobSet deleted"), res2.reason


# Kueue's own preemption message (pkg/scheduler/preemption: preemptionMessage)
KUEUE_PREEMPTED = ("Preempted to accommodate a workload (UID: 9f542104, JobUID: a20d0a6a) due to prioritization in "
                   "the ClusterQueue; preemptor path: /benchrun/benchrun-publication; preemptee path: "
                   "/benchrun/benchrun-nightly")


def readmitted(message: str, stats: list[dict] | None = None) -> dict:
    """A Workload preempted and admitted again, as Kueue leaves it (pkg/workload SetQuotaReservation)."""
    wl = {"status": {"conditions": [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
         "message": "Quota reserved in ClusterQueue benchrun-nightly", "lastTransitionTime": "2026-01-01T00:05:00Z"},
        {"type": "Evicted", "status": "False", "reason": "QuotaReserved", "message": f"Previously: {message}",
         "lastTransitionTime": "2026-01-01T00:05:00Z"}]}}
    if stats is not None:
        wl["status"]["schedulingStats"] = {"evictions": stats}
    return wl


def test_a_readmitted_workload_names_the_eviction_not_its_readmission():
    """Kueue rewrites the Evicted condition of a workload it admits again (status False, reason
    QuotaReserved, "Previously: <message>"): the eviction it records is read back from the message,
    else from schedulingStats when that counts one reason only."""
    from benchrun.launch.k8s_status import workload_eviction, workload_evicted
    from benchrun.launch.k8s_wait import _new_kueue_eviction

    fresh = lambda: {"true": set(), "false": set(), "awaiting": False}  # noqa: E731
    seen = fresh()
    ev = _new_kueue_eviction(readmitted(KUEUE_PREEMPTED), seen)
    assert ev is not None and (ev["reason"], ev["message"], ev["what"]) == ("Preempted", KUEUE_PREEMPTED,
                                                                            "preempted by Kueue")
    assert ev["requeued"] is True and ev["status"] == "False"
    assert _new_kueue_eviction(readmitted(KUEUE_PREEMPTED), seen) is None  # the same one, polled again
    assert workload_eviction(readmitted(KUEUE_PREEMPTED)) == f"Preempted: {KUEUE_PREEMPTED}"
    timeout = readmitted("Exceeded the PodsReady timeout benchrun-runs/job-tiny-r1-1a2b3")
    assert workload_evicted(timeout)["reason"] == "PodsReadyTimeout"
    # a message of no known shape: schedulingStats, when it counts one reason
    other = readmitted("evicted for a reason of its own", [{"reason": "NodeFailures", "underlyingCause": "",
                                                            "count": 1}])
    assert workload_evicted(other)["reason"] == "NodeFailures"
    two = readmitted("evicted for a reason of its own", [
        {"reason": "NodeFailures", "underlyingCause": "", "count": 1},
        {"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 2}])
    assert workload_evicted(two)["reason"] == "Evicted"  # never QuotaReserved, never a guess
    # seen while evicted, then readmitted: one eviction, not two
    seen = fresh()
    evicted = {"status": {"conditions": [{"type": "Evicted", "status": "True", "reason": "Preempted",
                                          "message": KUEUE_PREEMPTED, "lastTransitionTime": "2026-01-01T00:04:00Z"}]}}
    assert _new_kueue_eviction(evicted, seen)["reason"] == "Preempted"
    assert _new_kueue_eviction(readmitted(KUEUE_PREEMPTED), seen) is None


def test_preempted_and_admitted_again_between_two_polls_is_recorded_as_the_preemption(kcluster_factory, tmp_path):
    """The launcher never sees the Evicted condition True: by its next poll Kueue (the harness, in
    Kueue's shape) has admitted the workload again. The attempt is still recorded, as preempted."""
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    run_dir = tmp_path / "home" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    launcher = launcher_for(cluster, eviction_retries=1)
    orig, asked = launcher._sleep, []

    def sleep(s: float) -> None:
        for p in cluster.list("pods"):
            if not asked and working(cluster)(p):
                asked.append(p["metadata"]["name"])
                cluster.preempt(TINY_R1, message=KUEUE_PREEMPTED)
                cluster.wait_for(lambda: any(c["type"] == "Evicted" and c["status"] == "False"
                                             for w in cluster.list("workloads") for c in w["status"]["conditions"]),
                                 what="the workload admitted again")
        orig(s)

    launcher._sleep = sleep
    res = launcher.launch(make_inv(run_dir, code=first_attempt_works_then_hangs(tmp_path / "marker")), run_dir)
    assert res.status == "ok", res.reason
    [first] = res.messages[0]["attempts"]
    assert first["cause"] == "kueue" and first["pod_name"] == asked[0]
    assert first["reason"] == f"preempted by Kueue (Preempted: {KUEUE_PREEMPTED})", first["reason"]
    # what the harness wrote is Kueue's shape, and the published v1beta2 Workload schema accepts it
    validator = crd_validator("kueue.x-k8s.io_workloads.yaml", "v1beta2")
    versions = [v for v in cluster.history("workloads", res.messages[0]["workload_name"]) if v]
    again = [c for v in versions for c in v["status"]["conditions"] if c["type"] == "Evicted" and c["status"] == "False"]
    assert again and again[0]["reason"] == "QuotaReserved" and again[0]["message"] == f"Previously: {KUEUE_PREEMPTED}"
    for wl in versions:
        validator.validate(wl)
    assert cluster.errors == []
