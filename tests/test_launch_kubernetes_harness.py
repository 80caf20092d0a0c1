"""The Job lifecycle of the Kubernetes launcher against the cluster harness (real client, HTTP)."""

from __future__ import annotations

import dataclasses

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from benchrun.launch.kubernetes import RESULT_KEY, KubernetesLauncher, sweep
from benchrun.launch.podspec import Placement, job_name
from benchrun.plan import Invocation
from benchrun.suites.result import SCHEMA, metric
from conftest import ROOT
from test_telemetry_prometheus import _Prometheus, fake_prometheus  # noqa: F401 (a fixture: the one fake)

RUN_ID = "k8s-20261201000000-abcdef12"
CASE = "bc-0123456789abcdef"


def script_for(replicate: int, *, samples: dict[str, str] | None = None, before: str = "", status: str = "ok") -> str:
    doc = {
        "schema": SCHEMA, "run_id": RUN_ID, "suite": "tiny", "replicate": replicate, "benchmark_case_id": CASE,
        "status": status, "reason": None, "synthetic": False, "started_utc": "2026-12-01T00:00:00Z",
        "finished_utc": "2026-12-01T00:00:01Z", "parameters": {}, "context": {}, "samples": samples or {},
        "metrics": [metric("tiny_value", 3.5, "1", "higher")],
    }
    return before + textwrap.dedent(f"""
        import json, sys
        print("hello from the pod", flush=True)
        print("a line on stderr", file=sys.stderr, flush=True)
        print(json.dumps({{{RESULT_KEY!r}: json.loads({json.dumps(json.dumps(doc))})}}), flush=True)
        if "BENCHRUN_RESULT_STDOUT" not in __import__("os").environ:  # run by the local launcher (a layer pod)
            import os, pathlib
            p = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"], "structured"); p.mkdir(parents=True, exist_ok=True)
            (p / "{RUN_ID}_tiny_r{replicate}.json").write_text({json.dumps(json.dumps(doc))})
    """)


def make_inv(run_dir: Path, replicate: int = 1, code: str | None = None, **over: Any) -> Invocation:
    fields: dict[str, Any] = dict(
        run_id=RUN_ID, layer="micro", suite="tiny", replicate=replicate, benchmark_case_id=CASE,
        argv=(sys.executable, "-c", code if code is not None else script_for(replicate)),
        env={"BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "tiny",
             "BENCHRUN_REPLICATE": str(replicate)},
        timeout_s=30.0, image="python:3.11",
    )
    fields.update(over)
    return Invocation(**fields)


TINY_R1 = job_name(make_inv(Path("/benchrun/run")))  # the Job of make_inv's replicate 1


def launcher_for(cluster, **placement: Any) -> KubernetesLauncher:
    from kubernetes import client

    api = cluster.api_client()
    place = Placement(queue_name="benchrun", **{"pending_timeout_s": 20.0, **placement})
    return KubernetesLauncher(client.BatchV1Api(api), client.CoreV1Api(api), "default", place, poll_s=0.05,
                              custom_api=client.CustomObjectsApi(api))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home" / "runs" / RUN_ID).mkdir(parents=True)
    return tmp_path / "home"


@pytest.fixture
def shared(kcluster_factory, home):
    """A cluster whose PVC "home" is the test's BENCHRUN_HOME (the shared run volume)."""
    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)})
    cluster.bind_pvc("home", home)
    return cluster


def test_success_log_result_timeline_and_cleanup(shared, home):
    run_dir = home / "runs" / RUN_ID
    res = launcher_for(shared, run_volume_claim="home", run_home=str(home)).launch(make_inv(run_dir), run_dir)
    assert (res.status, res.exit_code, res.reason) == ("ok", 0, None)
    assert res.metrics[0]["value"] == 3.5
    log_text = (run_dir / res.log).read_text()
    assert "hello from the pod" in log_text and "a line on stderr" in log_text
    timeline = res.messages[0]
    assert timeline["kind"] == "pod" and timeline["job_name"] == TINY_R1
    assert timeline["admitted_utc"] and timeline["queue_wait_s"] is not None and timeline["node_name"]
    assert res.job_uid == timeline["job_uid"] and res.pod_uid == timeline["pod_uid"]
    assert res.scheduler_run_id.startswith(f"job-{TINY_R1}-")
    assert json.loads((run_dir / f"raw/{RUN_ID}_tiny_r1_pod.json").read_text())["pod_uid"] == res.pod_uid
    shared.wait_for(lambda: not shared.list("jobs") and not shared.list("pods"), what="the Job and pod deleted")
    job_v1 = [v for v in shared.history("jobs", TINY_R1) if v][0]
    assert job_v1["spec"]["suspend"] is True  # created suspended, Kueue let it go
    assert shared.errors == []


