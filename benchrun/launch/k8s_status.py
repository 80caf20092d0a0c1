"""Reading Kubernetes status for the launcher: times of pods, Jobs, JobSets and Kueue Workloads,
the container's state, why a pod waits, and the scheduler timeline of one replicate.

Kubernetes stamps these to the second, against the API server's clock. The timeline goes into
a message of kind ``pod`` and ``raw/<run_id>_<suite>_r<k>_pod.json``: Job created, Kueue quota
reserved / admitted / pods ready, pod scheduled, container started and finished, with
``queue_wait_s`` (created -> admitted), ``scheduled_s``, ``started_s`` and ``run_s``.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

from benchrun.launch.podspec import CONTAINER_NAME


def epoch(ts: Any) -> float | None:
    """Epoch seconds of a client timestamp (datetime, or RFC 3339 text), else None."""
    if ts is None:
        return None
    if isinstance(ts, str):
        try:
            ts = _dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(ts, _dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=_dt.timezone.utc)
        return ts.timestamp()
    return None


def _utc(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _span(a: float | None, b: float | None) -> float | None:
    return round(b - a, 3) if a is not None and b is not None else None


def container_status(pod: Any) -> Any:
    for cs in (getattr(pod.status, "container_statuses", None) or []):
        if cs.name == CONTAINER_NAME:
            return cs
    return None


def waiting(pod: Any) -> tuple[str | None, str | None]:
    """The suite container's waiting reason and message, or (None, None)."""
    cs = container_status(pod)
    state = getattr(cs, "state", None)
    w = getattr(state, "waiting", None)
    if w is None:
        return None, None
    return w.reason, w.message


def terminated(pod: Any) -> Any:
    cs = container_status(pod)
    state = getattr(cs, "state", None)
    return getattr(state, "terminated", None)


def container_started(pod: Any) -> float | None:
    """When the suite's container started (running, or terminated after a start), epoch seconds; None before."""
    state = getattr(container_status(pod), "state", None)
    return epoch(getattr(getattr(state, "running", None), "started_at", None)
                 or getattr(getattr(state, "terminated", None), "started_at", None))


def running_for(pods: Any) -> float:
    """Seconds since the last of the pods' suite containers started (0 when a start is not recorded): the
    suite's timeout counts from its container's start. A run worker that adopted a Job already running
    (restarted mid-launch) counted from its first look, up to twice the timeout (review 2026-12-07)."""
    starts = [container_started(pod) for pod in pods]
    return max(0.0, min((time.time() - t if t is not None else 0.0 for t in starts), default=0.0))


def disrupted(pod: Any) -> str | None:
    """``reason: message`` of the pod's DisruptionTarget condition (an eviction), else None."""
    for c in (pod.status.conditions or []) if pod.status is not None else []:
        if c.type == "DisruptionTarget" and c.status == "True":
            return f"{c.reason}: {c.message}" if c.reason else "DisruptionTarget"
    return None


def deleting(pod: Any) -> bool:
    return getattr(pod.metadata, "deletion_timestamp", None) is not None


# A disrupted pod still not stopped this long after its deletionTimestamp (the end of its grace period)
# has lost its node: the replicate ends naming the disruption, not at its timeout as "timed out" (review).
STUCK_TERMINATING_S = 60.0


def stuck_terminating(pod: Any) -> str | None:
    """Why a disrupted pod that has not stopped :data:`STUCK_TERMINATING_S` after its grace period ends
    its replicate (the Job replaces a pod only once it has stopped), else None."""
    at = epoch(pod.metadata.deletion_timestamp) if deleting(pod) else None
    why = disrupted(pod)
    if at is None or why is None or getattr(pod.status, "phase", None) in ("Succeeded", "Failed") \
            or time.time() <= at + STUCK_TERMINATING_S:
        return None
    return (f"its pod was disrupted ({why}) and had not stopped {STUCK_TERMINATING_S:g}s after its grace period "
            "(its node unreachable?)")


def scheduling_note(pod: Any) -> str:
    """Why a pod is still pending, from its PodScheduled condition (Kueue gate, Unschedulable)."""
    for cond in (getattr(pod.status, "conditions", None) or []):
        if cond.type == "PodScheduled" and cond.status != "True":
            return f"{cond.reason or 'not scheduled'}: {cond.message}" if cond.message else (cond.reason or "not scheduled")
    reason, message = waiting(pod)
    if reason:
        return f"{reason}: {message}" if message else reason
    return f"phase {pod.status.phase}"


