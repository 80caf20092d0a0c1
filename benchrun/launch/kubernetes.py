"""The Kubernetes launcher: each invocation is one pod, admitted by Kueue, watched to its end.

One pod per replicate (``podspec.pod_manifest``), created with the official client's
``create_namespaced_pod``, polled with ``read_namespaced_pod`` until its phase is
``Succeeded`` or ``Failed``; its log (stdout and stderr as the kubelet keeps them) is
copied to ``raw/<run_id>_<suite>_r<k>.log`` with ``read_namespaced_pod_log``; then the pod
is deleted with ``delete_namespaced_pod`` (``delete_finished=False`` keeps it for a person
to look at). Nothing goes through a shell.

**Result contract.** A pod's files die with it, so the suite's result document travels in
its log: the pod gets ``BENCHRUN_RESULT_STDOUT=1`` and the suite prints, as its last
result line on stdout, ``{"__benchrun_result__": <the result document>}`` (one line of
JSON). The launcher takes the last such line, checks it like a local result file
(``read_result``: schema, status, numeric metrics; and that it names this run, suite and
replicate) and writes it atomically to ``structured/<run_id>_<suite>_r<k>.json``. We chose
this over a Pipes message because it works with or without a Dagster Pipes session and
because a Pipes ``report_custom_message`` payload has no size bound we control.

**Pipes in pods.** ``DAGSTER_PIPES_CONTEXT`` (the context itself, base64) passes through
unchanged; ``DAGSTER_PIPES_MESSAGES``, which names a file on the orchestrator, is replaced
by ``{"stdio": "stderr"}`` so the suite's Pipes messages land in the pod log, where the
launcher picks up the custom messages into ``LaunchResult.messages``.

**Timing.** ``wall_s`` is the orchestrator's view (create → pod finished, including
queueing). The pod's own timeline, the launch timeline the job_startup suite measures
locally, is in a message of kind ``pod`` and in ``raw/<run_id>_<suite>_r<k>_pod.json``:
``scheduled_s`` (creation → PodScheduled=True; with Kueue this includes admission),
``started_s`` (creation → container started; includes image pull) and ``run_s``
(container start → finish). Kubernetes stamps these to the second, and against the API
server's clock, not ours. ``timeout_s`` counts from the container's start (the kubelet
enforces it as ``activeDeadlineSeconds`` from the pod's start too); waiting to be admitted
and scheduled is bounded separately by ``pending_timeout_s``.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import signal as _signal
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from dagster_pipes import DAGSTER_PIPES_MESSAGES_ENV_VAR, PIPES_PROTOCOL_VERSION_FIELD, encode_env_var
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from benchrun.launch.base import LaunchResult, prepare_outputs
from benchrun.launch.podspec import CONTAINER_NAME, Placement, pod_manifest
from benchrun.plan import Invocation
from benchrun.suites.result import atomic_path, atomic_write_json, raw_path, read_result

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


class KubernetesLauncher:
    """Runs invocations as pods through a ``kubernetes.client.CoreV1Api`` (or an object
    with the same four methods)."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        placement: Placement,
        poll_s: float = 2.0,
        *,
        run_labels: Mapping[str, str] | None = None,
        pending_timeout_s: float = 1800.0,
        delete_finished: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.placement = placement
        self.poll_s = poll_s
        self.run_labels = dict(run_labels or {})
        self.pending_timeout_s = pending_timeout_s
        self.delete_finished = delete_finished
        self._sleep = sleep

    def preflight(self, invocations: Iterable[Invocation]) -> None:
        """Build every pod manifest without creating any: a spec error (no image, a label
        value Kubernetes refuses, publication grade without its guarantees) raises
        BenchrunError before the first pod of the run starts, not halfway through it."""
        for inv in invocations:
            pod_manifest(inv, namespace=self.namespace, run_labels=self.run_labels, placement=self.placement)

    # -- the protocol -------------------------------------------------------------------
    def launch(
        self, inv: Invocation, run_dir: Path, *, extra_env: Mapping[str, str] | None = None
    ) -> LaunchResult:
        log_path, result_path = prepare_outputs(inv, run_dir)
        t_request = time.time()
        t0 = time.perf_counter()
        manifest = pod_manifest(
            inv, namespace=self.namespace, run_labels=self.run_labels,
            placement=self.placement, extra_env=self._pod_env(extra_env),
        )
        try:
            pod = self.api.create_namespaced_pod(namespace=self.namespace, body=manifest)
        except ApiException as exc:
            reason = f"cannot create pod: {_api_error(exc)}"
            with atomic_path(log_path) as tmp:
                tmp.write_text(f"benchrun: {reason}\n", encoding="utf-8")
            return self._result(inv, "failed", reason, None, time.perf_counter() - t0,
                                t_request, t_request, log_path, None, [], [])
        name = pod.metadata.name
        log.info("%s r%d: pod %s/%s created", inv.suite, inv.replicate, self.namespace, name)

        try:
            pod, verdict = self._wait(inv, name, pod, t0)
            log_note = self._copy_log(name, log_path)
        except BaseException:
            # Cancelled (KeyboardInterrupt, a Dagster run terminated) or a bug: the pod
            # must not outlive the launch that owns it.
            self._delete(name)
            raise
        deleted = False
        if verdict is not None or self.delete_finished:
            deleted = self._delete(name)
        timeline = pod_timeline(pod) if pod is not None else {"kind": "pod", "pod_name": name}
        atomic_write_json(raw_path(run_dir, inv.run_id, inv.suite, inv.replicate, "pod", "json"), timeline)

        doc, doc_error, messages = self._scan_log(inv, log_path, result_path)
        status, reason, code = self._verdict(inv, pod, verdict, deleted, doc, doc_error, log_note)
        if status == "failed":
            log.warning("%s r%d failed: %s (log: %s)", inv.suite, inv.replicate, reason, log_path)
        t_spawned = _epoch(timeline.get("container_started_utc")) or t_request
        return self._result(
            inv, status, reason, code, time.perf_counter() - t0, t_request, t_spawned, log_path,
            result_path if doc is not None else None,
            doc.get("metrics", []) if doc and status == "ok" else [],
            [timeline, *messages],
        )

    # -- steps --------------------------------------------------------------------------
    @staticmethod
    def _pod_env(extra_env: Mapping[str, str] | None) -> dict[str, str]:
        env = dict(extra_env or {})
        if DAGSTER_PIPES_MESSAGES_ENV_VAR in env:
            # The orchestrator's temp file does not exist in the pod; the log does.
            env[DAGSTER_PIPES_MESSAGES_ENV_VAR] = encode_env_var({"stdio": "stderr"})
        return env

    def _wait(self, inv: Invocation, name: str, pod: Any, t0: float) -> tuple[Any, str | None]:
        """Poll until the pod ends; a verdict string when the launcher ended it instead."""
        started: float | None = None
        errors = 0
        while True:
            try:
                pod = self.api.read_namespaced_pod(name=name, namespace=self.namespace)
                errors = 0
            except (ApiException, HTTPError, OSError) as exc:
                if isinstance(exc, ApiException) and exc.status == 404:
                    return None, "pod disappeared before it finished (deleted by someone else?)"
                errors += 1
                what = _api_error(exc) if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
                if errors >= MAX_READ_ERRORS:
                    return pod, f"lost the pod: {MAX_READ_ERRORS} reads in a row failed, last {what}; pod deleted"
                log.warning("reading pod %s failed (%s); retrying", name, what)
                self._sleep(self.poll_s)
                continue
            phase = pod.status.phase if pod.status is not None else None
            if phase in ("Succeeded", "Failed"):
                return pod, None
            reason, message = _waiting(pod)
            if reason in FATAL_WAITING:
                return pod, f"{FATAL_WAITING[reason]}: {reason}" + (f": {message}" if message else "")
            now = time.perf_counter()
            if phase == "Running" and started is None:
                started = now
            if started is None and now - t0 > self.pending_timeout_s:
                return pod, (f"not started within {self.pending_timeout_s:g}s "
                             f"({_scheduling_note(pod)}); pod deleted")
            if started is not None and now - started > inv.timeout_s:
                return pod, f"timed out after {inv.timeout_s:g}s; pod deleted"
            self._sleep(self.poll_s)

    def _copy_log(self, name: str, log_path: Path) -> str | None:
        """Stream the container log into ``log_path``; a note when there is none."""
        try:
            resp = self.api.read_namespaced_pod_log(
                name=name, namespace=self.namespace, container=CONTAINER_NAME, _preload_content=False
            )
        except ApiException as exc:
            note = f"no container log ({_api_error(exc)})"
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
        try:
            self.api.delete_namespaced_pod(
                name=name, namespace=self.namespace, grace_period_seconds=DELETE_GRACE_S,
                propagation_policy="Background",
            )
            return True
        except ApiException as exc:
            if exc.status == 404:
                return True
            log.warning("could not delete pod %s: %s", name, _api_error(exc))
            return False

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
        if verdict is not None:
            if not deleted and verdict.endswith("; pod deleted"):
                verdict = verdict[: -len("; pod deleted")] + "; pod NOT deleted"
            return "failed", verdict, code
        pod_reason = pod.status.reason
        pod_message = pod.status.message
        if pod_reason == "DeadlineExceeded":
            return "failed", f"timed out after {inv.timeout_s:g}s (activeDeadlineSeconds); pod deleted", code
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
