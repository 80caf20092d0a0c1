"""Job manifests for suite invocations: labels, Kueue admission, resources, GPU and topology placement.

``job_manifest`` is a pure function from an :class:`~benchrun.plan.Invocation` and a
:class:`Placement` to a ``batch/v1`` Job-shaped dict (camelCase, as the API server and
``kubernetes.client`` accept it); nothing here talks to a cluster. One Job per replicate,
named from the run id, suite and replicate (``job_name``), so a retried step finds the Job
it created instead of creating a second one. The Job is created suspended and carries the
Kueue labels; Kueue unsuspends it when its quota is reserved (Kueue's ``batch/job``
integration, on by default, unlike the plain-Pod one).

What each placement knob turns into, and what was verified against the projects' own sources
(2026-11-30, through stored copies of their repositories and documentation):

* Kueue v1beta2 (kubernetes-sigs/kueue, ``batch/job`` integration): the label
  ``kueue.x-k8s.io/queue-name`` on the Job names the LocalQueue in its namespace, and
  ``kueue.x-k8s.io/priority-class`` names a WorkloadPriorityClass. The Job is created with
  ``spec.suspend: true``; Kueue creates a Workload for it and unsuspends it on admission.
  Preemption suspends it again (the Workload's ``Evicted`` condition says why).
* Slinky slurm-bridge (SlinkyProject/slurm-bridge, docs/workload.md and
  internal/wellknown/annotations.go): a pod opts in with ``spec.schedulerName:
  slurm-bridge-scheduler`` (or by living in a namespace its admission controller manages).
  Each pod of a Job (or JobSet) is its own Slurm external job, configured by
  ``slurmjob.slinky.slurm.net/<suffix>`` annotations on the top-level workload object — the
  Job's (the JobSet's) own ``metadata.annotations``; slurm-bridge ignores those of a pod
  template or of a JobSet's generated Jobs — among them ``partition``, ``constraints``,
  ``reservation``, ``qos``, ``timelimit`` (whole minutes: the pod's deadline, image pull
  included) and ``exclusive`` (exclusive is Slurm-bridge's default;
  only ``"false"`` shares the node). ``nvidia.com/gpu`` limits become ``gres/gpu=<n>``.
  Earlier slurm-bridge releases used the prefix ``slinky.slurm.net/`` for the same
  annotations; set :attr:`Placement.slinky_annotation_prefix` for those clusters.
  Slinky has no pod-level "topology" field: topology is Slurm's (partition, constraints,
  reservation) and, on the Kubernetes side, node affinity, which is what we emit.
* Publication grade (seed "Publication-Grade Mode"): dedicated nodes (a node selector is
  required, tolerations for their taint when they have one), a fixed topology (required node
  affinity on :attr:`Placement.topology_label` when set), exclusivity (required pod
  anti-affinity against every pod carrying ``benchrun.dev/run-id`` in the same
  :attr:`Placement.exclusive_topology_key` domain: the rule is symmetric in the scheduler, so
  no two benchrun pods share a node), an image pinned by digest, cpu and memory sized for the
  suite (not ``SUITE_RESOURCES``' defaults), and ``exclusive: "true"`` under slurm-bridge.
* Every grade: Guaranteed QoS (cpu, memory and GPUs with requests = limits, whole CPUs, from
  the spec, else the launcher, else ``SUITE_RESOURCES``), ``nvidia.com/gpu`` for a suite whose
  parameters ask for CUDA or NCCL, and a pod deadline of the suite's timeout plus
  :attr:`Placement.pull_allowance_s` (``activeDeadlineSeconds`` counts from the pod's
  ``startTime``, which is before the image pull); an eviction is not a failure
  (``EVICTION_POLICY``: podFailurePolicy Ignore on ``DisruptionTarget``, FailJob on the
  suite's non-zero exit codes, ``podReplacementPolicy: Failed``), and the restricted Pod Security
  Standard (:mod:`benchrun.launch.podsecurity`). When a
  guarantee cannot be expressed the function raises instead of emitting a pod that would
  only look publication-safe.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
from dataclasses import replace
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.launch.placement import (  # noqa: F401 - Placement and its rules are part of this module's interface
    _DNS_SUBDOMAIN,
    DEFAULT_RESOURCES,
    SLINKY_JOB_PREFIX,
    SLURM_BRIDGE_SCHEDULER,
    SUITE_RESOURCES,
    Placement,
    check_image_allowed,
    check_label_key,
    check_label_value,
    moving_tag,
    pod_deadline_s,
    slinky_annotations,
    suite_module,
    wants_gpu,
    whole_cpus,
)
from benchrun.launch import podsecurity
from benchrun.plan import Invocation

MANAGED_BY = "benchrun"
LABEL_PREFIX = "benchrun.dev/"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
CONTAINER_NAME = "suite"
RUN_VOLUME = "run-dir"
# The suite prints its result document as one JSON line under this key (see kubernetes.py).
RESULT_STDOUT_ENV = "BENCHRUN_RESULT_STDOUT"
# Host-side values the planner passes through for local subprocesses; inside a container
# the image (PATH, HOME, TMPDIR) and the device plugin (CUDA_VISIBLE_DEVICES) own them.
HOST_ONLY_ENV = ("PATH", "HOME", "TMPDIR", "CUDA_VISIBLE_DEVICES", "PYTHONPATH")
DEFAULT_RUN_DIR = "/benchrun/run"

_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def job_name(inv: Invocation) -> str:
    """The fixed Job name of one replicate: ``<run_id>-<suite>-r<k>-<digest>``, a DNS-1123 label.

    At most 52 characters, so the pods' ``<job>-<5 random>`` names stay within 63. The run id
    and the suite are shortened and lowercased to fit, so the digest (of run id, layer, suite
    and replicate, as ``jobset.jobset_name`` has) tells apart suites the shortening would merge
    (``gemm_fp16``/``gemm.fp16``, ``GEMM``/``gemm``, a long common prefix). The same invocation
    always gets the same name: a retried launch adopts the Job instead of duplicating it."""
    suite = re.sub(r"[^a-z0-9-]+", "-", inv.suite.lower()).strip("-")[:16].strip("-") or "suite"
    digest = hashlib.sha256(f"{inv.run_id}/{inv.layer}/{inv.suite}/{inv.replicate}".encode()).hexdigest()[:8]
    tail = f"-{suite}-r{inv.replicate}-{digest}"
    head = re.sub(r"[^a-z0-9-]+", "-", inv.run_id.lower()).strip("-")[: 52 - len(tail)].rstrip("-")
    return (head + tail).strip("-")


def escape_k8s(word: str) -> str:
    """``word`` as a container's command or args must be written for the process to receive
    ``word``: Kubernetes expands ``$(VAR)`` there and reads ``$$`` as ``$``."""
    return word.replace("$", "$$")


def container_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The argv as the container runs it: the planner's local interpreter becomes ``python``."""
    out = list(argv)
    if not out:
        raise BenchrunError("invocation argv is empty: the suite has no command to run")
    first = out[0]
    local = {sys.executable, os.path.realpath(sys.executable)}
    if first in local or (os.path.isabs(first) and os.path.realpath(first) in local):
        out[0] = "python"
    elif os.path.isabs(first) and first.startswith(sys.prefix + os.sep):
        # Another script of this venv (e.g. .venv/bin/benchrun): the image has it on PATH.
        out[0] = os.path.basename(first)
    return out


