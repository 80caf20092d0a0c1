"""The objects the launcher's wait loop (:func:`benchrun.launch.k8s_wait.wait`) follows, each as a
:class:`~benchrun.launch.k8s_wait.Watch`: a ``batch/v1`` Job, a gang's JobSet, an Indexed load Job —
how each is read (its pods by index, its Kueue Workload) and the events that explain it."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from benchrun.launch.k8s_objects import (
    JOBSET_GROUP,
    JOBSET_UID_LABEL,
    JOBSET_VERSION,
    JOBSETS,
    KUEUE_GROUP,
    KUEUE_JOB_UID_LABEL,
    KUEUE_VERSION,
    REPLICATED_JOB,
    WORKLOADS,
)
from benchrun.launch.k8s_status import epoch
from benchrun.launch.k8s_status import deleting as _deleting, disrupted as _disrupted
from benchrun.launch.k8s_wait import Watch, _phase


def pull_failure_messages(core_api: Any, namespace: str, pod: Any) -> list[str]:
    """The messages of the pod's ``Failed`` events (the kubelet's pull failures among them), oldest first."""
    events = core_api.list_namespaced_event(
        namespace, field_selector=f"involvedObject.uid={pod.metadata.uid},reason=Failed").items
    stamped = [(epoch(ev.last_timestamp) or epoch(ev.event_time) or epoch(ev.metadata.creation_timestamp) or 0.0,
                ev.message or "") for ev in events]
    return [m for _w, m in sorted(stamped, key=lambda t: t[0]) if m]


def failed_create_messages(core_api: Any, namespace: str, since: float | None,
                           uids: set[str] | frozenset[str] = frozenset(),
                           names: set[str] | None = None) -> list[str]:
    """The messages of FailedCreate Warning events on the Jobs given by uid (or, for a JobSet's
    child Jobs, by name and not older than ``since``: a JobSet of that name deleted a moment ago
    left its own), oldest first."""
    events = core_api.list_namespaced_event(
        namespace, field_selector="reason=FailedCreate,involvedObject.kind=Job").items
    found = []
    for ev in events:
        inv = ev.involved_object
        when = epoch(ev.last_timestamp) or epoch(ev.event_time) or epoch(ev.metadata.creation_timestamp) or 0.0
        if (inv.uid in uids) or (names is not None and inv.name in names and (since is None or when >= since - 1)):
            found.append((when, ev.message or ""))
    return [m for _w, m in sorted(found, key=lambda t: t[0])]


def job_watch(client: Any, batch_api: Any, custom_api: Any, namespace: str, name: str, *,
              eviction_retries: int | None = None) -> Watch:
    """A ``batch/v1`` Job: its newest pod of this Job's uid (an evicted attempt left out once its
    replacement exists), its Workload when Kueue is readable."""
    evicted: list[str] = []

    def read(job: Any) -> tuple[Any, Any, dict[int, Any]]:
        job = batch_api.read_namespaced_job_status(name=name, namespace=namespace)
        every = _job_pods(client, namespace, name, job.metadata.uid)
        pod = _newest_pod(client, namespace, name, job.metadata.uid, exclude=evicted, pods=every)
        # an eviction whose replacement already exists: the newest pod is the replacement, so the
        # evicted one would never be read as this Job's pod (and its attempt never counted)
        watch.missed[:] = [p for p in every if p is not pod and p.metadata.uid not in evicted
                           and _phase(p) == "Failed" and _disrupted(p)]
        return job, _job_workload(custom_api, namespace, job), ({0: pod} if pod is not None else {})

    def no_pod(job: Any) -> str:
        return ("suspended, no Kueue Workload (is Kueue installed and the queue label right?)"
                if job.spec.suspend else "no pod created")

    watch = Watch(kind="Job", name=name, read=read, nodes=1, ended_by=("Complete",), pod_end_ends=True,
                  no_pod_note=no_pod, name_the_node=False, eviction_retries=eviction_retries, evicted=evicted,
                  failed_creates=lambda job: failed_create_messages(client.core_api, namespace, None,
                                                                    uids={job.metadata.uid}),
                  pull_errors=lambda pod: pull_failure_messages(client.core_api, namespace, pod))
    return watch


def jobset_watch(core_api: Any, custom_api: Any, namespace: str, name: str, nodes: int, *,
                 eviction_retries: int | None = None) -> Watch:
    """A JobSet: its pods by completion index (the node rank), its Workload by the JobSet's uid.
    A gang Kueue evicted (preempted, PodsReadyTimeout) is suspended, loses every pod, and is
    admitted again with new ones: a new attempt, within ``eviction_retries``; the newest pod of
    each index that is not of an ended attempt is the one followed."""
    evicted: list[str] = []

    def read(_js: Any) -> tuple[Any, Any, dict[int, Any]]:
        js = custom_api.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, name)
        uid = (js.get("metadata") or {}).get("uid")
        listed = [p for p in core_api.list_namespaced_pod(
                      namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
                  if _of_jobset(p, uid)]
        pods = {}
        # an ended attempt's pod (still terminating) never wins over its index's new one, even
        # when both were created in the same second
        for pod in sorted(listed, key=lambda p: (p.metadata.uid not in evicted,
                                                 epoch(p.metadata.creation_timestamp) or 0.0, not _deleting(p))):
            idx = (pod.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index", "0")
            pods[int(idx)] = pod
        workload = None
        if uid:
            items = custom_api.list_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOADS,
                label_selector=f"{KUEUE_JOB_UID_LABEL}={uid}").get("items") or []
            workload = items[0] if items else None
        return js, workload, pods

    children = {f"{name}-{REPLICATED_JOB}-0"}  # one replicated Job of ``nodes`` pods (benchrun.launch.jobset)
    return Watch(kind="JobSet", name=name, read=read, nodes=nodes, ended_by=("Completed", "Failed"),
                 pod_end_ends=False, no_pod_note=lambda _js: "no pods created", name_the_node=True,
                 eviction_retries=eviction_retries, pod_evictions_replaced=False, evicted=evicted,
                 failed_creates=lambda js: failed_create_messages(
                     core_api, namespace, epoch((js.get("metadata") or {}).get("creationTimestamp")), names=children),
                 pull_errors=lambda pod: pull_failure_messages(core_api, namespace, pod))


def _of_jobset(pod: Any, uid: str | None) -> bool:
    """Whether a pod named for the JobSet is of this JobSet and not of one of that name deleted a
    moment ago (made anew: ``k8s_submit``), by the uid label JobSet puts on its pods; a pod
    without the label (an older JobSet) is taken by its name."""
    mine = (pod.metadata.labels or {}).get(JOBSET_UID_LABEL)
    return mine is None or not uid or mine == uid


def load_job_watch(client: Any, batch_api: Any, custom_api: Any, namespace: str, name: str, pods: int) -> Watch:
    """An Indexed load Job (``benchrun.launch.loadjob``): its pods by completion index, this Job's
    uid only; it ends by its own condition (every index succeeded, or one failed: backoffLimit 0)."""

    def read(_job: Any) -> tuple[Any, Any, dict[int, Any]]:
        job = batch_api.read_namespaced_job_status(name=name, namespace=namespace)
        found = [p for p in client.get_pods_in_job(name, namespace)
                 if any(o.uid == job.metadata.uid for o in (p.metadata.owner_references or []))]
        by_index: dict[int, Any] = {}
        for pod in sorted(found, key=lambda p: epoch(p.metadata.creation_timestamp) or 0.0):
            by_index[int((pod.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index", "0"))] = pod
        return job, _job_workload(custom_api, namespace, job), by_index

    def no_pod(job: Any) -> str:
        return ("suspended, no Kueue Workload (is Kueue installed and the queue label right?)"
                if job.spec.suspend else "no pods created")

    return Watch(kind="Job", name=name, read=read, nodes=pods, ended_by=("Complete", "Failed"), pod_end_ends=False,
                 no_pod_note=no_pod, name_the_node=True,
                 failed_creates=lambda job: failed_create_messages(client.core_api, namespace, None,
                                                                   uids={job.metadata.uid}),
                 pull_errors=lambda pod: pull_failure_messages(client.core_api, namespace, pod))


def _job_workload(custom_api: Any, namespace: str, job: Any) -> dict[str, Any] | None:
    if custom_api is None or job is None:
        return None
    try:
        items = custom_api.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOADS,
            label_selector=f"{KUEUE_JOB_UID_LABEL}={job.metadata.uid}",
        ).get("items") or []
    except (ApiException, HTTPError, OSError):
        return None  # Kueue not installed or not readable: the timeline has no Kueue times
    return items[0] if items else None


def _job_pods(client: Any, namespace: str, name: str, job_uid: str | None = None) -> list[Any]:
    pods = client.get_pods_in_job(name, namespace)
    if job_uid:
        # only this Job's pods: a same-named Job deleted a moment ago may leave its pods
        # behind for a while (background deletion)
        pods = [p for p in pods if any(o.uid == job_uid for o in (p.metadata.owner_references or []))]
    return list(pods)


def _newest_pod(client: Any, namespace: str, name: str, job_uid: str | None = None,
                exclude: list[str] | tuple[str, ...] = (), pods: list[Any] | None = None) -> Any:
    pods = _job_pods(client, namespace, name, job_uid) if pods is None else pods
    if exclude:  # evicted attempts the Job replaced (creation times have whole seconds: no tie-break)
        pods = [p for p in pods if p.metadata.uid not in set(exclude)] or pods
    if not pods:
        return None
    # the newest pod (a Job recreated after preemption makes a new one); of two created in the
    # same second (whole seconds), the one not being deleted: an ended attempt still terminating
    return max(pods, key=lambda p: (epoch(p.metadata.creation_timestamp) or 0.0, not _deleting(p)))
