"""One controller tick over the listed BenchmarkRuns: what to submit, reject, cancel and patch.

The cursor maps each object's uid to the last generation handled and that generation's
run, so a tick submits each ``(uid, generation)`` exactly once, in any order of listing;
a uid that disappears from a full listing, or is listed with a ``deletionTimestamp``, was
deleted and its run is cancelled. A new generation started supersedes the earlier ones: the
cursor entry keeps ``superseding`` (their runs still to stop or mark) until the sensor has
stopped them, through a later edit that is rejected too (whose entry then names the generation
that superseded in ``superseding_generation``: a rejected edit stops nothing of its own). At most
:data:`MAX_NEW_PER_TICK` new generations are handled a tick; the rest stay out of the cursor and
are the next tick's.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchrun.controller.status import ResourceRef, lags, rejected_status, status_from_run
from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

CURSOR_VERSION = 1
# Run tags that tie a Dagster run to its object (the sensor cancels by uid).
TAG_UID = "benchrun/cr-uid"
TAG_NAME = "benchrun/cr"
TAG_GENERATION = "benchrun/cr-generation"
# Validating and pinning takes 0.13-0.21 s a generation on a loaded VM (benchmarks/README.md,
# "BenchmarkRun controller tick") and a sensor tick times out after 60 s: a tick that tried a
# burst of a few hundred would time out, keep its cursor and fail the same way for ever. The
# commit sensor's cap (DEFAULT_MAX_COMMITS_PER_TICK) for the same reason.
MAX_NEW_PER_TICK = 25
# The fallback sensor's cap, where a cluster's ticks are faster or slower than that measure.
ENV_MAX_NEW = "BENCHRUN_CR_MAX_PER_TICK"
# The BenchmarkRun operator's finalizer (benchrun.controller.operator.FINALIZER is this one).
OPERATOR_FINALIZER = "benchmarking.aisp.dev/run"
# The fallback sensor may not patch benchmarkruns (only their status), so it cannot remove it.
FINALIZER_LEFT = (f"deleting: finalizer {OPERATOR_FINALIZER} was left by the BenchmarkRun operator, "
                  "which no longer runs; the fallback sensor cancels its run but cannot remove the finalizer. "
                  "Remove it by hand: kubectl -n {namespace} patch benchmarkrun {name} --type=merge "
                  "-p '{{\"metadata\":{{\"finalizers\":null}}}}' (docs/kubernetes.md, The BenchmarkRun "
                  "operator, Uninstalling)")
# (document bytes, source, now) -> benchrun.submit.Prepared
Register = Callable[[bytes, str, dt.datetime], Any]


@dataclass(frozen=True)
class Submitted:
    ref: ResourceRef
    run_id: str
    status: dict[str, Any]  # the Pending status to write

    def tags(self) -> dict[str, str]:
        return {"benchrun/trigger": "benchmarkrun", TAG_UID: self.ref.uid,
                TAG_NAME: f"{self.ref.namespace}/{self.ref.name}"[:63],
                TAG_GENERATION: str(self.ref.generation)}


@dataclass
class Tick:
    """What one tick decided, and the next cursor."""

    submitted: list[Submitted] = field(default_factory=list)
    rejected: list[tuple[ResourceRef, dict[str, Any]]] = field(default_factory=list)
    deleted: list[tuple[ResourceRef, str | None]] = field(default_factory=list)  # (ref, run_id)
    patches: list[tuple[ResourceRef, dict[str, Any]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    waiting: int = 0  # new generations over the cap: the next tick's
    finalizer_left: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (object, status message)
    # (ref, pending): a started generation whose earlier generations' runs are still to stop; pending
    # maps a Dagster run id to its run directory still to mark Canceled (None: marked)
    superseding: list[tuple[ResourceRef, dict[str, str | None]]] = field(default_factory=list)
    cursor: str = ""

    def keep_deleted(self, ref: ResourceRef, run_id: str | None) -> None:
        """Put a deleted object back in the cursor: its deletion is not done (its run's status
        could not be pulled), and the next tick, not finding it listed, tries it again."""
        data = _cursor_json(self.cursor)
        entries = dict(data.get("objects") or {})
        entries[ref.uid] = {**ref.to_json(), "run_id": run_id}
        self.cursor = dump_cursor(entries, data.get("namespace"))

    def superseded(self, ref: ResourceRef, left: dict[str, str | None] | None) -> None:
        """Record in the cursor what stopping the runs ``ref`` supersedes left for the next tick
        (``dagster_runs.stop_superseded``); None: nothing, the entry is done with them."""
        data = _cursor_json(self.cursor)
        entries = dict(data.get("objects") or {})
        entry = entries.get(ref.uid)
        if entry is None or _superseding_generation(entry) != ref.generation:
            return
        entries[ref.uid] = {k: v for k, v in entry.items() if k not in ("superseding", "superseding_generation")}
        if left is not None:
            entries[ref.uid]["superseding"] = left
            if "superseding_generation" in entry:
                entries[ref.uid]["superseding_generation"] = entry["superseding_generation"]
        self.cursor = dump_cursor(entries, data.get("namespace"))


def _superseding_generation(entry: dict[str, Any]) -> int:
    """The generation whose start superseded the runs the entry's ``superseding`` holds: the entry's
    own, or an earlier one's where a later edit was rejected with a stop still pending."""
    return int(entry.get("superseding_generation") or entry["generation"])