def test_declared_outputs_must_arrive(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    # No shared run volume: the pod writes into an emptyDir, the files die with it.
    code = script_for(1, samples={"calls": f"raw/{RUN_ID}_tiny_r1_calls.json"}, before=textwrap.dedent("""
        import os, pathlib
        p = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"], "raw"); p.mkdir(parents=True, exist_ok=True)
        (p / "%s_tiny_r1_calls.json").write_text("[]")
    """ % RUN_ID))
    res = launcher_for(kcluster).launch(make_inv(run_dir, code=code), run_dir)
    assert res.status == "failed"
    assert res.reason.startswith(f"declared outputs did not arrive in the run directory: raw/{RUN_ID}_tiny_r1_calls.json")


def test_shared_volume_brings_declared_outputs_back(shared, home):
    run_dir = home / "runs" / RUN_ID
    code = script_for(1, samples={"calls": f"raw/{RUN_ID}_tiny_r1_calls.json"}, before=textwrap.dedent("""
        import os, pathlib
        p = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"], "raw"); p.mkdir(parents=True, exist_ok=True)
        (p / "%s_tiny_r1_calls.json").write_text("[1, 2]")
    """ % RUN_ID))
    res = launcher_for(shared, run_volume_claim="home", run_home=str(home)).launch(make_inv(run_dir, code=code), run_dir)
    assert res.status == "ok", res.reason
    assert json.loads((run_dir / f"raw/{RUN_ID}_tiny_r1_calls.json").read_text()) == [1, 2]


def test_a_preemption_seen_after_the_replacement_pod_keeps_the_ended_attempts_log(kcluster, home):
    # make test, 2026-12-05: under load the launcher's next read came after Kueue had admitted the
    # preempted Job again and its replacement pod existed; with the retry budget spent, the replicate
    # got the replacement's log (empty: it had not printed yet) and its timeline, not the attempt that
    # ran and was preempted. Here the read is held back until the replacement runs.
    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster, eviction_retries=0)
    first: dict[str, str] = {}

    def lines(name: str) -> str:
        try:
            return (kcluster.scratch(name) / "logs" / "suite.log").read_text()
        except (KeyError, OSError):
            return ""

    def sleep(s: float) -> None:
        pods = [p for p in kcluster.list("pods") if p["status"].get("phase") == "Running"]
        if not first and pods and "working" in lines(pods[0]["metadata"]["name"]):
            first["pod"] = pods[0]["metadata"]["name"]
            kcluster.preempt(TINY_R1)
            kcluster.wait_for(lambda: any(p["metadata"]["name"] != first["pod"] and p["status"].get("phase") == "Running"
                                          for p in kcluster.list("pods")), what="the replacement pod running")
        time.sleep(s)

    launcher._sleep = sleep
    code = "import time, uuid; print('working', uuid.uuid4().hex, flush=True); time.sleep(30)"
    res = launcher.launch(make_inv(run_dir, code=code), run_dir)
    assert res.status == "failed" and res.reason.startswith("preempted by Kueue"), res.reason
    ran = lines(first["pod"])
    token = ran.split("working ", 1)[1].split()[0]  # the line the preempted attempt printed, its own uuid
    assert token in (run_dir / res.log).read_text(), ((run_dir / res.log).read_text(), ran)
    timeline = json.loads((run_dir / f"raw/{RUN_ID}_tiny_r1_pod.json").read_text())
    assert timeline["attempts"][0]["pod_name"] == first["pod"]
    assert first["pod"] in json.dumps({k: v for k, v in timeline.items() if k != "attempts"})
    kcluster.wait_for(lambda: not kcluster.list("jobs") and not kcluster.list("pods"), what="cleanup")


def test_image_pull_failure_is_a_failed_replicate(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    res = launcher_for(kcluster).launch(make_inv(run_dir, image="registry.invalid/nope:1"), run_dir)
    assert res.status == "failed"
    assert res.reason.startswith("image pull failed: ErrImagePull") or res.reason.startswith("image pull failed: ImagePullBackOff")
    kcluster.wait_for(lambda: not kcluster.list("jobs"), what="the Job deleted")


def test_never_scheduled_reports_the_schedulers_reason(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    # Fits the queue's quota (16 GPUs) but no node (8 each): Kueue admits, the scheduler cannot place it.
    res = launcher_for(kcluster, pending_timeout_s=4.0).launch(make_inv(run_dir, gpus=12), run_dir)
    assert res.status == "failed"
    assert res.reason.startswith("not started within 4s (Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu")
    # Over the queue's quota: Kueue keeps it suspended and says why.
    res2 = launcher_for(kcluster, pending_timeout_s=4.0).launch(make_inv(run_dir, replicate=2, gpus=32), run_dir)
    assert res2.status == "failed" and "Kueue: Pending: couldn't assign flavors" in res2.reason
    assert "insufficient quota for nvidia.com/gpu" in res2.reason
    kcluster.wait_for(lambda: not kcluster.list("jobs"), what="the Jobs deleted")


def test_preemption_mid_replicate_fails_it_with_the_reason(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster, eviction_retries=0)  # no retry budget (tests/test_kueue_evictions.py: with one)
    calls = {"n": 0}

    def printed(pod) -> bool:
        try:
            return "working" in (kcluster.scratch(pod["metadata"]["name"]) / "logs" / "suite.log").read_text()
        except (KeyError, OSError):
            return False

    def sleep(s: float) -> None:
        calls["n"] += 1
        pods = kcluster.list("pods")
        if calls["n"] == 1 or not any(p["status"].get("phase") == "Running" and printed(p) for p in pods):
            time.sleep(s)
            return
        if calls.get("preempted") is None:
            calls["preempted"] = True
            kcluster.preempt(TINY_R1)
        time.sleep(s)

    launcher._sleep = sleep
    code = "import time; print('working', flush=True); time.sleep(30)"
    res = launcher.launch(make_inv(run_dir, code=code), run_dir)
    assert res.status == "failed"
    assert res.reason.startswith("preempted by Kueue (Preempted: Preempted by the harness")
    assert "working" in (run_dir / res.log).read_text()  # the log was kept
    kcluster.wait_for(lambda: not kcluster.list("jobs") and not kcluster.list("pods"), what="cleanup")


def test_oomkilled_and_timeout(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)
    orig = launcher._sleep

    def sleep(s: float) -> None:
        for p in kcluster.list("pods"):
            if p["status"].get("phase") == "Running" and p["metadata"]["labels"].get("benchrun.dev/replicate") == "1":
                kcluster.oom_kill(p["metadata"]["name"])
        orig(s)

    launcher._sleep = sleep
    res = launcher.launch(make_inv(run_dir, code="import time; time.sleep(30)"), run_dir)
    assert res.status == "failed" and res.reason.startswith("OOMKilled (exit code 137)")
    launcher._sleep = orig
    res2 = launcher.launch(make_inv(run_dir, replicate=2, code="import time; time.sleep(30)", timeout_s=1.0), run_dir)
    assert res2.status == "failed" and "timed out after 1s" in res2.reason


def test_a_retried_launch_adopts_the_existing_job(kcluster, home):
    from kubernetes import client

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)
    inv = make_inv(run_dir)
    client.BatchV1Api(kcluster.api_client()).create_namespaced_job("default", launcher.manifest(inv))
    uid = kcluster.get("jobs", TINY_R1)["metadata"]["uid"]
    res = launcher.launch(inv, run_dir)
    assert res.status == "ok" and res.job_uid == uid
    created = [v for v in kcluster.history("jobs", TINY_R1) if v and v["metadata"]["uid"] != uid]
    assert created == []  # never a second Job


def test_an_adopted_running_job_is_timed_from_its_containers_start(kcluster, home):
    """Review 2026-12-07: a run worker restarted mid-launch adopted the replicate's running Job and timed
    the suite from its own first look: 4 s into a 5 s timeout, the suite ended 9.5 s after it started."""
    import datetime as dt

    from kubernetes import client

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)
    inv = make_inv(run_dir, code="import time; print('working', flush=True); time.sleep(60)", timeout_s=5.0)
    client.BatchV1Api(kcluster.api_client()).create_namespaced_job("default", launcher.manifest(inv))
    kcluster.wait_for(lambda: [p for p in kcluster.list("pods") if p["status"].get("phase") == "Running"],
                      what="the earlier worker's pod running")
    time.sleep(4.0)  # the worker's restart took 4 s
    res = launcher.launch(inv, run_dir)
    assert res.status == "failed" and "timed out after 5s" in res.reason, res.reason
    started = dt.datetime.fromisoformat(res.messages[0]["container_started_utc"].replace("Z", "+00:00")).timestamp()
    assert res.t_finished - started < 8.0, res.t_finished - started  # was 9.5 s: 4 s + the whole timeout


