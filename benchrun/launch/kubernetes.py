"""The Kubernetes launcher: each replicate is one ``batch/v1`` Job, admitted by Kueue, watched to its end.

One Job per replicate (``podspec.job_manifest``), named from the run id, suite and
replicate, created suspended with the Kueue labels. The manifest goes through dagster-k8s's
``k8s_model_from_dict`` (a misspelt field fails before anything is created) and is created
with ``DagsterKubernetesClient.create_namespaced_job_with_retries``; a Job of that name that
already exists (a retried step, a restarted orchestrator) is adopted, not duplicated. The
launcher then polls the Job, its pod and its Kueue Workload until the Job ends, keeping
benchrun's own failure reasons: preempted (the Workload's ``Evicted`` condition), image pull
failures, never scheduled (with the scheduler's or Kueue's message), OOMKilled, Evicted,
timeouts. While the pod runs, ``log_follower`` (the Dagster resource passes dagster-k8s's
``PipesK8sPodLogsMessageReader``) streams its log into the Dagster run: Pipes messages and
log lines arrive as they happen. The pod's full log is copied to
``raw/<run_id>_<suite>_r<k>.log`` at the end; then the Job is deleted with its pods
(``delete_finished=False`` keeps it for a person; ``ttlSecondsAfterFinished`` removes it
later anyway).

**Files.** The run directory is a shared volume (``Placement.run_volume_claim``): the pod
mounts its run's directory from the PVC that holds ``BENCHRUN_HOME``, at the same path the
orchestrator uses, so what the suite writes is in the run directory when the pod ends. The
result document also travels in the log (``BENCHRUN_RESULT_STDOUT=1``: the suite prints
``{"__benchrun_result__": <doc>}`` as one line), which the launcher checks like a local
result file (schema, status, numeric metrics, and that it names this run, suite and
replicate) and writes atomically to ``structured/``. Every file the result document declares
(its ``samples``) must then be in the run directory: a replicate whose declared outputs did
not arrive is failed, naming them.

**Timing.** ``wall_s`` is the orchestrator's view (create → Job finished, including
queueing). The scheduler's timeline (Job created, Kueue quota reserved / admitted / pods
ready, pod scheduled, container started and finished) is in a message of kind ``pod`` and in
``raw/<run_id>_<suite>_r<k>_pod.json``, with ``queue_wait_s`` (created → admitted),
``scheduled_s``, ``started_s`` and ``run_s``. Kubernetes stamps these to the second, against
the API server's clock. ``timeout_s`` counts from the container's start (the kubelet
enforces it as the pod's ``activeDeadlineSeconds``); waiting to be admitted and scheduled is
bounded separately by ``pending_timeout_s``.

**Nothing leaks.** Every Job carries ``benchrun.dev/run-id``; ``ttlSecondsAfterFinished``
and an ``activeDeadlineSeconds`` of timeout + pending timeout bound a Job whose orchestrator
died; ``delete_run_jobs`` deletes a run's Jobs (cancellation) and ``sweep`` deletes the Jobs
of runs that are no longer running.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import signal as _signal
import time
from pathlib import Path
from contextlib import AbstractContextManager
from typing import Any, Callable, Iterable, Mapping

from dagster_pipes import DAGSTER_PIPES_MESSAGES_ENV_VAR, PIPES_PROTOCOL_VERSION_FIELD, encode_env_var
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from benchrun.launch.base import LaunchResult, prepare_outputs
from benchrun.launch.podspec import CONTAINER_NAME, LABEL_PREFIX, Placement, job_manifest
from benchrun.plan import Invocation
from benchrun.suites.result import raw_path, read_result
from benchrun.fsio import atomic_path, atomic_write_json

log = logging.getLogger(__name__)

RESULT_KEY = "__benchrun_result__"
_RESULT_PREFIX = b'{"' + RESULT_KEY.encode() + b'"'
# Container waiting reasons that will not resolve by waiting: fail the replicate at once.
FATAL_WAITING = {
    "ImagePullBackOff": "image pull failed",
    "ErrImageNeverPull": "image pull failed",
    "InvalidImageName": "image pull failed",
    "CreateContainerConfigError": "cannot create the container",
    "CreateContainerError": "cannot create the container",
    "RunContainerError": "cannot start the container",
}
# Consecutive failed reads of the pod before the launcher gives up on it.
MAX_READ_ERRORS = 5
DELETE_GRACE_S = 5


def _epoch(ts: Any) -> float | None:
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


def _utc(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _container_status(pod: Any) -> Any:
    for cs in (getattr(pod.status, "container_statuses", None) or []):
        if cs.name == CONTAINER_NAME:
            return cs
    return None


def _waiting(pod: Any) -> tuple[str | None, str | None]:
    cs = _container_status(pod)
    state = getattr(cs, "state", None)
    waiting = getattr(state, "waiting", None)
    if waiting is None:
        return None, None
    return waiting.reason, waiting.message


def _terminated(pod: Any) -> Any:
    cs = _container_status(pod)
    state = getattr(cs, "state", None)
    return getattr(state, "terminated", None)


def _scheduling_note(pod: Any) -> str:
    """Why a pod is still pending, from its PodScheduled condition (Kueue gate, Unschedulable)."""
    for cond in (getattr(pod.status, "conditions", None) or []):
        if cond.type == "PodScheduled" and cond.status != "True":
            return f"{cond.reason or 'not scheduled'}: {cond.message}" if cond.message else (cond.reason or "not scheduled")
    reason, message = _waiting(pod)
    if reason:
        return f"{reason}: {message}" if message else reason
    return f"phase {pod.status.phase}"


def pod_timeline(pod: Any) -> dict[str, Any]:
    """The pod's launch timeline and identity (join keys pod_uid, node_name) from its status."""
    created = _epoch(pod.metadata.creation_timestamp)
    scheduled = None
    for cond in (getattr(pod.status, "conditions", None) or []):
        if cond.type == "PodScheduled" and cond.status == "True":
            scheduled = _epoch(cond.last_transition_time)
    cs = _container_status(pod)
    state = getattr(cs, "state", None)
    running = getattr(state, "running", None)
    term = getattr(state, "terminated", None)
    started = _epoch(getattr(running, "started_at", None) or getattr(term, "started_at", None))
    finished = _epoch(getattr(term, "finished_at", None))

    def span(a: float | None, b: float | None) -> float | None:
        return round(b - a, 3) if a is not None and b is not None else None

    return {
        "kind": "pod",
        "pod_name": pod.metadata.name,
        "pod_uid": pod.metadata.uid,
        "namespace": pod.metadata.namespace,
        "node_name": getattr(pod.spec, "node_name", None) if pod.spec is not None else None,
        "phase": pod.status.phase,
        "reason": pod.status.reason,
        "qos_class": getattr(pod.status, "qos_class", None),
        "image_id": getattr(cs, "image_id", None),
        "restart_count": getattr(cs, "restart_count", None),
        "created_utc": _utc(created),
        "scheduled_utc": _utc(scheduled),
        "pod_started_utc": _utc(_epoch(pod.status.start_time)),
        "container_started_utc": _utc(started),
        "container_finished_utc": _utc(finished),
        "scheduled_s": span(created, scheduled),
        "started_s": span(created, started),
        "run_s": span(started, finished),
        "exit_code": getattr(term, "exit_code", None),
        "termination_reason": getattr(term, "reason", None),
    }


