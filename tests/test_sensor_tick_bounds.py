"""The fallback BenchmarkRun sensor's bounds: a burst of new objects drains over ticks (a tick
that tried it all would pass the 60 s sensor timeout and fail for ever), and an object held by
the operator's leftover finalizer counts as deleted when its deletionTimestamp comes."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from benchrun.automation.ticks import prepare_register
from benchrun.controller import resources
from benchrun.controller.operator import FINALIZER
from benchrun.controller.resources import controller_tick
from benchrun.rundir import RunDir
from test_controller import NS, Cluster, cluster, instance, queued_run, resource_doc, run_request, tick  # noqa: F401

T0 = dt.datetime(2026, 12, 5, 12, 0, 0, tzinfo=dt.timezone.utc)


def obj(doc: dict[str, Any], name: str, uid: str, generation: int = 1, **meta: Any) -> dict[str, Any]:
    o = copy.deepcopy(doc)
    o["metadata"] = {"name": name, "namespace": "team-a", "uid": uid, "generation": generation,
                     "creationTimestamp": "2026-12-05T11:00:00Z", **meta}
    return o


def test_a_burst_drains_over_ticks_at_most_the_cap_each(canary_doc, bench_home: Path) -> None:
    burst = [obj(canary_doc, f"canary-{i}", f"uid-{i}") for i in range(5)]
    cursor, seen = None, []
    for submitted, waiting in ((2, 3), (2, 1), (1, 0), (0, 0)):
        out = controller_tick(burst, cursor, prepare_register(None), T0, max_new=2)
        assert (len(out.submitted), out.waiting) == (submitted, waiting)  # was: 5 submitted in the first tick
        assert any(f"{waiting} new BenchmarkRun generation(s) wait" in n for n in out.notes) == bool(waiting)
        seen += [s.ref.name for s in out.submitted]
        cursor = out.cursor
    assert sorted(seen) == [f"canary-{i}" for i in range(5)]  # each once, none lost
    assert len(list((bench_home / "runs").iterdir())) == 5
    assert resources.MAX_NEW_PER_TICK == 25  # the commit sensor's cap; 25 x 0.21 s is far below 60 s


def test_a_deletion_timestamp_is_a_deletion_cancelled_once(canary_doc, bench_home: Path) -> None:
    a = obj(canary_doc, "canary-a", "uid-a")
    first = controller_tick([a], None, prepare_register(None), T0)
    [sub] = first.submitted
    # deleted with the operator's finalizer left on it: listed, generation bumped, deletionTimestamp set
    held = obj(canary_doc, "canary-a", "uid-a", generation=2, deletionTimestamp="2026-12-05T12:01:00Z",
               finalizers=[FINALIZER])
    deleting = controller_tick([held], first.cursor, prepare_register(None), T0)
    assert [(ref.generation, run_id) for ref, run_id in deleting.deleted] == [(1, sub.run_id)]  # was: []
    assert deleting.submitted == []  # was: generation 2 submitted as a new run
    [(_, message)] = deleting.finalizer_left
    assert "kubectl -n team-a patch benchmarkrun canary-a --type=merge" in message and "Uninstalling" in message
    again = controller_tick([held], deleting.cursor, prepare_register(None), T0)
    assert (again.deleted, again.submitted, len(again.finalizer_left)) == ([], [], 1)  # not cancelled twice
    gone = controller_tick([], again.cursor, prepare_register(None), T0)
    assert gone.deleted == [] and json.loads(gone.cursor)["objects"] == {}
    # one never seen before (the operator ran it): its Dagster runs are still cancelled by uid
    b = obj(canary_doc, "canary-b", "uid-b", deletionTimestamp="2026-12-05T12:01:00Z")
    unseen = controller_tick([b], None, prepare_register(None), T0)
    assert [(ref.uid, run_id) for ref, run_id in unseen.deleted] == [("uid-b", None)]
    assert unseen.submitted == [] and unseen.finalizer_left == []  # not the operator's finalizer: nothing to say


def test_the_sensor_requests_a_burst_over_ticks(cluster: Cluster, instance: dg.DagsterInstance,
                                                resource_doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "MAX_NEW_PER_TICK", 2)
    for i in range(3):
        doc = copy.deepcopy(resource_doc)
        doc["metadata"]["name"] = f"canary-{i}"
        cluster.apply(doc)
    first = tick(instance, None)
    assert len(first.run_requests) == 2  # was: 3
    second = tick(instance, first.cursor)
    assert [r.run_key.split(":")[1] for r in second.run_requests] == [f"{NS}/canary-2"]
    assert "waiting" not in tick(instance, second.cursor).skip_message


def test_the_sensors_cap_is_a_setting(cluster: Cluster, instance: dg.DagsterInstance,
                                      resource_doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # before: 25, whatever the cluster (a slower API server or disk timed out at 25 a tick, for ever)
    for i in range(3):
        doc = copy.deepcopy(resource_doc)
        doc["metadata"]["name"] = f"canary-{i}"
        cluster.apply(doc)
    monkeypatch.setenv(resources.ENV_MAX_NEW, "1")
    first = tick(instance, None)
    assert len(first.run_requests) == 1
    monkeypatch.setenv(resources.ENV_MAX_NEW, "0")
    with pytest.raises(Exception, match="BENCHRUN_CR_MAX_PER_TICK='0' must be a positive integer"):
        tick(instance, first.cursor)
    monkeypatch.delenv(resources.ENV_MAX_NEW)
    assert resources.max_new_per_tick() == resources.MAX_NEW_PER_TICK
    assert len(tick(instance, first.cursor).run_requests) == 2


def test_an_object_held_by_the_operators_finalizer_is_cancelled_and_says_why(
        cluster: Cluster, instance: dg.DagsterInstance, resource_doc: dict[str, Any]) -> None:
    resource_doc["metadata"]["finalizers"] = [FINALIZER]  # left from when the operator ran
    cluster.apply(resource_doc)
    data = tick(instance, None)
    request = run_request(data)
    run = queued_run(instance, request)
    cluster.delete(NS, "canary-cr")
    assert cluster.get(NS, "canary-cr")["metadata"].get("deletionTimestamp")  # held by the finalizer
    deleting = tick(instance, data.cursor)
    assert "1 deleted" in deleting.skip_message  # was: no new BenchmarkRun generation
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED
    assert RunDir.for_run(request.partition_key).read_status()["phase"] == "Canceled"
    message = cluster.get(NS, "canary-cr")["status"]["message"]
    assert f"kubectl -n {NS} patch benchmarkrun canary-cr" in message and FINALIZER in message
    assert "deleted" not in tick(instance, deleting.cursor).skip_message  # cancelled once
    # removed by hand as the message says: gone, and nothing more to do
    cluster.api.patch_namespaced_custom_object("benchmarking.aisp.dev", "v1alpha1", NS, "benchmarkruns",
                                               "canary-cr", {"metadata": {"finalizers": None}})
    assert cluster.get(NS, "canary-cr") is None
    assert "deleted" not in tick(instance, deleting.cursor).skip_message
