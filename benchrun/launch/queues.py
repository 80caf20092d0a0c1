"""Whether a run's Kueue LocalQueue exists, asked before any Job is created (not 1800 s later)."""

from __future__ import annotations

from typing import Any

from benchrun.errors import BenchrunError

KUEUE_GROUP, KUEUE_VERSION, LOCALQUEUES = "kueue.x-k8s.io", "v1beta2", "localqueues"


def check_queue(custom_api: Any, namespace: str, queue: str) -> None:
    """Raise BenchrunError naming the LocalQueue and the fix when ``namespace`` has no LocalQueue
    ``queue`` (Kueue would leave every Job of the run suspended, Inadmissible) or Kueue's API is
    not installed. Any other answer (403, a network error) is not a verdict: the Jobs say."""
    from kubernetes.client.exceptions import ApiException

    try:
        custom_api.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, LOCALQUEUES, queue)
    except ApiException as exc:
        if exc.status != 404:
            return
        body = str(exc.body or "")
        if "could not find the requested resource" in body:
            raise BenchrunError(
                f"Kueue is not installed: the cluster serves no {KUEUE_GROUP}/{KUEUE_VERSION} localqueues, so no Job "
                "of this run would ever be admitted; install Kueue (v1beta2 API) and apply deploy/kustomize/base") from None
        raise BenchrunError(
            f"LocalQueue {queue!r} does not exist in namespace {namespace!r}: Kueue would leave every Job of this "
            "run Inadmissible; apply deploy/kustomize/base (kueue.yaml: canary, nightly, pre-release, publication), "
            "or map the run's cadence to an existing LocalQueue in BENCHRUN_LAUNCHER_QUEUES (JSON) or set "
            "BENCHRUN_LAUNCHER_QUEUE_NAME") from None
