"""Nothing of the Kubernetes launcher leaks: deleting a replicate's Job or JobSet with its pods,
every object of a cancelled run (``delete_run_jobs``), and those of runs that no longer run
(``sweep``, with ``finished_here`` deciding from this orchestrator's run directories).

Every object carries ``benchrun.dev/run-id``; ``ttlSecondsAfterFinished`` and an
``activeDeadlineSeconds`` of timeout + pending timeout bound one whose orchestrator died.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from benchrun.launch.k8s_objects import JOBSET_GROUP, JOBSET_VERSION, JOBSETS, MANAGED_BY_SELECTOR, RUN_ID_LABEL
from benchrun.launch.k8s_submit import api_error

log = logging.getLogger(__name__)

DELETE_GRACE_S = 5


def deleted(kind: str, name: str, delete: Callable[[], Any]) -> bool:
    """Delete one object; True when it is gone (or already was), False with a warning otherwise."""
    try:
        delete()
        return True
    except ApiException as exc:
        if exc.status == 404:
            return True
        log.warning("could not delete %s %s: %s", kind, name, api_error(exc))
        return False
    except (HTTPError, OSError) as exc:
        log.warning("could not delete %s %s: %s", kind, name, exc)
        return False


def delete_job(batch_api: Any, namespace: str, name: str) -> bool:
    return deleted("Job", name, lambda: batch_api.delete_namespaced_job(
        name=name, namespace=namespace, grace_period_seconds=DELETE_GRACE_S, propagation_policy="Background"))


def delete_jobset(custom_api: Any, namespace: str, name: str) -> bool:
    return deleted("JobSet", name, lambda: custom_api.delete_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, name, propagation_policy="Background"))


def _delete_jobsets(custom_api: Any, namespace: str, selector: str, keep: Callable[[str], bool]) -> list[str]:
    if custom_api is None:
        return []
    try:
        items = custom_api.list_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS,
                                                         label_selector=selector).get("items") or []
    except ApiException as exc:
        if exc.status == 404:
            return []  # JobSet not installed
        raise
    gone = []
    for js in items:
        meta = js.get("metadata") or {}
        if keep((meta.get("labels") or {}).get(RUN_ID_LABEL, "")):
            continue
        try:
            custom_api.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, meta["name"],
                                                       propagation_policy="Background")
            gone.append(meta["name"])
        except ApiException as exc:
            if exc.status != 404:
                raise
    return gone


def delete_run_jobs(batch_api: Any, namespace: str, run_id: str, custom_api: Any = None) -> int:
    """Delete every Job and JobSet of one run (with their pods), by the run-id label; how many."""
    n = len(_delete_jobsets(custom_api, namespace, f"{RUN_ID_LABEL}={run_id}", lambda _r: False))
    jobs = batch_api.list_namespaced_job(namespace, label_selector=f"{RUN_ID_LABEL}={run_id}").items
    n += len(jobs)
    for job in jobs:
        try:
            batch_api.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
    return n


def sweep(batch_api: Any, namespace: str, is_running: Callable[[str], bool], custom_api: Any = None) -> list[str]:
    """Delete the Jobs (and JobSets) of runs that are no longer running (an orchestrator that
    died leaves them behind); the names deleted. ``is_running(run_id)`` decides."""
    gone = _delete_jobsets(custom_api, namespace, MANAGED_BY_SELECTOR,
                           lambda run_id: not run_id or is_running(run_id))
    jobs = batch_api.list_namespaced_job(namespace, label_selector=MANAGED_BY_SELECTOR).items
    for job in jobs:
        run_id = (job.metadata.labels or {}).get(RUN_ID_LABEL)
        if not run_id or is_running(run_id):
            continue
        try:
            batch_api.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
            gone.append(job.metadata.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return gone


def finished_here(home: Path) -> Callable[[str], bool]:
    """``is_running`` for ``sweep``: a run counts as finished only when its phase is terminal in
    its directory under ``home`` or, for a run this home does not hold, in the shared state
    (``BENCHRUN_SHARED_STATE``: on a cluster every run worker has its own home, so a dead
    worker's runs are known only there). A run known to neither (another deployment sharing
    the namespace) is left alone, as is any run whose status cannot be read."""
    from benchrun.paths import validate_run_id
    from benchrun.rundir import TERMINAL_PHASES, RunDir
    from benchrun.sharedstate import shared_state

    shared: list[Any] = []  # looked up once, on the first run this home does not hold

    def is_running(run_id: str) -> bool:
        try:
            rd = RunDir(Path(home), validate_run_id(run_id))
            if rd.exists():
                return rd.read_status().get("phase") not in TERMINAL_PHASES
            if not shared:
                shared.append(shared_state())
            st = shared[0].read_status(run_id) if shared[0] is not None else None
            return st is None or st.get("phase") not in TERMINAL_PHASES
        except Exception:
            return True  # when in doubt, keep it (TTL, the owner and the deadline bound it anyway)

    return is_running
