"""An edit supersedes the earlier generation ("a spec edit double-books GPUs"): once a new
generation's run is started, the in-flight Dagster runs of the same object with an earlier
``benchrun/cr-generation`` are stopped and their run directories marked Canceled, naming the new
generation; was: the earlier run went on for hours, holding its GPUs and suite pods, measuring
what no status showed. A run already finished is left as it is, the current generation's run is
never stopped, and a stop the run launcher did not confirm holds the new run back in nothing and
is tried again until it is confirmed. The operator and the fallback sensor alike."""

from __future__ import annotations

import copy
import json
from typing import Any

import dagster as dg

from benchrun.controller.dagster_runs import DagsterRuns
from benchrun.controller.resources import TAG_GENERATION
from benchrun.rundir import RunDir
from test_controller import Cluster, queued_run, run_request, tick
from test_controller import cluster, resource_doc  # noqa: F401 - fixtures
from test_operator import CR, KIND, NS, api_of, create, doc, operator, runs_of
from test_operator import harness, instance, runs  # noqa: F401 - fixtures
from test_operator_review_fixes import _k8s_terminate_failing, _started, _terminate_ok

STARTED, CANCELED, QUEUED = dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.QUEUED


def _edit(harness: Any, canary_doc: dict[str, Any], name: str) -> None:
    api_of(harness).patch_namespaced_custom_object(
        *CR, NS, "benchmarkruns", name, {"spec": {"trials": {**canary_doc["spec"]["trials"], "minReplicates": 4}}})
    assert harness.get(KIND, name, NS)["metadata"]["generation"] == 2


def _by_generation(instance: dg.DagsterInstance, uid: str) -> dict[int, dg.DagsterRun]:
    return {int(r.tags[TAG_GENERATION]): r for r in runs_of(instance, uid)}


def _finish(instance: dg.DagsterInstance, run: dg.DagsterRun, run_dir: str) -> dict[str, Any]:
    """The run worker finished the run: Dagster's run SUCCESS, its run directory Succeeded."""
    instance.report_dagster_event(dg.DagsterEvent(dg.DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name),
                                  run.run_id)
    worker = RunDir.for_run(run_dir)
    for phase in ("Running", "Analyzing", "Succeeded"):
        worker.set_phase(phase)
    return worker.read_status()


# -- the operator -------------------------------------------------------------------------------
def test_an_edit_stops_the_earlier_generations_run_and_marks_it_canceled(harness, instance, runs, canary_doc,
                                                                        monkeypatch) -> None:
    op, uid, first, first_dir = _first_generation_started(harness, instance, runs, canary_doc, "e")
    assert first.status == STARTED
    calls: list[str] = []
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    _edit(harness, canary_doc, "e")
    op.relist()
    second = _by_generation(instance, uid)[2]
    assert second.status == QUEUED  # generation 2's run is created, and not stopped
    assert calls == [first.run_id]  # was: [] (generation 1's run went on)
    assert instance.get_run_by_id(first.run_id).status == CANCELED
    st = RunDir.for_run(first_dir).read_status()
    assert st["phase"] == "Canceled" and "superseded by generation 2" in st["message"]
    live = harness.get(KIND, "e", NS)["status"]
    assert (live["observedGeneration"], live["runId"]) == (2, second.tags["dagster/partition"])
    assert uid not in op.waiting and uid not in op._superseding
    # the current generation's run is never stopped: launched, then relisted by this and a fresh operator
    assert _started(instance, second).status == STARTED
    op.relist()
    operator(harness, DagsterRuns(instance)).relist()
    assert instance.get_run_by_id(second.run_id).status == STARTED and calls == [first.run_id]


