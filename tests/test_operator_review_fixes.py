"""Found in review of the BenchmarkRun operator: a deletion whose run was not stopped removed the
finalizer anyway; a replica with a fast clock took over a live Lease; a half-open connection
blocked the loop for good (now client timeouts and a heartbeat the liveness probe checks); a
verdict left out of a later status stayed on the object (merge patches merge nested maps); and
the uninstall order was undocumented (the finalizer outlived the operator)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from benchrun.controller import kube
from benchrun.controller import lease as lease_mod
from benchrun.controller import status as status_mod
from benchrun.controller.dagster_runs import DagsterRuns, stop_in_flight
from benchrun.controller.lease import LeaseElector
from benchrun.controller.operator import FINALIZER, Operator, Settings
from benchrun.controller.status import ResourceRef
from benchrun.rundir import RunDir
from test_operator import CR, KIND, NS, api_of, create, doc, operator, runs_of
from test_operator import harness, instance, runs  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[1]


def _started(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.DagsterRun:
    """What the run worker reports when it starts: the run is launched (STARTED)."""
    instance.report_dagster_event(dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name=run.job_name),
                                  run.run_id)
    return instance.get_run_by_id(run.run_id)


def _k8s_terminate_failing(instance: dg.DagsterInstance, calls: list[str]) -> Any:
    """``K8sRunLauncher.terminate`` when its delete_job failed (403, API server away, the Job not
    created yet): CANCELING reported first, the exception swallowed, None returned."""
    def terminate(run_id: str) -> None:
        calls.append(run_id)
        instance.report_run_canceling(instance.get_run_by_id(run_id))
        return None

    return terminate


def _terminate_ok(instance: dg.DagsterInstance, calls: list[str]) -> Any:
    def terminate(run_id: str) -> bool:
        calls.append(run_id)
        run = instance.get_run_by_id(run_id)
        instance.report_run_canceling(run)
        instance.report_run_canceled(run)  # the worker, SIGTERMed, reports it on its way down
        return True

    return terminate


# -- 1. the finalizer waits until the runs have stopped -----------------------------------------
def test_a_deletion_whose_run_did_not_stop_keeps_the_finalizer_and_is_retried_with_back_off(
        harness, instance, runs, canary_doc, monkeypatch) -> None:
    obj = create(harness, doc(canary_doc, "t"))
    uid = obj["metadata"]["uid"]
    operator(harness, runs).relist()
    [run] = runs_of(instance, uid)
    run_dir_id = harness.get(KIND, "t", NS)["status"]["runId"]
    assert _started(instance, run).status == dg.DagsterRunStatus.STARTED
    calls: list[str] = []
    monkeypatch.setattr(instance.run_launcher, "terminate", _k8s_terminate_failing(instance, calls))
    api_of(harness).delete_namespaced_custom_object(*CR, NS, "benchmarkruns", "t")
    op = operator(harness, DagsterRuns(instance))
    op.relist()
    held = harness.get(KIND, "t", NS)  # was: None (finalizer removed, the Job left running)
    assert held is not None and held["metadata"]["finalizers"] == [FINALIZER]
    assert run.run_id in held["status"]["message"] and "did not confirm" in held["status"]["message"]
    assert RunDir.for_run(run_dir_id).read_status()["phase"] == "Pending"  # not marked Canceled
    assert (op.stats.cancelled, op.stats.stop_waits, calls) == (0, 1, [run.run_id])
    # backing off: neither a retry nor the watch's event of its own status note tries it at once
    op.retry_waiting()
    op.step()
    assert calls == [run.run_id] and uid in op.waiting
    # due again, still failing (the run is CANCELING now, and still in flight): the wait doubles
    op._not_before[uid] = 0.0
    op.retry_waiting()
    assert len(calls) == 2 and op.stats.stop_waits == 2
    assert op._not_before[uid] - time.monotonic() > 1.5 * op.settings.stop_retry_s
    assert harness.get(KIND, "t", NS) is not None
    # the launcher stops it: the next try removes the finalizer and marks the run directory
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    op._not_before[uid] = 0.0
    op.retry_waiting()
    assert harness.get(KIND, "t", NS) is None and op.stats.cancelled == 1 and len(calls) == 3
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
    assert RunDir.for_run(run_dir_id).read_status()["phase"] == "Canceled"
    assert uid not in op.waiting and uid not in op._not_before


def test_stop_in_flight_reports_what_stopped_and_what_is_waited_for(harness, instance, runs, canary_doc,
                                                                   monkeypatch) -> None:
    """A queued run is cancelled where it waits; a launched run whose launcher raised is waited for,
    with the reason; one confirmed stopped is not terminated again while it stays CANCELING."""
    obj = create(harness, doc(canary_doc, "two"))
    uid = obj["metadata"]["uid"]
    op = operator(harness, runs)
    op.relist()
    api_of(harness).patch_namespaced_custom_object(
        *CR, NS, "benchmarkruns", "two", {"spec": {"trials": {**canary_doc["spec"]["trials"], "minReplicates": 4}}})
    op.step()
    first, second = sorted(runs_of(instance, uid), key=lambda r: int(r.tags["benchrun/cr-generation"]))
    _started(instance, first)

    def refused(run_id: str) -> bool:
        raise RuntimeError("jobs.batch is forbidden")

    monkeypatch.setattr(instance.run_launcher, "terminate", refused)
    confirmed: set[str] = set()
    result = stop_in_flight(instance, uid, "deleted", confirmed=confirmed)
    assert result.stopped == (second.run_id,) and list(result.waiting) == [first.run_id]
    assert "STARTED" in result.waiting[first.run_id] and "forbidden" in result.waiting[first.run_id]
    assert instance.get_run_by_id(second.run_id).status == dg.DagsterRunStatus.CANCELED
    calls: list[str] = []

    def stopped_but_still_canceling(run_id: str) -> bool:
        calls.append(run_id)
        instance.report_run_canceling(instance.get_run_by_id(run_id))
        return True

    monkeypatch.setattr(instance.run_launcher, "terminate", stopped_but_still_canceling)
    result = stop_in_flight(instance, uid, "deleted", confirmed=confirmed)
    assert (result.stopped, result.waiting) == ((first.run_id,), {})
    assert stop_in_flight(instance, uid, "deleted", confirmed=confirmed).stopped == ()
    assert calls == [first.run_id]  # CANCELING, confirmed: not terminated again


# -- 2. Lease expiry on the local monotonic clock -----------------------------------------------
def test_a_replica_with_a_fast_clock_does_not_take_a_live_lease(harness, monkeypatch) -> None:
    t0 = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    wall, mono = [t0], [1000.0]
    monkeypatch.setattr(lease_mod, "_now", lambda: wall[0])
    monkeypatch.setattr(lease_mod, "_monotonic", lambda: mono[0])
    a = LeaseElector(harness.api_client(), NS, "benchrun-operator", "a", duration_s=15)
    b = LeaseElector(harness.api_client(), NS, "benchrun-operator", "b", duration_s=15)

    def at(seconds: float, skew_s: float = 0.0) -> None:
        wall[0], mono[0] = t0 + dt.timedelta(seconds=seconds + skew_s), 1000.0 + seconds

    at(0)
    assert a.try_acquire()
    at(2)
    assert a.try_acquire()  # renewed
    at(3, skew_s=16)  # b's wall clock runs 16 s ahead: a's renewTime looks 17 s old to it
    assert not b.try_acquire()  # was: True, two leaders
    at(17.9, skew_s=16)
    assert not b.try_acquire()  # unchanged for 14.9 s of b's own time: still live
    at(10)
    assert a.try_acquire()  # a renews: b times the new record from when it sees it
    at(20, skew_s=16)
    assert not b.try_acquire()
    at(34.9, skew_s=16)
    assert not b.try_acquire()
    at(35, skew_s=16)
    assert b.try_acquire()  # 15 s of b's time without a renewal: expired
    assert harness.get("leases", "benchrun-operator", NS)["spec"]["holderIdentity"] == "b"
    at(36)
    assert not a.try_acquire()
    # every write above had times with 0 microseconds, which isoformat() writes without a fraction: a
    # real API server (and the harness) refuses those as MicroTime (review 2026-12-07), release too
    b.release()
    assert not harness.get("leases", "benchrun-operator", NS)["spec"].get("holderIdentity")
    assert harness.get("leases", "benchrun-operator", NS)["spec"]["acquireTime"] == "2026-12-01T00:00:51.000000Z"


# -- 3. client timeouts and the heartbeat -------------------------------------------------------
@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP server that answers a request's headers and then never sends another byte (a
    half-open connection, a load balancer that dropped it): its URL."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            c.recv(65536)
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    srv.close()
    for c in conns:  # a call still blocked (without the fix) ends here
        c.close()


def _api_client(url: str) -> Any:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = url
    return client.ApiClient(cfg)


def _returns_within(fn: Any, seconds: float) -> BaseException | None:
    """Run ``fn`` in a thread; fail unless it ends within ``seconds``; what it raised."""
    out: list[BaseException | None] = [None]

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out[0] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn} still blocked after {seconds} s"
    return out[0]


def test_a_watch_on_a_silent_connection_times_out_and_the_pass_ends(silent_server) -> None:
    from kubernetes import client

    op = Operator(client.CustomObjectsApi(_api_client(silent_server)), None,
                  Settings(namespace="ns", watch_timeout_s=1, watch_margin_s=1), register=lambda *a: None)
    op.version = "1"
    assert _returns_within(op.step, 20) is None  # was: blocked for good; now the stream's read times out
    assert op.version == "1"  # watched again from there next pass


def test_every_other_call_and_the_lease_give_up_on_a_silent_connection(silent_server, monkeypatch) -> None:
    from kubernetes import client

    monkeypatch.setattr(kube, "REQUEST_TIMEOUT", (0.5, 0.5))
    monkeypatch.setattr(lease_mod, "REQUEST_TIMEOUT", (0.5, 0.5))
    api = client.CustomObjectsApi(_api_client(silent_server))
    calls = {
        "get": lambda: kube.get_benchmarkrun(api, "ns", "x"),
        "list": lambda: kube.list_all(api, "ns"),
        "patch": lambda: kube.patch_object(api, "ns", "x", {"metadata": {"finalizers": []}}),
        "status": lambda: kube.patch_status_if(api, "ns", "x", {"message": "m"}, "1"),
        "lease": lambda: LeaseElector(_api_client(silent_server), "ns", "l", "me").try_acquire(),
    }
    for name, call in calls.items():
        err = _returns_within(call, 10)  # 4 tries (urllib3 retries) of 0.5 s at most
        assert err is not None and "timed out" in repr(err).lower(), (name, err)


def test_the_loop_touches_its_heartbeat_every_pass_and_between_objects(harness, instance, runs, canary_doc,
                                                                         tmp_path) -> None:
    beat = tmp_path / "hb" / "alive"
    for name in ("h0", "h1"):
        create(harness, doc(canary_doc, name))
    op = Operator(api_of(harness), runs, Settings(namespace=NS, watch_timeout_s=1, heartbeat=beat))
    op.heartbeat.every_s = 0.0  # every touch lands (the loop's own limit is one a second)
    touched: list[float] = []
    real_keep = op.keep_lease

    def keep_lease() -> None:
        os.utime(beat, (0, 0))
        real_keep()
        touched.append(beat.stat().st_mtime)

    op.keep_lease = keep_lease
    stop, real_step, before = threading.Event(), op.step, []

    def one_pass() -> None:
        try:  # run() outlives a failing pass: stop whatever happens
            before.append(beat.exists())  # touched before the pass
            real_step()
        finally:
            stop.set()

    op.step = one_pass
    guard = threading.Timer(60.0, stop.set)
    guard.start()
    try:
        op.run(stop)
    finally:
        guard.cancel()
    assert before == [True] and not op.stats.errors, op.stats.errors
    assert len(touched) >= 2 and min(touched) > time.time() - 30  # between the objects of the pass


def _operator_container() -> tuple[dict[str, Any], dict[str, Any]]:
    docs = list(yaml.safe_load_all((ROOT / "deploy/kustomize/base/operator.yaml").read_text()))
    [deployment] = [d for d in docs if d and d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    return pod, container


def test_the_liveness_probe_checks_the_heartbeat_the_operator_touches(tmp_path) -> None:
    pod, container = _operator_container()
    args = container["args"]
    path = args[args.index("--heartbeat-file") + 1]
    command = container["livenessProbe"]["exec"]["command"]
    assert command[:3] == ["python", "-m", "benchrun.controller.heartbeat"] and command[3] == path
    limit = float(command[4])
    probe = container["livenessProbe"]
    assert limit > 2 * 4 * sum(kube.REQUEST_TIMEOUT)  # a live loop between two slow calls passes
    assert probe["timeoutSeconds"] >= 5 and probe["failureThreshold"] >= 2
    [mount] = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == mount["name"])
    beat = tmp_path / "alive"

    def probe_rc() -> int:
        run = subprocess.run([sys.executable, *command[1:3], str(beat), command[4]], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
        return run.returncode

    assert probe_rc() == 1  # no heartbeat yet
    beat.touch()
    assert probe_rc() == 0
    os.utime(beat, (time.time() - limit - 60,) * 2)
    assert probe_rc() == 1  # a loop that stopped touching it


# -- 4. verdicts replaced, not merged --------------------------------------------------------------
def test_replacing_nulls_what_the_new_status_lacks_at_every_depth() -> None:
    current = {"verdicts": {"outcome": "ok", "Signed": "True: Signed"}, "message": "m", "phase": "Running"}
    wanted = {"verdicts": {"outcome": "ok"}, "phase": "Running"}
    assert status_mod.replacing(current, wanted) == {"verdicts": {"outcome": "ok", "Signed": None},
                                                     "phase": "Running", "message": None}
    assert status_mod.replacing(current, {"verdicts": None}) == {"verdicts": None, "message": None, "phase": None}


def test_a_verdict_left_out_of_a_later_status_leaves_the_object(harness, canary_doc) -> None:
    obj = create(harness, doc(canary_doc, "v"))
    ref = ResourceRef.of(obj)
    api = api_of(harness)
    signed = {"type": "Signed", "status": "True", "reason": "Signed"}
    complete = {"type": "Complete", "status": "True", "reason": "Done"}
    st = {"run_id": "v-1", "phase": "Succeeded", "outcome": "ok", "status_seq": 1, "conditions": [complete, signed]}
    assert status_mod.write(api, ref, status_mod.status_from_run(st, ref))
    assert harness.get(KIND, "v", NS)["status"]["verdicts"] == {"outcome": "ok", "Complete": "True: Done",
                                                                "Signed": "True: Signed"}
    # the run's status.json moved on without the signature (signing redone)
    later = {**st, "status_seq": 2, "conditions": [complete]}
    assert status_mod.write(api, ref, status_mod.status_from_run(later, ref))
    assert harness.get(KIND, "v", NS)["status"]["verdicts"] == {"outcome": "ok", "Complete": "True: Done"}  # was: Signed kept
    assert status_mod.write(api, ref, status_mod.status_from_run({**later, "status_seq": 3, "conditions": [],
                                                                  "outcome": None}, ref))
    assert "verdicts" not in harness.get(KIND, "v", NS)["status"]


# -- 5. the uninstall order ------------------------------------------------------------------------
def _operator_section() -> str:
    text = (ROOT / "docs/kubernetes.md").read_text(encoding="utf-8")
    start = text.index("### The BenchmarkRun operator")
    return text[start:text.index("\n## ", start) if "\n## " in text[start:] else len(text)]


def test_the_docs_delete_the_benchmarkruns_before_the_operator_and_the_finalizer_patch_works(
        harness, instance, runs, canary_doc) -> None:
    section = _operator_section()
    first = section.index("kubectl delete benchmarkruns --all")
    assert first < section.index("kubectl delete -k deploy/kustomize/base", first)
    [patch] = re.findall(r"kubectl -n NAMESPACE patch benchmarkrun NAME --type=merge -p '([^']+)'", section)
    # the patch as written strips the finalizer of an object left Terminating with no operator
    create(harness, doc(canary_doc, "left"))
    operator(harness, runs).relist()
    api_of(harness).delete_namespaced_custom_object(*CR, NS, "benchmarkruns", "left")
    assert harness.get(KIND, "left", NS)["metadata"]["finalizers"] == [FINALIZER]
    api_of(harness).patch_namespaced_custom_object(*CR, NS, "benchmarkruns", "left", json.loads(patch))
    assert harness.get(KIND, "left", NS) is None


def test_a_finished_benchmarkrun_whose_dagster_run_is_gone_is_followed_not_run_again(
        harness, instance, runs, canary_doc) -> None:
    """The Dagster run store was the only record that a generation had started: with its run deleted
    (the UI's "Delete run", a database reset), every relist queued the benchmark again under the same
    run id, and the Succeeded object went back to Running."""
    create(harness, doc(canary_doc, "done"))
    op = operator(harness, runs)
    op.relist()
    uid = harness.get(KIND, "done", NS)["metadata"]["uid"]
    [run] = runs_of(instance, uid)
    run_id = run.tags["dagster/partition"]
    rd = RunDir.for_run(run_id)
    for phase in ("Running", "Analyzing", "Succeeded"):
        rd.set_phase(phase)
    instance.report_run_canceled(run)  # any finished state of the Dagster run
    op.catch_up()
    assert harness.get(KIND, "done", NS)["status"]["phase"] == "Succeeded"
    instance.delete_run(run.run_id)
    again = operator(harness, DagsterRuns(instance))  # a restart, or a relist after 410
    again.relist()
    assert runs_of(instance, uid) == [] and again.stats.started == 0 and again.stats.reused == 1
    status = harness.get(KIND, "done", NS)["status"]
    assert (status["phase"], status["runId"]) == ("Succeeded", run_id)
    assert rd.read_status()["phase"] == "Succeeded" and uid in again.known
    # its run directory gone too (a fresh home beside a reset database): nothing says it ran, so it starts
    # (it raised "no such run" on every pass, and never started)
    import shutil

    instance.delete_run(runs_of(instance, uid)[0].run_id) if runs_of(instance, uid) else None
    shutil.rmtree(rd.path)
    fresh = operator(harness, DagsterRuns(instance))
    fresh.relist()
    assert fresh.stats.started == 1 and not fresh.stats.errors and len(runs_of(instance, uid)) == 1
    # registered but never started (its submit lost with the record): started, as before
    create(harness, doc(canary_doc, "owed"))
    op.relist()
    owed_uid = harness.get(KIND, "owed", NS)["metadata"]["uid"]
    [owed] = runs_of(instance, owed_uid)
    instance.delete_run(owed.run_id)
    third = operator(harness, DagsterRuns(instance))
    third.relist()
    assert len(runs_of(instance, owed_uid)) == 1 and third.stats.started == 1


def test_objects_waiting_for_a_start_token_are_read_only_as_tokens_come(harness, instance, runs, canary_doc,
                                                                        monkeypatch) -> None:
    """Each pass read every rate-limited object again (a GET and Dagster queries) though the bucket could
    start none of them: the backlog times the pass rate in API calls, what the rate limit was for."""
    for i in range(6):
        create(harness, doc(canary_doc, f"w{i}"))
    op = Operator(api_of(harness), runs, Settings(namespace=NS, page_size=2, watch_timeout_s=30, starts_per_s=0.001,
                                                  start_burst=2))
    op.relist()
    assert op.stats.started == 2 and len(op.waiting) == 4
    gets: list[str] = []
    real = kube.get_benchmarkrun

    def counted(api, namespace, name):
        gets.append(name)
        return real(api, namespace, name)

    monkeypatch.setattr(kube, "get_benchmarkrun", counted)
    for _ in range(5):
        op.retry_waiting()
    assert gets == [] and op.stats.started == 2 and len(op.waiting) == 4  # was: 20 GETs
    assert op._watch_timeout() == 30  # the next token is 1000 s away: the watch waits its full time, not 1 s
    op.bucket.tokens = 2.0  # time passes: two tokens, the two oldest are read and started
    op.retry_waiting()
    assert gets == ["w2", "w3"] and op.stats.started == 4 and len(op.waiting) == 2
