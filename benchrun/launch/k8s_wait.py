"""The launcher's one wait loop: poll a Job or a JobSet, its pods and its Kueue Workload until it
ends, or end it with benchrun's own reason (preempted, unpullable, never scheduled, timed out,
lost). What differs between a Job and a JobSet is data, a :class:`Watch`: how one poll reads the
object, how many pods must run, which condition ends it.

``timeout_s`` counts from the moment every pod of the replicate runs; waiting to be admitted and
scheduled is bounded separately by ``pending_timeout_s``. While node 0's pod runs,
``log_follower`` streams its log into the Dagster run.

An attempt can end without ending the replicate: a pod evicted (``DisruptionTarget``: the Job
replaces it) or a Workload evicted by Kueue for a reason it requeues on (Preempted,
PodsReadyTimeout, AdmissionCheck: the Job is admitted again and makes a new pod). Each such
attempt goes into ``Watch.history`` and the next one is followed from its own start, up to
``eviction_retries``; an InactiveWorkload is never admitted again and ends the replicate.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from benchrun.launch.k8s_failures import FATAL_WAITING, PULL_WAITING, permanent_pull_error
from benchrun.launch.k8s_status import cond_message, cond_time, epoch, running_for, scheduling_note, waiting, \
    INACTIVE_NOTE, workload_evicted, workload_pending_note
from benchrun.launch.k8s_status import deleting as _deleting, disrupted as _disrupted, \
    stuck_terminating as _stuck_terminating
from benchrun.launch.k8s_submit import api_error
from benchrun.launch.podsecurity import refusal_reason

log = logging.getLogger(__name__)

# Consecutive failed reads before the launcher gives up on the object, when the API refuses (403, 400):
MAX_READ_ERRORS = 5
# ... and how long, when it does not answer or answers 429/5xx (an API server restart, a control-plane
# upgrade), with the wait between reads doubling up to READ_BACKOFF_MAX_S: before, five reads two
# seconds apart, so a 10 s outage failed an hour-long GPU replicate and deleted its Job.
TRANSIENT_BUDGET_S = 300.0
READ_BACKOFF_MAX_S = 30.0
# Pod phases from which a pod has run (or is running).
RAN = ("Running", "Succeeded", "Failed")

LogFollower = Callable[[str], AbstractContextManager[Any]]
# One poll: (the object, its Kueue Workload or None, pods found by node rank). Raises
# ApiException, HTTPError or OSError when the API cannot be read.
Read = Callable[[Any], tuple[Any, Any, dict[int, Any]]]


@dataclass(frozen=True)
class Watch:
    """What the wait loop needs to know of one kind of object."""

    kind: str  # "Job" or "JobSet", as the reasons name it
    name: str
    read: Read  # given the object as last read
    nodes: int  # pods that must run before the replicate counts as started
    ended_by: tuple[str, ...]  # the object's conditions that end the wait (its verdict is then the pods')
    pod_end_ends: bool  # a Job ends with its one pod; a JobSet only by its condition
    no_pod_note: Callable[[Any], str]  # why nothing is pending, when no pod exists
    name_the_node: bool  # a gang's reasons say which node
    # Evictions the object replaces (a Job's podFailurePolicy ignores DisruptionTarget and
    # podReplacementPolicy makes a new pod): how many are followed; None: an eviction is not
    # followed (its pod's end is the replicate's end).
    eviction_retries: int | None = None
    # whether a pod's own eviction is such an attempt: a Job's is (it replaces the pod); a gang's
    # is not (one node's pod cannot rejoin a rendezvous its peers have left: the child Job fails,
    # and the gang's end is the replicate's, naming the node). Kueue's evictions of the whole
    # object (it suspends it, every pod goes, and it is admitted again) are followed for both.
    pod_evictions_replaced: bool = True
    evicted: list[str] = field(default_factory=list)  # uids of the evicted attempts (read skips them)
    # the attempts that ended before this one (evicted or preempted): cause, reason, pod, node,
    # whether it had started measuring; written into the replicate's timeline as ``attempts``
    history: list[dict[str, Any]] = field(default_factory=list)
    # evicted pods the last read found beside a newer one (the replacement came before a poll
    # saw the eviction): recorded as ended attempts before anything else is judged
    missed: list[Any] = field(default_factory=list)
    # a gang's pods gone from under it while it ran (a drain's eviction deletes the pod, and a poll that
    # backs off may never see it Failed), by node rank, as last seen: the node failed_node names first
    gone: dict[int, Any] = field(default_factory=dict)
    # the Job controller's refusals to make this object's pods (FailedCreate events: Pod Security
    # admission, a quota), newest last; None: not read (the account may not list events)
    failed_creates: Callable[[Any], list[str]] | None = None
    # a pod's pull failures as the kubelet reported them (its Failed events' messages), newest last:
    # an ImagePullBackOff's own message says only "Back-off pulling image"; None: not read
    pull_errors: Callable[[Any], list[str]] | None = None
    # "events" once the account was refused listing them: neither reader is called again (the
    # Watch is frozen; this set is its one switch)
    off: set[str] = field(default_factory=set)


def wait(watch: Watch, obj: Any, t0: float, *, timeout_s: float, pending_timeout_s: float, poll_s: float,
         sleep: Callable[[float], None], log_follower: LogFollower | None = None,
         max_poll_s: float | None = None, pull_allowance_s: float = 600.0,
         ) -> tuple[Any, Any, dict[int, Any], str | None]:
    """Poll until the object ends: (object, Workload, pods by rank, None), or with a verdict string
    when the launcher ended it instead. ``obj`` is the object as created (None if not read yet).

    Polls back off while nothing changes (no new resourceVersion of the object or its Workload,
    no pod's phase): ``poll_s``, then 1.5 times longer each unchanged poll up to ``max_poll_s``
    (default 5 × ``poll_s``), and ``poll_s`` again after any change. A replicate that runs for
    an hour costs its API server a few calls a minute, not 3 every ``poll_s``; its times come
    from the pods' own timestamps, so the later look only delays noticing the end.

    A pod whose image does not pull (``ErrImagePull``, ``ImagePullBackOff``) fails the replicate
    at once when the registry's answer is final (not found, access denied:
    :func:`~benchrun.launch.k8s_failures.permanent_pull_error`), else once it has failed to pull
    for ``pull_allowance_s``: the kubelet retries, and a rate limit or a blip passes."""
    kind = watch.kind
    ceiling = max(poll_s, max_poll_s if max_poll_s is not None else 5 * poll_s)
    interval, seen = poll_s, None
    kueue: dict[str, Any] = {"true": set(), "false": set(), "awaiting": False}  # Evicted transitions seen
    started: float | None = None
    refusal_note: str | None = None
    pulls: dict[str, tuple[float, str | None]] = {}  # pod uid -> (first seen failing to pull, detail)
    errors = 0
    outage_since: float | None = None
    pods: dict[int, Any] = {}
    workload = None
    follow: AbstractContextManager[Any] | None = None
    try:
        while True:
            # the attempt followed until now: what a Kueue eviction seen in this read ends
            followed = {r: p for r, p in pods.items() if p.metadata.uid not in watch.evicted}
            try:
                obj, new_workload, new_pods = watch.read(obj)
                pods.update(new_pods)
                workload = new_workload or workload
                errors, outage_since = 0, None
            except (ApiException, HTTPError, OSError) as exc:
                if isinstance(exc, ApiException) and exc.status == 404 and obj is not None:
                    return obj, workload, pods, f"the {kind} disappeared before it finished (deleted by someone else?)"
                errors += 1
                what = api_error(exc) if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
                transient = not isinstance(exc, ApiException) or exc.status in (0, 408, 429) or (exc.status or 0) >= 500
                if not transient and errors >= MAX_READ_ERRORS:
                    return obj, workload, pods, (f"lost the {kind}: {MAX_READ_ERRORS} reads in a row failed, "
                                                 f"last {what}; {kind} deleted")
                now = time.monotonic()
                outage_since = outage_since if outage_since is not None else now
                if transient and now - outage_since > TRANSIENT_BUDGET_S:
                    return obj, workload, pods, (f"lost the {kind}: the API server did not answer for "
                                                 f"{now - outage_since:.0f} s ({errors} reads, last {what}); "
                                                 f"{kind} deleted")
                log.warning("reading %s %s failed (%s); retrying", kind, watch.name, what)
                sleep(min(READ_BACKOFF_MAX_S, poll_s * 2 ** min(errors - 1, 10)) if transient else poll_s)
                continue
            ev = _new_kueue_eviction(workload, kueue)
            if ev is not None:
                said = f"{ev['what']} ({ev['reason']}: {ev['message']})"
                # The attempt it ended is the one followed until now: by this read Kueue may already
                # have admitted it again and the Job made the next pod (the newest), while the ended
                # one is still terminating; with none followed yet, the pods of this read that are
                # not a newer attempt's (:func:`_of_ended_attempt`). When the eviction ends the
                # replicate, its log and timeline are that attempt's, not the replacement's.
                ended = followed or {r: p for r, p in new_pods.items()
                                     if p.metadata.uid not in watch.evicted and _of_ended_attempt(p, ev)}
                if not ev["requeued"]:
                    return obj, workload, {**pods, **ended}, f"{said}: {INACTIVE_NOTE}; {kind} deleted"
                fresh = {r: new_pods[r] if r in new_pods and new_pods[r].metadata.uid == p.metadata.uid else p
                         for r, p in ended.items()}  # as this read shows them
                done = sorted(r for r, p in fresh.items() if _phase(p) == "Succeeded")
                if watch.nodes > 1 and done:
                    # admitted again, the JobSet resumes its child Job, which keeps its completed indexes:
                    # only the other nodes would run, waiting for peers that never come (the harness ran
                    # them, and the replicate read ok from two attempts' nodes: review 2026-12-08)
                    return obj, workload, {**pods, **fresh}, (
                        f"{said} after node{'s' if len(done) > 1 else ''} {', '.join(map(str, done))} had finished: "
                        f"a {kind} admitted again resumes its Job, which keeps the indexes that completed and "
                        f"reruns only the others, so the gang cannot run together again; {kind} deleted")
                if watch.eviction_retries is None:
                    return obj, workload, {**pods, **ended}, f"{said}; {kind} deleted"
                # Kueue requeues it: the Job is admitted again and makes a new pod, a new attempt
                # (its own log and result, never merged with this one), within the same budget as evictions.
                _record(watch, "kueue", said, ended.get(0), started is not None, also=ended.values())
                if len(watch.history) > watch.eviction_retries:
                    return obj, workload, {**pods, **ended}, (
                        f"{said}; ended {len(watch.history)} times by evictions or preemptions, "
                        f"more than eviction_retries={watch.eviction_retries}; {kind} deleted")
                log.warning("%s: %s; Kueue requeues it (retry %d of %d)", watch.name, said, len(watch.history),
                            watch.eviction_retries)
                if follow is not None:
                    follow.__exit__(None, None, None)
                    follow = None
                started, t0 = None, time.perf_counter()
                sleep(poll_s)
                continue
            _gang_pods_gone(watch, followed, new_pods)
            vanished = _vanished(watch, followed, new_pods)
            if (watch.missed or vanished) and watch.eviction_retries is not None and watch.pod_evictions_replaced:
                # evictions the Job had already replaced when this poll came (the replacement may even
                # have finished): each is an ended attempt within the same budget
                replaced = False
                for gone in sorted([*watch.missed, *vanished], key=lambda p: epoch(p.metadata.creation_timestamp) or 0.0):
                    if gone.metadata.uid in watch.evicted:
                        continue
                    replaced = True
                    why = _disrupted(gone) or VANISHED
                    _record(watch, "eviction", f"evicted: {why}", gone, _ran(gone))
                    if len(watch.history) > watch.eviction_retries:  # the replicate ends with this attempt's pod
                        return obj, workload, {**pods, 0: gone}, (
                            f"evicted {len(watch.history)} times, more than eviction_retries="
                            f"{watch.eviction_retries} (last: {why}); {kind} deleted")
                    log.warning("%s: pod %s evicted (%s); the %s replaced it (retry %d of %d)", watch.name,
                                gone.metadata.name, why, kind, len(watch.history), watch.eviction_retries)
                if replaced:
                    # the replacement is a new attempt with its own clock, pending allowance and log, as
                    # when the eviction is seen directly (below); before, it kept the evicted attempt's,
                    # and a replacement needing more than timeout minus the first attempt's time timed out
                    if follow is not None:
                        follow.__exit__(None, None, None)
                        follow = None
                    started, t0 = None, time.perf_counter()
            watch.missed.clear()
            pod0 = pods.get(0)
            phase0 = pod0.status.phase if pod0 is not None and pod0.status is not None else None
            if watch.eviction_retries is not None and watch.pod_evictions_replaced \
                    and phase0 == "Failed" and _disrupted(pod0) \
                    and pod0.metadata.uid not in watch.evicted \
                    and not (cond_time(obj, "Failed") or cond_time(obj, "Complete")):
                # Evicted, not failed: the Job replaces the pod (podspec.EVICTION_POLICY); follow the
                # new attempt from its own start, its own log and result (never merged with this
                # one), up to eviction_retries times.
                why = _disrupted(pod0)
                _record(watch, "eviction", f"evicted: {why}", pod0, started is not None)
                if len(watch.history) > watch.eviction_retries:
                    return obj, workload, pods, (f"evicted {len(watch.history)} times, more than eviction_retries="
                                                 f"{watch.eviction_retries} (last: {why}); {kind} deleted")
                log.warning("%s: pod %s evicted (%s); the %s replaces it (retry %d of %d)", watch.name,
                            pod0.metadata.name, why, kind, len(watch.history), watch.eviction_retries)
                if follow is not None:
                    follow.__exit__(None, None, None)
                    follow = None
                started, t0 = None, time.perf_counter()
                sleep(poll_s)
                continue
            # an attempt that ended (evicted, preempted) is not this one: its pod counts no more
            live = {r: p for r, p in pods.items() if p.metadata.uid not in watch.evicted}
            pod0 = live.get(0)
            phase0 = pod0.status.phase if pod0 is not None and pod0.status is not None else None
            if phase0 == "Running" and follow is None and log_follower is not None:
                follow = log_follower(pod0.metadata.name)
                follow.__enter__()
            if (watch.pod_end_ends and phase0 in ("Succeeded", "Failed")) \
                    or any(cond_time(obj, c) for c in watch.ended_by):
                stale = sorted(r for r, p in pods.items() if r not in live)
                if watch.nodes > 1 and stale:  # a node's newest pod is of an ended attempt: never one result
                    return obj, workload, pods, (
                        f"node{'s' if len(stale) > 1 else ''} {', '.join(map(str, stale))} did not run in the "
                        f"attempt that ended the {kind} (their pods are of an attempt Kueue ended): the gang's "
                        f"result would mix attempts; {kind} deleted")
                return obj, workload, pods, None
            if cond_time(obj, "Failed"):
                why = cond_message(obj, "Failed") or "Failed"
                return obj, workload, pods, f"the {kind} failed before its pod finished ({why}); {kind} deleted"
            for rank, pod in sorted(live.items()):
                reason, message = waiting(pod)
                where = f"node {rank}: " if watch.name_the_node else ""
                if reason in FATAL_WAITING:
                    return obj, workload, pods, where + (
                        f"{FATAL_WAITING[reason]}: {reason}" + (f": {message}" if message else ""))
                if reason in PULL_WAITING:
                    failed_pull = _pull_verdict(watch, pod, reason, message, pulls, pull_allowance_s)
                    if failed_pull:
                        return obj, workload, pods, where + failed_pull
                stuck = _stuck_terminating(pod)  # its node lost: the Job replaces it only once it has stopped
                if stuck:
                    return obj, workload, pods, f"{where}{stuck}; {kind} deleted"
            if started is None and len(live) < watch.nodes and watch.failed_creates is not None \
                    and not _suspended(obj):
                refusals = _read_refusals(watch, obj)
                refused = refusal_reason(refusals[-1]) if refusals else None
                if refused:
                    return obj, workload, pods, f"{refused}; {kind} deleted"
                refusal_note = refusals[-1] if refusals else refusal_note
            now = time.perf_counter()
            if started is None and sum(1 for p in live.values() if _phase(p) in RAN) >= watch.nodes:
                started = now - running_for(live.values())  # from the containers' start, not this look
            if started is None and now - t0 > pending_timeout_s:
                pending = [p for _r, p in sorted(live.items()) if _phase(p) not in RAN]
                note = (scheduling_note(pending[0]) if pending else None) or workload_pending_note(workload) \
                    or (f"pods not created: {refusal_note}" if refusal_note else None) or watch.no_pod_note(obj)
                return obj, workload, pods, f"not started within {pending_timeout_s:g}s ({note}); {kind} deleted"
            if started is not None and now - started > timeout_s:
                return obj, workload, pods, f"timed out after {timeout_s:g}s; {kind} deleted"
            state = (_version(obj), _version(workload), tuple(sorted((p.metadata.uid, _phase(p)) for p in live.values())))
            interval = min(interval * 1.5, ceiling) if state == seen else poll_s
            seen = state
            sleep(interval)
    finally:
        if follow is not None:
            follow.__exit__(None, None, None)


def _pull_verdict(watch: Watch, pod: Any, reason: str, message: str | None,
                  pulls: dict[str, tuple[float, str | None]], allowance_s: float) -> str | None:
    """The replicate's reason when a pod's failing pull is final or has lasted ``allowance_s``;
    None while it may still pull. ``pulls`` keeps when each pod was first seen failing and the
    kubelet's last detail (an ``ErrImagePull`` message, else the pod's newest ``Failed`` event)."""
    uid = pod.metadata.uid
    first, detail = pulls.get(uid, (time.monotonic(), None))
    if message and not message.startswith("Back-off pulling image"):
        detail = message  # the runtime's answer (ErrImagePull; a newer kubelet's back-off carries it too)
    if not permanent_pull_error(detail) and watch.pull_errors is not None and "events" not in watch.off:
        try:
            found = watch.pull_errors(pod)
        except (ApiException, HTTPError, OSError) as exc:
            _events_refused(watch, exc, "a pull failure is judged on the pod's own status")
            found = []
        # the kubelet's "Failed to pull image ...: <the runtime's answer>", not its "Error: ImagePullBackOff"
        answers = [m for m in found if not m.startswith("Error: ")]
        detail = next((m for m in reversed(answers) if permanent_pull_error(m)), answers[-1] if answers else detail)
    pulls[uid] = (first, detail)
    said = detail or message or "no detail"
    if permanent_pull_error(detail):
        return f"image pull failed: {reason}: {said}"
    waited = time.monotonic() - first
    if waited > allowance_s:
        return (f"image pull failed: {reason} for {waited:.0f}s, beyond pull_allowance_s={allowance_s:g} (the kubelet "
                f"kept retrying): {said}")
    return None


def _suspended(obj: Any) -> bool:
    spec = obj.get("spec") if isinstance(obj, dict) else getattr(obj, "spec", None)
    return bool((spec.get("suspend") if isinstance(spec, dict) else getattr(spec, "suspend", None)) or False)


def _read_refusals(watch: Watch, obj: Any) -> list[str]:
    """The object's FailedCreate messages; an account that may not list events (or an API that
    does not answer) only loses this early verdict: the pending timeout still ends the wait."""
    if watch.failed_creates is None or "events" in watch.off:
        return []
    try:
        return watch.failed_creates(obj)
    except (ApiException, HTTPError, OSError) as exc:
        _events_refused(watch, exc, "a pod the API server refuses is noticed only at the pending timeout")
        return []


def _events_refused(watch: Watch, exc: Exception, loses: str) -> None:
    """An events read failed: when the account may not list them, stop reading them (and say what is lost)."""
    if isinstance(exc, ApiException) and exc.status in (401, 403) and "events" not in watch.off:
        watch.off.add("events")
        log.warning("cannot list events in the namespace (%s): %s", api_error(exc), loses)


def _new_kueue_eviction(workload: Any, seen: dict[str, Any]) -> dict[str, Any] | None:
    """Kueue's Evicted condition when it says something not seen yet: True with a new time, or
    False again (readmitted between two polls) when its True was never seen."""
    ev = workload_evicted(workload)
    if ev is None:
        return None
    mark = f"{ev['reason']}@{ev['time']}"
    if ev["status"] == "True":
        if mark in seen["true"]:
            return None
        seen["true"].add(mark)
        seen["awaiting"] = True
        return ev
    if mark in seen["false"]:
        return None
    seen["false"].add(mark)
    missed = not seen["awaiting"] and mark not in seen["true"]
    seen["awaiting"] = False
    return ev if missed else None


def _record(watch: Watch, cause: str, reason: str, pod: Any, measured: bool, also: Any = ()) -> None:
    """One ended attempt in the replicate's history; its pod (and ``also``: the rest of a
    gang's) is no longer followed."""
    for p in (pod, *also):
        if p is not None and p.metadata.uid not in watch.evicted:
            watch.evicted.append(p.metadata.uid)
    watch.history.append({
        "attempt": len(watch.history) + 1, "cause": cause, "reason": reason, "measured": measured,
        "pod_name": pod.metadata.name if pod is not None else None,
        "pod_uid": pod.metadata.uid if pod is not None else None,
        "node_name": getattr(pod.spec, "node_name", None) if pod is not None and pod.spec is not None else None,
        "ended_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
    })