def test_an_edit_leaves_a_finished_earlier_run_as_it_is(harness, instance, runs, canary_doc, monkeypatch) -> None:
    op, uid, first, first_dir = _first_generation_started(harness, instance, runs, canary_doc, "f")
    finished = _finish(instance, first, first_dir)
    calls: list[str] = []
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    _edit(harness, canary_doc, "f")
    op.relist()
    assert set(_by_generation(instance, uid)) == {1, 2} and calls == []
    assert instance.get_run_by_id(first.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert RunDir.for_run(first_dir).read_status() == finished
    assert uid not in op.waiting and uid not in op._superseding


def test_an_unconfirmed_stop_does_not_hold_the_new_run_back_and_is_retried(harness, instance, runs, canary_doc,
                                                                           monkeypatch) -> None:
    op, uid, first, first_dir, calls = _edited_with_its_stop_unconfirmed(harness, instance, runs, canary_doc,
                                                                        monkeypatch, "u")
    assert set(_by_generation(instance, uid)) == {1, 2}  # started all the same
    assert harness.get(KIND, "u", NS)["status"]["observedGeneration"] == 2
    assert calls == [first.run_id] and RunDir.for_run(first_dir).read_status()["phase"] == "Pending"
    assert uid in op.waiting and op._superseding[uid] == {first.run_id: first_dir}
    op.retry_waiting()  # backing off: not tried again at once
    assert calls == [first.run_id]
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    op._not_before[uid] = 0.0
    op.retry_waiting()
    assert calls == [first.run_id, first.run_id]
    assert instance.get_run_by_id(first.run_id).status == CANCELED
    assert RunDir.for_run(first_dir).read_status()["phase"] == "Canceled"
    assert _by_generation(instance, uid)[2].status == QUEUED
    assert uid not in op.waiting and uid not in op._superseding and uid not in op._not_before


# -- the fallback sensor ------------------------------------------------------------------------
def _edited(resource_doc: dict[str, Any]) -> dict[str, Any]:
    edited = copy.deepcopy(resource_doc)
    edited["spec"]["layers"][0]["suites"][0]["parameters"]["iterations"] = 3
    return edited


def test_the_fallback_sensor_stops_the_earlier_generations_run_on_an_edit(cluster: Cluster, instance,
                                                                         resource_doc, monkeypatch) -> None:
    cluster.apply(resource_doc)
    data = tick(instance, None)
    first_request = run_request(data)
    first = _started(instance, queued_run(instance, first_request))  # the daemon launched it
    calls: list[str] = []
    monkeypatch.setattr(instance.run_launcher, "terminate", _k8s_terminate_failing(instance, calls))
    assert cluster.apply(_edited(resource_doc))["metadata"]["generation"] == 2
    second = tick(instance, data.cursor)
    second_request = run_request(second)  # requested although generation 1's stop is not confirmed
    assert second_request.tags[TAG_GENERATION] == "2" and calls == [first.run_id]
    assert RunDir.for_run(first_request.partition_key).read_status()["phase"] == "Pending"
    assert "superseding" in next(iter(json.loads(second.cursor)["objects"].values()))
    current = _started(instance, queued_run(instance, second_request))
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    third = tick(instance, second.cursor)  # tried again: confirmed now
    assert calls == [first.run_id, first.run_id]  # was: [] (no stop at all)
    assert instance.get_run_by_id(first.run_id).status == CANCELED
    st = RunDir.for_run(first_request.partition_key).read_status()
    assert st["phase"] == "Canceled" and "superseded by generation 2" in st["message"]
    assert "superseding" not in next(iter(json.loads(third.cursor)["objects"].values()))
    tick(instance, third.cursor)
    assert instance.get_run_by_id(current.run_id).status == STARTED and len(calls) == 2  # never the current one
    assert cluster.get(NS, "canary-cr")["status"]["runId"] == second_request.partition_key


def test_the_fallback_sensor_leaves_a_finished_earlier_run_as_it_is(cluster: Cluster, instance, resource_doc,
                                                                    monkeypatch) -> None:
    cluster.apply(resource_doc)
    data = tick(instance, None)
    request = run_request(data)
    first = _started(instance, queued_run(instance, request))
    finished = _finish(instance, first, request.partition_key)
    calls: list[str] = []
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    cluster.apply(_edited(resource_doc))
    second = tick(instance, data.cursor)
    assert run_request(second).tags[TAG_GENERATION] == "2" and calls == []
    assert instance.get_run_by_id(first.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert RunDir.for_run(request.partition_key).read_status() == finished
    assert "superseding" not in next(iter(json.loads(second.cursor)["objects"].values()))


# -- review fixes ---------------------------------------------------------------------------------
def _counted_supersedes(monkeypatch: Any) -> list[int]:
    """The generation of every ``DagsterRuns.supersede`` call (each one asks Dagster for the object's runs)."""
    generations: list[int] = []
    real = DagsterRuns.supersede

    def supersede(self: DagsterRuns, ref: Any, pending: Any, **kwargs: Any) -> Any:
        generations.append(ref.generation)
        return real(self, ref, pending, **kwargs)

    monkeypatch.setattr(DagsterRuns, "supersede", supersede)
    return generations


def test_a_relist_after_catch_up_stopped_following_supersedes_nothing_again(harness, instance, runs, canary_doc,
                                                                           monkeypatch) -> None:
    """Found in review: catch-up drops a settled object from ``known``, and the relist after each drop took the
    edited object for new and asked Dagster for its earlier runs again (800 edited objects: 800 queries
    a relist, for the life of the process; a run of generation 1 re-executed by hand was stopped at
    some relist). A restarted operator still supersedes once."""
    obj = create(harness, doc(canary_doc, "s"))
    uid = obj["metadata"]["uid"]
    op = operator(harness, runs)
    op.relist()
    [first] = runs_of(instance, uid)
    _started(instance, first)
    calls: list[str] = []
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    supersedes = _counted_supersedes(monkeypatch)
    _edit(harness, canary_doc, "s")
    op.relist()
    assert supersedes == [2] and calls == [first.run_id]
    second = _by_generation(instance, uid)[2]
    _finish(instance, _started(instance, second), second.tags["dagster/partition"])
    for _ in range(3):
        op.catch_up()
    assert uid not in op.known and op.stats.settled == 1  # settled: no longer followed
    op.relist()
    op.relist()
    assert supersedes == [2]  # was: [2, 2] (asked again once catch-up had dropped it)
    operator(harness, DagsterRuns(instance)).relist()  # a restart: nothing remembered, superseded once
    assert supersedes == [2, 2] and calls == [first.run_id]


def _rejected_edit(harness: Any, canary_doc: dict[str, Any], name: str) -> None:
    api_of(harness).patch_namespaced_custom_object(
        *CR, NS, "benchmarkruns", name, {"spec": {"trials": {**canary_doc["spec"]["trials"], "minReplicates": 1}}})
    assert harness.get(KIND, name, NS)["metadata"]["generation"] == 3


def test_a_rejected_edit_does_not_drop_a_stop_still_pending(harness, instance, runs, canary_doc,
                                                            monkeypatch) -> None:
    """Found in review: generation 2 superseded generation 1, whose stop was not confirmed yet, then an
    invalid generation 3 came: the operator returned at Rejected and never tried the stop again
    (generation 1 kept its GPUs). The stop goes on, bounded by generation 2: its run is left alone."""
    op, uid, first, first_dir, calls = _edited_with_its_stop_unconfirmed(harness, instance, runs, canary_doc,
                                                                        monkeypatch, "p")
    second = _started(instance, _by_generation(instance, uid)[2])
    assert calls == [first.run_id] and op._superseding[uid] == {first.run_id: first_dir}
    _rejected_edit(harness, canary_doc, "p")
    op.relist()
    live = harness.get(KIND, "p", NS)["status"]
    assert (live["phase"], live["observedGeneration"]) == ("Rejected", 3)
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    op._not_before[uid] = 0.0
    op.retry_waiting()
    assert calls == [first.run_id, first.run_id]  # was: [first.run_id] (never tried again)
    assert instance.get_run_by_id(first.run_id).status == CANCELED
    st = RunDir.for_run(first_dir).read_status()
    assert st["phase"] == "Canceled" and "superseded by generation 2" in st["message"]
    assert instance.get_run_by_id(second.run_id).status == STARTED  # a rejected edit stops nothing of its own
    assert uid not in op.waiting and uid not in op._superseding
    op.relist()
    assert calls == [first.run_id, first.run_id] and harness.get(KIND, "p", NS)["status"]["phase"] == "Rejected"


def test_a_restarted_operator_finds_a_stop_still_pending_while_the_current_generation_is_rejected(
        harness, instance, runs, canary_doc, monkeypatch) -> None:
    """Noticed last session: the operator kept a pending stop in memory only. Restarted while the current
    generation is Rejected, it returned at Rejected and never tried generation 1's stop again (it kept its
    GPUs). A fresh operator asks Dagster once for the latest generation that started a run, and stops
    what is earlier: generation 2's run is left alone."""
    op, uid, first, first_dir, calls = _edited_with_its_stop_unconfirmed(harness, instance, runs, canary_doc,
                                                                        monkeypatch, "r")
    second = _started(instance, _by_generation(instance, uid)[2])
    _rejected_edit(harness, canary_doc, "r")
    op.relist()
    assert harness.get(KIND, "r", NS)["status"]["phase"] == "Rejected"
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    fresh = operator(harness, DagsterRuns(instance))  # a restart: nothing in memory
    fresh.relist()
    assert calls[-1] == first.run_id and instance.get_run_by_id(first.run_id).status == CANCELED  # was: STARTED
    st = RunDir.for_run(first_dir).read_status()
    assert st["phase"] == "Canceled" and "superseded by generation 2" in st["message"]
    assert instance.get_run_by_id(second.run_id).status == STARTED
    assert uid not in fresh._superseding and fresh._superseded_by[uid] == 2
    asked = len(calls)
    fresh.relist()  # asked once: settled
    assert len(calls) == asked and harness.get(KIND, "r", NS)["status"]["phase"] == "Rejected"


def test_the_fallback_sensor_does_not_drop_a_stop_still_pending_on_a_rejected_edit(cluster: Cluster, instance,
                                                                                   resource_doc,
                                                                                   monkeypatch) -> None:
    """As the operator: the rejected generation's cursor entry carries the pending stop (was: written
    without it, so generation 1's run was never stopped nor marked Canceled)."""
    cluster.apply(resource_doc)
    data = tick(instance, None)
    first_request = run_request(data)
    first = _started(instance, queued_run(instance, first_request))
    calls: list[str] = []
    monkeypatch.setattr(instance.run_launcher, "terminate", _k8s_terminate_failing(instance, calls))
    edited = _edited(resource_doc)
    cluster.apply(edited)
    second = tick(instance, data.cursor)
    current = _started(instance, queued_run(instance, run_request(second)))
    assert calls == [first.run_id]
    invalid = copy.deepcopy(edited)
    invalid["spec"]["trials"]["minReplicates"] = 1
    assert cluster.apply(invalid)["metadata"]["generation"] == 3
    third = tick(instance, second.cursor)  # rejected; the stop is tried again, still not confirmed
    assert not third.run_requests and cluster.get(NS, "canary-cr")["status"]["phase"] == "Rejected"
    assert calls == [first.run_id, first.run_id]  # was: [first.run_id]; never the current generation's run
    [entry] = json.loads(third.cursor)["objects"].values()
    assert (entry["generation"], entry["run_id"], entry["superseding_generation"]) == (3, None, 2)
    assert entry["superseding"] == {first.run_id: first_request.partition_key}
    monkeypatch.setattr(instance.run_launcher, "terminate", _terminate_ok(instance, calls))
    fourth = tick(instance, third.cursor)
    assert calls == [first.run_id] * 3 and instance.get_run_by_id(first.run_id).status == CANCELED
    st = RunDir.for_run(first_request.partition_key).read_status()
    assert st["phase"] == "Canceled" and "superseded by generation 2" in st["message"]
    [entry] = json.loads(fourth.cursor)["objects"].values()
    assert "superseding" not in entry and "superseding_generation" not in entry
    tick(instance, fourth.cursor)
    assert instance.get_run_by_id(current.run_id).status == STARTED and len(calls) == 3
    assert cluster.get(NS, "canary-cr")["status"]["phase"] == "Rejected"


def _edited_with_its_stop_unconfirmed(harness, instance, runs, canary_doc, monkeypatch, name: str):
    """An object whose generation 1 run started, then edited while the run launcher cannot confirm a
    stop: (operator, uid, generation 1's Dagster run, its run directory, the terminate calls)."""
    op, uid, first, first_dir = _first_generation_started(harness, instance, runs, canary_doc, name)
    calls: list[str] = []
    monkeypatch.setattr(instance.run_launcher, "terminate", _k8s_terminate_failing(instance, calls))
    _edit(harness, canary_doc, name)
    op.relist()
    return op, uid, first, first_dir, calls


def _first_generation_started(harness, instance, runs, canary_doc, name: str):
    """A new object reconciled by an operator and its generation 1 run started: (operator, uid, that
    Dagster run as started, its run directory)."""
    obj = create(harness, doc(canary_doc, name))
    uid = obj["metadata"]["uid"]
    op = operator(harness, runs)
    op.relist()
    [first] = runs_of(instance, uid)
    first_dir = harness.get(KIND, name, NS)["status"]["runId"]
    return op, uid, _started(instance, first), first_dir