def _signal_note(code: int, signal: int | None) -> str:
    num = signal or (code - 128 if code > 128 else None)
    if not num:
        return ""
    try:
        return f" ({_signal.Signals(num).name})"
    except ValueError:
        return f" (signal {num})"


KUEUE_GROUP, KUEUE_VERSION, WORKLOADS = "kueue.x-k8s.io", "v1beta2", "workloads"
JOBSET_GROUP, JOBSET_VERSION, JOBSETS = "jobset.x-k8s.io", "v1alpha2", "jobsets"
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
RUN_ID_LABEL = LABEL_PREFIX + "run-id"

LogFollower = Callable[[str], AbstractContextManager[Any]]


def _cond_time(obj: Any, type_: str) -> float | None:
    """Epoch of a True condition's lastTransitionTime, on a dict (custom object) or a model."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        conds = (obj.get("status") or {}).get("conditions") or []
        for c in conds:
            if c.get("type") == type_ and c.get("status") == "True":
                return _epoch(c.get("lastTransitionTime"))
        return None
    for c in (getattr(obj.status, "conditions", None) or []):
        if c.type == type_ and c.status == "True":
            return _epoch(c.last_transition_time)
    return None


def _workload_eviction(wl: dict[str, Any] | None) -> str | None:
    """The Evicted condition's reason and message when Kueue evicted (preempted) the workload.

    Any Evicted condition counts, also one already back to False: Kueue may requeue and
    readmit a preempted workload between two polls, and the replicate was still cut short."""
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Evicted" and c.get("status") in ("True", "False"):
            return f"{c.get('reason') or 'Evicted'}: {c.get('message') or 'no message'}"
    return None


def _workload_pending_note(wl: dict[str, Any] | None) -> str | None:
    for c in ((wl or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "QuotaReserved" and c.get("status") != "True":
            return f"Kueue: {c.get('reason') or 'Pending'}: {c.get('message') or ''}".rstrip(": ")
    return None


def job_timeline(job: Any, workload: dict[str, Any] | None, pod: Any) -> dict[str, Any]:
    """The scheduler timeline of one replicate: Job, Kueue Workload and pod times, and spans."""
    timeline = pod_timeline(pod) if pod is not None else {"kind": "pod"}
    if isinstance(job, dict):  # a JobSet (custom object)
        meta = job.get("metadata") or {}
        created = _epoch(meta.get("creationTimestamp"))
        finished = _cond_time(job, "Completed") or _cond_time(job, "Failed")
        job_name, job_uid = meta.get("name"), meta.get("uid")
    else:
        created = _epoch(job.metadata.creation_timestamp) if job is not None else None
        finished = _cond_time(job, "Complete") or _cond_time(job, "Failed")
        job_name = job.metadata.name if job is not None else None
        job_uid = job.metadata.uid if job is not None else None
    reserved = _cond_time(workload, "QuotaReserved")
    admitted = _cond_time(workload, "Admitted")
    pods_ready = _cond_time(workload, "PodsReady")

    def span(a: float | None, b: float | None) -> float | None:
        return round(b - a, 3) if a is not None and b is not None else None

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
        queue_wait_s=span(created, admitted),
        evicted=_workload_eviction(workload),
    )
    return timeline


def snake_keys(klass: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest (camelCase, as the API takes it) with model field names (snake_case), as
    dagster-k8s's ``k8s_model_from_dict`` takes it. Keys the model does not know are kept as
    written, so ``k8s_model_from_dict`` names them; free-form maps (labels, env) are left alone."""
    import kubernetes.client.models as models

    def convert(typ: str | None, value: Any) -> Any:
        if typ is None or value is None:
            return value
        if typ.startswith("list[") and isinstance(value, list):
            return [convert(typ[5:-1], v) for v in value]
        model = getattr(models, typ, None)
        if model is not None and isinstance(value, Mapping) and hasattr(model, "attribute_map"):
            return snake_keys(model, value)
        return value

    by_json = {v: k for k, v in klass.attribute_map.items()}
    out: dict[str, Any] = {}
    for key, value in data.items():
        attr = by_json.get(key, key)
        out[attr] = convert(klass.openapi_types.get(attr), value)
    return out


