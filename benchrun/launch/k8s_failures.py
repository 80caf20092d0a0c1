"""Why a Kubernetes replicate failed, in benchrun's words: a container that cannot start, a
timeout, an eviction, OOMKilled, an exit code and its signal, a missing result line, and for a
gang the first node that failed."""

from __future__ import annotations

import signal as _signal
from typing import Any

from benchrun.launch.k8s_collect import RESULT_KEY
from benchrun.launch.k8s_status import container_started, disrupted, epoch, terminated, waiting
from benchrun.plan import Invocation

# Container waiting reasons that will not resolve by waiting: fail the replicate at once.
FATAL_WAITING = {
    "ErrImageNeverPull": "image pull failed",
    "InvalidImageName": "image pull failed",
    "CreateContainerConfigError": "cannot create the container",
    "CreateContainerError": "cannot create the container",
    "RunContainerError": "cannot start the container",
}
# A failed pull, which the kubelet retries with a back-off (10 s doubling to 5 min): final when the
# registry's answer says so (``permanent_pull_error``), else waited out up to the launcher's
# ``pull_allowance_s`` (a registry's 429 rate limit or a network blip passes; before, the first
# ImagePullBackOff failed the replicate, and with it a nightly's GPU slot).
PULL_WAITING = ("ErrImagePull", "ImagePullBackOff")
# What containerd / CRI-O / Docker say for an image that no retry will pull: no such image or tag,
# no access to it, a malformed reference.
_PERMANENT_PULL = ("code = notfound", ": not found", "manifest unknown", "name unknown", "repository does not exist",
                   "pull access denied", "401 unauthorized", "403 forbidden", "requested access to the resource is denied",
                   "invalid reference format", "no match for platform in manifest", "code = permissiondenied")


def permanent_pull_error(message: str | None) -> bool:
    """Whether a kubelet's pull failure (an ``ErrImagePull`` message or the pod's ``Failed`` event)
    says the image cannot be pulled however often it is tried."""
    text = (message or "").lower()
    return any(p in text for p in _PERMANENT_PULL)


def signal_note(code: int, signal: int | None) -> str:
    num = signal or (code - 128 if code > 128 else None)
    if not num:
        return ""
    try:
        return f" ({_signal.Signals(num).name})"
    except ValueError:
        return f" (signal {num})"


def verdict(
    inv: Invocation, pod: Any, ended: str | None, deleted: bool,
    doc: dict[str, Any] | None, doc_error: str | None, log_note: str | None,
) -> tuple[str, str | None, int | None]:
    """(status, reason, exit code) of one replicate from its pod, the wait loop's verdict
    (``ended``, when the launcher ended it), whether its Job was deleted, and its result."""
    term = terminated(pod) if pod is not None else None
    code = getattr(term, "exit_code", None)
    if ended is None and pod is None:
        return "failed", "the Job ended without running a pod", None
    if ended is not None:
        if not deleted and ended.endswith("; Job deleted"):
            ended = ended[: -len("; Job deleted")] + "; Job NOT deleted"
        return "failed", ended, code
    pod_reason = pod.status.reason
    pod_message = pod.status.message
    if pod_reason == "DeadlineExceeded":
        # the pod's own deadline (timeout plus the pull allowance); a container that never started was
        # still pulling or being created: that is the cause, not the suite (review 2026-12-07)
        ran = container_started(pod) is not None
        said = (f"timed out after {inv.timeout_s:g}s (activeDeadlineSeconds)" if ran else
                f"its container never started within the pod's activeDeadlineSeconds (the {inv.timeout_s:g}s "
                f"timeout plus the image pull allowance): {_waiting_note(pod)}")
        return "failed", said + ("; Job deleted" if deleted else "; Job NOT deleted"), code
    if pod_reason == "Evicted":
        return "failed", f"evicted: {pod_message or 'no message'}", code
    why = disrupted(pod)
    if why and (pod.status.phase == "Failed" or (code or 0) != 0):
        # a drain (the Eviction API), the scheduler's preemption, the taint manager: the pod's own
        # condition says why it was stopped, not the SIGTERM it exited with (review 2026-12-08)
        return "failed", f"evicted: {why}" + (f" (exit code {code})" if code is not None else ""), code
    if term is None:
        why = f"{pod_reason}: {pod_message}" if pod_reason else (pod_message or "no container status")
        return "failed", f"pod {pod.status.phase} without a container exit ({why})", code
    if term.reason == "OOMKilled":
        return "failed", f"OOMKilled (exit code {code}): the container exceeded its memory limit", code
    if code != 0:
        detail = doc.get("reason") if doc and doc.get("reason") else None
        return ("failed", f"exited with code {code}{signal_note(code, getattr(term, 'signal', None))}"
                + (f": {detail}" if detail else ""), code)
    if doc is None:
        return ("failed", doc_error or log_note or
                f"exited 0 but printed no {RESULT_KEY} line (see {inv.log_relpath()})", code)
    return doc["status"], doc.get("reason"), code


