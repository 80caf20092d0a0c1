"""Submitting the launcher's objects: a Job or JobSet is created, or adopted when one of its
name already exists (a retried step, a restarted orchestrator), never duplicated."""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from benchrun.launch.k8s_objects import JOBSET_GROUP, JOBSET_UID_LABEL, JOBSET_VERSION, JOBSETS
from benchrun.launch.podspec import LABEL_PREFIX

log = logging.getLogger(__name__)


def api_error(exc: ApiException) -> str:
    """One line from an API error: status, reason and the server's message when it sent one."""
    message = None
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        pass
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


# How long a finished Job of the same name may take to go before it is made anew (its pods first:
# Foreground propagation), polled every second.
REPLACE_WAIT_S = 120.0


def _finished(job: Any) -> str | None:
    """"Complete" or "Failed" when the Job has ended, else None."""
    for cond in getattr(getattr(job, "status", None), "conditions", None) or []:
        if getattr(cond, "type", None) in ("Complete", "Failed") and getattr(cond, "status", None) == "True":
            return cond.type
    return None


TERMINAL_PHASES = ("Succeeded", "Failed")


def pods_ended(pods: list[Any]) -> str | None:
    """"its pods ended" when there are pods and every one of them is Succeeded or Failed, else None.
    A Job's (or JobSet's) condition lags its pods by a controller sync: a rerun launched the moment
    the earlier pod ended found the Job without its Complete condition, adopted it and reported the
    old pod's result as the new launch's (CI, 2026-12-07). A Job between an eviction and its
    replacement pod reads ended too: it is made anew, which measures afresh; never the other way."""
    phases = [getattr(getattr(p, "status", None), "phase", None) for p in pods]
    return "its pods ended" if phases and all(ph in TERMINAL_PHASES for ph in phases) else None


def _job_ended(client: Any, namespace: str, name: str, job: Any) -> str | None:
    ended = _finished(job)
    if ended is not None:
        return ended
    uid = job.metadata.uid
    return pods_ended([p for p in client.get_pods_in_job(name, namespace)
                       if any(o.uid == uid for o in (p.metadata.owner_references or []))])


def create_or_adopt_job(client: Any, batch_api: Any, namespace: str, name: str, body: Any, poll_s: float,
                        before_recreate: Callable[[], Any] | None = None) -> Any:
    """Create the Job with ``DagsterKubernetesClient.create_namespaced_job_with_retries``; one of
    that name still running is adopted (a retried launch). One that has ended (a contended rerun, a
    re-execution of the run while the earlier Job was kept), by its condition or by its pods
    (``pods_ended``), is deleted, its pods with it, and made anew: adopted, its old pod's result was
    reported as the new launch's and nothing was measured (found in review). ``before_recreate`` is
    called once that Job and its pods are gone, before it is made anew: the launcher sets the ended
    launch's files aside there (its Job may have been running when ``live_job`` was asked, and ended
    since; found in review). The Job as the API server has it; ApiException when it cannot be."""
    from dagster_k8s.client import DagsterK8sUnrecoverableAPIError

    for attempt in (1, 2):
        try:
            _create_with_retries(client, body, namespace, poll_s)
        except DagsterK8sUnrecoverableAPIError as exc:
            api_exc = getattr(exc, "k8s_api_exception", None)
            if not (isinstance(api_exc, ApiException) and api_exc.status == 409):
                raise api_exc if isinstance(api_exc, ApiException) else exc
            existing = batch_api.read_namespaced_job(name=name, namespace=namespace)
            check_same_replicate(name, _labels(body), _labels(existing))
            ended = _job_ended(client, namespace, name, existing)
            if ended is None:
                log.info("Job %s/%s already exists (a retried launch): adopting it", namespace, name)
                return existing
            if attempt == 2:
                raise _taken_again("Job", name, ended)
            log.info("Job %s/%s of an earlier launch has ended (%s): deleting it to launch anew", namespace, name,
                     ended)
            _delete_and_wait(batch_api, namespace, name)
            if before_recreate is not None:
                before_recreate()
            continue
        return batch_api.read_namespaced_job(name=name, namespace=namespace)
    raise AssertionError("unreachable")


