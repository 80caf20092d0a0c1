"""The BenchmarkRun operator: watches the resources and starts, cancels and reports their runs.

One loop, in the replica that holds the Lease (``lease.LeaseElector``):

1. **List** every BenchmarkRun page by page (``limit``/``continue``), reconcile each, and
   remember the listing's ``resourceVersion``.
2. **Watch** from that version (``timeoutSeconds`` a few seconds, so the Lease is renewed
   between watches); each event is reconciled and moves the version on. A watch answered
   410 Gone (the version was compacted) lists again: nothing between is missed.
3. **Reconcile** one object: a new object gets the finalizer ``benchmarking.aisp.dev/run``;
   a new generation is validated, pinned and started as one Dagster run keyed by its uid and
   generation (``dagster_runs.DagsterRuns``: a retried event finds that run and starts no
   other), at most ``starts_per_s`` a second (a token bucket; the rest wait their turn), and
   its status is written Pending; an invalid one is written Rejected. A started generation
   supersedes the earlier ones: their in-flight runs are stopped and their run directories
   marked Canceled (a stop not yet confirmed is tried again with back-off). A deleted object (its
   ``deletionTimestamp`` set, held by the finalizer) has its runs stopped and then the
   finalizer removed, so a deletion is never missed even while the operator was away. The
   finalizer stays until every in-flight run is known to have stopped (a run launcher that
   could not delete its worker's Job says so only by its answer): until then the object's
   ``status.message`` and the log name the runs waited for, tried again with back-off.
4. **Catch up** the status of the objects it started whose run's status.json moved on.

Every API call has a client-side timeout (the watch: its ``timeoutSeconds`` plus a margin), so a
half-open connection fails the call instead of blocking the loop; the loop touches a heartbeat
file (``heartbeat.py``) that the Deployment's liveness probe checks.

Every write carries a ``resourceVersion`` precondition and is retried on 409 after reading
the object again (``status.write``); a status is never written back to an earlier phase.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchrun.controller import kube
from benchrun.controller.heartbeat import Heartbeat
from benchrun.controller.resources import OPERATOR_FINALIZER
from benchrun.controller.status import (ResourceRef, note, rejected_status, status_from_run, unregistered_status,
                                        write)
from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

FINALIZER = OPERATOR_FINALIZER  # defined beside the fallback sensor, which names it too
Register = Callable[[bytes, str, dt.datetime], Any]


class LostLease(Exception):
    """Another replica holds the Lease now: stop acting at once."""


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int) -> None:
        if rate <= 0 or burst < 1:
            raise BenchrunError(f"start rate {rate}/s burst {burst}: both must be positive "
                                "(--starts-per-second, --start-burst)")
        self.rate, self.burst = float(rate), int(burst)
        self.tokens, self.stamp = float(burst), time.monotonic()

    def available(self) -> float:
        """The tokens saved up now (none taken)."""
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        return self.tokens

    def take(self) -> bool:
        if self.available() >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait_s(self) -> float:
        return max(0.0, (1.0 - self.tokens) / self.rate)


@dataclass
class Stats:
    """What the operator did, for logs and the scale benchmark."""

    started: int = 0
    reused: int = 0
    rejected: int = 0
    cancelled: int = 0
    status_writes: int = 0
    relists: int = 0
    gone: int = 0
    settled: int = 0  # finished runs catch-up stopped following
    stop_waits: int = 0  # deletions whose runs were not yet known to have stopped (tried again)
    errors: list[str] = field(default_factory=list)


@dataclass
class Settings:
    namespace: str | None = None  # None: every namespace
    page_size: int = 500
    watch_timeout_s: int = 5
    watch_margin_s: float = 10.0  # the watch's client read timeout is watch_timeout_s + this
    starts_per_s: float = 20.0
    start_burst: int = 50
    catch_up_s: float = 10.0  # how often the status of started runs is compared with status.json
    home: Path | None = None
    heartbeat: Path | None = None  # touched every pass and between objects (the liveness probe's file)
    stop_retry_s: float = 2.0  # a deletion whose runs did not stop is tried again after this, doubling...
    stop_retry_max_s: float = 120.0  # ...up to this


def _since(status: dict[str, Any], why: str, now: str) -> str:
    """When the same registration failure was first written (else now): a retry that fails the
    same way writes nothing."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Registered" and cond.get("message") == why:
            return str(cond.get("lastTransitionTime") or now)
    return now