@pytest.mark.parametrize("delete_finished", [True, False])
def test_a_pod_past_its_deadline_before_its_container_started_says_so(kcluster_factory, home, delete_finished):
    """Review 2026-12-07: a pod whose image pull outlasted its activeDeadlineSeconds read `timed out after 1s
    (activeDeadlineSeconds); Job deleted`: the suite never ran, and with delete_finished off the Job stayed."""
    cluster = kcluster_factory(pull_seconds=6.0)
    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(cluster, pull_allowance_s=1.0)
    launcher.delete_finished = delete_finished
    res = launcher.launch(make_inv(run_dir, code="print('never ran')", timeout_s=1.0), run_dir)
    assert res.status == "failed" and res.reason.startswith(
        "its container never started within the pod's activeDeadlineSeconds (the 1s timeout plus the image pull "
        "allowance): "), res.reason
    assert res.reason.endswith("; Job deleted" if delete_finished else "; Job NOT deleted"), res.reason


def test_a_job_of_that_name_that_has_ended_is_made_anew_not_adopted(kcluster, home):
    """Found in review (twice): with the earlier Job kept (delete_finished off, a worker that died, a TTL not
    reached), a contended rerun or a re-execution of the run adopted the finished Job and reported its old
    pod's result as the new launch's: nothing was measured. Now the ended Job and its pods are deleted and
    the Job made anew."""
    from benchrun.launch.kubernetes import KubernetesLauncher

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)
    keep = KubernetesLauncher(launcher.batch_api, launcher.core_api, "default", launcher.placement, poll_s=0.05,
                              custom_api=launcher.custom_api, delete_finished=False)
    first = keep.launch(make_inv(run_dir), run_dir)
    assert first.status == "ok" and kcluster.get("jobs", TINY_R1) is not None  # kept
    again = keep.launch(make_inv(run_dir, code="import sys; sys.exit(3)"), run_dir)
    assert again.status == "failed" and "exited with code 3" in again.reason, again.reason
    assert again.job_uid != first.job_uid


def test_a_job_whose_pod_ended_before_its_complete_condition_is_made_anew_not_adopted(kcluster, home, monkeypatch):
    """CI (2026-12-07) failed the test above once: the rerun came the moment the earlier pod ended,
    before the Job controller's next sync gave the Job its Complete condition, so the Job read as
    running and was adopted, and the old pod's "ok" reported as the new launch's. A Job whose pods
    have all ended is now made anew whatever its conditions say. Held deterministic here: the Job
    controller paused, the condition taken off through the API."""
    from kubernetes import client

    from benchrun.launch.k8s_submit import create_or_adopt_job
    from benchrun.launch.kubernetes import KubernetesLauncher

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)
    keep = KubernetesLauncher(launcher.batch_api, launcher.core_api, "default", launcher.placement, poll_s=0.05,
                              custom_api=launcher.custom_api, delete_finished=False)
    first = keep.launch(make_inv(run_dir), run_dir)
    assert first.status == "ok"

    async def not_synced_yet() -> None:
        return None

    monkeypatch.setattr(kcluster.control, "job_controller", not_synced_yet)
    batch = client.BatchV1Api(kcluster.api_client())
    job = batch.read_namespaced_job_status(TINY_R1, "default")
    job.status.conditions = None
    batch.replace_namespaced_job_status(TINY_R1, "default", job)
    assert not (kcluster.get("jobs", TINY_R1)["status"].get("conditions"))
    [pod] = kcluster.list("pods")
    assert pod["status"]["phase"] == "Succeeded"
    made = create_or_adopt_job(keep.client, batch, "default", TINY_R1, keep._model(keep.manifest(make_inv(run_dir))),
                               0.05)
    assert made.metadata.uid != first.job_uid


def test_a_jobset_of_that_name_that_has_ended_is_made_anew_not_adopted(shared, home):
    """As a Job: a gang's JobSet kept after its run (delete_finished off) was adopted by the next
    launch of that replicate, which reported the old pods' result without running anything."""
    from benchrun.launch.kubernetes import KubernetesLauncher

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    keep = KubernetesLauncher(launcher.batch_api, launcher.core_api, "default", launcher.placement, poll_s=0.05,
                              custom_api=launcher.custom_api, delete_finished=False)
    gang = make_inv(run_dir, replicate=2, nodes=2, ranks_per_node=1, code=script_for(2))
    first = keep.launch(gang, run_dir)
    assert first.status == "ok", first.reason
    assert len(shared.list("jobsets")) == 1  # kept
    again = keep.launch(dataclasses.replace(gang, argv=(sys.executable, "-c", "import sys; sys.exit(3)")), run_dir)
    assert again.status == "failed" and "code 3" in (again.reason or ""), again.reason
    assert again.job_uid != first.job_uid
    assert shared.errors == []