def live_job(client: Any, batch_api: Any, namespace: str, name: str, body: Any) -> bool:
    """Whether a Job of that name, made for the same replicate, is there and has not ended: the one
    ``create_or_adopt_job`` would adopt (a restarted orchestrator retrying the step), whose pod may be
    writing into the run volume now. Asked before the launch sets an earlier launch's files aside, so
    that a live pod's files are never moved (``KubernetesLauncher.launch``). An API error, or no
    answer from the API server (urllib3's ``MaxRetryError``, ``OSError``: it escaped the launch and
    aborted the whole layer, where ``_create_with_retries`` rides them out; found in review), answers
    True: what cannot be read is not known to be safe to move."""
    try:
        existing = batch_api.read_namespaced_job(name=name, namespace=namespace)
        return _same_replicate(_labels(body), _labels(existing)) and \
            _job_ended(client, namespace, name, existing) is None
    except (ApiException, HTTPError, OSError) as exc:
        return _unknown("Job", namespace, name, exc)


def live_jobset(custom_api: Any, core_api: Any, namespace: str, name: str, manifest: dict[str, Any]) -> bool:
    """As ``live_job``, for a gang's JobSet (the one ``create_or_adopt_jobset`` would adopt)."""
    try:
        existing = custom_api.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, name)
        return _same_replicate(_labels(manifest), _labels(existing)) and \
            _jobset_ended(core_api, namespace, name, existing) is None
    except (ApiException, HTTPError, OSError) as exc:
        return _unknown("JobSet", namespace, name, exc)


def _unknown(kind: str, namespace: str, name: str, exc: Exception) -> bool:
    if isinstance(exc, ApiException) and exc.status == 404:
        return False
    why = api_error(exc) if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
    log.warning("cannot tell whether %s %s/%s is running (%s): an earlier launch's files are left in place",
                kind, namespace, name, why)
    return True


# How long a Job's creation is tried again while the API server throttles (429), fails (5xx) or does not
# answer: before, a 429 failed the replicate at once, and dagster-k8s's retries running out (four 5xx)
# escaped the launch and aborted the whole layer (found in review).
CREATE_BUDGET_S = 120.0