def container_env(inv: Invocation, run_dir: str, extra_env: Mapping[str, str] | None) -> list[dict[str, str]]:
    """The invocation's explicit environment as V1EnvVar dicts (never the launcher's own). The
    invocation's values come from the spec (its env, parameters as JSON): Kubernetes expands
    ``$(VAR)`` in env values as in args — from the pod's other variables, the envFrom secret's
    included — so they are escaped (:func:`escape_k8s`) and the suite receives what the spec
    wrote; the launcher's own ``extra_env`` is configuration and is passed as given."""
    launcher = {**(extra_env or {}), "BENCHRUN_RUN_DIR": run_dir, RESULT_STDOUT_ENV: "1"}
    env = {**{k: v for k, v in inv.env.items() if k not in HOST_ONLY_ENV}, **launcher}
    for key, value in env.items():
        if not isinstance(value, str):
            raise BenchrunError(f"invocation env {key}: value must be a string, got {type(value).__name__}")
    return [{"name": k, "value": env[k] if k in launcher else escape_k8s(env[k])} for k in sorted(env)]


def outputs_argv(argv: list[str], run_dir: str, placement: Placement, inputs: tuple[str, ...] = ()) -> list[str]:
    """The suite's argv inside ``benchrun.launch.podout``: its files and whole log uploaded to
    ``placement.outputs_uri`` when it ends (no shared run volume needed)."""
    from benchrun.launch.podout import parse_uri

    if placement.run_volume_claim:
        raise BenchrunError(
            "launcher outputs_uri and run_volume_claim (BENCHRUN_LAUNCHER_OUTPUTS_URI, _RUN_VOLUME_CLAIM): both set; "
            "the suites' files come back through one of them: unset the one you do not use")
    try:
        parse_uri(placement.outputs_uri or "")
    except ValueError as exc:
        raise BenchrunError(f"launcher {exc} (BENCHRUN_LAUNCHER_OUTPUTS_URI)") from None
    pulls = [a for rel in inputs for a in ("--input", rel)]
    return ["python", "-m", "benchrun.launch.podout", "--run-dir", run_dir, "--to", str(placement.outputs_uri),
            *pulls, "--", *argv]