def cond_time(obj: Any, type_: str) -> float | None:
    """Epoch of a True condition's lastTransitionTime, on a dict (custom object) or a model."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        conds = (obj.get("status") or {}).get("conditions") or []
        for c in conds:
            if c.get("type") == type_ and c.get("status") == "True":
                return epoch(c.get("lastTransitionTime"))
        return None
    for c in (getattr(obj.status, "conditions", None) or []):
        if c.type == type_ and c.status == "True":
            return epoch(c.last_transition_time)
    return None


def cond_message(obj: Any, type_: str) -> str | None:
    """``reason: message`` of a True condition, on a dict (custom object) or a model."""
    if isinstance(obj, dict):
        conds = [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                 for c in (obj.get("status") or {}).get("conditions") or []]
    else:
        conds = [(c.type, c.status, c.reason, c.message) for c in (getattr(obj.status, "conditions", None) or [])]
    return next((f"{reason}: {message}" for t, status, reason, message in conds if t == type_ and status == "True"),
                None)


def workload_eviction(wl: dict[str, Any] | None) -> str | None:
    """The Evicted condition's reason and message when Kueue evicted (preempted) the workload.

    Any Evicted condition counts, also one already back to False: Kueue may requeue and
    readmit a preempted workload between two polls, and the replicate was still cut short
    (the reason is then read back as :func:`workload_evicted` does)."""
    cond = _evicted_condition(wl)
    if cond is None:
        return None
    reason, message = _eviction_reason(wl, cond)
    return f"{reason}: {message}"


# Kueue's reasons on a Workload's Evicted condition (v1beta2, workload_types.go): what each means,
# and whether Kueue requeues the workload (the Job is then admitted again and makes a new pod).
KUEUE_EVICTIONS: dict[str, tuple[str, bool]] = {
    "Preempted": ("preempted by Kueue", True),  # a higher-priority or reclaiming workload took the quota
    "PodsReadyTimeout": ("pods not ready within Kueue's waitForPodsReady timeout", True),
    "AdmissionCheck": ("evicted by a Kueue admission check", True),  # a check went back to Retry/Pending
    "InactiveWorkload": ("deactivated in Kueue", False),
    "ClusterQueueStopped": ("evicted by Kueue: its ClusterQueue was stopped", True),
    "LocalQueueStopped": ("evicted by Kueue: its LocalQueue was stopped", True),
    "NodeFailures": ("evicted by Kueue: a node it was placed on failed", True),
}
# Said after an InactiveWorkload eviction: why it will not come back, and what to do.
INACTIVE_NOTE = ("the Workload is inactive (spec.active: false, set by a person, by Kueue past its requeuing backoff "
                 "limit, or for a rejected admission check) and is not admitted again")
# When Kueue admits an evicted workload again (pkg/workload SetQuotaReservation) it rewrites the
# Evicted condition: status False, reason "QuotaReserved", message "Previously: <the eviction's
# message>", a new lastTransitionTime. The eviction's reason is then read back from that message,
# by the texts Kueue writes for each reason (pkg/scheduler/preemption, pkg/controller/core), else
# from status.schedulingStats.evictions when it counts evictions of one reason only.
READMITTED_REASON, READMITTED_PREFIX = "QuotaReserved", "Previously: "
KUEUE_EVICTION_MESSAGES: tuple[tuple[str, str], ...] = (
    ("Preempted to accommodate", "Preempted"),
    ("Exceeded the PodsReady timeout", "PodsReadyTimeout"),
    ("At least one admission check is false", "AdmissionCheck"),
    ("The ClusterQueue is stopped", "ClusterQueueStopped"),
    ("The LocalQueue is stopped", "LocalQueueStopped"),
)


def _evicted_condition(wl: dict[str, Any] | None) -> dict[str, Any] | None:
    return next((c for c in ((wl or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == "Evicted" and c.get("status") in ("True", "False")), None)


def _eviction_reason(wl: dict[str, Any] | None, cond: dict[str, Any]) -> tuple[str, str]:
    """(reason, message) of the eviction the Evicted condition records, also once Kueue has
    admitted the workload again and rewritten the condition."""
    reason, message = cond.get("reason") or "Evicted", cond.get("message") or ""
    if not (cond.get("status") == "False" and reason == READMITTED_REASON):
        return reason, message or "no message"
    message = message.removeprefix(READMITTED_PREFIX)
    known = next((r for prefix, r in KUEUE_EVICTION_MESSAGES if message.startswith(prefix)), None)
    if known is None:
        stats = (((wl or {}).get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
        counted = {e.get("reason") for e in stats if e.get("reason") and (e.get("count") or 0) > 0}
        known = counted.pop() if len(counted) == 1 else "Evicted"
    return known, message or "no message"


def workload_evicted(wl: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Workload's Evicted condition (True now, or False again after a readmission) as a dict
    with ``reason``, ``message``, ``status``, ``time``, ``what`` (benchrun's words) and
    ``requeued`` (Kueue admits it again), else None. ``spec.active: false`` reads as
    InactiveWorkload even before Kueue writes the condition. After a readmission the reason and
    message are the eviction's (Kueue's rewritten condition says only ``QuotaReserved``)."""
    cond = _evicted_condition(wl)
    inactive = ((wl or {}).get("spec") or {}).get("active") is False
    if cond is None and not inactive:
        return None
    reason, message = _eviction_reason(wl, cond) if cond is not None else ("InactiveWorkload", "no message")
    if inactive:
        reason = "InactiveWorkload"
    what, requeued = KUEUE_EVICTIONS.get(reason, (f"evicted by Kueue ({reason})", True))
    return {"reason": reason, "message": message,
            "status": (cond or {}).get("status", "True"), "time": (cond or {}).get("lastTransitionTime"),
            "what": what, "requeued": requeued}