def test_a_jobset_live_when_asked_but_ended_when_adopted_has_its_files_set_aside(shared, home, monkeypatch):
    """The JobSet path of the re-creation callback (noticed last session: only the Job's had a test). A
    gang's JobSet kept after its run (delete_finished off) read as live when asked, so its files stayed;
    by the 409 it had ended, so it is deleted and made anew, and what its pods left goes aside first:
    the new launch, whose samples never arrive, does not find the earlier pods' at its own names."""
    import benchrun.launch.kubernetes as k8s
    from benchrun.launch.kubernetes import KubernetesLauncher

    run_dir = home / "runs" / RUN_ID
    pre = f"{RUN_ID}_tiny_r2"
    samples = {"requests": f"raw/{pre}_requests.parquet"}
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    keep = KubernetesLauncher(launcher.batch_api, launcher.core_api, "default", launcher.placement, poll_s=0.05,
                              custom_api=launcher.custom_api, delete_finished=False)
    wrote = script_for(2, samples=samples, before=textwrap.dedent(f"""
        import os, pathlib
        run = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"])
        (run / "raw").mkdir(parents=True, exist_ok=True)
        (run / "raw" / "{pre}_requests.parquet").write_bytes(b"the earlier pods'")
    """))
    gang = make_inv(run_dir, replicate=2, nodes=2, ranks_per_node=1, code=wrote)
    first = keep.launch(gang, run_dir)
    assert first.status == "ok", first.reason
    assert len(shared.list("jobsets")) == 1  # kept, ended
    asked: list[str] = []

    def live_when_asked(*args: Any) -> bool:
        asked.append(args[3])
        return True

    monkeypatch.setattr(k8s, "live_jobset", live_when_asked)
    again = keep.launch(dataclasses.replace(gang, argv=(sys.executable, "-c", script_for(2, samples=samples))),
                        run_dir)
    assert asked == [shared.list("jobsets")[0]["metadata"]["name"]]
    assert again.job_uid != first.job_uid and again.status == "failed", again
    assert again.reason.startswith(f"declared outputs did not arrive in the run directory: raw/{pre}_requests.parquet")
    assert (run_dir / "raw" / f"{pre}_earlier1_requests.parquet").read_bytes() == b"the earlier pods'"
    assert not (run_dir / "raw" / f"{pre}_requests.parquet").exists()
    assert shared.errors == []


def test_a_jobset_of_that_name_made_for_another_replicate_is_not_adopted(shared, home):
    """A JobSet was adopted whatever its labels said; now as a Job: left alone, the replicate
    failing naming both."""
    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    gang = make_inv(run_dir, replicate=2, nodes=2, ranks_per_node=1, code=script_for(2))
    other = launcher.manifest(dataclasses.replace(gang, suite="other"))
    other["metadata"]["name"] = launcher.manifest(gang)["metadata"]["name"]
    other["spec"]["suspend"] = True
    shared.create("jobsets", other)
    res = launcher.launch(gang, run_dir)
    assert res.status == "failed" and "already exists for suite='other', not suite='tiny'" in res.reason, res.reason
    [left] = shared.list("jobsets")
    assert left["metadata"]["labels"]["benchrun.dev/suite"] == "other"


def test_a_job_of_that_name_made_for_another_replicate_is_not_adopted(kcluster, home):
    """A Job already there under this replicate's name but labelled for another suite (a name
    clash, or one left over) is neither adopted (its result would be reported as this suite's)
    nor deleted: the replicate fails naming both."""
    from kubernetes import client

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)
    inv = make_inv(run_dir)
    foreign = launcher.manifest(inv)
    foreign["metadata"]["labels"]["benchrun.dev/suite"] = "gemm.a"
    client.BatchV1Api(kcluster.api_client()).create_namespaced_job("default", foreign)
    uid = kcluster.get("jobs", TINY_R1)["metadata"]["uid"]
    res = launcher.launch(inv, run_dir)
    assert res.status == "failed" and res.job_uid is None, res
    assert res.reason == (f"cannot create Job {TINY_R1}: 409 Conflict: Job {TINY_R1} already exists for "
                          "suite='gemm.a', not suite='tiny': not adopted (delete it if it is left over from "
                          "another run)")
    assert kcluster.get("jobs", TINY_R1)["metadata"]["uid"] == uid  # the other's Job is left alone


def test_a_relaunch_sets_the_earlier_launchs_files_aside_not_reused(shared, home):
    """Found in review: the local launcher sets an earlier launch's files aside (rerun.set_aside_earlier);
    this one removed only the result document. r1 relaunched into the same run directory (a Dagster
    re-execution) and failing kept launch 1's Prometheus and server-metrics parquets under its own
    names, curated and sealed as its telemetry; a relaunch whose samples never arrived found launch 1's
    and read ok. Each earlier launch's log, document, raw files and figures now go aside as earlier<i>."""
    run_dir = home / "runs" / RUN_ID
    pre = f"{RUN_ID}_tiny_r1"
    kinds = ("requests", "servermetrics", "prometheus")
    code = script_for(1, samples={"requests": f"raw/{pre}_requests.parquet"}, before=textwrap.dedent(f"""
        import os, pathlib
        run = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"])
        for d in ("raw", "figures"):
            (run / d).mkdir(parents=True, exist_ok=True)
        for kind in {kinds!r}:
            (run / "raw" / ("{pre}_%s.parquet" % kind)).write_bytes(b"launch 1 " + kind.encode())
        (run / "figures" / "{pre}_latency.png").write_bytes(b"launch 1 figure")
    """))
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    first = launcher.launch(make_inv(run_dir, code=code), run_dir)
    assert first.status == "ok", first.reason
    again = launcher.launch(make_inv(run_dir, code="import sys; print('launch 2', flush=True); sys.exit(3)"), run_dir)
    assert again.status == "failed" and "exited with code 3" in again.reason, again.reason
    raw, figures = run_dir / "raw", run_dir / "figures"
    assert "hello from the pod" in (raw / f"{pre}_earlier1.log").read_text()
    assert "launch 2" in (run_dir / again.log).read_text()
    doc = json.loads((raw / f"{pre}_earlier1.json").read_text())
    assert doc["status"] == "ok" and doc["samples"]["requests"] == f"raw/{pre}_earlier1_requests.parquet"
    for kind in kinds:
        assert (raw / f"{pre}_earlier1_{kind}.parquet").read_bytes() == b"launch 1 " + kind.encode()
        assert not (raw / f"{pre}_{kind}.parquet").exists(), kind  # nothing of launch 1's at r1's own names
    assert (figures / f"{pre}_earlier1_latency.png").read_bytes() == b"launch 1 figure"
    assert not (figures / f"{pre}_latency.png").exists() and not (run_dir / f"structured/{pre}.json").exists()
    # Launch 3 names its requests but never writes them: launch 1's are not taken for them.
    third = launcher.launch(make_inv(run_dir, code=script_for(1, samples={"requests": f"raw/{pre}_requests.parquet"})),
                            run_dir)
    assert third.status == "failed", third.reason
    assert third.reason.startswith(f"declared outputs did not arrive in the run directory: raw/{pre}_requests.parquet")
    assert "launch 2" in (raw / f"{pre}_earlier2.log").read_text()
    assert shared.errors == []