def _where(inv: Invocation) -> str:
    return f"spec.layers[{inv.layer}].suites[{inv.suite}]"


def _tolerations(placement: Placement) -> list[dict[str, Any]]:
    out = []
    for i, tol in enumerate(placement.tolerations):
        unknown = set(tol) - _TOLERATION_KEYS
        if unknown:
            raise BenchrunError(
                f"placement.tolerations[{i}]: unknown field(s) {sorted(unknown)}; "
                f"use {sorted(_TOLERATION_KEYS)}"
            )
        out.append(dict(tol))
    return out


def _affinity(inv: Invocation, placement: Placement) -> dict[str, Any] | None:
    affinity: dict[str, Any] = {}
    if placement.topology_label:
        check_label_key(placement.topology_label, "placement.topology_label")
        if not placement.topology_values:
            raise BenchrunError(
                "placement.topology_values: empty while topology_label is set; list the "
                f"values of {placement.topology_label} the run is pinned to"
            )
        for v in placement.topology_values:
            check_label_value(v, "placement.topology_values")
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{
                        "key": placement.topology_label,
                        "operator": "In",
                        "values": list(placement.topology_values),
                    }]}
                ]
            }
        }
    if placement.publication_grade:
        check_label_key(placement.exclusive_topology_key, "placement.exclusive_topology_key")
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchExpressions": [{"key": LABEL_PREFIX + "run-id", "operator": "Exists"}]},
                "topologyKey": placement.exclusive_topology_key,
            }]
        }
    return affinity or None


def _check_publication(inv: Invocation, placement: Placement, image: str) -> None:
    if "@sha256:" not in image:
        raise BenchrunError(
            f"{_where(inv)}.image: publication grade needs an image pinned by digest "
            f"(name@sha256:...), not {image!r}"
        )
    if not placement.node_selector:
        raise BenchrunError(
            "placement.node_selector: publication grade needs dedicated nodes; select them "
            "with a node label (and tolerate their taint in placement.tolerations)"
        )


# Downward API: the pod tells the suite where it runs (recorded with its environment).
DOWNWARD_ENV = (
    ("BENCHRUN_NODE_NAME", "spec.nodeName"),
    ("BENCHRUN_POD_NAME", "metadata.name"),
    ("BENCHRUN_POD_NAMESPACE", "metadata.namespace"),
    ("BENCHRUN_POD_UID", "metadata.uid"),
)
# The suite captures the environment of the node it runs on (benchrun.suites._runtime).
CAPTURE_ENV = "BENCHRUN_CAPTURE_ENVIRONMENT"