def workload_pending_note(wl: dict[str, Any] | None) -> str | None:
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "QuotaReserved" and c.get("status") != "True":
            return f"Kueue: {c.get('reason') or 'Pending'}: {c.get('message') or ''}".rstrip(": ")
    return None


def pod_timeline(pod: Any) -> dict[str, Any]:
    """The pod's launch timeline and identity (join keys pod_uid, node_name) from its status."""
    created = epoch(pod.metadata.creation_timestamp)
    scheduled = None
    for cond in (getattr(pod.status, "conditions", None) or []):
        if cond.type == "PodScheduled" and cond.status == "True":
            scheduled = epoch(cond.last_transition_time)
    cs = container_status(pod)
    term = getattr(getattr(cs, "state", None), "terminated", None)
    started = container_started(pod)
    finished = epoch(getattr(term, "finished_at", None))
    return {
        "kind": "pod",
        "pod_name": pod.metadata.name,
        "pod_uid": pod.metadata.uid,
        "namespace": pod.metadata.namespace,
        "node_name": getattr(pod.spec, "node_name", None) if pod.spec is not None else None,
        "phase": pod.status.phase,
        "reason": pod.status.reason,
        "qos_class": getattr(pod.status, "qos_class", None),
        "image": getattr(cs, "image", None) or next((c.image for c in (getattr(pod.spec, "containers", None) or [])
                                                    if c.name == CONTAINER_NAME), None),
        "image_id": getattr(cs, "image_id", None),
        "restart_count": getattr(cs, "restart_count", None),
        "created_utc": _utc(created),
        "scheduled_utc": _utc(scheduled),
        "pod_started_utc": _utc(epoch(pod.status.start_time)),
        "container_started_utc": _utc(started),
        "container_finished_utc": _utc(finished),
        "scheduled_s": _span(created, scheduled),
        "started_s": _span(created, started),
        "run_s": _span(started, finished),
        "exit_code": getattr(term, "exit_code", None),
        "termination_reason": getattr(term, "reason", None),
    }


def job_timeline(job: Any, workload: dict[str, Any] | None, pod: Any) -> dict[str, Any]:
    """The scheduler timeline of one replicate: Job, Kueue Workload and pod times, and spans."""
    timeline = pod_timeline(pod) if pod is not None else {"kind": "pod"}
    if isinstance(job, dict):  # a JobSet (custom object)
        meta = job.get("metadata") or {}
        created = epoch(meta.get("creationTimestamp"))
        finished = cond_time(job, "Completed") or cond_time(job, "Failed")
        job_name, job_uid = meta.get("name"), meta.get("uid")
    else:
        created = epoch(job.metadata.creation_timestamp) if job is not None else None
        finished = cond_time(job, "Complete") or cond_time(job, "Failed")
        job_name = job.metadata.name if job is not None else None
        job_uid = job.metadata.uid if job is not None else None
    reserved = cond_time(workload, "QuotaReserved")
    admitted = cond_time(workload, "Admitted")
    pods_ready = cond_time(workload, "PodsReady")
    timeline.update(
        job_name=job_name,
        job_uid=job_uid,
        workload_name=(workload or {}).get("metadata", {}).get("name"),
        cluster_queue=((workload or {}).get("status") or {}).get("admission", {}).get("clusterQueue"),
        job_created_utc=_utc(created),
        quota_reserved_utc=_utc(reserved),
        admitted_utc=_utc(admitted),
        pods_ready_utc=_utc(pods_ready),
        job_finished_utc=_utc(finished),
        queue_wait_s=_span(created, admitted),
        evicted=workload_eviction(workload),
    )
    return timeline


def node_keys(timeline: dict[str, Any]) -> dict[str, Any]:
    """The join keys a LaunchResult carries from its timeline."""
    return dict(scheduler_run_id=timeline.get("workload_name"), job_uid=timeline.get("job_uid"),
                pod_uid=timeline.get("pod_uid"), node_name=timeline.get("node_name"))
