"""controller_tick (the benchmarkrun_resource_sensor's decisions) on fabricated listings:
a tick evaluated again from a cursor that was never stored reuses the run its (uid,
generation) already has, and narrowing the watched namespace cancels nothing."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

from benchrun.automation.ticks import prepare_register
from benchrun.controller.resources import controller_tick

T0 = dt.datetime(2026, 12, 5, 12, 0, 0, tzinfo=dt.timezone.utc)


def obj(doc: dict[str, Any], namespace: str, name: str, uid: str, generation: int = 1) -> dict[str, Any]:
    o = copy.deepcopy(doc)
    o["metadata"] = {"name": name, "namespace": namespace, "uid": uid, "generation": generation,
                     "creationTimestamp": "2026-12-05T11:00:00Z"}
    return o


def test_a_retried_tick_reuses_the_run_of_its_generation(canary_doc, bench_home: Path) -> None:
    a = obj(canary_doc, "team-a", "canary-a", "uid-a")
    first = controller_tick([a], None, prepare_register(None), T0)
    [sub] = first.submitted
    # the daemon launched the run but the cursor was not stored: the same tick a second later
    again = controller_tick([a], None, prepare_register(None), T0 + dt.timedelta(seconds=1))
    assert [s.run_id for s in again.submitted] == [sub.run_id]  # was: a second run id (…120001-…)
    assert len(list((bench_home / "runs").iterdir())) == 1
    assert json.loads(again.cursor)["objects"]["uid-a"]["run_id"] == sub.run_id
    # a new generation is a new run
    a2 = obj(canary_doc, "team-a", "canary-a", "uid-a", generation=2)
    a2["spec"]["comparison"]["deltaPct"] = 4
    newer = controller_tick([a2], again.cursor, prepare_register(None), T0 + dt.timedelta(seconds=2))
    assert [s.run_id for s in newer.submitted] != [sub.run_id] and len(newer.submitted) == 1


def test_narrowing_the_watched_namespace_cancels_no_run(canary_doc, bench_home: Path) -> None:
    a, b = obj(canary_doc, "team-a", "canary-a", "uid-a"), obj(canary_doc, "team-b", "canary-b", "uid-b")
    every = controller_tick([a, b], None, prepare_register(None), T0)
    assert len(every.submitted) == 2
    narrowed = controller_tick([b], every.cursor, prepare_register(None), T0, namespace="team-b")
    assert narrowed.deleted == []  # was: team-a's run cancelled and marked Failed "was deleted"
    assert any("outside the watched namespace team-b" in n for n in narrowed.notes)
    assert set(json.loads(narrowed.cursor)["objects"]) == {"uid-b"}
    # within the scope, a missing object is still a deletion
    gone = controller_tick([], narrowed.cursor, prepare_register(None), T0, namespace="team-b")
    assert [ref.name for ref, _ in gone.deleted] == ["canary-b"]


def test_a_storage_failure_is_tried_again_not_rejected(canary_doc, bench_home: Path) -> None:
    # the fallback sensor rejected a valid resource for good when pinning failed for any reason
    from benchrun.errors import BenchrunError

    a = obj(canary_doc, "team-a", "canary-a", "uid-a")

    def failing(*_a, **_k):
        raise BenchrunError("shared state s3://bucket/: upload runs/x/status.json failed (NoCredentialsError)")

    failed = controller_tick([a], None, failing, T0)
    assert failed.rejected == [] and failed.submitted == []
    assert any("not registered yet" in n and "NoCredentialsError" in n for n in failed.notes)
    retried = controller_tick([a], failed.cursor, prepare_register(None), T0)
    assert len(retried.submitted) == 1
    bad = obj(canary_doc, "team-a", "canary-b", "uid-b")
    bad["spec"]["intent"]["cadence"] = "hourly"
    rejected = controller_tick([bad], None, prepare_register(None), T0)
    assert [ref.name for ref, _ in rejected.rejected] == ["canary-b"]