def _resources(inv: Invocation, placement: Placement) -> tuple[int, dict[str, dict[str, str]]]:
    """GPUs and the container's resources: requests = limits for cpu, memory and GPUs, always
    (Guaranteed QoS), from the spec, else the launcher, else ``SUITE_RESOURCES``."""
    where = _where(inv)
    if inv.gpus is not None:
        gpus = inv.gpus
    else:
        gpus = placement.gpus or (1 if wants_gpu(inv) else 0)
    if not isinstance(gpus, int) or gpus < 0:
        raise BenchrunError(f"{where}.gpus: {gpus!r} must be a whole number >= 0")
    if wants_gpu(inv) and not gpus:
        raise BenchrunError(f"{where}.gpus: the suite asks for CUDA (device: cuda, backend: nccl or a CUDA-only gemm dtype) but requests no "
                            "GPU; set gpus to 1 or more (the pod gets them as nvidia.com/gpu)")
    if placement.publication_grade and not ((inv.cpu or placement.cpu) and (inv.memory or placement.memory)):
        raise BenchrunError(
            f"{where}: publication grade needs Guaranteed QoS sized for the suite, not a default; set cpu and memory "
            "on the suite (spec.layers[..].suites[..].cpu/.memory) or on the launcher resource")
    default_cpu, default_memory = SUITE_RESOURCES.get(suite_module(inv), DEFAULT_RESOURCES)
    if inv.cpu:
        cpu = whole_cpus(inv.cpu, f"{where}.cpu")
    elif placement.cpu:
        cpu = whole_cpus(placement.cpu, "launcher cpu (BENCHRUN_LAUNCHER_CPU)")
    else:
        cpu = default_cpu
    quantities = {"cpu": cpu, "memory": str(inv.memory or placement.memory or default_memory)}
    if gpus:
        quantities[placement.gpu_resource] = str(gpus)
    # requests = limits: the scheduler reserves what the suite may use, and with cpu and
    # memory both set the pod is Guaranteed QoS (evicted last, exclusive cores).
    resources = {"limits": dict(quantities), "requests": dict(quantities)}
    return gpus, resources


def qos_class(pod_spec: Mapping[str, Any]) -> str:
    """The pod's QoS class as the kubelet computes it (Guaranteed, Burstable or BestEffort)."""
    containers = list(pod_spec.get("containers") or [])
    if not any((c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits")
               for c in containers):
        return "BestEffort"
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if not limits.get("cpu") or not limits.get("memory"):
            return "Burstable"
        if any(str(requests.get(k, v)) != str(v) for k, v in limits.items() if k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


def gang_anti_affinity(jobset: str) -> dict[str, Any]:
    """The required pod anti-affinity term that puts each pod of one gang on its own node."""
    return {"labelSelector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": jobset}},
            "topologyKey": "kubernetes.io/hostname"}


# An evicted pod (DisruptionTarget: drained node, kubelet pressure, preemption by the
# scheduler) is ignored by the Job (not counted against backoffLimit: 0) and replaced once it
# has stopped (podReplacementPolicy: Failed, so two attempts never run at once); a pod the
# suite itself failed (any non-zero exit code of its container) fails the Job at once.
EVICTION_POLICY: dict[str, Any] = {
    "podReplacementPolicy": "Failed",
    "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "NotIn", "values": [0]}},
    ]},
}