def _version(obj: Any) -> str | None:
    """The resourceVersion of a model or a dict (a custom object), else None."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return (obj.get("metadata") or {}).get("resourceVersion")
    meta = getattr(obj, "metadata", None)
    return getattr(meta, "resource_version", None)


def _phase(pod: Any) -> str | None:
    return pod.status.phase if pod.status is not None else None


def _ran(pod: Any) -> bool:
    """Whether a pod's container started (it had begun measuring when it ended)."""
    for cs in (pod.status.container_statuses or []) if pod.status is not None else []:
        state = cs.state
        if state is not None and (state.running is not None
                                  or (state.terminated is not None and state.terminated.started_at is not None)):
            return True
    return False


def _of_ended_attempt(pod: Any, ev: dict[str, Any]) -> bool:
    """Whether a pod seen with Kueue's eviction ``ev`` belongs to the attempt it ended: being
    deleted, or seen while the Workload is still evicted (no new attempt before it is admitted
    again), or created before the eviction."""
    if _deleting(pod) or ev["status"] == "True":
        return True
    evicted_at, created = epoch(ev.get("time")), epoch(pod.metadata.creation_timestamp)
    return evicted_at is not None and created is not None and created < evicted_at


# The reason of an attempt whose pod was gone before a poll saw it end (a drain's eviction between two
# polls that back off to seconds apart) while the Job had replaced it: its pods are replaced only when
# ignored by podFailurePolicy (DisruptionTarget), every other failure fails the Job (backoffLimit 0).
VANISHED = ("its pod was gone before it was seen to end, and the Job replaced it, which it does only for a "
            "disruption (podFailurePolicy Ignore on DisruptionTarget)")