def _waiting_note(pod: Any) -> str:
    """What the container was waiting for when its pod ended (``ContainerCreating``, ``ImagePullBackOff: ...``)."""
    reason, message = waiting(pod)
    return f"{reason}: {message}" if reason and message else (reason or "no container status")


def failed_node(inv: Invocation, pods: dict[int, Any], deleted: bool, gone: dict[int, Any] | None = None) -> str | None:
    """The node whose failure ended the gang, and why: a node evicted (its pod's DisruptionTarget, or
    ``gone``: its pod deleted while it ran, as a drain does, before a poll saw it end) before the
    first to finish among those that failed by themselves (an exit of their own, OOMKilled), before
    those a signal stopped (the Job controller's SIGTERM to the peers, a torch peer's exit after it);
    None when none failed or node 0 did (its own verdict then says why). Before, the lowest rank
    above 0 that failed: with node 0 exiting 3, node 1, stopped by SIGTERM, was named; and a drained
    node 1 was never named (node 0's SIGTERM was the reason)."""
    failed = []
    for rank, pod in pods.items():
        term = terminated(pod)
        if pod.status.phase == "Failed" or (term is not None and term.exit_code != 0):
            stopped = term is not None and term.reason != "OOMKilled" and (
                term.exit_code in (137, 143) or bool(getattr(term, "signal", None)))
            finished = epoch(getattr(term, "finished_at", None)) if term is not None else None
            evicted = pod.status.reason == "Evicted" or disrupted(pod) is not None
            failed.append((not evicted, stopped, finished if finished is not None else float("inf"), rank, pod))
    own = [f for f in failed if f[0] and not f[1]]  # a node that failed by itself (not evicted, not signalled)
    # a pod gone between polls is the cause only when no node failed by itself: the Job controller deletes the
    # peers of a node that exited 3, and a pod gone that way is no eviction (review of 2026-12-08's change)
    if gone and not own and (failed or any(p.status.phase != "Succeeded" for p in pods.values())):
        rank, pod = min(gone.items(), key=lambda g: (epoch(g[1].metadata.deletion_timestamp) or float("inf"), g[0]))
        why = disrupted(pod) or ("its pod was deleted while it ran and gone before a poll saw it end (a node "
                                 "drain's eviction, a preemption, or someone deleting it)")
        return f"node {rank} ({pod.spec.node_name}) failed: evicted: {why}"
    if not failed:
        return None
    _evicted, _stopped, _finished, rank, pod = min(failed, key=lambda f: f[:4])
    if rank == 0:
        return None
    why = verdict(inv, pod, None, deleted, None, None, None)[1]
    return f"node {rank} ({pod.spec.node_name}) failed: {why}"


def layer_end(pod: Any, ended: str | None) -> str:
    """Why a publication-grade layer's Job stopped (for the replicates it never reached)."""
    if pod is not None:
        term = terminated(pod)
        return ended or (f"the layer pod ended: {term.reason} (exit code {term.exit_code})" if term is not None
                         else f"the layer pod ended in phase {pod.status.phase}")
    return ended or "the layer Job ran no pod"
