"""Pod manifests for suite invocations: labels, Kueue admission, GPU and topology placement.

``pod_manifest`` is a pure function from an :class:`~benchrun.plan.Invocation` and a
:class:`Placement` to a V1Pod-shaped dict (camelCase, as the API server and
``kubernetes.client`` accept it); nothing here talks to a cluster.

What each placement knob turns into, and what was verified against the projects' own sources
(2026-11-30, through stored copies of their repositories and documentation):

* Kueue (kubernetes-sigs/kueue, plain-Pod integration): the label
  ``kueue.x-k8s.io/queue-name`` names the LocalQueue in the pod's namespace, and
  ``kueue.x-k8s.io/priority-class`` names a WorkloadPriorityClass (``WorkloadPriorityClassLabel``
  in Kueue's constants). Kueue gates the pod until its workload is admitted; that wait shows
  up in the pod's ``PodScheduled`` condition and so in the launcher's pending time. The
  cluster must have the ``pod`` integration enabled in Kueue's configuration.
* Slinky slurm-bridge (SlinkyProject/slurm-bridge, docs/workload.md and
  internal/wellknown/annotations.go): a pod opts in with ``spec.schedulerName:
  slurm-bridge-scheduler`` (or by living in a namespace its admission controller manages);
  a bare Pod carries ``slurmjob.slinky.slurm.net/<suffix>`` annotations for its Slurm
  external job, among them ``partition``, ``constraints``, ``reservation``, ``qos``,
  ``timelimit`` (whole minutes) and ``exclusive`` (exclusive is Slurm-bridge's default;
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
  no two benchrun pods share a node), an image pinned by digest, Guaranteed QoS when CPU and
  memory are given (requests = limits), and ``exclusive: "true"`` under slurm-bridge. When a
  guarantee cannot be expressed the function raises instead of emitting a pod that would
  only look publication-safe.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.plan import Invocation

MANAGED_BY = "benchrun"
LABEL_PREFIX = "benchrun.dev/"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
SLURM_BRIDGE_SCHEDULER = "slurm-bridge-scheduler"
SLINKY_JOB_PREFIX = "slurmjob.slinky.slurm.net/"
CONTAINER_NAME = "suite"
RUN_VOLUME = "run-dir"
# The suite prints its result document as one JSON line under this key (see kubernetes.py).
RESULT_STDOUT_ENV = "BENCHRUN_RESULT_STDOUT"
# Host-side values the planner passes through for local subprocesses; inside a container
# the image (PATH, HOME, TMPDIR) and the device plugin (CUDA_VISIBLE_DEVICES) own them.
HOST_ONLY_ENV = ("PATH", "HOME", "TMPDIR", "CUDA_VISIBLE_DEVICES", "PYTHONPATH")
DEFAULT_RUN_DIR = "/benchrun/run"

_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


@dataclass(frozen=True)
class Placement:
    """Where and how a suite pod may run (one per launcher; the same for every replicate).

    ``queue_name`` is the Kueue LocalQueue (required: every benchmark pod is admitted by
    Kueue); ``gpus`` becomes ``nvidia.com/gpu`` limits; ``cpu``/``memory`` are Kubernetes
    quantities set as requests and limits. ``publication_grade`` turns on the guarantees
    listed in the module docstring.
    """

    queue_name: str
    priority_class: str | None = None
    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    publication_grade: bool = False
    exclusive_topology_key: str = "kubernetes.io/hostname"
    topology_label: str | None = None
    topology_values: tuple[str, ...] = ()
    scheduler_name: str | None = None
    slurm_partition: str | None = None
    slurm_constraints: str | None = None
    slurm_reservation: str | None = None
    slurm_qos: str | None = None
    slinky_annotation_prefix: str = SLINKY_JOB_PREFIX
    service_account: str | None = None
    image_pull_policy: str = "IfNotPresent"
    gpu_resource: str = "nvidia.com/gpu"


def check_label_value(value: str, field_name: str) -> str:
    """Return ``value`` if it is a valid label value, else raise naming ``field_name``."""
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        raise BenchrunError(
            f"{field_name}: {value!r} is not a valid Kubernetes label value: at most 63 "
            "characters of letters, digits, '-', '_' and '.', starting and ending with a "
            "letter or digit"
        )
    return value


def check_label_key(key: str, field_name: str) -> str:
    """Return ``key`` if it is a valid label (or annotation) key, else raise."""
    prefix, _, name = key.rpartition("/") if isinstance(key, str) else ("", "", "")
    ok = (
        isinstance(key, str)
        and 0 < len(name) <= 63
        and _LABEL_NAME.match(name) is not None
        and (not prefix or (len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix) is not None))
    )
    if not ok:
        raise BenchrunError(
            f"{field_name}: {key!r} is not a valid Kubernetes label key: [prefix/]name with a "
            "DNS-subdomain prefix and a name of at most 63 letters, digits, '-', '_', '.'"
        )
    return key


def pod_name_prefix(inv: Invocation) -> str:
    """A DNS-1123 ``generateName`` prefix naming the run, suite and replicate.

    At most 58 characters, so the server's 5 random characters keep the name within a
    63-character hostname; a long run id is shortened and keeps a digest of itself."""
    suite = re.sub(r"[^a-z0-9-]+", "-", inv.suite.lower())[:24].strip("-") or "suite"
    tail = f"-{suite}-r{inv.replicate}-"
    head = inv.run_id
    if len(head) + len(tail) > 58:
        digest = hashlib.sha256(inv.run_id.encode()).hexdigest()[:6]
        head = head[: 58 - len(tail) - 7].rstrip("-") + "-" + digest
    return head + tail


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
    """The invocation's explicit environment as V1EnvVar dicts (never the launcher's own)."""
    env = {k: v for k, v in inv.env.items() if k not in HOST_ONLY_ENV}
    env.update(extra_env or {})
    env["BENCHRUN_RUN_DIR"] = run_dir
    env[RESULT_STDOUT_ENV] = "1"
    for key, value in env.items():
        if not isinstance(value, str):
            raise BenchrunError(f"invocation env {key}: value must be a string, got {type(value).__name__}")
    return [{"name": k, "value": env[k]} for k in sorted(env)]


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


def _slinky_annotations(inv: Invocation, placement: Placement) -> dict[str, str]:
    if placement.scheduler_name != SLURM_BRIDGE_SCHEDULER and not (
        placement.slurm_partition or placement.slurm_constraints or placement.slurm_reservation or placement.slurm_qos
    ):
        return {}
    p = placement.slinky_annotation_prefix
    ann = {p + "timelimit": str(max(1, math.ceil(inv.timeout_s / 60.0)))}
    for suffix, value in (("partition", placement.slurm_partition), ("constraints", placement.slurm_constraints),
                          ("reservation", placement.slurm_reservation), ("qos", placement.slurm_qos)):
        if value:
            ann[p + suffix] = value
    if placement.publication_grade:
        ann[p + "exclusive"] = "true"
    return ann


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


def pod_manifest(
    inv: Invocation,
    *,
    namespace: str,
    run_labels: Mapping[str, str] | None = None,
    placement: Placement,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The V1Pod (as a dict) that runs ``inv`` once under ``placement`` in ``namespace``.

    ``run_labels`` are further labels for every pod of the run (validated like ours, which
    win on a clash); ``extra_env`` is added to the invocation's environment (Pipes
    bootstrap variables). The pod runs argv directly (``command`` + ``args``, no shell),
    never restarts, and is killed by the kubelet ``timeout_s`` after it starts. The run
    directory path of the invocation is an emptyDir inside the pod, so argv and environment
    that name it work unchanged; files the suite leaves there die with the pod.
    """
    where = _where(inv)
    image = (inv.image or "").strip()
    if not image:
        raise BenchrunError(
            f"{where}.image: a Kubernetes launch needs a container image for suite "
            f"{inv.suite!r}; set spec.layers[..].suites[..].image (pinned by digest for "
            "publication grade)"
        )
    if not _DNS_SUBDOMAIN.match(namespace or "") or len(namespace) > 63:
        raise BenchrunError(f"namespace {namespace!r} is not a valid Kubernetes namespace name")
    if not placement.queue_name:
        raise BenchrunError("placement.queue_name: name the Kueue LocalQueue the pods are submitted to")
    if placement.publication_grade:
        _check_publication(inv, placement, image)
    if not isinstance(placement.gpus, int) or placement.gpus < 0:
        raise BenchrunError(f"placement.gpus: {placement.gpus!r} must be a whole number >= 0")

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
        KUEUE_QUEUE_LABEL: check_label_value(placement.queue_name, "placement.queue_name"),
    })
    if placement.priority_class:
        labels[KUEUE_PRIORITY_LABEL] = check_label_value(placement.priority_class, "placement.priority_class")

    for key, value in placement.node_selector.items():
        check_label_key(key, "placement.node_selector key")
        check_label_value(value, f"placement.node_selector[{key}]")

    resources: dict[str, dict[str, str]] = {}
    quantities = {"cpu": placement.cpu, "memory": placement.memory}
    if placement.gpus:
        quantities[placement.gpu_resource] = str(placement.gpus)
    for name, qty in quantities.items():
        if qty:
            resources.setdefault("limits", {})[name] = str(qty)
            resources.setdefault("requests", {})[name] = str(qty)

    argv = container_argv(inv.argv)
    run_dir = inv.env.get("BENCHRUN_RUN_DIR") or DEFAULT_RUN_DIR
    if not os.path.isabs(run_dir):
        raise BenchrunError(f"invocation env BENCHRUN_RUN_DIR: {run_dir!r} must be an absolute path")
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": placement.image_pull_policy,
        "command": argv[:1],
        "args": argv[1:],
        "env": container_env(inv, run_dir, extra_env),
        "workingDir": run_dir,
        "volumeMounts": [{"name": RUN_VOLUME, "mountPath": run_dir}],
    }
    if resources:
        container["resources"] = resources

    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": max(1, int(math.ceil(inv.timeout_s))),
        "containers": [container],
        "volumes": [{"name": RUN_VOLUME, "emptyDir": {}}],
        "enableServiceLinks": False,
    }
    if placement.node_selector:
        spec["nodeSelector"] = dict(placement.node_selector)
    tolerations = _tolerations(placement)
    if tolerations:
        spec["tolerations"] = tolerations
    affinity = _affinity(inv, placement)
    if affinity:
        spec["affinity"] = affinity
    if placement.scheduler_name:
        spec["schedulerName"] = placement.scheduler_name
    if placement.service_account:
        spec["serviceAccountName"] = placement.service_account

    metadata: dict[str, Any] = {
        "generateName": pod_name_prefix(inv),
        "namespace": namespace,
        "labels": labels,
    }
    annotations = _slinky_annotations(inv, placement)
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