def test_a_running_job_adopted_on_the_run_volume_keeps_its_files_in_place(shared, home):
    """The other side of the set-aside: a Job of the replicate's name still running (a restarted
    orchestrator retrying the step) is adopted, and its pod writes into this run directory through the
    volume. What it has written is this launch's, not an earlier one's: it stays at the replicate's names."""
    from kubernetes import client

    run_dir = home / "runs" / RUN_ID
    pre = f"{RUN_ID}_tiny_r1"
    code = script_for(1, samples={"requests": f"raw/{pre}_requests.parquet"}, before=textwrap.dedent(f"""
        import os, pathlib, time
        run = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"])
        (run / "raw").mkdir(parents=True, exist_ok=True)
        (run / "raw" / "{pre}_requests.parquet").write_bytes(b"the running pod's")
        deadline = time.monotonic() + 20
        while not (run / "adopted").exists() and time.monotonic() < deadline:  # held until the launch adopted it
            time.sleep(0.05)
    """))
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    inv = make_inv(run_dir, code=code)
    client.BatchV1Api(shared.api_client()).create_namespaced_job("default", launcher.manifest(inv))
    uid = shared.get("jobs", TINY_R1)["metadata"]["uid"]
    shared.wait_for(lambda: (run_dir / "raw" / f"{pre}_requests.parquet").is_file(), what="the pod writing")
    orig = launcher._sleep
    launcher._sleep = lambda s: ((run_dir / "adopted").touch(), orig(s))[-1]
    res = launcher.launch(inv, run_dir)
    assert res.status == "ok" and res.job_uid == uid, res.reason
    assert (run_dir / "raw" / f"{pre}_requests.parquet").read_bytes() == b"the running pod's"
    assert not list((run_dir / "raw").glob(f"{pre}_earlier*"))


def test_a_job_live_when_asked_but_ended_when_adopted_has_its_files_set_aside(shared, home, monkeypatch):
    """Found in review: on a run volume a Job of the replicate's name running when ``live_job`` was asked
    (a restarted orchestrator retrying the step) left the earlier launch's files in place; by the 409
    read in ``create_or_adopt_job`` (up to 120 s of API retries later) it had ended, so it was deleted
    and made anew, and the new pod ran with the earlier pod's raw parquets and figures at the
    replicate's own names (a relaunch whose samples never arrived found them and read ok). They now go
    aside once the ended Job is gone, before it is made anew."""
    from kubernetes import client

    import benchrun.launch.kubernetes as k8s

    run_dir = home / "runs" / RUN_ID
    pre = f"{RUN_ID}_tiny_r1"
    code = script_for(1, samples={"requests": f"raw/{pre}_requests.parquet"}, before=textwrap.dedent(f"""
        import os, pathlib, time
        run = pathlib.Path(os.environ["BENCHRUN_RUN_DIR"])
        for d in ("raw", "figures"):
            (run / d).mkdir(parents=True, exist_ok=True)
        (run / "raw" / "{pre}_requests.parquet").write_bytes(b"the earlier pod's")
        (run / "figures" / "{pre}_latency.png").write_bytes(b"the earlier pod's figure")
        deadline = time.monotonic() + 20
        while not (run / "end now").exists() and time.monotonic() < deadline:  # running until let go
            time.sleep(0.05)
    """))
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    client.BatchV1Api(shared.api_client()).create_namespaced_job("default", launcher.manifest(make_inv(run_dir,
                                                                                                      code=code)))
    uid = shared.get("jobs", TINY_R1)["metadata"]["uid"]
    shared.wait_for(lambda: (run_dir / "figures" / f"{pre}_latency.png").is_file(), what="the earlier pod writing")
    real, asked = k8s.live_job, []

    def live_then_ended(*args: Any) -> bool:
        live = real(*args)
        asked.append(live)
        (run_dir / "end now").touch()  # the Job ends right after it was seen running
        shared.wait_for(lambda: any(c["type"] == "Complete" and c["status"] == "True"
                                    for c in shared.get("jobs", TINY_R1)["status"].get("conditions") or []),
                        what="the earlier Job complete")
        return live

    monkeypatch.setattr(k8s, "live_job", live_then_ended)
    # This launch declares its requests but never writes them: the earlier pod's are not taken for them.
    res = launcher.launch(make_inv(run_dir, code=script_for(1, samples={"requests": f"raw/{pre}_requests.parquet"})),
                          run_dir)
    assert asked == [True]
    assert res.job_uid != uid and res.status == "failed", res
    assert res.reason.startswith(f"declared outputs did not arrive in the run directory: raw/{pre}_requests.parquet")
    assert (run_dir / "raw" / f"{pre}_earlier1_requests.parquet").read_bytes() == b"the earlier pod's"
    assert (run_dir / "figures" / f"{pre}_earlier1_latency.png").read_bytes() == b"the earlier pod's figure"
    assert not (run_dir / "raw" / f"{pre}_requests.parquet").exists()
    assert not (run_dir / "figures" / f"{pre}_latency.png").exists()
    assert shared.errors == []