def job_manifest(
    inv: Invocation,
    *,
    namespace: str,
    run_labels: Mapping[str, str] | None = None,
    placement: Placement,
    extra_env: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
    inputs: tuple[str, ...] = (),
    argv_escaped: bool = False,
) -> dict[str, Any]:
    """The ``batch/v1`` Job (as a dict) that runs ``inv`` once under ``placement``.

    Kubernetes expands ``$(VAR)`` and turns ``$$`` into ``$`` in a container's command and
    args, so every ``$`` of the argv is written ``$$`` (the local launcher runs the words as
    written: so does the pod); ``argv_escaped``: the caller did that already and put in the
    expansions it wants (the JobSet's ``$(NODE_RANK)``).

    ``run_labels`` are further labels for every Job and pod of the run (validated like ours,
    which win on a clash); ``extra_env`` is added to the invocation's environment (Pipes
    bootstrap variables); ``owner`` is an ownerReference (the Dagster run worker's pod) so the
    Jobs go when it goes. The container runs argv directly (``command`` + ``args``, no
    shell) in the image's own working directory, never restarts, and is killed by the
    kubelet ``timeout_s`` + ``pull_allowance_s`` after its ``startTime`` (the orchestrator
    enforces ``timeout_s`` itself from the container's start); the Job itself has a deadline
    of that plus the pending timeout and ``ttlSecondsAfterFinished``, so nothing outlives a
    dead orchestrator for long.
    """
    where = _where(inv)
    if inv.nodes > 1:
        raise BenchrunError(f"{where}: a multi-node suite (nodes={inv.nodes}) runs as one JobSet, not a Job per "
                            "replicate; build it with benchrun.launch.jobset.launch_manifest")
    image = (inv.image or placement.image or "").strip()
    if not image:
        raise BenchrunError(
            f"{where}.image: a Kubernetes launch needs a container image for suite "
            f"{inv.suite!r}; set spec.layers[..].suites[..].image (pinned by digest for "
            "publication grade) or the launcher's image"
        )
    check_image_allowed(image, placement.allowed_images, f"{where}.image" if inv.image else
                        f"BENCHRUN_LAUNCHER_IMAGE (the image of {where}, which names none)")
    if not _DNS_SUBDOMAIN.match(namespace or "") or len(namespace) > 63:
        raise BenchrunError(f"namespace {namespace!r} is not a valid Kubernetes namespace name")
    if not placement.queue_name:
        raise BenchrunError("placement.queue_name: name the Kueue LocalQueue the Jobs are submitted to")
    if placement.publication_grade:
        _check_publication(inv, placement, image)

    labels: dict[str, str] = {}
    for key, value in (run_labels or {}).items():
        labels[check_label_key(key, "run label key")] = check_label_value(value, f"run label {key}")
    labels.update({
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_PREFIX + "run-id": check_label_value(inv.run_id, "run_id"),
        LABEL_PREFIX + "layer": check_label_value(inv.layer, "layer"),
        LABEL_PREFIX + "suite": check_label_value(inv.suite, f"{where}.name"),
        LABEL_PREFIX + "replicate": check_label_value(str(inv.replicate), "replicate"),
        LABEL_PREFIX + "benchmark-case-id": check_label_value(inv.benchmark_case_id, "benchmark_case_id"),
    })
    job_labels = dict(labels)
    job_labels[KUEUE_QUEUE_LABEL] = check_label_value(placement.queue_name, "placement.queue_name")
    if placement.priority_class:
        job_labels[KUEUE_PRIORITY_LABEL] = check_label_value(placement.priority_class, "placement.priority_class")

    for key, value in placement.node_selector.items():
        check_label_key(key, "placement.node_selector key")
        check_label_value(value, f"placement.node_selector[{key}]")

    gpus, resources = _resources(inv, placement)
    argv = container_argv(inv.argv)
    run_dir = inv.env.get("BENCHRUN_RUN_DIR") or DEFAULT_RUN_DIR
    if not os.path.isabs(run_dir):
        raise BenchrunError(f"invocation env BENCHRUN_RUN_DIR: {run_dir!r} must be an absolute path")
    env = container_env(inv, run_dir, {**(extra_env or {}), CAPTURE_ENV: "1"})
    if not gpus:
        # On a GPU node the NVIDIA runtime would otherwise expose every GPU to a pod that
        # asked for none (its default is "all" when the variable is unset).
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})
    env.extend({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in DOWNWARD_ENV)

    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if not argv_escaped:
        argv = [escape_k8s(w) for w in argv]
    if placement.outputs_uri:  # the uploader's own words: literal too
        argv = [escape_k8s(w) for w in outputs_argv([], run_dir, placement, inputs)] + argv
    if placement.run_volume_claim:
        home = placement.run_home or ""
        rel = os.path.relpath(run_dir, home) if home else ""
        if not home or rel.startswith("..") or os.path.isabs(rel):
            raise BenchrunError(
                f"launcher.run_home: the run directory {run_dir} is not under {home or '(unset)'}; set it to "
                "the path where the run volume (BENCHRUN_HOME) is mounted on the orchestrator"
            )
        volumes.append({"name": RUN_VOLUME, "persistentVolumeClaim": {"claimName": placement.run_volume_claim}})
        mounts.append({"name": RUN_VOLUME, "mountPath": run_dir, "subPath": rel})
    else:
        volumes.append({"name": RUN_VOLUME, "emptyDir": {}})
        mounts.append({"name": RUN_VOLUME, "mountPath": run_dir})
    shm = inv.shm_size or placement.shm_size
    if shm:
        # NCCL and DataLoader workers need more than the container runtime's 64 MiB /dev/shm.
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})

    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": placement.image_pull_policy,
        "command": argv[:1],
        "args": argv[1:],
        "env": env,
        "volumeMounts": mounts,
    }
    container["resources"] = resources
    if placement.env_secret:
        container["envFrom"] = [{"secretRef": {"name": placement.env_secret}}]

    pod_deadline = pod_deadline_s(inv, placement)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": pod_deadline,
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": False,
    }
    if placement.node_selector:
        pod_spec["nodeSelector"] = dict(placement.node_selector)
    tolerations = _tolerations(placement)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    affinity = _affinity(inv, placement)
    if affinity:
        pod_spec["affinity"] = affinity
    if placement.scheduler_name:
        pod_spec["schedulerName"] = placement.scheduler_name
    if placement.service_account:
        pod_spec["serviceAccountName"] = placement.service_account
    if placement.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in placement.image_pull_secrets]
    podsecurity.apply(pod_spec, placement.pod_security, placement.run_as_user)

    pod_meta: dict[str, Any] = {"labels": labels}
    metadata: dict[str, Any] = {"name": job_name(inv), "namespace": namespace, "labels": job_labels}
    annotations = slinky_annotations(inv, placement)  # on the Job: slurm-bridge ignores a template's
    if annotations:
        metadata["annotations"] = annotations
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "completions": 1,
            "parallelism": 1,
            # from the Job's startTime, which a replaced pod does not reset: room for each attempt the
            # eviction budget allows (before, one pod's: late evictions ended as DeadlineExceeded)
            "activeDeadlineSeconds": (1 + max(0, placement.eviction_retries)) * pod_deadline
            + max(1, int(math.ceil(placement.pending_timeout_s))),
            "ttlSecondsAfterFinished": placement.ttl_seconds_after_finished,
            **EVICTION_POLICY,
            "template": {"metadata": pod_meta, "spec": pod_spec},
        },
    }


