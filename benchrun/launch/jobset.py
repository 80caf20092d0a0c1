"""JobSet manifests for multi-node suites: one gang = one JobSet, admitted by Kueue as one workload.

``jobset_manifest`` is a pure function from a gang :class:`~benchrun.plan.Invocation`
(``nodes > 1``) and a :class:`~benchrun.launch.podspec.Placement` to a
``jobset.x-k8s.io/v1alpha2`` JobSet (a dict); nothing here talks to a cluster. The
Kubernetes launcher calls it for every invocation with ``nodes > 1`` and
:func:`benchrun.launch.podspec.job_manifest` (one Job) for the others.

The shape (checked against JobSet's own CRD schema and examples, kubernetes-sigs/jobset):

* one replicated job ``node`` with ``replicas: 1`` whose Job has ``parallelism =
  completions = nodes``, ``completionMode: Indexed`` and ``backoffLimit: 0``: pod *i* is node
  *i* of the gang, and one failed pod fails the Job and so the JobSet
  (``failurePolicy.maxRestarts: 0``): the gang starts and ends as one;
* ``network.enableDNSHostnames`` with the JobSet's name as subdomain: pod *i* is reachable
  as ``<jobset>-node-0-<i>.<jobset>`` through the headless service JobSet manages, and
  rank 0's name is ``MASTER_ADDR`` (``publishNotReadyAddresses`` so peers resolve it
  before it is Ready: rendezvous happens before any readiness);
* ``NODE_RANK`` (and ``RANK``/``GROUP_RANK``/``BENCHRUN_NODE_RANK``) come from the pod's
  ``batch.kubernetes.io/job-completion-index`` annotation through the downward API,
  ``BENCHRUN_NODE_NAME`` from ``spec.nodeName``; ``${NODE_RANK}`` in the command becomes
  Kubernetes' own ``$(NODE_RANK)`` expansion (every other ``$`` in the command is escaped
  as ``$$``, so the process receives what the spec wrote), ``${MASTER_ADDR}``, ``${MASTER_PORT}``,
  ``${NNODES}`` and ``${HOSTS}`` are resolved to the stable names;
* Kueue: the queue and priority labels sit on the JobSet (Kueue's jobset integration makes
  one Workload of all pods), which is created ``suspend: true`` for Kueue to release;
  the pod template drops them so the pod integration never claims the pods one by one;
* every grade: required pod anti-affinity on ``jobset.sigs.k8s.io/jobset-name`` by
  ``kubernetes.io/hostname``, so the gang's pods are on distinct nodes;
* publication grade: ``alpha.jobset.sigs.k8s.io/exclusive-topology`` with a rack/block
  label (:attr:`GangOptions.exclusive_topology_key`, else the placement's
  ``topology_label``): the whole gang in one domain that no
  other JobSet shares; the pod template keeps podspec's anti-affinity (one benchrun pod
  per node), dedicated nodes and digest-pinned image; CPU and memory are required (the
  suite's, else the launcher's, as for a Job), so requests equal limits and the pods are
  Guaranteed QoS. The launcher offers publication grade to a run with a gang only when it
  has a ``topology_label`` (``LauncherSettings.publication_offer``);
* ``network: rdma`` on the suite: every pod asks for :attr:`GangOptions.rdma_resource`
  (the launcher's ``rdma_resource``/``rdma_per_pod``) and its container gets ``IPC_LOCK``
  (RDMA memory registration pins pages);
* Slinky slurm-bridge: its ``slurmjob.slinky.slurm.net/*`` annotations sit on the JobSet's own
  metadata (``podspec.slinky_annotations``), never on a template: slurm-bridge reads the
  top-level workload's and ignores those of the generated Jobs and pods. It makes each pod of
  the gang its own Slurm external job with those annotations: Slurm does not co-schedule the
  gang (Kueue admits the JobSet as one workload, then each pod waits for its own allocation).
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.launch.podspec import (
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    LABEL_PREFIX,
    Placement,
    check_label_key,
    container_argv,
    escape_k8s,
    gang_anti_affinity,
    job_manifest,
    pod_manifest,
    slinky_annotations,
)
from benchrun.launch.k8s_objects import REPLICATED_JOB
from benchrun.launch.placement import is_extended_resource
from benchrun.launch.podsecurity import NONE
from benchrun.plan import Invocation, resolve_gang

API_VERSION = "jobset.x-k8s.io/v1alpha2"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
DEFAULT_MASTER_PORT = 29500
# JobSet's webhook holds the name to DNS-1035 (a letter first, at most 63) as the subdomain and
# Service name and inside <jobset>-node-<job index> and <jobset>-node-<job index>-<pod index>-<5
# random>: "-node-0-", up to 4 digits of pod index and "-abcde" leave 45.
MAX_NAME = 45
# Put before a run id that does not start with a letter (a BenchmarkRun named "8b-gang").
NAME_PREFIX = "js-"
# Variables a node learns from its own pod rather than from the (shared) template.
_PER_NODE = ("NODE_RANK", "GROUP_RANK", "RANK", "BENCHRUN_NODE_RANK", "BENCHRUN_NODE_NAME", "LOCAL_RANK")


@dataclass(frozen=True)
class GangOptions:
    """Cluster facts a gang needs beyond a pod's Placement.

    ``exclusive_topology_key``: the node label of the domain (rack, block, node pool) a
    publication-grade gang takes whole; ``rdma_resource``/``rdma_per_pod``: the RDMA
    device plugin's resource (``rdma/ib``, ``rdma/rdma_shared_device_a``, ...), the launcher's
    settings of those names (``LauncherSettings.gang_options``);
    ``master_port``: the rendezvous port on rank 0.
    """

    exclusive_topology_key: str | None = None
    rdma_resource: str = "rdma/ib"
    rdma_per_pod: int = 1
    master_port: int = DEFAULT_MASTER_PORT


def jobset_name(inv: Invocation) -> str:
    """A deterministic DNS-1035 label of at most MAX_NAME characters for one replicate's gang.

    ``<run_id>-<suite>-r<k>-<digest>``, shortened like ``podspec.job_name``; a run id that does
    not start with a letter gets :data:`NAME_PREFIX` (the digest, of the run id as written,
    still tells that run apart from one whose id starts with the prefix)."""
    suite = re.sub(r"[^a-z0-9-]+", "-", inv.suite.lower()).strip("-")[:16].strip("-") or "suite"
    digest = hashlib.sha256(f"{inv.run_id}/{inv.layer}/{inv.suite}/{inv.replicate}".encode()).hexdigest()[:8]
    tail = f"-{suite}-r{inv.replicate}-{digest}"
    run = re.sub(r"[^a-z0-9-]+", "-", inv.run_id.lower()).strip("-")
    if not re.match(r"[a-z]", run):
        run = NAME_PREFIX + run
    head = run[: max(1, MAX_NAME - len(tail))].rstrip("-")
    return head + tail


def pod_hostname(name: str, node_rank: int) -> str:
    """The stable DNS name of node ``node_rank`` of JobSet ``name`` (headless service subdomain)."""
    return f"{name}-{REPLICATED_JOB}-0-{node_rank}.{name}"


def _node_env(inv: Invocation, master: str, port: int) -> list[dict[str, Any]]:
    """Rendezvous variables: shared values literal, per-node values from the downward API."""
    shared = {k: v for k, v in inv.node_env(0, master_addr=master, master_port=port).items() if k not in _PER_NODE}
    out: list[dict[str, Any]] = [{"name": k, "value": shared[k]} for k in sorted(shared)]
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}
    for name in ("NODE_RANK", "GROUP_RANK", "BENCHRUN_NODE_RANK"):
        out.append({"name": name, "valueFrom": copy.deepcopy(index)})
    if inv.ranks_per_node == 1:
        out.append({"name": "RANK", "valueFrom": copy.deepcopy(index)})
        out.append({"name": "LOCAL_RANK", "value": "0"})
    out.append({"name": "BENCHRUN_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    return out


def jobset_manifest(
    inv: Invocation,
    *,
    namespace: str,
    placement: Placement,
    run_labels: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    options: GangOptions = GangOptions(),
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JobSet (a dict) that runs one replicate of a multi-node suite as one gang.

    Like a suite's Job, it is removed ``ttlSecondsAfterFinished`` after it ends, and with
    ``owner`` (the run worker's pod) it goes when that pod goes: a dead orchestrator leaves no
    gang holding GPUs."""
    where = f"spec.layers[{inv.layer}].suites[{inv.suite}]"
    if inv.nodes < 2:
        raise BenchrunError(f"{where}: a JobSet is for a multi-node suite (nodes > 1); this one has nodes={inv.nodes}")
    if not 0 < options.master_port < 65536:
        raise BenchrunError(f"gang options master_port: {options.master_port} is not a TCP port")
    if inv.network == "rdma" and not (is_extended_resource(options.rdma_resource) and options.rdma_per_pod >= 1):
        raise BenchrunError(
            f"launcher rdma_resource/rdma_per_pod ({options.rdma_resource!r}, {options.rdma_per_pod}): the RDMA device "
            "plugin's extended resource (e.g. rdma/ib) and how many of it each pod asks for (1 or more)")
    name = jobset_name(inv)
    master = pod_hostname(name, 0)
    hosts = ",".join(pod_hostname(name, i) for i in range(inv.nodes))
    # the rack/block label a publication gang takes whole: given, else the label the run's
    # fixed topology is pinned by (placement.topology_label)
    exclusive_key = options.exclusive_topology_key or placement.topology_label
    if placement.publication_grade:
        if not exclusive_key:
            raise BenchrunError(
                "gang options exclusive_topology_key: publication grade places a multi-node gang in one "
                "topology domain of its own; name the node label of that domain (a rack or block label), "
                "or pin the run's topology with the launcher's topology_label (BENCHRUN_LAUNCHER_TOPOLOGY_LABEL)")
        check_label_key(exclusive_key, "gang options exclusive_topology_key")
        if not ((inv.cpu or placement.cpu) and (inv.memory or placement.memory)):
            raise BenchrunError(
                f"{where}: publication grade needs Guaranteed QoS for every pod of the gang; set cpu and memory "
                "on the suite (spec.layers[..].suites[..].cpu/.memory) or on the launcher (requests = limits)")
    if inv.gpus_per_node is not None:
        if inv.gpus is not None and inv.gpus != inv.gpus_per_node:
            raise BenchrunError(f"{where}: gpus={inv.gpus} and gpusPerNode={inv.gpus_per_node} disagree; a gang's pod "
                                "asks for gpusPerNode GPUs, drop gpus or make them equal")
        placement = replace(placement, gpus=inv.gpus_per_node)

    # The template's argv: ${NODE_RANK} → $(NODE_RANK) (from the pod's completion index);
    # the rest of the gang's placeholders are the same on every node.
    # Every "$" the spec wrote is escaped ("$$": Kubernetes reads it as "$" and expands "$(VAR)"),
    # then the one expansion wanted, $(NODE_RANK), is put in; the interpreter word is rewritten first.
    values = {"MASTER_ADDR": escape_k8s(master), "MASTER_PORT": str(options.master_port),
              "NNODES": str(inv.nodes), "HOSTS": escape_k8s(hosts), "NODE_RANK": "$(NODE_RANK)"}
    argv = tuple(resolve_gang(escape_k8s(w), values) for w in container_argv(inv.argv))
    # the template of one node's pod (job_manifest refuses gangs, so it is shown a single node)
    # RDMA pins memory (IPC_LOCK): a capability reaches a non-root process's effective set only as an
    # ambient one, which Kubernetes never sets, so such a gang runs as its image's user, outside the
    # restricted context (its namespace must allow privileged pods: benchrun.launch.podsecurity)
    pod = pod_manifest(replace(inv, argv=argv, nodes=1), namespace=namespace, run_labels=run_labels,
                       placement=replace(placement, pod_security=NONE) if inv.network == "rdma" else placement,
                       extra_env=extra_env, argv_escaped=True)
    labels = dict(pod["metadata"]["labels"])
    jobset_labels = {**labels, LABEL_PREFIX + "nodes": str(inv.nodes)}
    pod_labels = {k: v for k, v in labels.items() if k not in (KUEUE_QUEUE_LABEL, KUEUE_PRIORITY_LABEL)}

    spec = pod["spec"]
    container = spec["containers"][0]
    container["env"] = [e for e in container["env"] if e["name"] not in _PER_NODE] + _node_env(
        inv, master, options.master_port)
    container["ports"] = [{"name": "rendezvous", "containerPort": options.master_port, "protocol": "TCP"}]
    if inv.network == "rdma":
        for kind in ("limits", "requests"):
            container.setdefault("resources", {}).setdefault(kind, {})[options.rdma_resource] = str(options.rdma_per_pod)
        caps = container.setdefault("securityContext", {}).setdefault("capabilities", {})
        caps["add"] = sorted(set(caps.get("add", [])) | {"IPC_LOCK"})
    # The Job retries nothing: one failed node fails the gang (the replicate is one observation).
    spec["restartPolicy"] = "Never"
    # Every grade: each node of the gang on its own node (a "2-node" allreduce on one node
    # measures shared memory, not the network).
    anti = spec.setdefault("affinity", {}).setdefault("podAntiAffinity", {})
    anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(gang_anti_affinity(name))

    template_meta: dict[str, Any] = {"labels": pod_labels}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": jobset_labels}
    # slurm-bridge's annotations on the JobSet itself (it ignores the generated Jobs' and pods'),
    # each pod's Slurm timelimit covering that pod's deadline
    annotations = slinky_annotations(inv, placement)
    if placement.publication_grade:
        annotations[EXCLUSIVE_TOPOLOGY_ANNOTATION] = str(exclusive_key)
    if annotations:
        metadata["annotations"] = annotations
    if owner:
        metadata["ownerReferences"] = [dict(owner)]
    job_spec = {
        "parallelism": inv.nodes,
        "completions": inv.nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        # from the child Job's start (its unsuspension): the pods' deadline plus the pending timeout
        "activeDeadlineSeconds": int(spec["activeDeadlineSeconds"]) + max(1, int(placement.pending_timeout_s)),
        "template": {"metadata": template_meta, "spec": spec},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "suspend": True,  # Kueue admits the gang as one workload, then unsuspends it
            "failurePolicy": {"maxRestarts": 0},
            "successPolicy": {"operator": "All"},
            "ttlSecondsAfterFinished": placement.ttl_seconds_after_finished,
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1,
                                "template": {"metadata": {"labels": dict(pod_labels)}, "spec": job_spec}}],
        },
    }


def launch_manifest(
    inv: Invocation,
    *,
    namespace: str,
    placement: Placement,
    run_labels: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    options: GangOptions = GangOptions(),
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What the Kubernetes launcher (and ``benchrun render``) creates for one invocation:
    a JobSet for a multi-node suite, the Indexed load Job for a serving suite with ``load_pods``
    (``benchrun.launch.loadjob``), else the single Job of :func:`job_manifest`."""
    from benchrun.launch.loadjob import load_job_manifest, load_pods

    if inv.is_gang:
        load_pods(inv)  # a gang with load_pods is refused, naming the field
        return jobset_manifest(inv, namespace=namespace, placement=placement, run_labels=run_labels,
                               extra_env=extra_env, options=options, owner=owner)
    if load_pods(inv) > 1:
        return load_job_manifest(inv, namespace=namespace, placement=placement, run_labels=run_labels,
                                 extra_env=extra_env, owner=owner)
    return job_manifest(inv, namespace=namespace, run_labels=run_labels, placement=placement, extra_env=extra_env,
                        owner=owner)