def test_no_answer_from_the_api_server_when_asking_for_a_live_job_does_not_abort_the_launch(shared, home, caplog):
    """Found in review: ``live_job`` caught only ApiException, and a connection error of the client
    (urllib3's MaxRetryError) escaped the launch, and ``run_layer`` aborted the whole layer with it
    (before, the first call was ``_create_with_retries``, which rides them out). Now it reads as
    unknown: the earlier launch's files are left in place, with a warning, and the replicate launches."""
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    run_dir = home / "runs" / RUN_ID
    pre = f"{RUN_ID}_tiny_r1"
    (run_dir / "raw").mkdir()
    (run_dir / "raw" / f"{pre}_requests.parquet").write_bytes(b"an earlier launch's")
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    real, calls = launcher.batch_api.read_namespaced_job, []

    def unreachable_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("name"))
        if len(calls) == 1:
            raise MaxRetryError(None, f"/apis/batch/v1/namespaces/default/jobs/{TINY_R1}",
                                NewConnectionError(None, "Connection refused"))
        return real(*args, **kwargs)

    launcher.batch_api.read_namespaced_job = unreachable_once
    with caplog.at_level("WARNING", logger="benchrun.launch.k8s_submit"):
        res = launcher.launch(make_inv(run_dir), run_dir)
    assert res.status == "ok", res.reason
    assert calls[0] == TINY_R1
    assert (run_dir / "raw" / f"{pre}_requests.parquet").read_bytes() == b"an earlier launch's"
    assert not list((run_dir / "raw").glob(f"{pre}_earlier*"))
    assert any(f"cannot tell whether Job default/{TINY_R1} is running (MaxRetryError" in r.getMessage()
               for r in caplog.records), caplog.text


def test_cancellation_deletes_the_job(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)

    def sleep(s: float) -> None:
        if any(p["status"].get("phase") == "Running" for p in kcluster.list("pods")):
            raise KeyboardInterrupt
        time.sleep(s)

    launcher._sleep = sleep
    with pytest.raises(KeyboardInterrupt):
        launcher.launch(make_inv(run_dir, code="import time; time.sleep(30)"), run_dir)
    kcluster.wait_for(lambda: not kcluster.list("jobs") and not kcluster.list("pods"), what="cleanup")