def pod_manifest(
    inv: Invocation,
    *,
    namespace: str,
    run_labels: Mapping[str, str] | None = None,
    placement: Placement,
    extra_env: Mapping[str, str] | None = None,
    argv_escaped: bool = False,
) -> dict[str, Any]:
    """The pod of ``job_manifest`` as a V1Pod-shaped dict (labels include the Kueue ones): the
    building block of a JobSet's pod template (``benchrun.launch.jobset``). It carries no
    slurm-bridge annotation: those belong on the workload object (``slinky_annotations``)."""
    job = job_manifest(inv, namespace=namespace, run_labels=run_labels, placement=placement, extra_env=extra_env,
                       argv_escaped=argv_escaped)
    metadata: dict[str, Any] = {"name": job["metadata"]["name"], "namespace": namespace,
                                "labels": dict(job["metadata"]["labels"])}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": job["spec"]["template"]["spec"]}


def layer_inputs(run_id: str) -> str:
    """The run-directory file a layer pod reads first (the pinned plan), fetched from the
    artifact store when there is no run volume."""
    return f"structured/{run_id}_plan.json"


def layer_job_name(run_id: str, layer: str) -> str:
    """``<run_id>-<layer>`` (fixed), a DNS-1123 label of at most 52 characters."""
    tail = "-" + re.sub(r"[^a-z0-9-]+", "-", layer.lower()).strip("-")
    head = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    if len(head) + len(tail) > 52 or head != run_id:
        head = head[: 52 - len(tail) - 7].rstrip("-") + "-" + hashlib.sha256(run_id.encode()).hexdigest()[:6]
    return head + tail