def load_cursor(text: str | None) -> dict[str, dict[str, Any]]:
    """uid → {namespace, name, uid, generation, run_id}; an unreadable cursor starts afresh."""
    data = _cursor_json(text)
    return dict(data.get("objects") or {}) if data else {}


def _cursor_json(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        log.warning("controller cursor is not JSON; starting afresh (runs keep their run keys)")
        return {}
    return data if isinstance(data, dict) and data.get("v") == CURSOR_VERSION else {}


def dump_cursor(entries: dict[str, dict[str, Any]], namespace: str | None = None) -> str:
    """The cursor: the entries and the scope they were listed in (``namespace``; None = all)."""
    return json.dumps({"v": CURSOR_VERSION, "objects": entries, "namespace": namespace},
                      sort_keys=True, separators=(",", ":"))


def document_bytes(obj: dict[str, Any]) -> bytes:
    """The document as its author wrote it: apiVersion, kind, metadata (name, namespace,
    labels, annotations but kubectl's last-applied copy) and spec; no server fields, no status."""
    meta = obj.get("metadata") or {}
    authored: dict[str, Any] = {"name": meta.get("name")}
    if meta.get("namespace"):
        authored["namespace"] = meta["namespace"]
    if meta.get("labels"):
        authored["labels"] = dict(meta["labels"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != "kubectl.kubernetes.io/last-applied-configuration"}
    if annotations:
        authored["annotations"] = annotations
    doc = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": authored, "spec": obj.get("spec")}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode("utf-8")


def _now_text(now: dt.datetime) -> str:
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def max_new_per_tick() -> int:
    """``$BENCHRUN_CR_MAX_PER_TICK`` (a positive integer), else :data:`MAX_NEW_PER_TICK`."""
    import os

    raw = os.environ.get(ENV_MAX_NEW, "").strip()
    if not raw:
        return MAX_NEW_PER_TICK
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise BenchrunError(f"{ENV_MAX_NEW}={raw!r} must be a positive integer (new BenchmarkRun generations "
                            f"validated and pinned a tick; default {MAX_NEW_PER_TICK}), or unset")
    return int(raw)


def controller_tick(objs: list[dict[str, Any]], cursor: str | None, register: Register, now: dt.datetime,
                    home: Path | None = None, namespace: str | None = None, max_new: int | None = None) -> Tick:
    """Decide one tick. ``objs`` is a full listing of ``namespace`` (None: every namespace).

    Only an object of the listed scope that is missing from the listing, or listed with a
    ``deletionTimestamp``, was deleted: an entry of another namespace (the watched namespace was
    narrowed since the cursor was written) is dropped from the cursor without touching its run.
    At most ``max_new`` (default :data:`MAX_NEW_PER_TICK`) new generations are validated and
    pinned; the others are counted in ``waiting`` and, left out of the cursor, are new next tick."""
    from benchrun.automation.discovery import format_spec_errors
    from benchrun.rundir import RunDir

    entries = load_cursor(cursor)
    out = Tick()
    if namespace is not None:
        for uid in sorted(u for u, e in entries.items() if e.get("namespace") != namespace):
            entry = entries.pop(uid)
            out.notes.append(f"{entry.get('namespace')}/{entry.get('name')}: outside the watched namespace "
                             f"{namespace} now (BENCHRUN_CR_NAMESPACE); no longer followed, its run "
                             f"{entry.get('run_id')} left as it is")
    listed: set[str] = set()
    cap = MAX_NEW_PER_TICK if max_new is None else max_new
    budget = cap
    for obj in sorted(objs, key=lambda o: (o.get("metadata", {}).get("namespace") or "", o.get("metadata", {}).get("name") or "")):
        ref = ResourceRef.of(obj)
        if not ref.uid or ref.uid == "None":
            out.notes.append(f"{ref.namespace}/{ref.name}: no metadata.uid; skipped")
            continue
        listed.add(ref.uid)
        entry = entries.get(ref.uid)
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            _deleting(obj, ref, entry, entries, out)
            continue
        if entry is not None and int(entry["generation"]) >= ref.generation:
            _catch_up(obj, ref, entry, out, home)
            continue
        if budget <= 0:
            out.waiting += 1  # not in the cursor at this generation: still new next tick
            continue
        budget -= 1
        try:
            # the object's creation time, not the tick's: a tick evaluated again from a cursor that
            # was never stored (its run already made) pins the same run, as the operator does
            prepared = _register_once(register, obj, ref, _created(obj), home)
        except BenchrunError as exc:
            invalid = admission_errors(obj, ref, exc, home)
            if invalid is None:  # the shared state or the disk failed: not the spec's fault, tried again next tick
                out.notes.append(f"{ref.namespace}/{ref.name} generation {ref.generation}: not registered yet "
                                 f"({exc}); trying again next tick")
                if entry is not None:
                    entries[ref.uid] = entry  # still listed: not deleted; the earlier generation's run stays followed
                continue
            errors = list(format_spec_errors(invalid))
            out.rejected.append((ref, rejected_status(ref, errors, _now_text(now))))
            entries[ref.uid] = {**ref.to_json(), "run_id": None}
            if entry is not None and "superseding" in entry:  # stops nothing itself; a pending stop goes on
                entries[ref.uid].update(superseding=dict(entry["superseding"]),
                                        superseding_generation=_superseding_generation(entry))
            continue
        rd = RunDir.for_run(prepared.run_id, home)
        st = _own(rd, ref, home)
        out.submitted.append(Submitted(ref, prepared.run_id, status_from_run(st, ref)))
        entries[ref.uid] = {**ref.to_json(), "run_id": prepared.run_id}
        if ref.generation > 1:  # an edit: the earlier generations' runs are stopped (and what is left kept)
            entries[ref.uid]["superseding"] = dict((entry or {}).get("superseding") or {})
    for uid in sorted(set(entries) - listed):
        entry = entries.pop(uid)
        if not entry.get("deleting"):  # a deleting one's run was cancelled when its deletionTimestamp came
            out.deleted.append((ResourceRef.from_json(entry), entry.get("run_id")))
    out.superseding = [(ResourceRef.from_json({**entries[uid], "generation": _superseding_generation(entries[uid])}),
                        dict(entries[uid]["superseding"]))
                       for uid in sorted(listed & set(entries)) if "superseding" in entries[uid]
                       and not entries[uid].get("deleting")]
    if out.waiting:
        out.notes.append(f"{out.waiting} new BenchmarkRun generation(s) wait for the next tick "
                         f"(at most {cap} are validated and pinned a tick)")
    out.cursor = dump_cursor(entries, namespace)
    return out


def _deleting(obj: dict[str, Any], ref: ResourceRef, entry: dict[str, Any] | None,
              entries: dict[str, dict[str, Any]], out: Tick) -> None:
    """A listed object with a ``deletionTimestamp``: deleted, its run cancelled once (the entry,
    marked ``deleting``, stays until the object is gone, so it is neither cancelled again nor
    taken for new). Its generation is not compared: deletion bumps it on a custom resource."""
    if entry is None or not entry.get("deleting"):
        known = ResourceRef.from_json(entry) if entry is not None else ref
        run_id = entry.get("run_id") if entry is not None else None  # None: Dagster runs still cancelled by uid
        out.deleted.append((known, run_id))
        entries[ref.uid] = {**known.to_json(), "run_id": run_id, "deleting": True}
    if OPERATOR_FINALIZER in ((obj.get("metadata") or {}).get("finalizers") or []):
        out.finalizer_left.append((obj, FINALIZER_LEFT.format(namespace=ref.namespace, name=ref.name)))


def cancel_deleted_run(home: Path | str | None, run_id: str, reason: str, *,
                       warn: Callable[[str], Any] | None = None) -> bool:
    """The run of a deleted BenchmarkRun marked Canceled unless it has finished; True when it
    changed. The one deletion step of the operator's finalizer and the fallback sensor, and how
    both mark the run of an earlier generation that an edit superseded.

    This home's copy may be stale (a restart, a failover, between catch-ups): the run's worker
    may have finished it meanwhile, and a finished run is not canceled. So its status.json is
    pulled first, and a pull that fails raises (BenchrunError) with nothing marked: the caller
    tries the deletion again (the operator keeps its finalizer, the sensor the object in its
    cursor). A run that cannot be marked is left, said through ``warn`` (else this module's log)."""
    from benchrun.paths import benchrun_home
    from benchrun.runend import cancel_run
    from benchrun.sharedstate import pull_run

    pull_run(run_id, benchrun_home(home), status_only=True)
    try:
        return cancel_run(home, run_id, reason)
    except BenchrunError as exc:
        (warn or log.warning)(f"run {run_id}: {exc}")
        return False


def admission_errors(obj: dict[str, Any], ref: ResourceRef, exc: BenchrunError,
                     home: Path | None) -> BenchrunError | None:
    """The error that makes the document invalid, or None when ``exc`` (raised while pinning
    and registering it) is not the spec's fault: the shared state or the disk failed, which a
    later try may not. Only an invalid document is Rejected (a final phase). The rule is the
    schedules' and commit sensors' too (:func:`benchrun.submit.admission_fault`)."""
    from benchrun.submit import admission_fault

    return admission_fault(exc, document_bytes(obj), f"cr:{ref.namespace}/{ref.name}", home)


def _created(obj: dict[str, Any]) -> dt.datetime:
    """The object's creation time: the run id's clock, so a retried event pins the same run."""
    text = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    except ValueError:
        return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def _register_once(register: Register, obj: dict[str, Any], ref: ResourceRef, now: dt.datetime,
                   home: Path | None) -> Any:
    """Pin the object's document as a run of its own.

    Run ids have second resolution and ``prepare`` is idempotent, so the same bytes applied
    again within a second (deleted and re-created, say) would land in the earlier object's
    run; such a collision takes the next second instead.
    """
    from benchrun.rundir import RunDir

    source = f"cr:{ref.namespace}/{ref.name}"
    data = document_bytes(obj)
    for offset in range(60):
        prepared = register(data, source, now + dt.timedelta(seconds=offset))
        owner = RunDir.for_run(prepared.run_id, home).read_status().get("resource")
        if owner is None or owner == ref.to_json():
            return prepared
    raise BenchrunError(f"{source}: no free run id within a minute of {now:%Y-%m-%dT%H:%M:%SZ}; apply it again")


def _own(rd: Any, ref: ResourceRef, home: Path | None) -> dict[str, Any]:
    """Record the object that owns the run in its status and push that status: a pull of the
    shared copy must not lose it (the run is found by it when a tick or a pass is retried)."""
    from benchrun.paths import benchrun_home
    from benchrun.sharedstate import push_run

    rd.update_status(resource=ref.to_json())
    # no-op unless BENCHRUN_SHARED_STATE is set; a status another pod wrote meanwhile is merged, not replaced
    push_run(rd.path, benchrun_home(home), status_only=True, merge=rd.merge_shared_status)
    return rd.read_status()


def _catch_up(obj: dict[str, Any], ref: ResourceRef, entry: dict[str, Any], out: Tick, home: Path | None) -> None:
    """Queue a status patch when the object's status lags its run's status.json."""
    from benchrun.rundir import RunDir

    run_id = entry.get("run_id")
    if not run_id:
        _rejection_lost(obj, ref, out)
        return
    try:
        from benchrun.paths import benchrun_home
        from benchrun.sharedstate import pull_run

        pull_run(run_id, benchrun_home(home), status_only=True)  # the run worker's pod wrote it
        st = RunDir.for_run(run_id, home).read_status()
    except BenchrunError as exc:
        out.notes.append(f"{ref.namespace}/{ref.name}: run {run_id}: {exc}")
        return
    wanted = status_from_run(st, ref)
    if lags(obj.get("status"), wanted):
        out.patches.append((ref, wanted))


def _rejection_lost(obj: dict[str, Any], ref: ResourceRef, out: Tick) -> None:
    """A rejected generation whose Rejected status never arrived (the write failed): validate
    its document again and queue the status once more."""
    from benchrun.automation.discovery import format_spec_errors
    from benchrun.spec import load_spec_bytes

    current = obj.get("status") or {}
    if current.get("phase") == "Rejected" and current.get("observedGeneration") == ref.generation:
        return
    try:
        load_spec_bytes(document_bytes(obj), f"cr:{ref.namespace}/{ref.name}")
    except BenchrunError as exc:
        stamp = dt.datetime.now(dt.timezone.utc)
        out.rejected.append((ref, rejected_status(ref, list(format_spec_errors(exc)), _now_text(stamp))))
