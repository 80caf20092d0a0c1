"""The load Job: a serving suite's load spread over N pods as ONE Indexed ``batch/v1`` Job.

A serving suite (``serving_sweep``, ``serving_workflow``) whose parameters say ``load_pods: N``
(N > 1) runs on the Kubernetes launcher as one Job with ``completionMode: Indexed`` and
``completions = parallelism = N``: pod *k* has completion index *k* (``JOB_COMPLETION_INDEX``,
and ``BENCHRUN_LOAD_INDEX`` / ``BENCHRUN_NODE_RANK`` from the pod's
``batch.kubernetes.io/job-completion-index`` annotation). Kueue admits the N pods as one
Workload (one pod set of count N), so they start together or not at all. Every pod runs the
same suite command; the pods split each point's load, meet at a start barrier per point and
merge their request rows through the artifact store (:mod:`benchrun.loadgen.loadpods`): pod 0
writes the replicate's result, every pod's files and log come back by key.

What the Job says beyond ``podspec.job_manifest``'s single pod:

* ``BENCHRUN_LOAD_PODS`` = N, ``BENCHRUN_LOAD_STORE`` = the launcher's ``outputs_uri`` (where the
  pods meet), ``BENCHRUN_LOAD_JOB_UID`` from the pod's ``batch.kubernetes.io/controller-uid``
  label (so a re-created Job never reads an earlier one's barrier), ``BENCHRUN_LOAD_TIMEOUT_S``
  (how long a pod waits for the others: the pending timeout, for pods scheduled apart, plus
  a minute), ``BENCHRUN_NODES`` = N;
* no eviction replacement (``podFailurePolicy`` / ``podReplacementPolicy`` dropped) and
  ``backoffLimit: 0``: one pod lost fails the Job and the Job controller ends the others. A
  replacement pod would join barriers its peers have passed; the point is one observation;
* preferred pod anti-affinity on the Job's name by hostname: the load pods spread over nodes
  when the cluster has room (required would leave a small cluster unable to run the Job).

Refused, with the field and the fix: ``load_pods`` on a suite that is not a serving suite, on a
multi-node gang, in a publication-grade layer Job (one pod), without ``outputs_uri``, or without
an ``endpoint`` parameter (each pod would start its own reference server).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.launch.placement import Placement, suite_module
from benchrun.plan import Invocation

SERVING_SUITES = ("serving_sweep", "serving_workflow")
MAX_LOAD_PODS = 64  # as benchrun.loadgen.suite.MAX_LOAD_PODS (the pod side checks it again)
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
log = logging.getLogger("benchrun.launch.kubernetes")


def load_pods(inv: Invocation) -> int:
    """The ``load_pods`` parameter of an invocation (1 when absent); BenchrunError naming the
    field when it is not a whole number in [1, MAX_LOAD_PODS] or the suite cannot take it."""
    raw = (inv.parameters or {}).get("load_pods")
    if raw is None:
        return 1
    where = f"spec.layers[{inv.layer}].suites[{inv.suite}].parameters.load_pods"
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_LOAD_PODS:
        raise BenchrunError(f"{where}: {raw!r} must be a whole number from 1 to {MAX_LOAD_PODS} (pods of the load Job)")
    if raw > 1 and suite_module(inv) not in SERVING_SUITES:
        raise BenchrunError(f"{where}: only the serving suites ({', '.join(SERVING_SUITES)}) spread their load over "
                            f"pods; {inv.suite} is not one")
    if raw > 1 and inv.is_gang:
        raise BenchrunError(f"{where}: a multi-node gang (nodes={inv.nodes}) cannot also be a load Job; drop nodes")
    return raw


def load_job_manifest(inv: Invocation, *, namespace: str, placement: Placement, run_labels: Mapping[str, str] | None = None,
                      extra_env: Mapping[str, str] | None = None, owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Indexed Job (a dict) that runs one replicate of a serving suite on ``load_pods`` pods."""
    from benchrun.launch.podspec import EVICTION_POLICY, job_manifest, job_name

    n = load_pods(inv)
    where = f"spec.layers[{inv.layer}].suites[{inv.suite}].parameters"
    if n < 2:
        raise BenchrunError(f"{where}.load_pods: a load Job has 2 or more pods; this suite asks for {n}")
    if not placement.outputs_uri:
        raise BenchrunError(f"{where}.load_pods: the load pods meet and merge their rows in the artifact store; set the "
                            "launcher's outputs_uri (BENCHRUN_LAUNCHER_OUTPUTS_URI, s3://bucket/prefix)")
    if not (inv.parameters or {}).get("endpoint"):
        raise BenchrunError(f"{where}.endpoint: load_pods={n} drives one server from {n} pods; give its URL (without "
                            "one each pod would start its own reference server)")
    job = job_manifest(inv, namespace=namespace, run_labels=run_labels, placement=placement,
                       extra_env=extra_env, owner=owner)
    spec = job["spec"]
    for key in EVICTION_POLICY:
        spec.pop(key, None)
    spec.update(completionMode="Indexed", completions=n, parallelism=n, backoffLimit=0)
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    added: list[dict[str, Any]] = [
        {"name": "BENCHRUN_LOAD_PODS", "value": str(n)},
        {"name": "BENCHRUN_NODES", "value": str(n)},
        {"name": "BENCHRUN_LOAD_STORE", "value": str(placement.outputs_uri)},
        {"name": "BENCHRUN_LOAD_TIMEOUT_S", "value": str(int(placement.pending_timeout_s) + 60)},
        {"name": "BENCHRUN_LOAD_INDEX", "valueFrom": index},
        {"name": "BENCHRUN_NODE_RANK", "valueFrom": dict(index)},
        {"name": "BENCHRUN_LOAD_JOB_UID", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{CONTROLLER_UID_LABEL}']"}}},
    ]
    names = {e["name"] for e in added}
    container["env"] = [e for e in container["env"] if e["name"] not in names] + added
    name = job_name(inv)
    anti = pod.setdefault("affinity", {}).setdefault("podAntiAffinity", {})
    anti.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append({
        "weight": 100,
        "podAffinityTerm": {"labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": name}},
                            "topologyKey": "kubernetes.io/hostname"}})
    job["metadata"]["labels"]["benchrun.dev/load-pods"] = str(n)
    return job