def _largest(invs: list[Invocation], placement: Placement) -> dict[str, Any]:
    """The layer pod's size: the largest of what each suite's own Job would get (``_resources``:
    the spec, else the launcher, else the suite's default; a CUDA suite 1 GPU unless set)."""
    from kubernetes.utils.quantity import parse_quantity

    sizes = [_resources(inv, placement) for inv in invs]
    shm = [q for q in (inv.shm_size or placement.shm_size for inv in invs) if q]
    return {"gpus": max(g for g, _ in sizes),
            **{k: max((r["limits"][k] for _, r in sizes), key=parse_quantity) for k in ("cpu", "memory")},
            "shm_size": max(shm, key=parse_quantity) if shm else None}


def layer_deadline_s(invs: list[Invocation] | tuple[Invocation, ...], contended_reruns: int = 0) -> float:
    """A layer Job's deadline: every replicate's timeout and a minute each, for each attempt the
    pod may make (a contended replicate is launched again up to ``contended_reruns`` times)."""
    return (1 + max(0, int(contended_reruns))) * (sum(inv.timeout_s for inv in invs) + 60.0 * len(invs))


def layer_job_manifest(
    invocations: list[Invocation] | tuple[Invocation, ...],
    *,
    namespace: str,
    placement: Placement,
    run_labels: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    owner: Mapping[str, Any] | None = None,
    contended_reruns: int = 0,
) -> dict[str, Any]:
    """Publication grade: ONE Job for a whole layer, holding its node for every replicate.

    Its pod runs ``python -m benchrun.launch.inpod`` (the replicates in the planned order,
    from the pinned plan on the run volume), with the largest of the layer's per-suite
    resources, so every replicate runs on the same dedicated node after one admission and
    no queue wait between replicates; ``contended_reruns``: the layer's budget for launching a
    contended replicate again, in the pod. Everything else (labels, Kueue, placement, volumes,
    QoS) is ``job_manifest``'s for the layer's first invocation."""
    invs = list(invocations)
    if not invs:
        raise BenchrunError("a layer Job needs at least one invocation")
    if any(inv.is_gang for inv in invs):
        raise BenchrunError(
            f"spec.layers[{invs[0].layer}]: a multi-node suite runs as its own JobSet; a layer Job holds one node")
    images = {(inv.image or placement.image or "").strip() for inv in invs}
    if len(images) != 1:
        raise BenchrunError(
            f"spec.layers[{invs[0].layer}]: publication grade runs a layer in one pod, so its suites need one "
            f"image; they name {sorted(images)}")
    first = invs[0]
    sized = replace(first, **_largest(invs, placement), timeout_s=layer_deadline_s(invs, contended_reruns),
                    argv=("python", "-m", "benchrun.launch.inpod", "--run-dir",
                          first.env.get("BENCHRUN_RUN_DIR") or DEFAULT_RUN_DIR, "--run-id", first.run_id,
                          "--layer", first.layer,
                          *(("--contended-reruns", str(int(contended_reruns))) if contended_reruns else ())),
                    env={k: first.env[k] for k in ("BENCHRUN_RUN_ID", "BENCHRUN_RUN_DIR", "BENCHRUN_LAYER",
                                                    "LANG", "PYTHONUNBUFFERED") if k in first.env})
    inputs = (layer_inputs(first.run_id),) if placement.outputs_uri else ()
    job = job_manifest(sized, namespace=namespace, run_labels=run_labels, placement=placement,
                       extra_env=extra_env, owner=owner, inputs=inputs)
    job["metadata"]["name"] = layer_job_name(first.run_id, first.layer)
    # A publication layer is one observation on one dedicated node: an eviction fails it
    # (a replacement pod would rerun the layer's replicates and mix two attempts).
    for key in EVICTION_POLICY:
        job["spec"].pop(key, None)
    for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
        for key in ("suite", "replicate", "benchmark-case-id"):
            meta["labels"].pop(LABEL_PREFIX + key, None)
        meta["labels"][LABEL_PREFIX + "layer-job"] = "true"
    return job