class Operator:
    """Reconciles BenchmarkRuns against Dagster; ``run(stop)`` is the whole loop."""

    def __init__(self, api: Any, runs: Any, settings: Settings, *, elector: Any = None,
                 register: Register | None = None) -> None:
        from benchrun.automation.ticks import prepare_register

        self.api, self.runs, self.settings, self.elector = api, runs, settings, elector
        self.register = register or prepare_register(settings.home)
        self.bucket = TokenBucket(settings.starts_per_s, settings.start_burst)
        self.version: str | None = None
        self.waiting: dict[str, dict[str, Any]] = {}  # uid -> object: rate-limited or failed, tried again
        # the waiting objects that wait for a start token only, oldest first: read again only as tokens come
        self._rate_limited: dict[str, None] = {}
        self.known: dict[str, tuple[ResourceRef, str]] = {}  # uid -> (ref, run_id) for status catch-up
        self.stats = Stats()
        self._last_catch_up = 0.0
        self._settled: dict[str, Any] = {}  # uid -> what catch_up last found of a run it had nothing to write for
        self._renewed = time.monotonic()
        self.heartbeat = Heartbeat(settings.heartbeat)
        self._not_before: dict[str, float] = {}  # uid -> monotonic time a waiting deletion is tried again
        self._stop_tries: dict[str, int] = {}  # uid -> passes its deletion waited for its runs to stop
        # uid -> runs of earlier generations stopped for an edit: Dagster run id -> run directory still
        # to mark Canceled (None: marked); present until every one stopped and was marked
        self._superseding: dict[str, dict[str, str | None]] = {}
        # uid -> the latest generation whose run superseded the earlier ones here (the bound of what
        # _superseding holds); kept when catch_up stops following the object, so a relist supersedes
        # again only for a later generation (a restart, this map empty, once)
        self._superseded_by: dict[str, int] = {}

    # -- the loop ------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        try:
            self.heartbeat.beat()
            while not stop.is_set():
                self.heartbeat.beat()
                if self.elector is not None and not self._leading():
                    self.version = None  # a new leader lists afresh
                    stop.wait(max(1.0, self.elector.duration_s / 3))
                    continue
                self._renewed = time.monotonic()
                try:
                    self.step()
                except LostLease:
                    log.warning("lost the Lease to another replica; stopped acting until it is free again")
                    self.version = None
                except Exception as exc:  # noqa: BLE001 - the operator outlives any one failure
                    self.stats.errors.append(f"pass failed: {exc!r}")
                    log.warning("operator pass failed (%r); listing again in a second", exc)
                    self.version = None
                    stop.wait(1.0)
        finally:
            if self.elector is not None:
                self.elector.release()

    def _leading(self) -> bool:
        """Whether this replica holds the Lease; an API server that cannot be asked (a 503, a
        broken connection) counts as not leading for now, and the loop asks again after its wait."""
        try:
            return bool(self.elector.try_acquire())
        except Exception as exc:  # noqa: BLE001 - the operator outlives any one failure
            status = getattr(exc, "status", None)  # an ApiException's repr is empty
            why = f"API {status} {getattr(exc, 'reason', '')}".rstrip() if isinstance(status, int) else repr(exc)
            self.stats.errors.append(f"Lease {self.elector.namespace}/{self.elector.name}: {why}")
            log.warning("could not take or renew Lease %s/%s (%s); not acting, asking again shortly",
                        self.elector.namespace, self.elector.name, why)
            return False

    def step(self) -> None:
        """One pass: list if needed, retry what waits, watch for a few seconds, catch up."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            if self.version is None:
                self.relist()
            self.retry_waiting()
            try:
                self.watch_once()
            except (urllib3.exceptions.ProtocolError, urllib3.exceptions.TimeoutError) as exc:
                # The stream broke (server closed it, network): watch again from the last version.
                log.info("watch stream ended (%s); watching again from %s", exc, self.version)
            if time.monotonic() - self._last_catch_up > self.settings.catch_up_s:
                self.catch_up()
        except ApiException as exc:
            if exc.status == 410:
                self.stats.gone += 1
                log.info("watch from resourceVersion %s: 410 Gone; listing again", self.version)
                self.version = None
            elif exc.status == 429:
                retry = float((exc.headers or {}).get("Retry-After") or 1)
                log.info("API server throttled the operator (429); waiting %.0f s", retry)
                time.sleep(retry)
            else:
                self.stats.errors.append(f"API {exc.status}: {exc.reason}")
                log.warning("API error %s %s; listing again", exc.status, exc.reason)
                self.version = None
                time.sleep(1.0)

    def keep_lease(self) -> None:
        """Renew the Lease when a third of its duration has passed (long passes included);
        raise LostLease when another replica took it. Called between objects and right before
        a run is created (a replica that stalled past its Lease creates nothing). A pass that makes
        progress is alive: the heartbeat is touched here too."""
        self.heartbeat.beat()
        if self.elector is None or time.monotonic() - self._renewed < self.elector.duration_s / 3:
            return
        if not self.elector.try_acquire():
            raise LostLease()
        self._renewed = time.monotonic()

    def relist(self) -> None:
        items, version = kube.list_all(self.api, self.settings.namespace, limit=self.settings.page_size)
        self.stats.relists += 1
        for obj in items:
            self.keep_lease()
            self.reconcile(obj)
        self.version = version

    def watch_once(self) -> None:
        from kubernetes import watch

        fn = self.api.list_namespaced_custom_object if self.settings.namespace else self.api.list_cluster_custom_object
        args = (kube.GROUP, kube.VERSION, self.settings.namespace, kube.PLURAL) if self.settings.namespace else (
            kube.GROUP, kube.VERSION, kube.PLURAL)
        timeout = self._watch_timeout()
        # timeoutSeconds ends a healthy watch; the client's read timeout ends one whose connection died
        # silently (a half-open connection otherwise blocked this loop for good)
        deadline = (kube.REQUEST_TIMEOUT[0], timeout + self.settings.watch_margin_s)
        for event in watch.Watch().stream(fn, *args, resource_version=self.version, timeout_seconds=timeout,
                                          allow_watch_bookmarks=True, _request_timeout=deadline):
            self.keep_lease()
            obj = event["object"]
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if event["type"] == "DELETED":
                uid = str((obj.get("metadata") or {}).get("uid"))
                self.known.pop(uid, None)
                self.waiting.pop(uid, None)
                self._rate_limited.pop(uid, None)
                self._settled.pop(uid, None)
                self._not_before.pop(uid, None)
                self._stop_tries.pop(uid, None)
                self._superseding.pop(uid, None)
                self._superseded_by.pop(uid, None)
            elif event["type"] in ("ADDED", "MODIFIED"):
                self.reconcile(obj)
            if version:
                self.version = str(version)

    def _watch_timeout(self) -> int:
        """The watch's ``timeoutSeconds``: short while an object waits to be tried again now, else up to
        the earliest deferred deletion, else ``watch_timeout_s``."""
        now, longest = time.monotonic(), self.settings.watch_timeout_s
        token_due = self.bucket.wait_s() if self.bucket.available() < 1.0 else 0.0
        due = [token_due if uid in self._rate_limited else self._not_before.get(uid, 0.0) - now for uid in self.waiting]
        return max(1, min([longest, *(int(d + 0.999) for d in due)])) if due else longest

    def retry_waiting(self) -> None:
        """Read again and reconcile the waiting objects that are due: those backing off once their time
        comes, those waiting for a start token only as many as the bucket holds, oldest first. Before,
        every one was read (a GET and Dagster queries) every pass whether or not a token had come: 28
        waiting objects made 145 GETs in 5 passes that started 2 (review 2026-12-08)."""
        now = time.monotonic()
        tokens = int(self.bucket.available())
        for uid in list(self.waiting):
            if self._not_before.get(uid, 0.0) > now:
                continue  # a deletion backing off: tried again when its time comes
            if uid in self._rate_limited:
                if tokens < 1:
                    continue  # no start token yet: nothing to read it for
                tokens -= 1
                self._rate_limited.pop(uid)
            self.keep_lease()
            obj = self.waiting.pop(uid)
            fresh = kube.get_benchmarkrun(self.api, ResourceRef.of(obj).namespace, ResourceRef.of(obj).name)
            if fresh is not None and str(fresh["metadata"].get("uid")) == uid:
                self.reconcile(fresh)
            else:  # gone (another replica finalized it): nothing left to back off for
                self._not_before.pop(uid, None)
                self._stop_tries.pop(uid, None)
                self._superseding.pop(uid, None)
                self._superseded_by.pop(uid, None)

    # -- one object ----------------------------------------------------------------------------
    def reconcile(self, obj: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        ref = ResourceRef.of(obj)
        try:
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                if self._not_before.get(ref.uid, 0.0) > time.monotonic():
                    self.waiting[ref.uid] = obj  # backing off (an event, our own status note): later
                    return
                self._finalize(obj, ref)
                return
            obj = self._ensure_finalizer(obj, ref)
            if obj is None:
                return
            self._reconcile_generation(obj, ref)
        except LostLease:
            raise  # the whole pass stops, not just this object
        except ApiException as exc:
            if exc.status in (410, 429):
                self.waiting[ref.uid] = obj
                raise
            self._failed(obj, ref, f"API {exc.status} {exc.reason}")
        except Exception as exc:  # noqa: BLE001 - one object's failure must not stop the others
            self._failed(obj, ref, repr(exc))

    def _failed(self, obj: dict[str, Any], ref: ResourceRef, why: str) -> None:
        self.stats.errors.append(f"{ref.namespace}/{ref.name}: {why}")
        log.warning("%s/%s: %s; tried again on the next pass", ref.namespace, ref.name, why)
        self.waiting[ref.uid] = obj

    def _ensure_finalizer(self, obj: dict[str, Any], ref: ResourceRef) -> dict[str, Any] | None:
        finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
        if FINALIZER in finalizers:
            return obj
        return self._patch_meta(obj, ref, finalizers + [FINALIZER])

    def _patch_meta(self, obj: dict[str, Any] | None, ref: ResourceRef, finalizers: list[str]) -> dict[str, Any] | None:
        """Set the finalizers with a resourceVersion precondition; on 409 read and decide again."""
        from kubernetes.client.exceptions import ApiException

        for _attempt in range(8):
            if obj is None or str(obj["metadata"].get("uid")) != ref.uid:
                return None
            body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"], "finalizers": finalizers}}
            try:
                return kube.patch_object(self.api, ref.namespace, ref.name, body)
            except ApiException as exc:
                if exc.status == 404:
                    return None
                if exc.status != 409:
                    raise
            obj = kube.get_benchmarkrun(self.api, ref.namespace, ref.name)
            if obj is not None:
                current = list(obj["metadata"].get("finalizers") or [])
                finalizers = current + [FINALIZER] if FINALIZER in finalizers and FINALIZER not in current else \
                    [f for f in current if f != FINALIZER or FINALIZER in finalizers]
        raise RuntimeError(f"{ref.namespace}/{ref.name}: finalizer write still conflicting")

    def _finalize(self, obj: dict[str, Any], ref: ResourceRef) -> None:
        from benchrun.controller.resources import cancel_deleted_run

        finalizers = list(obj["metadata"].get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        reason = f"BenchmarkRun {ref.namespace}/{ref.name} was deleted"
        stopping = self.runs.cancel(ref, reason)
        self.stats.cancelled += len(stopping.stopped)
        if stopping.stopped:
            log.info("%s: stopped Dagster run(s) %s", reason, ", ".join(stopping.stopped))
        if stopping.waiting:
            self._wait_for_stop(obj, ref, stopping.waiting)
            return
        run_id = ((obj.get("status") or {}).get("runId")) or (self.known.get(ref.uid) or (None, None))[1]
        superseded = [d for d in (self._superseding.get(ref.uid) or {}).values() if d]  # an edit's, not marked yet
        for run_dir in [run_id, *superseded] if run_id else superseded:
            # pulled first, a finished run is not canceled; a pull that fails raises and leaves the
            # finalizer: the deletion is tried again on the next pass
            cancel_deleted_run(self.settings.home, run_dir, reason, warn=log.warning)
        log.info("%s: none of its Dagster runs is in flight; removing the finalizer", reason)
        self._patch_meta(obj, ref, [f for f in finalizers if f != FINALIZER])
        self.known.pop(ref.uid, None)
        self._not_before.pop(ref.uid, None)
        self._stop_tries.pop(ref.uid, None)
        self._superseding.pop(ref.uid, None)
        self._superseded_by.pop(ref.uid, None)

    def _back_off(self, obj: dict[str, Any], ref: ResourceRef) -> tuple[int, float]:
        """Try the object's stops again later: after ``stop_retry_s``, doubling up to ``stop_retry_max_s``."""
        tries = self._stop_tries.get(ref.uid, 0) + 1
        delay = min(self.settings.stop_retry_max_s, self.settings.stop_retry_s * 2 ** (tries - 1))
        self._stop_tries[ref.uid] = tries
        self._not_before[ref.uid] = time.monotonic() + delay
        self.waiting[ref.uid] = obj
        self.stats.stop_waits += 1
        return tries, delay

    def _wait_for_stop(self, obj: dict[str, Any], ref: ResourceRef, waiting: dict[str, str]) -> None:
        """Keep the finalizer: runs of the deleted object may still hold their workers (and GPUs).
        Say what is waited for on the object and in the log, and try again with back-off."""
        tries, delay = self._back_off(obj, ref)
        runs = "; ".join(f"{run_id} {why}" for run_id, why in sorted(waiting.items()))
        message = f"deleting: finalizer {FINALIZER} kept until its Dagster run(s) stop: {runs}"
        log.warning("%s/%s %s (try %d, again in %.0f s)", ref.namespace, ref.name, message, tries, delay)
        if note(self.api, obj, message):
            self.stats.status_writes += 1

    def _reconcile_generation(self, obj: dict[str, Any], ref: ResourceRef) -> None:
        from benchrun.automation.discovery import format_spec_errors
        from benchrun.controller.resources import _created, _own, _register_once, admission_errors
        from benchrun.rundir import RunDir

        status = obj.get("status") or {}
        existing = self.runs.find(ref)
        if existing is not None:
            run_id = existing.tags.get("dagster/partition")
            self.known[ref.uid] = (ref, run_id)
            if status.get("observedGeneration") != ref.generation or not status.get("phase"):
                self.stats.reused += 1
                self._write_from_run(obj, ref, run_id)
            self._supersede(obj, ref, started=True)
            return
        if status.get("observedGeneration") == ref.generation and status.get("phase") == "Rejected":
            self._supersede(obj, ref)  # a stop still pending from an earlier edit goes on
            return
        recorded = status.get("runId") if status.get("observedGeneration") == ref.generation else None
        if recorded and self._ran(str(recorded), ref):
            # its Dagster run record is gone (deleted in the UI, a database reset) but the object's status and
            # the run's own status.json say this generation ran: follow it, never run the benchmark again (every
            # relist started it anew, and a Succeeded object went back to Running: review 2026-12-08)
            self.known[ref.uid] = (ref, str(recorded))
            self.stats.reused += 1
            self._write_from_run(obj, ref, str(recorded))
            self._supersede(obj, ref, started=True)
            return
        if not self.bucket.take():
            self.waiting[ref.uid] = obj
            self._rate_limited[ref.uid] = None
            return
        try:
            prepared = _register_once(self.register, obj, ref, _created(obj), self.settings.home)
        except BenchrunError as exc:
            now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            errors = admission_errors(obj, ref, exc, self.settings.home)
            if errors is None:  # the spec is valid: storage or I/O failed, tried again
                if write(self.api, ref, unregistered_status(ref, str(exc), _since(status, str(exc), now)), current=obj):
                    self.stats.status_writes += 1
                self._failed(obj, ref, f"not registered: {exc}")
                return
            if write(self.api, ref, rejected_status(ref, list(format_spec_errors(errors)), now), current=obj):
                self.stats.status_writes += 1
            self.stats.rejected += 1
            self._supersede(obj, ref)  # stops nothing of its own; one pending from an earlier edit goes on
            return
        _own(RunDir.for_run(prepared.run_id, self.settings.home), ref, self.settings.home)
        _run, created = self.runs.start(ref, prepared.run_id, before_create=self.keep_lease)
        self.stats.started += int(created)
        self.stats.reused += int(not created)
        self.known[ref.uid] = (ref, prepared.run_id)
        self._write_from_run(obj, ref, prepared.run_id)
        self._supersede(obj, ref, started=True)

    def _ran(self, run_id: str, ref: ResourceRef) -> bool:
        """Whether run ``run_id`` is this generation's (its status.json names the object) and went past
        Pending: registered only, its start is still owed (a submit that failed is retried)."""
        from benchrun.paths import benchrun_home, is_run_id
        from benchrun.rundir import RunDir
        from benchrun.sharedstate import pull_run

        if not is_run_id(run_id):
            return False  # a status someone wrote by hand names no run of ours
        try:
            pull_run(run_id, benchrun_home(self.settings.home), status_only=True)  # the worker's pod wrote it
        except (BenchrunError, OSError):
            pass  # the local copy decides
        try:
            st = RunDir.for_run(run_id, self.settings.home).read_status()
        except (BenchrunError, OSError):
            return False  # no run directory (a fresh home) or a damaged one: nothing says it ran, so it starts
        return st.get("resource") == ref.to_json() and st.get("phase") not in (None, "Pending")

    def _supersede(self, obj: dict[str, Any], ref: ResourceRef, *, started: bool = False) -> None:
        """Stop the in-flight runs of the object's earlier generations and mark their run directories
        Canceled (``DagsterRuns.supersede``), after its own run was started: a stop not confirmed
        holds nothing back (Kueue queues the new run's workloads until quota frees) and is tried
        again with back-off until it is confirmed or the run has ended.

        ``started``: ``ref``'s run exists, and supersedes once per generation (a relist after catch-up
        stopped following the object asks Dagster nothing). Else (a rejected generation) only a stop
        still pending goes on, bounded by the generation that superseded: a rejected edit stops nothing.
        A process that did not see that generation start (a restart) asks Dagster for it once."""
        if started and ref.generation > self._superseded_by.get(ref.uid, 1):
            self._superseding.setdefault(ref.uid, {})  # an edit, or the first pass after a restart
            self._superseded_by[ref.uid] = ref.generation
        elif not started and ref.uid not in self._superseded_by:
            # a rejected generation this process never saw another start (a restart): the latest generation
            # that started a run superseded the earlier ones; a stop still pending then is found again
            latest = self.runs.latest_generation(ref.uid) or 1
            self._superseded_by[ref.uid] = latest
            if latest > 1:
                self._superseding.setdefault(ref.uid, {})
        if ref.uid not in self._superseding:
            return
        if self._not_before.get(ref.uid, 0.0) > time.monotonic():
            self.waiting[ref.uid] = obj  # backing off: tried again when its time comes
            return
        pending = self._superseding[ref.uid]  # kept if this raises: the retry supersedes
        ref = dataclasses.replace(ref, generation=self._superseded_by[ref.uid])
        left, waiting = self.runs.supersede(ref, pending, home=self.settings.home, warn=log.warning)
        if left is None:
            for state in (self._superseding, self._not_before, self._stop_tries):
                state.pop(ref.uid, None)
            return
        self._superseding[ref.uid] = left
        tries, delay = self._back_off(obj, ref)
        runs = "; ".join(f"{run_id} {why}" for run_id, why in sorted(waiting.items())) or "run directories not marked"
        log.warning("%s/%s generation %d: earlier generations' runs not stopped yet: %s (try %d, again in %.0f s)",
                    ref.namespace, ref.name, ref.generation, runs, tries, delay)

    def _write_from_run(self, obj: dict[str, Any] | None, ref: ResourceRef, run_id: str | None) -> dict[str, Any] | None:
        """Write the object's status from the run's status.json; that status.json when nothing needed
        writing (the object already holds it or a later one), else None."""
        from benchrun.rundir import RunDir

        if not run_id:
            return None
        st = RunDir.for_run(run_id, self.settings.home).read_status()
        if write(self.api, ref, status_from_run(st, ref), current=obj):
            self.stats.status_writes += 1
            return None
        return st

    def catch_up(self) -> None:
        """Write the status of started runs whose status.json moved on (a missed write). The Lease is
        renewed between runs, as in every other pass; a run in a final phase whose status.json did not
        move since the previous pass and whose object already holds it is no longer followed (its
        signing and report land within a pass or two of its end). Before, every BenchmarkRun that still
        existed was pulled and read again every pass, forever: 800 finished runs made one pass 20 s
        long, past the 15 s Lease, with no renewal in it."""
        from benchrun.paths import benchrun_home
        from benchrun.sharedstate import FINAL_PHASES, pull_run

        self._last_catch_up = time.monotonic()
        for uid, (ref, run_id) in list(self.known.items()):
            self.keep_lease()
            try:
                pull_run(run_id, benchrun_home(self.settings.home), status_only=True)
                held = self._write_from_run(None, ref, run_id)
            except BenchrunError as exc:
                log.info("%s/%s: run %s: %s", ref.namespace, ref.name, run_id, exc)
                continue
            if held is not None and held.get("phase") in FINAL_PHASES and self._settled.get(uid) == held:
                self.known.pop(uid, None)
                self._settled.pop(uid, None)
                self.stats.settled += 1
            else:
                self._settled[uid] = held