def refuse_in_layer_job(invs: list[Invocation]) -> None:
    """A publication-grade layer Job runs every suite of the layer in one pod: no load Job there."""
    for inv in invs:
        if load_pods(inv) > 1:
            raise BenchrunError(f"spec.layers[{inv.layer}].suites[{inv.suite}].parameters.load_pods: a publication-grade "
                                "layer runs in one pod; a load spread over pods runs outside it (drop load_pods, or "
                                "use workers within the pod)")


def launch_load(launcher: Any, inv: Invocation, run_dir: Path, manifest: dict[str, Any], log_path: Path,
                result_path: Path, t_request: float, t0: float) -> Any:
    """One replicate as a load Job, through the Kubernetes launcher's own steps (create or adopt,
    then ``_many_pods`` as for a gang): every pod's files and log back by index, pod 0's result
    (the merged points), the first failing pod named."""
    from kubernetes.client.exceptions import ApiException

    from benchrun.launch.k8s_submit import api_error
    from benchrun.launch.k8s_watches import load_job_watch

    k8s = launcher
    name = manifest["metadata"]["name"]
    n = int(manifest["spec"]["completions"])
    try:
        job = k8s._create_or_adopt(name, k8s._model(manifest))
    except ApiException as exc:
        return k8s._not_created(inv, f"cannot create the load Job {name}: {api_error(exc)}", log_path, t_request, t0)
    log.info("%s r%d: load Job %s/%s created (%d pods)", inv.suite, inv.replicate, k8s.namespace, name, n)
    watch = load_job_watch(k8s.client, k8s.batch_api, k8s.custom_api, k8s.namespace, name, n)
    return k8s._many_pods(inv, run_dir, watch, job, "load_pods", "index", lambda: k8s._delete(name), log_path,
                          result_path, t_request, t0, extra_fields=("container_started_utc",), word="load pod")