class KubernetesLauncher:
    """Runs invocations as Kueue-admitted Jobs through dagster-k8s's ``DagsterKubernetesClient``."""

    def __init__(
        self,
        batch_api: Any,
        core_api: Any,
        namespace: str,
        placement: Placement,
        poll_s: float = 2.0,
        *,
        custom_api: Any = None,
        run_labels: Mapping[str, str] | None = None,
        delete_finished: bool = True,
        owner: Mapping[str, Any] | None = None,
        log_follower: LogFollower | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        from dagster_k8s.client import DagsterKubernetesClient

        self.batch_api = batch_api
        self.core_api = core_api
        self.custom_api = custom_api
        self.namespace = namespace
        self.placement = placement
        self.poll_s = poll_s
        self.run_labels = dict(run_labels or {})
        self.pending_timeout_s = placement.pending_timeout_s
        self.delete_finished = delete_finished
        self.owner = dict(owner) if owner else None
        self.log_follower = log_follower
        self._sleep = sleep
        self.client = DagsterKubernetesClient(batch_api, core_api, log, sleep, time.time)

    def manifest(self, inv: Invocation, extra_env: Mapping[str, str] | None = None) -> dict[str, Any]:
        if inv.is_gang:
            from benchrun.launch.jobset import jobset_manifest

            return jobset_manifest(inv, namespace=self.namespace, placement=self.placement,
                                   run_labels=self.run_labels, extra_env=self._pod_env(extra_env))
        return job_manifest(inv, namespace=self.namespace, run_labels=self.run_labels, placement=self.placement,
                            extra_env=self._pod_env(extra_env), owner=self.owner)

    def preflight(self, invocations: Iterable[Invocation]) -> None:
        """Build (and model-check) every Job without creating any: a spec error raises
        BenchrunError before the first Job of the run starts, not halfway through it."""
        for inv in invocations:
            manifest = self.manifest(inv)
            if manifest["kind"] == "Job":
                self._model(manifest)

    @staticmethod
    def _model(manifest: dict[str, Any]) -> Any:
        from dagster_k8s.models import k8s_model_from_dict
        from kubernetes.client import V1Job

        from benchrun.errors import BenchrunError

        try:
            return k8s_model_from_dict(V1Job, snake_keys(V1Job, manifest))
        except Exception as exc:  # dagster-k8s raises a plain Exception naming the bad keys
            raise BenchrunError(f"Job {manifest['metadata']['name']}: not a valid batch/v1 Job: {exc}") from None

    # -- the protocol -------------------------------------------------------------------
    def launch(
        self, inv: Invocation, run_dir: Path, *, extra_env: Mapping[str, str] | None = None
    ) -> LaunchResult:
        log_path, result_path = prepare_outputs(inv, run_dir)
        t_request = time.time()
        t0 = time.perf_counter()
        manifest = self.manifest(inv, extra_env)
        name = manifest["metadata"]["name"]
        if manifest["kind"] == "JobSet":
            return self._launch_gang(inv, run_dir, manifest, log_path, result_path, t_request, t0)
        try:
            job = self._create_or_adopt(name, self._model(manifest))
        except ApiException as exc:
            reason = f"cannot create Job {name}: {_api_error(exc)}"
            with atomic_path(log_path) as tmp:
                tmp.write_text(f"benchrun: {reason}\n", encoding="utf-8")
            return self._result(inv, "failed", reason, None, time.perf_counter() - t0,
                                t_request, t_request, log_path, None, [], [])
        log.info("%s r%d: Job %s/%s created", inv.suite, inv.replicate, self.namespace, name)

        workload: dict[str, Any] | None = None
        pod = None
        try:
            job, workload, pod, verdict = self._wait(inv, name, job, t0)
            log_note = self._copy_log(pod.metadata.name if pod is not None else None, log_path)
        except BaseException:
            # Cancelled (KeyboardInterrupt, a Dagster run terminated) or a bug: the Job
            # must not outlive the launch that owns it.
            self._delete(name)
            raise
        timeline = job_timeline(job, workload, pod)
        deleted = False
        if verdict is not None or self.delete_finished:
            deleted = self._delete(name)
        atomic_write_json(raw_path(run_dir, inv.run_id, inv.suite, inv.replicate, "pod", "json"), timeline)
        try:
            from benchrun.launch.podenv import record_pod_environment

            record_pod_environment(run_dir, inv, timeline)
        except Exception as exc:  # the replicate's verdict does not depend on it
            log.warning("%s r%d: could not record the pod's environment: %s", inv.suite, inv.replicate, exc)

        doc, doc_error, messages = self._scan_log(inv, log_path, result_path)
        if doc is not None:  # Prometheus over the pod's window on its node (BENCHRUN_PROMETHEUS_URL); never raises
            from benchrun.telemetry.hook import pod_prometheus

            pod_prometheus(inv, run_dir, timeline)
        status, reason, code = self._verdict(inv, pod, verdict, deleted, doc, doc_error, log_note)
        if status != "failed" and doc is not None:
            missing = missing_outputs(run_dir, doc)
            if missing:
                status, reason = "failed", (
                    "declared outputs did not arrive in the run directory: " + ", ".join(missing)
                    + " (is the run volume shared with the pods? see launcher.run_volume_claim)")
        if status == "failed":
            log.warning("%s r%d failed: %s (log: %s)", inv.suite, inv.replicate, reason, log_path)
        t_spawned = _epoch(timeline.get("container_started_utc")) or t_request
        res = self._result(
            inv, status, reason, code, time.perf_counter() - t0, t_request, t_spawned, log_path,
            result_path if doc is not None else None,
            doc.get("metrics", []) if doc and status == "ok" else [],
            [timeline, *messages],
        )
        from dataclasses import replace

        return replace(res, scheduler_run_id=timeline.get("workload_name"), job_uid=timeline.get("job_uid"),
                       pod_uid=timeline.get("pod_uid"), node_name=timeline.get("node_name"))

    # -- publication grade: one Job per layer ------------------------------------------
    def launch_layer(
        self, invocations: Iterable[Invocation], run_dir: Path, *, extra_env: Mapping[str, str] | None = None,
        on_result: Callable[[LaunchResult], None] | None = None,
    ) -> list[LaunchResult]:
        """Run a whole layer in ONE Job (``podspec.layer_job_manifest``, ``benchrun.launch.inpod``):
        one admission, one dedicated node, the replicates back to back in the planned order.
        ``on_result`` sees each replicate as the pod reports it (the results file on the run
        volume); a replicate the pod never reached is failed with the Job's reason."""
        from dataclasses import replace

        from benchrun.launch.inpod import results_relpath
        from benchrun.launch.podspec import layer_job_manifest

        invs = list(invocations)
        first = invs[0]
        manifest = layer_job_manifest(invs, namespace=self.namespace, placement=self.placement,
                                      run_labels=self.run_labels, extra_env=self._pod_env(extra_env), owner=self.owner)
        name = manifest["metadata"]["name"]
        layer_log = run_dir / "raw" / f"{first.run_id}_{first.layer}_layer.log"
        layer_log.parent.mkdir(parents=True, exist_ok=True)
        results_file = run_dir / results_relpath(first.run_id, first.layer)
        results_file.unlink(missing_ok=True)  # a stale file from an earlier attempt is not this one's
        t_request, t0 = time.time(), time.perf_counter()
        reported: list[LaunchResult] = []

        def poll() -> None:
            try:
                rows = json.loads(results_file.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                return
            for row in rows[len(reported):]:
                res = LaunchResult(**row)
                reported.append(res)
                if on_result is not None:
                    on_result(res)

        try:
            job = self._create_or_adopt(name, self._model(manifest))
        except ApiException as exc:
            reason = f"cannot create the layer Job {name}: {_api_error(exc)}"
            return [self._unreached(inv, run_dir, reason, t_request, t0) for inv in invs]
        orig_sleep = self._sleep
        self._sleep = lambda s: (poll(), orig_sleep(s))[-1]
        whole = replace(first, timeout_s=sum(inv.timeout_s for inv in invs) + 60.0 * len(invs))
        try:
            job, workload, pod, verdict = self._wait(whole, name, job, t0)
            self._copy_log(pod.metadata.name if pod is not None else None, layer_log)
        except BaseException:
            self._delete(name)
            raise
        finally:
            self._sleep = orig_sleep
        timeline = job_timeline(job, workload, pod)
        if verdict is not None or self.delete_finished:
            self._delete(name)
        atomic_write_json(run_dir / "raw" / f"{first.run_id}_{first.layer}_layer_pod.json", timeline)
        poll()
        keys = dict(scheduler_run_id=timeline.get("workload_name"), job_uid=timeline.get("job_uid"),
                    pod_uid=timeline.get("pod_uid"), node_name=timeline.get("node_name"))
        done = {(r.suite, r.replicate): replace(r, messages=[timeline, *r.messages], **keys) for r in reported}
        if pod is not None:
            term = _terminated(pod)
            why = verdict or (f"the layer pod ended: {term.reason} (exit code {term.exit_code})" if term is not None
                              else f"the layer pod ended in phase {pod.status.phase}")
        else:
            why = verdict or "the layer Job ran no pod"
        out = []
        for inv in invs:
            res = done.get((inv.suite, inv.replicate))
            if res is None:
                res = replace(self._unreached(inv, run_dir, f"the layer Job ended before this replicate ran ({why})",
                                              t_request, t0), **keys)
                if on_result is not None:
                    on_result(res)
            out.append(res)
        return out

    def _unreached(self, inv: Invocation, run_dir: Path, reason: str, t_request: float, t0: float) -> LaunchResult:
        log_path, _result = prepare_outputs(inv, run_dir)
        with atomic_path(log_path) as tmp:
            tmp.write_text(f"benchrun: {reason}\n", encoding="utf-8")
        return self._result(inv, "failed", reason, None, time.perf_counter() - t0, t_request, t_request,
                            log_path, None, [], [])

    # -- multi-node gangs: one JobSet ---------------------------------------------------
    def _launch_gang(self, inv: Invocation, run_dir: Path, manifest: dict[str, Any], log_path: Path,
                     result_path: Path, t_request: float, t0: float) -> LaunchResult:
        """A gang replicate as one JobSet (benchrun.launch.jobset): every node's log copied to
        its own file, node 0's result read, the first failing node named in the reason."""
        from dataclasses import replace

        name = manifest["metadata"]["name"]
        try:
            try:
                self.custom_api.create_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, self.namespace,
                                                                JOBSETS, manifest)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                log.info("JobSet %s/%s already exists (a retried launch): adopting it", self.namespace, name)
        except ApiException as exc:
            reason = f"cannot create JobSet {name}: {_api_error(exc)}"
            with atomic_path(log_path) as tmp:
                tmp.write_text(f"benchrun: {reason}\n", encoding="utf-8")
            return self._result(inv, "failed", reason, None, time.perf_counter() - t0,
                                t_request, t_request, log_path, None, [], [])
        try:
            js, workload, pods, verdict = self._wait_gang(inv, name, t0)
            notes = {rank: self._copy_log(pod.metadata.name, run_dir / inv.node_log_relpath(rank))
                     for rank, pod in pods.items()}
            if 0 not in pods:
                notes[0] = self._copy_log(None, log_path)
        except BaseException:
            self._delete_jobset(name)
            raise
        pod0 = pods.get(0)
        timeline = job_timeline(js, workload, pod0)
        timeline["nodes"] = [{"node_rank": r, **{k: pod_timeline(p).get(k) for k in
                              ("pod_name", "pod_uid", "node_name", "phase", "exit_code", "termination_reason")}}
                             for r, p in sorted(pods.items())]
        deleted = False
        if verdict is not None or self.delete_finished:
            deleted = self._delete_jobset(name)
        atomic_write_json(raw_path(run_dir, inv.run_id, inv.suite, inv.replicate, "pod", "json"), timeline)
        if verdict is None:
            for rank, pod in sorted(pods.items()):
                term = _terminated(pod)
                if rank and (pod.status.phase == "Failed" or (term is not None and term.exit_code != 0)):
                    why = self._verdict(inv, pod, None, deleted, None, None, None)[1]
                    verdict = f"node {rank} ({pod.spec.node_name}) failed: {why}"
                    break
        doc, doc_error, messages = self._scan_log(inv, log_path, result_path)
        if doc is not None:  # Prometheus over node 0's window (BENCHRUN_PROMETHEUS_URL); never raises
            from benchrun.telemetry.hook import pod_prometheus

            pod_prometheus(inv, run_dir, timeline)
        status, reason, code = self._verdict(inv, pod0, verdict, deleted, doc, doc_error, notes.get(0))
        if status != "failed" and doc is not None:
            missing = missing_outputs(run_dir, doc)
            if missing:
                status, reason = "failed", "declared outputs did not arrive in the run directory: " + ", ".join(missing)
        if status == "failed":
            log.warning("%s r%d failed: %s (log: %s)", inv.suite, inv.replicate, reason, log_path)
        res = self._result(
            inv, status, reason, code, time.perf_counter() - t0, t_request,
            _epoch(timeline.get("container_started_utc")) or t_request, log_path,
            result_path if doc is not None else None,
            doc.get("metrics", []) if doc and status == "ok" else [], [timeline, *messages])
        return replace(res, scheduler_run_id=timeline.get("workload_name"), job_uid=timeline.get("job_uid"),
                       pod_uid=timeline.get("pod_uid"), node_name=timeline.get("node_name"))

    def _wait_gang(self, inv: Invocation, name: str, t0: float) -> tuple[Any, Any, dict[int, Any], str | None]:
        started: float | None = None
        js: Any = None
        workload = None
        pods: dict[int, Any] = {}
        errors = 0
        follow: AbstractContextManager[Any] | None = None
        try:
            while True:
                try:
                    js = self.custom_api.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, self.namespace,
                                                                      JOBSETS, name)
                    listed = self.core_api.list_namespaced_pod(
                        self.namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}").items
                    for pod in sorted(listed, key=lambda p: _epoch(p.metadata.creation_timestamp) or 0.0):
                        idx = (pod.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index", "0")
                        pods[int(idx)] = pod
                    uid = (js.get("metadata") or {}).get("uid")
                    if uid and self.custom_api is not None:
                        items = self.custom_api.list_namespaced_custom_object(
                            KUEUE_GROUP, KUEUE_VERSION, self.namespace, WORKLOADS,
                            label_selector=f"{KUEUE_JOB_UID_LABEL}={uid}").get("items") or []
                        workload = items[0] if items else workload
                    errors = 0
                except (ApiException, HTTPError, OSError) as exc:
                    if isinstance(exc, ApiException) and exc.status == 404 and js is not None:
                        return js, workload, pods, "the JobSet disappeared before it finished (deleted by someone else?)"
                    errors += 1
                    if errors >= MAX_READ_ERRORS:
                        return js, workload, pods, f"lost the JobSet: {MAX_READ_ERRORS} reads in a row failed; JobSet deleted"
                    self._sleep(self.poll_s)
                    continue
                evicted = _workload_eviction(workload)
                if evicted:
                    return js, workload, pods, f"preempted by Kueue ({evicted}); JobSet deleted"
                if _cond_time(js, "Completed") or _cond_time(js, "Failed"):
                    return js, workload, pods, None
                for rank, pod in sorted(pods.items()):
                    reason, message = _waiting(pod)
                    if reason in FATAL_WAITING:
                        return js, workload, pods, (f"node {rank}: {FATAL_WAITING[reason]}: {reason}"
                                                    + (f": {message}" if message else ""))
                pod0 = pods.get(0)
                if pod0 is not None and pod0.status.phase == "Running" and follow is None and self.log_follower:
                    follow = self.log_follower(pod0.metadata.name)
                    follow.__enter__()
                now = time.perf_counter()
                running = [p for p in pods.values() if p.status.phase in ("Running", "Succeeded", "Failed")]
                if started is None and len(running) >= inv.nodes:
                    started = now
                if started is None and now - t0 > self.pending_timeout_s:
                    waiting = [p for p in pods.values() if p.status.phase == "Pending"]
                    note = (_scheduling_note(waiting[0]) if waiting else None) or _workload_pending_note(workload) \
                        or "no pods created"
                    return js, workload, pods, f"not started within {self.pending_timeout_s:g}s ({note}); JobSet deleted"
                if started is not None and now - started > inv.timeout_s:
                    return js, workload, pods, f"timed out after {inv.timeout_s:g}s; JobSet deleted"
                self._sleep(self.poll_s)
        finally:
            if follow is not None:
                follow.__exit__(None, None, None)

    def _delete_jobset(self, name: str) -> bool:
        return _deleted("JobSet", name, lambda: self.custom_api.delete_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, self.namespace, JOBSETS, name, propagation_policy="Background"))

    # -- steps --------------------------------------------------------------------------
    @staticmethod
    def _pod_env(extra_env: Mapping[str, str] | None) -> dict[str, str]:
        env = dict(extra_env or {})
        if DAGSTER_PIPES_MESSAGES_ENV_VAR in env:
            # Whatever reader the session chose for a local process, in a pod the messages
            # go to the log (PipesK8sPodLogsMessageReader reads them there) unless the
            # session already names a pod-reachable channel (an S3 bucket).
            from dagster_pipes import decode_env_var

            try:
                params = decode_env_var(env[DAGSTER_PIPES_MESSAGES_ENV_VAR])
            except Exception:
                params = {}
            if not isinstance(params, dict) or "path" in params:
                env[DAGSTER_PIPES_MESSAGES_ENV_VAR] = encode_env_var({"stdio": "stderr"})
        return env

    def _create_or_adopt(self, name: str, body: Any) -> Any:
        from dagster_k8s.client import DagsterK8sUnrecoverableAPIError

        try:
            self.client.create_namespaced_job_with_retries(body, self.namespace, wait_time_between_attempts=self.poll_s)
        except DagsterK8sUnrecoverableAPIError as exc:
            api_exc = getattr(exc, "k8s_api_exception", None)
            if not (isinstance(api_exc, ApiException) and api_exc.status == 409):
                raise api_exc if isinstance(api_exc, ApiException) else exc
            log.info("Job %s/%s already exists (a retried launch): adopting it", self.namespace, name)
        return self.batch_api.read_namespaced_job(name=name, namespace=self.namespace)

    def _workload(self, job: Any) -> dict[str, Any] | None:
        if self.custom_api is None or job is None:
            return None
        try:
            items = self.custom_api.list_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, self.namespace, WORKLOADS,
                label_selector=f"{KUEUE_JOB_UID_LABEL}={job.metadata.uid}",
            ).get("items") or []
        except (ApiException, HTTPError, OSError):
            return None  # Kueue not installed or not readable: the timeline has no Kueue times
        return items[0] if items else None

    def _pod(self, name: str, job_uid: str | None = None, exclude: Iterable[str] = ()) -> Any:
        pods = self.client.get_pods_in_job(name, self.namespace)
        if job_uid:
            # only this Job's pods: a same-named Job deleted a moment ago may leave its pods
            # behind for a while (background deletion)
            pods = [p for p in pods if any(o.uid == job_uid for o in (p.metadata.owner_references or []))]
        if exclude:  # evicted attempts the Job replaced (creation times have whole seconds: no tie-break)
            pods = [p for p in pods if p.metadata.uid not in set(exclude)] or pods
        if not pods:
            return None
        # the newest pod (a Job recreated after preemption makes a new one)
        return max(pods, key=lambda p: _epoch(p.metadata.creation_timestamp) or 0.0)

    def _wait(self, inv: Invocation, name: str, job: Any, t0: float) -> tuple[Any, Any, Any, str | None]:
        """Poll Job, pod and Workload until the Job ends; a verdict string when the launcher
        ended it instead (preempted, unpullable, never scheduled, timed out, lost)."""
        started: float | None = None
        errors = 0
        pod = None
        workload = None
        evicted_pods: list[str] = []  # uids of this replicate's evicted pods (the Job replaces them)
        follow: AbstractContextManager[Any] | None = None
        try:
            while True:
                try:
                    job = self.batch_api.read_namespaced_job_status(name=name, namespace=self.namespace)
                    pod = self._pod(name, job.metadata.uid, exclude=evicted_pods) or pod
                    workload = self._workload(job) or workload
                    errors = 0
                except (ApiException, HTTPError, OSError) as exc:
                    if isinstance(exc, ApiException) and exc.status == 404:
                        return job, workload, pod, "the Job disappeared before it finished (deleted by someone else?)"
                    errors += 1
                    what = _api_error(exc) if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
                    if errors >= MAX_READ_ERRORS:
                        return job, workload, pod, f"lost the Job: {MAX_READ_ERRORS} reads in a row failed, last {what}; Job deleted"
                    log.warning("reading Job %s failed (%s); retrying", name, what)
                    self._sleep(self.poll_s)
                    continue
                evicted = _workload_eviction(workload)
                if evicted:
                    return job, workload, pod, f"preempted by Kueue ({evicted}); Job deleted"
                phase = pod.status.phase if pod is not None and pod.status is not None else None
                if phase == "Failed" and not (_cond_time(job, "Failed") or _cond_time(job, "Complete")) and any(
                        c.type == "DisruptionTarget" and c.status == "True" for c in pod.status.conditions or []):
                    # Evicted, not failed: the Job's podFailurePolicy ignores the pod and replaces it
                    # (podspec.EVICTION_POLICY); follow the new attempt from its own start, its own
                    # log and result (never merged with this one), up to eviction_retries times.
                    if pod.metadata.uid not in evicted_pods:
                        evicted_pods.append(pod.metadata.uid)
                        why = next((f"{c.reason}: {c.message}" for c in pod.status.conditions
                                    if c.type == "DisruptionTarget"), "DisruptionTarget")
                        if len(evicted_pods) > self.placement.eviction_retries:
                            return job, workload, pod, (f"evicted {len(evicted_pods)} times, more than eviction_retries="
                                                        f"{self.placement.eviction_retries} (last: {why}); Job deleted")
                        log.warning("%s r%d: pod %s evicted (%s); the Job replaces it (retry %d of %d)", inv.suite,
                                    inv.replicate, pod.metadata.name, why, len(evicted_pods), self.placement.eviction_retries)
                        if follow is not None:
                            follow.__exit__(None, None, None)
                            follow = None
                        started, t0 = None, time.perf_counter()
                    self._sleep(self.poll_s)
                    continue
                if phase == "Running" and follow is None and self.log_follower is not None:
                    follow = self.log_follower(pod.metadata.name)
                    follow.__enter__()
                if phase in ("Succeeded", "Failed") or _cond_time(job, "Complete"):
                    return job, workload, pod, None
                if _cond_time(job, "Failed"):
                    why = next((f"{c.reason}: {c.message}" for c in job.status.conditions
                                if c.type == "Failed" and c.status == "True"), "Failed")
                    return job, workload, pod, f"the Job failed before its pod finished ({why}); Job deleted"
                if pod is not None:
                    reason, message = _waiting(pod)
                    if reason in FATAL_WAITING:
                        return job, workload, pod, f"{FATAL_WAITING[reason]}: {reason}" + (f": {message}" if message else "")
                now = time.perf_counter()
                if phase == "Running" and started is None:
                    started = now
                if started is None and now - t0 > self.pending_timeout_s:
                    note = (_scheduling_note(pod) if pod is not None else None) or _workload_pending_note(workload) \
                        or ("suspended, no Kueue Workload (is Kueue installed and the queue label right?)"
                            if job.spec.suspend else "no pod created")
                    return job, workload, pod, f"not started within {self.pending_timeout_s:g}s ({note}); Job deleted"
                if started is not None and now - started > inv.timeout_s:
                    return job, workload, pod, f"timed out after {inv.timeout_s:g}s; Job deleted"
                self._sleep(self.poll_s)
        finally:
            if follow is not None:
                follow.__exit__(None, None, None)

    def _copy_log(self, pod_name: str | None, log_path: Path) -> str | None:
        """Copy the container log into ``log_path``; a note when there is none."""
        if pod_name is None:
            note = "no pod was created"
            with atomic_path(log_path) as tmp:
                tmp.write_text(f"benchrun: {note}\n", encoding="utf-8")
            return note
        try:
            resp = self.core_api.read_namespaced_pod_log(
                name=pod_name, namespace=self.namespace, container=CONTAINER_NAME, _preload_content=False
            )
        except (ApiException, HTTPError, OSError) as exc:
            note = f"no container log ({_api_error(exc) if isinstance(exc, ApiException) else exc})"
            with atomic_path(log_path) as tmp:
                tmp.write_text(f"benchrun: {note}\n", encoding="utf-8")
            return note
        try:
            with atomic_path(log_path) as tmp, tmp.open("wb") as fh:
                for chunk in resp.stream(1 << 16):
                    fh.write(chunk)
        finally:
            release = getattr(resp, "release_conn", None)
            if release is not None:
                release()
        return None

    def _delete(self, name: str) -> bool:
        return _deleted("Job", name, lambda: self.batch_api.delete_namespaced_job(
            name=name, namespace=self.namespace, grace_period_seconds=DELETE_GRACE_S,
            propagation_policy="Background"))

    def _scan_log(
        self, inv: Invocation, log_path: Path, result_path: Path
    ) -> tuple[dict[str, Any] | None, str | None, list[dict[str, Any]]]:
        """The last result line (written to structured/ and checked) and the Pipes messages."""
        last: bytes | None = None
        messages: list[dict[str, Any]] = []
        with log_path.open("rb") as fh:
            for line in fh:
                if line.startswith(_RESULT_PREFIX):
                    last = line
                elif line.startswith(b'{"' + PIPES_PROTOCOL_VERSION_FIELD.encode()):
                    try:
                        msg = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if msg.get("method") == "report_custom_message":
                        payload = (msg.get("params") or {}).get("payload")
                        if isinstance(payload, dict):
                            messages.append(payload)
        if last is None:
            return None, None, messages
        try:
            doc = json.loads(last)[RESULT_KEY]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            return None, f"the result line in {inv.log_relpath()} is not JSON ({exc})", messages
        if not isinstance(doc, dict):
            return None, f"the result line in {inv.log_relpath()} does not hold an object", messages
        mine = (inv.run_id, inv.suite, inv.replicate)
        theirs = (doc.get("run_id"), doc.get("suite"), doc.get("replicate"))
        if theirs != mine:
            return None, f"the result line names {theirs}, not {mine}", messages
        atomic_write_json(result_path, doc)
        try:
            return read_result(result_path), None, messages
        except ValueError as exc:
            result_path.unlink(missing_ok=True)
            return None, str(exc), messages

    @staticmethod
    def _verdict(
        inv: Invocation, pod: Any, verdict: str | None, deleted: bool,
        doc: dict[str, Any] | None, doc_error: str | None, log_note: str | None,
    ) -> tuple[str, str | None, int | None]:
        term = _terminated(pod) if pod is not None else None
        code = getattr(term, "exit_code", None)
        if verdict is None and pod is None:
            return "failed", "the Job ended without running a pod", None
        if verdict is not None:
            if not deleted and verdict.endswith("; Job deleted"):
                verdict = verdict[: -len("; Job deleted")] + "; Job NOT deleted"
            return "failed", verdict, code
        pod_reason = pod.status.reason
        pod_message = pod.status.message
        if pod_reason == "DeadlineExceeded":
            return "failed", f"timed out after {inv.timeout_s:g}s (activeDeadlineSeconds); Job deleted", code
        if pod_reason == "Evicted":
            return "failed", f"evicted: {pod_message or 'no message'}", code
        if term is None:
            why = f"{pod_reason}: {pod_message}" if pod_reason else (pod_message or "no container status")
            return "failed", f"pod {pod.status.phase} without a container exit ({why})", code
        if term.reason == "OOMKilled":
            return "failed", f"OOMKilled (exit code {code}): the container exceeded its memory limit", code
        if code != 0:
            detail = doc.get("reason") if doc and doc.get("reason") else None
            return ("failed", f"exited with code {code}{_signal_note(code, getattr(term, 'signal', None))}"
                    + (f": {detail}" if detail else ""), code)
        if doc is None:
            return ("failed", doc_error or log_note or
                    f"exited 0 but printed no {RESULT_KEY} line (see {inv.log_relpath()})", code)
        return doc["status"], doc.get("reason"), code

    def _result(
        self, inv: Invocation, status: str, reason: str | None, code: int | None, wall: float,
        t_request: float, t_spawned: float, log_path: Path, result_path: Path | None,
        metrics: list[dict[str, Any]], messages: list[dict[str, Any]],
    ) -> LaunchResult:
        run_dir = log_path.parent.parent
        return LaunchResult(
            run_id=inv.run_id, layer=inv.layer, suite=inv.suite, replicate=inv.replicate,
            benchmark_case_id=inv.benchmark_case_id, status=status, reason=reason, exit_code=code,
            wall_s=round(wall, 6), t_request=t_request, t_spawned=t_spawned, t_finished=time.time(),
            log=log_path.relative_to(run_dir).as_posix(),
            result=result_path.relative_to(run_dir).as_posix() if result_path else None,
            metrics=list(metrics), messages=list(messages),
        )