@pytest.mark.slow
def test_orchestrator_killed_mid_layer_then_sweep_cleans_up(kcluster, home, tmp_path):
    """A launching process killed with SIGKILL leaves its Job; the sweep deletes it."""
    run_dir = home / "runs" / RUN_ID
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from pathlib import Path
        from test_launch_kubernetes_harness import launcher_for, make_inv
        class C:  # the cluster, seen from another process: just its kubeconfig
            def api_client(self):
                from kubernetes import config
                return config.new_client_from_config(config_file={str(kcluster.kubeconfig)!r})
        run_dir = Path({str(run_dir)!r})
        launcher_for(C()).launch(make_inv(run_dir, code="import time; time.sleep(60)"), run_dir)
    """))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    proc = subprocess.Popen([sys.executable, str(driver)], env=env, start_new_session=True)
    try:
        kcluster.wait_for(lambda: any(p["status"].get("phase") == "Running" for p in kcluster.list("pods")),
                          timeout=60, what="the replicate running")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert [j["metadata"]["name"] for j in kcluster.list("jobs")] == [TINY_R1]  # left behind
    from kubernetes import client

    batch = client.BatchV1Api(kcluster.api_client())
    assert sweep(batch, "default", is_running=lambda run_id: run_id != RUN_ID) == [TINY_R1]
    kcluster.wait_for(lambda: not kcluster.list("jobs") and not kcluster.list("pods"), what="cleanup")
    assert sweep(batch, "default", is_running=lambda run_id: False) == []


def test_a_gang_runs_as_one_jobset(shared, home):
    """nodes: 2 → one JobSet under one Kueue workload; node 0's result, each node's log; a
    failing node fails the replicate, named."""
    run_dir = home / "runs" / RUN_ID
    node_code = script_for(1, before=textwrap.dedent("""
        import os, sys
        rank = int(os.environ["NODE_RANK"])
        print("node", rank, "of", os.environ["NNODES"], "master", os.environ["MASTER_ADDR"], flush=True)
        if rank != 0:
            sys.exit(int(os.environ.get("FAIL_CODE", "0")))
    """))
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    inv = make_inv(run_dir, code=node_code, nodes=2, ranks_per_node=1)
    res = launcher.launch(inv, run_dir)
    assert res.status == "ok", res.reason
    assert "node 0 of 2" in (run_dir / inv.node_log_relpath(0)).read_text()
    assert "node 1 of 2" in (run_dir / inv.node_log_relpath(1)).read_text()
    timeline = res.messages[0]
    assert [n["node_rank"] for n in timeline["nodes"]] == [0, 1] and timeline["admitted_utc"]
    assert res.scheduler_run_id.startswith("jobset-")
    shared.wait_for(lambda: not shared.list("jobsets") and not shared.list("jobs") and not shared.list("pods"),
                    what="the JobSet and its children deleted")
    bad = make_inv(run_dir, replicate=2, code=node_code.replace("script_for", ""), nodes=2, ranks_per_node=1,
                   env={**inv.env, "FAIL_CODE": "3"})
    res2 = launcher.launch(bad, run_dir)
    assert res2.status == "failed" and res2.reason.startswith("node 1 (node-"), res2.reason
    assert "exited with code 3" in res2.reason


def test_publication_layer_runs_in_one_job_on_one_node(kcluster_factory, home):
    """Publication grade: one Job for the layer, one admission, every replicate on the same
    node in the planned order; a replicate the pod never reached is failed with the reason."""
    from kharness import Node

    cluster = kcluster_factory(host_env={"PYTHONPATH": str(ROOT)},
                               nodes=[Node("gpu-a", labels={"pool": "bench"}), Node("gpu-b", labels={"pool": "bench"})])
    cluster.bind_pvc("home", home)
    run_dir = home / "runs" / RUN_ID
    image = "registry.example/bench@sha256:" + "b" * 64
    invs = [make_inv(run_dir, replicate=k, code=script_for(k), image=image, cpu="1", memory="1Gi") for k in (1, 2, 3)]
    (run_dir / "structured").mkdir(parents=True, exist_ok=True)
    (run_dir / "structured" / f"{RUN_ID}_plan.json").write_text(json.dumps([i.to_json() for i in invs]))
    launcher = launcher_for(cluster, run_volume_claim="home", run_home=str(home), publication_grade=True,
                            node_selector={"pool": "bench"})
    seen = []
    results = launcher.launch_layer(invs, run_dir, on_result=seen.append)
    assert [(r.replicate, r.status) for r in results] == [(1, "ok"), (2, "ok"), (3, "ok")], [r.reason for r in results]
    assert [r.replicate for r in seen] == [1, 2, 3]
    assert len({r.node_name for r in results}) == 1 and len({r.job_uid for r in results}) == 1
    assert len(cluster.list("workloads")) <= 1  # one admission (the Workload goes with its Job)
    assert all(r.messages[0]["admitted_utc"] for r in results)
    assert "hello from the pod" in (run_dir / results[2].log).read_text()
    # A layer whose pod dies early: the unreached replicates are failed, with the reason.
    bad = [make_inv(run_dir, replicate=k, code="import time; time.sleep(30)", image=image, cpu="1", memory="1Gi",
                    timeout_s=1.0, suite="slow") for k in (1, 2)]
    (run_dir / "structured" / f"{RUN_ID}_plan.json").write_text(json.dumps([i.to_json() for i in bad]))
    launcher._sleep = lambda s: ([cluster.oom_kill(p["metadata"]["name"]) for p in cluster.list("pods")
                                  if p["status"].get("phase") == "Running"], time.sleep(s))
    results = launcher.launch_layer(bad, run_dir)
    assert all(r.status == "failed" for r in results)
    assert results[-1].reason.startswith("the layer Job ended before this replicate ran (the layer pod ended: OOMKilled")


def test_cancelling_a_run_deletes_its_jobs_by_label(kcluster, home):
    """What the Dagster resource does when a run is cancelled: every Job of that run goes."""
    from kubernetes import client

    from benchrun.launch.kubernetes import delete_run_jobs

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)
    batch = client.BatchV1Api(kcluster.api_client())
    for k in (1, 2):
        batch.create_namespaced_job("default", launcher.manifest(make_inv(run_dir, replicate=k)))
    other = launcher.manifest(make_inv(run_dir, replicate=1, run_id="other-20261201000000-abcdef12"))
    batch.create_namespaced_job("default", other)
    assert delete_run_jobs(batch, "default", RUN_ID, client.CustomObjectsApi(kcluster.api_client())) == 2
    assert [j["metadata"]["name"] for j in kcluster.list("jobs")] == [other["metadata"]["name"]]


def test_sweep_deletes_only_jobs_of_runs_finished_here(kcluster, home):
    from kubernetes import client

    from benchrun.launch.kubernetes import finished_here
    from benchrun.rundir import RunDir

    batch = client.BatchV1Api(kcluster.api_client())
    launcher = launcher_for(kcluster)
    ids = {"done": "done-20261201000000-abcdef12", "live": "live-20261201000000-abcdef12",
           "elsewhere": "elsewhere-20261201000000-abcdef12"}
    for key, phase in (("done", "Failed"), ("live", "Running")):
        rd = RunDir(home, ids[key]).create()
        rd.write_status({"run_id": ids[key], "phase": phase})
    for run_id in ids.values():
        batch.create_namespaced_job("default", launcher.manifest(make_inv(home / "runs" / run_id, run_id=run_id)))
    names = {key: job_name(make_inv(home / "runs" / run_id, run_id=run_id)) for key, run_id in ids.items()}
    assert sweep(batch, "default", finished_here(home)) == [names["done"]]
    left = sorted(j["metadata"]["name"] for j in kcluster.list("jobs"))
    assert left == sorted([names["live"], names["elsewhere"]])


def test_the_pod_receives_the_words_the_spec_wrote_and_a_gang_its_node_rank(shared, home):
    # Kubernetes reads "$$" as "$" and expands "$(VAR)" in command and args: the Job passed the
    # spec's words unescaped ("a$$b" arrived as "a$b") and the JobSet escaped only "$(" —
    # the harness's kubelet now expands as a kubelet does, so this runs what a cluster would
    from benchrun.plan import gang_mark

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    code = script_for(1, before="import sys; print('ARGV', sys.argv[1:], flush=True)\n")
    words = ("a$$b", "$(HOME)", "cost=$5", "$(BENCHRUN_RUN_ID)")
    res = launcher.launch(make_inv(run_dir, argv=(sys.executable, "-c", code, *words)), run_dir)
    assert res.status == "ok", res.reason
    assert f"ARGV {list(words)!r}" in (run_dir / res.log).read_text()
    gang = make_inv(run_dir, replicate=2, nodes=2, ranks_per_node=1,
                    argv=(sys.executable, "-c", script_for(2, before="import sys; print('ARGV', sys.argv[1:], flush=True)\n"),
                          "rank=" + gang_mark("NODE_RANK"), "a$$b", "$(X)"))
    res = launcher.launch(gang, run_dir)
    assert res.status == "ok", res.reason
    for rank in (0, 1):
        assert f"ARGV ['rank={rank}', 'a$$b', '$(X)']" in (run_dir / gang.node_log_relpath(rank)).read_text()


def test_the_pod_receives_the_env_values_the_spec_wrote(shared, home):
    # The kubelet expands $(VAR) in env values too, from the variables before it (the envFrom
    # secret's included): a spec's env "$(AWS_SECRET_ACCESS_KEY)" became the secret, which the
    # suite writes into its signed result. Spec values are escaped; the harness expands as a kubelet.
    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(shared, run_volume_claim="home", run_home=str(home))
    code = script_for(1, before="import os; print('ENV', os.environ['SPEC_VALUE'], flush=True)\n")
    inv = make_inv(run_dir, code=code)
    inv = dataclasses.replace(inv, env={**inv.env, "SPEC_VALUE": "$(BENCHRUN_RUN_ID)/a$$b"})
    res = launcher.launch(inv, run_dir)
    assert res.status == "ok", res.reason
    assert "ENV $(BENCHRUN_RUN_ID)/a$$b\n" in (run_dir / res.log).read_text()


def test_the_kubelets_expansion_in_the_harness():
    from kharness.control import expand_k8s

    env = {"A": "x", "EMPTY": ""}
    assert expand_k8s("$(A)/$$(A)/$(B)/$$/$5/$/$(A", env) == "x/$(A)/$(B)/$/$5/$/$(A"
    assert expand_k8s("$(EMPTY)end$", env) == "end$"
    assert expand_k8s("a$(b$$c", env) == "a$(b$c"  # as Kubernetes' expansion.Expand does


def test_an_api_server_that_does_not_answer_for_a_while_does_not_fail_the_replicate(kcluster, home):
    """Found in review: five failed reads two seconds apart ended the replicate and deleted its Job, so a
    10 s API-server restart failed an hour-long GPU run. 5xx, 429 and connection errors now get a time
    budget with the wait doubling; a refusal (403) still ends it after five reads (test_rbac_harness)."""
    import time as _time

    from kubernetes.client.exceptions import ApiException

    run_dir = home / "runs" / RUN_ID
    launcher = launcher_for(kcluster)
    real = launcher.batch_api.read_namespaced_job_status
    down = {"until": None, "refused": 0}

    def flaky(*a, **k):
        if down["until"] is None:
            down["until"] = _time.monotonic() + 2.0  # the first read starts a 2 s outage
        if _time.monotonic() < down["until"]:
            down["refused"] += 1
            raise ApiException(status=503, reason="Service Unavailable")
        return real(*a, **k)

    launcher.batch_api.read_namespaced_job_status = flaky
    res = launcher.launch(make_inv(run_dir), run_dir)
    assert res.status == "ok", res.reason
    assert down["refused"] >= 5  # before: the fifth failed read ended the replicate


def test_a_job_creation_the_api_server_throttles_or_fails_for_a_while_is_tried_again(kcluster, home):
    """Found in review: a 429 on the Job's creation failed the replicate at once, and four 5xx (dagster-k8s's
    retries running out) escaped the launch and aborted the whole layer."""
    from kubernetes.client.exceptions import ApiException

    run_dir = home / "runs" / RUN_ID
    for status, times in ((429, 2), (503, 6)):
        launcher = launcher_for(kcluster)
        real = launcher.batch_api.create_namespaced_job
        calls = {"n": 0}

        def flaky(*a, _real=real, _status=status, _times=times, **k):
            calls["n"] += 1
            if calls["n"] <= _times:
                exc = ApiException(status=_status, reason="busy")
                exc.headers = {"Retry-After": "0"}
                raise exc
            return _real(*a, **k)

        launcher.batch_api.create_namespaced_job = flaky
        launcher.client.batch_api = launcher.batch_api
        res = launcher.launch(make_inv(run_dir), run_dir)
        assert res.status == "ok", (status, res.reason)
        assert calls["n"] == times + 1
        kcluster.wait_for(lambda: not kcluster.list("jobs"), what="the Job deleted")


def test_a_jobsets_watch_reads_only_its_own_pods_not_those_of_one_of_that_name_deleted_before():
    """A JobSet made anew (an ended one of its name deleted first) was followed by name: a pod of
    the deleted one still terminating, or created later in the same second, could be read as the
    new one's node 0. JobSet labels its pods with its uid; the watch reads only this JobSet's."""
    import datetime as dt
    from types import SimpleNamespace as NS

    from benchrun.launch.k8s_watches import jobset_watch

    def pod(uid: str, js_uid: str, second: int) -> Any:
        return NS(metadata=NS(uid=uid, name=f"p-{uid}", labels={"jobset.sigs.k8s.io/jobset-uid": js_uid},
                              annotations={"batch.kubernetes.io/job-completion-index": "0"},
                              creation_timestamp=dt.datetime(2026, 12, 7, 0, 0, second, tzinfo=dt.timezone.utc),
                              deletion_timestamp=None),
                  status=NS(phase="Succeeded"))

    core = NS(list_namespaced_pod=lambda ns, label_selector: NS(items=[pod("new", "js-2", 1), pod("old", "js-1", 2)]))
    custom = NS(get_namespaced_custom_object=lambda *a: {"metadata": {"uid": "js-2"}, "status": {}},
                list_namespaced_custom_object=lambda *a, **k: {"items": []})
    _js, _wl, pods = jobset_watch(core, custom, "default", "gang", 1).read(None)
    assert pods[0].metadata.uid == "new"


def test_prometheus_is_collected_beside_the_next_job_and_written_by_the_layers_last(kcluster, home, monkeypatch,
                                                                                   fake_prometheus):
    """Found in review (2026-12-07): the launcher waited for the Prometheus settle (up to 15 s) before it
    created the next Job, and asked only for a replicate that left a result. Now the collection runs
    beside the next Job, and the layer's last replicate, a failed one too, writes it in before the
    layer ends."""
    from benchrun.warehouse.sources import parse_ts

    _Prometheus.reset(targets=[{"scrapeInterval": "1s"}])  # no series: every query answered, with nothing
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", fake_prometheus)
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "3s")
    run_dir = home / "runs" / RUN_ID
    r1, r2 = make_inv(run_dir, 1), make_inv(run_dir, 2, code="import sys; sys.exit(3)")
    (run_dir / "structured").mkdir(parents=True, exist_ok=True)
    (run_dir / "structured" / f"{RUN_ID}_plan.json").write_text(json.dumps([r1.to_json(), r2.to_json()]))
    launcher = launcher_for(kcluster)
    res1 = launcher.launch(r1, run_dir)
    returned = time.time()
    ended = parse_ts(res1.messages[0]["container_finished_utc"]).timestamp()
    assert res1.status == "ok" and returned < ended + 3.0  # it did not wait for the settle
    assert json.loads((run_dir / res1.result).read_text())["telemetry"]["prometheus"]["status"] == "pending"
    res2 = launcher.launch(r2, run_dir)
    assert res2.status == "failed" and res2.result is None
    prom = json.loads((run_dir / res1.result).read_text())["telemetry"]["prometheus"]
    assert prom["status"] == "ok" and prom["settle_s"] == 3.0, prom