def _gang_pods_gone(watch: Watch, followed: dict[int, Any], new_pods: dict[int, Any]) -> None:
    """A gang's node whose pod followed until this read is no longer its newest (deleted, or replaced
    while terminating) and had not finished: kept in ``watch.gone``, as last seen. A gang's child Job
    fails on it (backoffLimit 0), and the peers' SIGTERM was named as the cause (review 2026-12-08)."""
    if watch.nodes <= 1:
        return
    for rank, before in followed.items():
        now = new_pods.get(rank)
        if rank in watch.gone or _phase(before) == "Succeeded" or before.metadata.uid in watch.evicted:
            continue
        if now is None or now.metadata.uid != before.metadata.uid:
            watch.gone[rank] = before


def _vanished(watch: Watch, followed: dict[int, Any], new_pods: dict[int, Any]) -> list[Any]:
    """The single-pod attempt followed until this read, when this read shows another pod in its place and
    neither lists it any more nor counted it (review 2026-12-07: it was never counted, and the replacement
    ran on its clock and timed out)."""
    before, now = followed.get(0), new_pods.get(0)
    if watch.nodes != 1 or before is None or now is None or before.metadata.uid == now.metadata.uid:
        return []
    if before.metadata.uid in watch.evicted or any(p.metadata.uid == before.metadata.uid for p in watch.missed):
        return []
    return [before]