def _api_error(exc: ApiException) -> str:
    """One line from an API error: status, reason and the server's message when it sent one."""
    message = None
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        pass
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


def _deleted(kind: str, name: str, delete: Callable[[], Any]) -> bool:
    """Delete one object; True when it is gone (or already was), False with a warning otherwise."""
    try:
        delete()
        return True
    except ApiException as exc:
        if exc.status == 404:
            return True
        log.warning("could not delete %s %s: %s", kind, name, _api_error(exc))
        return False
    except (HTTPError, OSError) as exc:
        log.warning("could not delete %s %s: %s", kind, name, exc)
        return False


def missing_outputs(run_dir: Path, doc: Mapping[str, Any]) -> list[str]:
    """Files the result document declares (``samples``) that are not in the run directory."""
    missing = []
    samples = doc.get("samples") or {}
    for value in samples.values() if isinstance(samples, dict) else []:
        if isinstance(value, str) and value and not (Path(run_dir) / value).is_file():
            missing.append(value)
    return sorted(missing)


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
    deleted = _delete_jobsets(custom_api, namespace, "app.kubernetes.io/managed-by=benchrun",
                              lambda run_id: not run_id or is_running(run_id))
    jobs = batch_api.list_namespaced_job(namespace, label_selector="app.kubernetes.io/managed-by=benchrun").items
    for job in jobs:
        run_id = (job.metadata.labels or {}).get(RUN_ID_LABEL)
        if not run_id or is_running(run_id):
            continue
        try:
            batch_api.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
            deleted.append(job.metadata.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return deleted


def finished_here(home: Path) -> Callable[[str], bool]:
    """``is_running`` for ``sweep`` from this orchestrator's runs: a run counts as finished
    only when its directory is under ``home`` and its phase is terminal. A run this home
    does not know (another orchestrator sharing the namespace) is left alone."""
    from benchrun.paths import validate_run_id
    from benchrun.rundir import TERMINAL_PHASES, RunDir

    def is_running(run_id: str) -> bool:
        try:
            rd = RunDir(Path(home), validate_run_id(run_id))
            if not rd.exists():
                return True
            return rd.read_status().get("phase") not in TERMINAL_PHASES
        except Exception:
            return True  # when in doubt, keep it (TTL and the deadline bound it anyway)

    return is_running