def _create_with_retries(client: Any, body: Any, namespace: str, poll_s: float) -> None:
    """``create_namespaced_job_with_retries``, itself tried again within CREATE_BUDGET_S on 429 (after its
    Retry-After), 5xx and connection errors, the wait doubling; ApiException when the budget runs out."""
    import time

    from dagster_k8s.client import DagsterK8sAPIRetryLimitExceeded, DagsterK8sUnrecoverableAPIError
    from urllib3.exceptions import HTTPError

    deadline, delay = time.monotonic() + CREATE_BUDGET_S, max(poll_s, 0.5)
    while True:
        try:
            client.create_namespaced_job_with_retries(body, namespace, wait_time_between_attempts=poll_s)
            return
        except DagsterK8sUnrecoverableAPIError as exc:
            api_exc = getattr(exc, "k8s_api_exception", None)
            if not (isinstance(api_exc, ApiException) and api_exc.status == 429) or time.monotonic() > deadline:
                raise
            after = (api_exc.headers or {}).get("Retry-After") if api_exc.headers else None
            wait, reason = float(after) if after and str(after).isdigit() else delay, api_error(api_exc)
        except DagsterK8sAPIRetryLimitExceeded as exc:
            api_exc = getattr(exc, "k8s_api_exception", None)
            reason = api_error(api_exc) if isinstance(api_exc, ApiException) else str(exc)
            if time.monotonic() > deadline:
                raise ApiException(status=getattr(api_exc, "status", None) or 503,
                                   reason=f"still failing after {CREATE_BUDGET_S:g} s of retries ({reason})") from None
            wait = delay
        except (HTTPError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise ApiException(status=0, reason=f"the API server did not answer for {CREATE_BUDGET_S:g} s "
                                                    f"({reason})") from None
            wait = delay
        log.warning("creating Job in %s failed (%s); trying again in %.1f s", namespace, reason, wait)
        time.sleep(min(wait, max(0.0, deadline - time.monotonic()) + 0.01))
        delay = min(2 * delay, 30.0)


def _taken_again(kind: str, name: str, ended: str) -> ApiException:
    """An ended object deleted to launch anew was there again, ended, when created anew (another
    launch of the same replicate at once): neither adopted (its result is not this launch's) nor
    deleted again."""
    return ApiException(status=409, reason=f"{kind} {name} was made again by another launch while this one "
                                           f"replaced it, and has ended ({ended}): not adopted")


def _delete_and_wait(batch_api: Any, namespace: str, name: str) -> None:
    """Delete the Job and its pods (Foreground) and wait until the name is free."""
    _delete_then_wait(
        "Job", name,
        lambda: batch_api.delete_namespaced_job(name=name, namespace=namespace, propagation_policy="Foreground"),
        lambda: batch_api.read_namespaced_job(name=name, namespace=namespace))


def _delete_then_wait(kind: str, name: str, delete: Callable[[], Any], read: Callable[[], Any]) -> None:
    import time

    try:
        delete()
    except ApiException as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + REPLACE_WAIT_S
    while time.monotonic() < deadline:
        try:
            read()
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(1.0)
    raise ApiException(status=409, reason=f"{kind} {name} of an earlier launch was still being deleted after "
                                          f"{REPLACE_WAIT_S:g} s")


# The labels that say which replicate (or layer) of which run a Job runs.
IDENTITY_LABELS = tuple(LABEL_PREFIX + k for k in ("run-id", "layer", "suite", "replicate"))


def _labels(obj: Any) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else getattr(obj, "metadata", None)
    labels = meta.get("labels") if isinstance(meta, dict) else getattr(meta, "labels", None)
    return dict(labels or {})


def _same_replicate(wanted: dict[str, str], found: dict[str, str]) -> bool:
    """Whether two objects' labels name the same replicate (or layer) of the same run."""
    return all(wanted.get(k) == found.get(k) for k in IDENTITY_LABELS)


def check_same_replicate(name: str, wanted: dict[str, str], found: dict[str, str], kind: str = "Job") -> None:
    """Adopt only a Job (JobSet) made for the same replicate: raise a 409 naming both otherwise (a
    name shared by two suites would report the other suite's Job as this one's)."""
    differ = {k: found.get(k) for k in IDENTITY_LABELS if wanted.get(k) != found.get(k)}
    if differ:
        exc = ApiException(status=409, reason="Conflict")
        theirs = ", ".join(f"{k.removeprefix(LABEL_PREFIX)}={v!r}" for k, v in differ.items())
        mine = ", ".join(f"{k.removeprefix(LABEL_PREFIX)}={wanted.get(k)!r}" for k in differ)
        exc.body = json.dumps({"message": f"{kind} {name} already exists for {theirs}, not {mine}: not adopted "
                                          "(delete it if it is left over from another run)"})
        raise exc


def create_or_adopt_jobset(custom_api: Any, core_api: Any, namespace: str, name: str,
                           manifest: dict[str, Any], before_recreate: Callable[[], Any] | None = None) -> None:
    """Create the JobSet; one of that name made for the same replicate and still running is adopted
    (a retried launch). One that has ended, by its Completed/Failed condition or by its pods, is
    deleted (Foreground) and made anew, as a Job is: adopted, its old pods' results were the new
    launch's; ``before_recreate`` as for a Job. ApiException when it cannot be."""
    for attempt in (1, 2):
        try:
            custom_api.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, manifest)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
        existing = custom_api.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, name)
        check_same_replicate(name, _labels(manifest), _labels(existing), kind="JobSet")
        ended = _jobset_ended(core_api, namespace, name, existing)
        if ended is None:
            log.info("JobSet %s/%s already exists (a retried launch): adopting it", namespace, name)
            return
        if attempt == 2:
            raise _taken_again("JobSet", name, ended)
        log.info("JobSet %s/%s of an earlier launch has ended (%s): deleting it to launch anew", namespace, name,
                 ended)
        _delete_then_wait(
            "JobSet", name,
            lambda: custom_api.delete_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, name,
                                                               propagation_policy="Foreground"),
            lambda: custom_api.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, name))
        if before_recreate is not None:
            before_recreate()


def _jobset_ended(core_api: Any, namespace: str, name: str, js: dict[str, Any]) -> str | None:
    for cond in (js.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Completed", "Failed") and cond.get("status") == "True":
            return cond["type"]
    if core_api is None:
        return None
    pods = core_api.list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
    uid = (js.get("metadata") or {}).get("uid")
    # the JobSet's own pods: JobSet labels them with its uid
    mine = [p for p in pods if (p.metadata.labels or {}).get(JOBSET_UID_LABEL) in (None, uid)]
    return pods_ended(mine)
