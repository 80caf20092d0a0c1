"""The control plane the harness plays: Kueue, the Job and JobSet controllers, a scheduler,
a kubelet, the TTL controller and the garbage collector.

All of it runs as one reconcile loop in the API server's event loop (``ControlPlane.run``),
reading objects straight from the emulator and writing through it, so every change shows
up in list and watch exactly as a write over HTTP would. Hand-written: nothing on PyPI
plays Kueue or a kubelet against an in-memory API server. The behaviour follows the
upstream controllers closely enough for a client to rely on the same fields:

- **Kueue** (v1beta2). A Job or JobSet carrying ``kueue.x-k8s.io/queue-name`` is suspended
  at creation (the webhook) and gets a Workload ``job-<name>-<hash>`` /
  ``jobset-<name>-<hash>`` with one pod set per pod template. Pending workloads are
  admitted in priority order (``kueue.x-k8s.io/priority-class`` → ``priority_classes``),
  then creation order, when their requests fit the ClusterQueue's remaining nominal quota;
  admission writes ``status.admission`` and the ``QuotaReserved``/``Admitted`` conditions and
  unsuspends the owner. When one does not fit, lower-priority admitted workloads are
  preempted (``Evicted`` reason ``Preempted``, owner suspended again, ``Requeued``;
  ``status.schedulingStats.evictions`` counts by reason; admitted again, ``Evicted`` turns False
  with reason ``QuotaReserved`` and message ``Previously: <message>``, as Kueue rewrites it). ``preempt(..., reason=)`` evicts for
  another of Kueue's reasons (``PodsReadyTimeout``, ``AdmissionCheck``: requeued alike;
  ``InactiveWorkload``: ``spec.active: false``, ``Requeued=False``, never admitted again).
  ``PodsReady`` and ``Finished`` follow the pods and the owner. An unknown queue leaves the
  workload pending with ``QuotaReserved=False`` reason ``Inadmissible``; a workload asking for a
  resource its ClusterQueue does not cover (the LocalQueue's quota names none) stays pending with
  ``resource <name> unavailable in ClusterQueue`` and preempts nothing, as Kueue's flavor
  assigner does (Kueue's ``resources.excludeResourcePrefixes`` is not emulated).
- **Job controller.** An unsuspended, unfinished Job gets pods ``<job>-<hash>`` (or
  ``<job>-<index>-<hash>`` in ``Indexed`` mode, with ``JOB_COMPLETION_INDEX``), up to
  ``parallelism``; counts ``active``/``ready``/``succeeded``/``failed``; replaces failed pods
  up to ``backoffLimit``, following ``podFailurePolicy`` (``Ignore``: not counted, replaced;
  ``FailJob``: Failed with reason ``PodFailurePolicy``; by ``onPodConditions`` or
  ``onExitCodes``) and ``podReplacementPolicy: Failed`` (no replacement while a pod terminates); ends ``Complete`` (with ``SuccessCriteriaMet``) or ``Failed``
  (``BackoffLimitExceeded``, ``DeadlineExceeded`` after ``activeDeadlineSeconds``); a suspended
  Job loses its pods and shows ``Suspended``: as Kubernetes' ``deleteJobPods`` does, their
  tracking finalizer goes first, so they never count as failures, and a plain DELETE sets no
  ``DisruptionTarget`` (they fail with the signal).
- **JobSet controller** (v1alpha2). Child Jobs ``<jobset>-<replicatedJob>-<index>`` with the
  JobSet labels, suspended with their parent; ``Completed`` when all succeed, ``Failed``
  when one fails and ``failurePolicy.maxRestarts`` is used up (else all children are
  recreated and ``status.restarts`` counts up).
- **Scheduler.** Binds a pending pod to the first node (in the order given: it packs, so
  two pods that nothing keeps apart share a node) where its requests fit the node's
  remaining allocatable, its ``nodeSelector`` and required node affinity match, its
  tolerations cover the node's ``NoSchedule`` taints and no required pod anti-affinity (its
  own or an already placed pod's, by ``topologyKey``) forbids it; otherwise
  ``PodScheduled=False`` reason ``Unschedulable``. Pods get ``status.qosClass`` at creation.
- **Kubelet.** Sets the pod's ``startTime`` when it accepts it, then pulls for
  ``pull_seconds`` (an image in ``unpullable`` or on a ``.invalid`` registry ends in
  ``ErrImagePull`` then ``ImagePullBackOff``, a ``Failed`` event saying ``not found``; one made
  flaky fails so with a registry's 429 for a while, then pulls; ``activeDeadlineSeconds`` counts from
  ``startTime``, the pull included), then runs each container's ``command`` +
  ``args`` as a local process in the pod's scratch directory. Volume mount paths are mapped
  into that directory (emptyDir per pod, hostPath as is, a PVC shared by name across pods,
  ConfigMap/Secret files written out) and every argument and env value that starts with a
  mount path is rewritten to the mapped directory. Env takes ``value`` and the common
  ``fieldRef``s and ``envFrom`` (Secret, ConfigMap). stdout and stderr are one timestamped log per
  container, served live and rotated at ``log_max_bytes`` (the kubelet's ``containerLogMaxSize``,
  10 MiB): a plain log read then gets the newest file only, a follow streams on across it. On
  exit: ``terminated`` with exit code, ``Completed``/``Error``/``OOMKilled``, times,
  ``imageID`` (``docker-pullable://repo@sha256:...``), and phase ``Succeeded``/``Failed``.
  ``activeDeadlineSeconds`` kills the pod with reason ``DeadlineExceeded``. A deleted pod's
  processes are terminated.
- **Pod Security admission** (``podsecurity``): a namespace that enforces ``baseline`` or
  ``restricted`` (its Namespace object's ``pod-security.kubernetes.io/enforce`` label, else the
  cluster's ``pod_security``, ``restricted`` for its namespace by default) refuses a Job's pod that
  breaks the level: no pod, a ``FailedCreate`` Warning event on the Job with the API server's
  message, tried again every second.
- **TTL after finished** and **garbage collection** by ``ownerReferences``.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import hashlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import kmock
from kubernetes.utils.quantity import parse_quantity

from .emulator import HarnessEmulator, now_iso
from .podsecurity import ENFORCE_LABEL, forbidden_message

PODS = kmock.resource("", "v1", "pods")
EVENTS = kmock.resource("", "v1", "events")
NODES = kmock.resource("", "v1", "nodes")
NAMESPACES = kmock.resource("", "v1", "namespaces")
CONFIGMAPS = kmock.resource("", "v1", "configmaps")
SECRETS = kmock.resource("", "v1", "secrets")
JOBS = kmock.resource("batch", "v1", "jobs")
WORKLOADS = kmock.resource("kueue.x-k8s.io", "v1beta2", "workloads")
LOCALQUEUES = kmock.resource("kueue.x-k8s.io", "v1beta2", "localqueues")
CLUSTERQUEUES = kmock.resource("kueue.x-k8s.io", "v1beta2", "clusterqueues")
WORKLOADPRIORITYCLASSES = kmock.resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses")
JOBSETS = kmock.resource("jobset.x-k8s.io", "v1alpha2", "jobsets")

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU = "nvidia.com/gpu"


def expand_k8s(word: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a container's command and args (k8s.io/kubernetes
    third_party/forked/golang/expansion): ``$$`` is ``$``; ``$(NAME)`` is NAME's value when the
    container's env defines it, else left as written; any other ``$`` stays."""
    out, i, n = [], 0, len(word)
    while i < n:
        ch = word[i]
        if ch != "$" or i + 1 >= n:
            out.append(ch)
            i += 1
            continue
        nxt = word[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = word.find(")", i + 2)
            if end < 0:  # unclosed: "$(" as written, and the scan goes on (a later "$$" is still "$")
                out.append("$(")
                i += 2
                continue
            name = word[i + 2:end]
            out.append(env[name] if name in env else word[i:end + 1])
            i = end + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


@dataclass
class Node:
    """One node of the harness cluster."""

    name: str
    capacity: dict[str, str] = field(default_factory=lambda: {"cpu": "32", "memory": "128Gi", GPU: "8", "pods": "110"})
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Image:
    """What an image means to the harness kubelet: working directory, env and entrypoint."""

    workdir: str | None = None  # host directory; None = the pod's scratch dir
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] | None = None


def _ts(seconds: float | None = None) -> str:
    t = dt.datetime.fromtimestamp(seconds if seconds is not None else time.time(), dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:5]


def _condition(type_: str, status: bool, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason or type_,
        "message": message,
        "lastTransitionTime": now_iso(),
        "lastProbeTime": None,
    }


def set_condition(conditions: list[dict[str, Any]], cond: dict[str, Any]) -> list[dict[str, Any]]:
    """Upsert by type; keeps lastTransitionTime when the status did not change."""
    out = []
    found = False
    for c in conditions:
        if c.get("type") == cond["type"]:
            found = True
            if c.get("status") == cond["status"]:
                cond = dict(cond, lastTransitionTime=c.get("lastTransitionTime"))
            out.append(cond)
        else:
            out.append(c)
    if not found:
        out.append(cond)
    return out


def has_condition(obj: dict[str, Any], type_: str, status: str = "True") -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == status for c in (obj.get("status") or {}).get("conditions") or []
    )


def pod_requests(spec: dict[str, Any]) -> dict[str, Decimal]:
    """Summed container requests (limits where a request is missing), as the scheduler counts."""
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = dict(res.get("limits") or {})
        merged.update(res.get("requests") or {})
        for k, v in merged.items():
            total[k] = total.get(k, Decimal(0)) + parse_quantity(v)
    total["pods"] = Decimal(1)
    return total


def _fits(need: dict[str, Decimal], free: dict[str, Decimal]) -> list[str]:
    """Resources in ``need`` that ``free`` cannot cover (an unknown resource never fits)."""
    return [k for k, v in need.items() if v > 0 and free.get(k, Decimal(0)) < v]


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def qos_class(spec: dict[str, Any]) -> str:
    """The pod's QoS class as the API server sets it: Guaranteed when every container has cpu
    and memory limits and its requests (where given) equal them, BestEffort with no resources."""
    containers = list(spec.get("containers") or [])
    if not any((c.get("resources") or {}).get("limits") or (c.get("resources") or {}).get("requests") for c in containers):
        return "BestEffort"
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        for r in ("cpu", "memory"):
            if r not in limits or parse_quantity(requests.get(r, limits[r])) != parse_quantity(limits[r]):
                return "Burstable"
    return "Guaranteed"


def _expr_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), list(expr.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) against labels; an empty one
    matches everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expr_matches(e, labels) for e in selector.get("matchExpressions") or [])


def _node_affinity_ok(spec: dict[str, Any], node_labels: dict[str, str]) -> bool:
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(all(_expr_matches(e, node_labels) for e in t.get("matchExpressions") or []) for t in terms)


def _anti_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list((((spec.get("affinity") or {}).get("podAntiAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution")) or [])


@dataclass
class _Container:
    name: str
    proc: asyncio.subprocess.Process | None = None
    lines: list[tuple[str, bytes]] = field(default_factory=list)
    done: bool = False
    exit_code: int | None = None
    reason: str | None = None
    started: str | None = None
    finished: str | None = None
    image: str = ""
    image_id: str = ""
    rotated_at: int = 0  # index in lines where the current log file starts (after the last rotation)
    file_bytes: int = 0  # bytes in the current log file
    rotations: int = 0


@dataclass
class _PodRun:
    uid: str
    name: str
    namespace: str
    scratch: Path
    containers: dict[str, _Container] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    pull_started: float = 0.0
    task: asyncio.Task[None] | None = None
    killed_reason: str | None = None


class ControlPlane:
    """Kueue, Job/JobSet controllers, scheduler, kubelet, TTL and GC (see the module doc)."""

    def __init__(
        self,
        api: HarnessEmulator,
        root: Path,
        *,
        nodes: list[Node],
        queues: dict[str, dict[str, str]],
        priority_classes: dict[str, int],
        images: dict[str, Image],
        default_image: Image,
        unpullable: set[str],
        host_env: dict[str, str],
        pull_seconds: float,
        tick: float,
        log_max_bytes: int = 10 * 1024 * 1024,
        pod_security: dict[str, str] | None = None,
    ) -> None:
        self.api = api
        # namespace -> the Pod Security level it enforces when no Namespace object labels it
        self.pod_security = dict(pod_security or {})
        self.refused_until: dict[str, float] = {}  # Job uid -> when its pod create is tried again
        self.log_max_bytes = log_max_bytes
        self.root = root
        self.nodes = nodes
        self.queues = queues
        self.priority_classes = priority_classes
        self.images = images
        self.default_image = default_image
        self.unpullable = unpullable
        self.flaky_pulls: dict[str, float] = {}  # image -> seconds its pulls fail with a 429 (Cluster.make_flaky)
        self.host_env = host_env
        self.pull_seconds = pull_seconds
        self.tick = tick
        self.runs: dict[str, _PodRun] = {}
        self.stopping = False
        # workload name -> (Evicted reason, message) to evict it with on the next pass, as Kueue would
        # for that reason (Preempted, PodsReadyTimeout, AdmissionCheck: requeued; InactiveWorkload:
        # spec.active false, not requeued)
        self.preempt_requests: dict[str, tuple[str, str]] = {}
        self.pod_faults: dict[str, tuple[str, str]] = {}  # pod name -> (reason, message)
        self.lost: set[str] = set()  # uids of pods whose node no longer reports (Cluster.lose_node_of)
        self.errors: list[str] = []
        self.grace_seconds = 1.0
        self.terminating: dict[Any, float] = {}  # pod key -> when the object goes
        self.uncounted_pods: set[str] = set()  # uids deleted for a suspension: never a Job failure
        self.ttl_seen: dict[str, float] = {}  # finished Job uid -> when the TTL controller first saw it
        api.on_create = self._webhook
        api.log_source = self.serve_log

    # ------------------------------------------------------------------ admission webhook
    def _webhook(self, resource: kmock.resource, data: dict[str, Any]) -> None:
        labels = (data.get("metadata") or {}).get("labels") or {}
        if resource in (JOBS, JOBSETS) and QUEUE_LABEL in labels:
            data.setdefault("spec", {})["suspend"] = True
        if resource == PODS:
            data.setdefault("status", {}).setdefault("phase", "Pending")
            data["status"]["qosClass"] = qos_class(data.get("spec") or {})

    # ------------------------------------------------------------------ loop
    async def run(self) -> None:
        await self._seed()
        while not self.stopping:
            try:
                await self.reconcile()
            except Exception as exc:  # keep the cluster alive; tests can assert on errors
                import traceback

                self.errors.append("".join(traceback.format_exception(exc)))
            await asyncio.sleep(self.tick)

    async def _seed(self) -> None:
        for node in self.nodes:
            await self.api.put_object(
                NODES,
                None,
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": node.name, "labels": {"kubernetes.io/hostname": node.name, **node.labels}},
                    "spec": {"taints": node.taints},
                    "status": {
                        "capacity": dict(node.capacity),
                        "allocatable": dict(node.capacity),
                        "conditions": [_condition("Ready", True, "KubeletReady")],
                        # every field V1NodeSystemInfo requires, so the client can read a node list
                        "nodeInfo": {"kernelVersion": os.uname().release, "operatingSystem": "linux",
                                     "architecture": "amd64", "bootID": node.name, "machineID": node.name,
                                     "systemUUID": node.name, "containerRuntimeVersion": "containerd://1.7.0",
                                     "kubeletVersion": "v1.31.0", "kubeProxyVersion": "v1.31.0",
                                     "osImage": "kharness"},
                    },
                },
            )
        for pc, value in self.priority_classes.items():
            await self.api.put_object(
                WORKLOADPRIORITYCLASSES,
                None,
                {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": pc},
                 "value": value},
            )
        for lq, quota in self.queues.items():
            await self.api.put_object(
                CLUSTERQUEUES,
                None,
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": {"name": f"{lq}-cq"},
                    "spec": {
                        "resourceGroups": [
                            {
                                "coveredResources": sorted(quota),
                                "flavors": [
                                    {
                                        "name": "default-flavor",
                                        "resources": [{"name": k, "nominalQuota": v} for k, v in sorted(quota.items())],
                                    }
                                ],
                            }
                        ],
                        "preemption": {"withinClusterQueue": "LowerPriority"},
                    },
                },
            )

    async def stop(self) -> None:
        self.stopping = True
        for run in list(self.runs.values()):
            await self._kill(run, "Stopped")
        # let every pod task read its pipes to the end, so no subprocess transport outlives the loop
        tasks = [r.task for r in self.runs.values() if r.task is not None and not r.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def reconcile(self) -> None:
        # each controller on its own, as on a cluster: one that fails (a child Job's name still
        # held by a Job the garbage collector has yet to remove) no longer stops the others for
        # the tick, the collector among them, which held that name for ever
        failed = []
        for controller in (self.jobset_controller, self.kueue, self.job_controller, self.scheduler, self.kubelet,
                           self.ttl_and_gc):
            try:
                await controller()
            except Exception as exc:
                failed.append(exc)
        if failed:
            raise failed[0]

    # ------------------------------------------------------------------ helpers
    async def _event(self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        await self.api.put_object(
            EVENTS,
            ns,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": ns},
                "involvedObject": {
                    "kind": obj.get("kind"),
                    "name": meta["name"],
                    "namespace": ns,
                    "uid": meta.get("uid"),
                },
                "reason": reason,
                "message": message,
                "type": type_,
                "firstTimestamp": now_iso(),
                "lastTimestamp": now_iso(),
                "count": 1,
                "source": {"component": "kharness"},
            },
        )

    async def _update(self, key: Any, old: dict[str, Any], new: dict[str, Any]) -> None:
        if key[0] in (WORKLOADS, JOBSETS):  # metav1.Condition: no lastProbeTime
            for c in (new.get("status") or {}).get("conditions") or []:
                c.pop("lastProbeTime", None)
        if json.dumps(old, sort_keys=True, default=str) != json.dumps(new, sort_keys=True, default=str):
            await self.api.replace_object(key, new)

    # ------------------------------------------------------------------ JobSet
    async def jobset_controller(self) -> None:
        jobs = self.api.live(JOBS)
        for key, raw in self.api.live(JOBSETS):
            js = copy.deepcopy(raw)
            meta, spec = js["metadata"], js.get("spec") or {}
            ns = meta.get("namespace") or "default"
            status = js.setdefault("status", {})
            conds = status.get("conditions") or []
            if has_condition(js, "Completed") or has_condition(js, "Failed"):
                continue
            restarts = int(status.get("restarts") or 0)
            suspend = bool(spec.get("suspend"))
            mine = {
                r["metadata"]["name"]: (k, r)
                for k, r in jobs
                if any(o.get("uid") == meta["uid"] for o in r["metadata"].get("ownerReferences") or [])
            }
            rj_status = []
            all_ok, failed = True, False
            for rj in spec.get("replicatedJobs") or []:
                counts = {"name": rj["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
                for i in range(int(rj.get("replicas", 1))):
                    name = f"{meta['name']}-{rj['name']}-{i}"
                    if name not in mine:
                        await self._create_child_job(js, rj, i, name, ns, suspend, restarts)
                        all_ok = False
                        counts["active"] += 1
                        continue
                    jkey, job = mine[name]
                    if bool((job.get("spec") or {}).get("suspend")) != suspend:
                        nj = copy.deepcopy(job)
                        nj["spec"]["suspend"] = suspend
                        await self._update(jkey, job, nj)
                    if has_condition(job, "Complete"):
                        counts["succeeded"] += 1
                    elif has_condition(job, "Failed"):
                        counts["failed"] += 1
                        failed = True
                        all_ok = False
                    else:
                        all_ok = False
                        counts["suspended" if suspend else "active"] += 1
                        counts["ready"] += int((job.get("status") or {}).get("ready") or 0)
                rj_status.append(counts)
            status["replicatedJobsStatus"] = rj_status
            if failed:
                max_restarts = int((spec.get("failurePolicy") or {}).get("maxRestarts") or 0)
                if restarts < max_restarts:
                    for jkey, _ in mine.values():
                        await self._delete_with_dependents(jkey)
                    status["restarts"] = restarts + 1
                else:
                    status["conditions"] = set_condition(
                        conds, _condition("Failed", True, "FailedJobs", "jobset failed due to a failed child job")
                    )
                    for jkey, _ in mine.values():
                        await self._terminate_job_pods(jkey[2], ns)
            elif all_ok and rj_status:
                status["conditions"] = set_condition(conds, _condition("Completed", True, "AllJobsCompleted"))
            else:
                status["conditions"] = set_condition(conds, _condition("Suspended", suspend, "JobSetSuspended"))
            await self._update(key, raw, js)

    async def _create_child_job(
        self, js: dict[str, Any], rj: dict[str, Any], index: int, name: str, ns: str, suspend: bool, restarts: int
    ) -> None:
        tmpl = copy.deepcopy(rj.get("template") or {})
        labels = {
            "jobset.sigs.k8s.io/jobset-name": js["metadata"]["name"],
            "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"],
            "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
            "jobset.sigs.k8s.io/job-index": str(index),
            "jobset.sigs.k8s.io/replicatedjob-replicas": str(rj.get("replicas", 1)),
            "jobset.sigs.k8s.io/restart-attempt": str(restarts),
        }
        meta = tmpl.setdefault("metadata", {})
        meta["name"] = name
        meta["labels"] = {**(meta.get("labels") or {}), **labels}
        meta["ownerReferences"] = [
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "name": js["metadata"]["name"],
                "uid": js["metadata"]["uid"],
                "controller": True,
            }
        ]
        spec = tmpl.setdefault("spec", {})
        spec["suspend"] = suspend
        pod_meta = spec.setdefault("template", {}).setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **labels}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **labels}
        network = (js.get("spec") or {}).get("network") or {}
        if network.get("enableDNSHostnames", True):
            spec["template"].setdefault("spec", {})["subdomain"] = network.get("subdomain") or js["metadata"]["name"]
        try:
            await self.api.put_object(JOBS, ns, {"apiVersion": "batch/v1", "kind": "Job", **tmpl})
        except kmock.KubernetesError as exc:
            # the name still held by a Job of a JobSet of this name that was deleted (the garbage
            # collector removes it on its pass): the JobSet controller tries again, as it requeues
            if getattr(exc, "status", None) != 409:
                raise

    # ------------------------------------------------------------------ Kueue
    def _owner_of_workload(self, wl: dict[str, Any]) -> tuple[kmock.resource, Any, dict[str, Any]] | None:
        refs = wl["metadata"].get("ownerReferences") or []
        for res in (JOBS, JOBSETS):
            for key, raw in self.api.live(res, wl["metadata"].get("namespace")):
                if any(r.get("uid") == raw["metadata"]["uid"] for r in refs):
                    return res, key, raw
        return None

    def _podsets(self, res: kmock.resource, obj: dict[str, Any]) -> list[dict[str, Any]]:
        spec = obj.get("spec") or {}
        if res == JOBS:
            return [
                {
                    "name": "main",
                    "count": int(spec.get("parallelism", 1)),
                    "template": copy.deepcopy(spec.get("template") or {}),
                }
            ]
        out = []
        for rj in spec.get("replicatedJobs") or []:
            jspec = (rj.get("template") or {}).get("spec") or {}
            out.append(
                {
                    "name": rj["name"],
                    "count": int(rj.get("replicas", 1)) * int(jspec.get("parallelism", 1)),
                    "template": copy.deepcopy(jspec.get("template") or {}),
                }
            )
        return out

    @staticmethod
    def _usage(wl: dict[str, Any]) -> dict[str, Decimal]:
        total: dict[str, Decimal] = {}
        for ps in wl["spec"]["podSets"]:
            for k, v in pod_requests((ps.get("template") or {}).get("spec") or {}).items():
                if k == "pods":
                    continue
                total[k] = total.get(k, Decimal(0)) + v * int(ps.get("count", 1))
        return total

    @staticmethod
    def _uncovered(wl: dict[str, Any], covered: dict[str, str]) -> str | None:
        """Kueue's message for the first pod set asking for a resource the ClusterQueue's
        resource groups do not cover (``coveredResources``; ``pods`` only when covered), else None."""
        for ps in wl["spec"]["podSets"]:
            for k, v in sorted(pod_requests((ps.get("template") or {}).get("spec") or {}).items()):
                if k != "pods" and v > 0 and k not in covered:
                    return f"couldn't assign flavors to pod set {ps['name']}: resource {k} unavailable in ClusterQueue"
        return None

    async def kueue(self) -> None:
        workloads = {raw["metadata"]["name"]: (key, raw) for key, raw in self.api.live(WORKLOADS)}
        # Create a workload for every queued Job/JobSet that has none (children of a JobSet
        # are covered by the JobSet's workload).
        for res, prefix in ((JOBS, "job"), (JOBSETS, "jobset")):
            for _key, raw in self.api.live(res):
                meta = raw["metadata"]
                labels = meta.get("labels") or {}
                if QUEUE_LABEL not in labels:
                    continue
                if res == JOBS and any(o.get("kind") == "JobSet" for o in meta.get("ownerReferences") or []):
                    continue
                wl_name = f"{prefix}-{meta['name']}-{_short_hash(meta['uid'])}"
                if wl_name in workloads:
                    continue
                pc = labels.get(PRIORITY_LABEL)
                wl = {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "Workload",
                    "metadata": {
                        "name": wl_name,
                        "namespace": meta.get("namespace"),
                        "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                        "ownerReferences": [
                            {
                                "apiVersion": raw.get("apiVersion"),
                                "kind": raw.get("kind"),
                                "name": meta["name"],
                                "uid": meta["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "spec": {
                        "queueName": labels[QUEUE_LABEL],
                        "priority": self.priority_classes.get(pc, 0) if pc else 0,
                        **({"priorityClassName": pc} if pc else {}),
                        "podSets": self._podsets(res, raw),
                    },
                    "status": {"conditions": []},
                }
                created = await self.api.put_object(WORKLOADS, meta.get("namespace"), wl)
                workloads[wl_name] = ((WORKLOADS, meta.get("namespace"), wl_name), created)

        # Quota in use per queue, by admitted (not finished) workloads.
        used: dict[str, dict[str, Decimal]] = {q: {} for q in self.queues}
        admitted: dict[str, list[tuple[Any, dict[str, Any]]]] = {q: [] for q in self.queues}
        pending = []
        for name, (key, wl) in sorted(workloads.items()):
            q = wl["spec"].get("queueName")
            if name in self.preempt_requests and has_condition(wl, "Admitted"):
                reason, message = self.preempt_requests.pop(name)
                if reason == "InactiveWorkload":
                    wl = await self._deactivate(key, wl)
                await self._evict(key, wl, reason, message)
                continue
            if (wl.get("spec") or {}).get("active") is False:
                continue  # an inactive workload is never admitted (until someone reactivates it)
            if has_condition(wl, "Finished"):
                continue
            if has_condition(wl, "QuotaReserved"):
                if q in used:
                    for k, v in self._usage(wl).items():
                        used[q][k] = used[q].get(k, Decimal(0)) + v
                    admitted[q].append((key, wl))
                await self._track_workload(key, wl)
            else:
                pending.append((key, wl))

        pending.sort(key=lambda kw: (-int(kw[1]["spec"].get("priority", 0)), kw[1]["metadata"]["creationTimestamp"]))
        for key, wl in pending:
            q = wl["spec"].get("queueName")
            new = copy.deepcopy(wl)
            conds = new["status"].get("conditions") or []
            if q not in self.queues:
                new["status"]["conditions"] = set_condition(
                    conds, _condition("QuotaReserved", False, "Inadmissible", f"LocalQueue {q} doesn't exist")
                )
                await self._update(key, wl, new)
                continue
            unavailable = self._uncovered(wl, self.queues[q])
            if unavailable:
                # Kueue's flavor assigner: a resource no resource group covers makes the pod set
                # unassignable; no preemption can change that, so nothing is preempted for it.
                new["status"]["conditions"] = set_condition(conds, _condition("QuotaReserved", False, "Pending", unavailable))
                await self._update(key, wl, new)
                continue
            quota = {k: parse_quantity(v) for k, v in self.queues[q].items()}
            need = self._usage(wl)
            free = {k: quota.get(k, Decimal(0)) - used[q].get(k, Decimal(0)) for k in quota}
            short = _fits(need, free)
            if short:
                # Preempt lower-priority admitted workloads if that makes room.
                prio = int(wl["spec"].get("priority", 0))
                victims = sorted(
                    (v for v in admitted[q] if int(v[1]["spec"].get("priority", 0)) < prio),
                    key=lambda v: (int(v[1]["spec"].get("priority", 0)), v[1]["metadata"]["creationTimestamp"]),
                )
                chosen, freed = [], dict(free)
                for v in victims:
                    if not _fits(need, freed):
                        break
                    chosen.append(v)
                    for k, val in self._usage(v[1]).items():
                        freed[k] = freed.get(k, Decimal(0)) + val
                if chosen and not _fits(need, freed):
                    for vkey, vwl in chosen:
                        await self._evict(vkey, vwl, "Preempted", f"Preempted to accommodate {wl['metadata']['name']}")
                        admitted[q].remove((vkey, vwl))
                        for k, val in self._usage(vwl).items():
                            used[q][k] = used[q].get(k, Decimal(0)) - val
                    short = []
            if short:
                msg = f"couldn't assign flavors to pod set main: insufficient quota for {', '.join(short)}"
                new["status"]["conditions"] = set_condition(conds, _condition("QuotaReserved", False, "Pending", msg))
                await self._update(key, wl, new)
                continue
            for k, v in need.items():
                used[q][k] = used[q].get(k, Decimal(0)) + v
            admitted[q].append((key, new))
            new["status"]["admission"] = {
                "clusterQueue": f"{q}-cq",
                "podSetAssignments": [
                    {
                        "name": ps["name"],
                        "count": ps.get("count", 1),
                        "flavors": {k: "default-flavor" for k in self.queues[q]},
                        "resourceUsage": {
                            k: str(v * int(ps.get("count", 1)))
                            for k, v in pod_requests(ps["template"].get("spec") or {}).items()
                            if k != "pods"
                        },
                    }
                    for ps in new["spec"]["podSets"]
                ],
            }
            conds = set_condition(conds, _condition("QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {q}-cq"))
            conds = set_condition(conds, _condition("Admitted", True, "Admitted", "The workload is admitted"))
            # an earlier eviction's condition, rewritten as Kueue's SetQuotaReservation does: status
            # False, reason QuotaReserved, "Previously: <its message>", the time of this admission
            conds = [c for c in conds if c["type"] not in ("Evicted", "Requeued")] + (
                [dict(c, status="False", reason="QuotaReserved", message=f"Previously: {c.get('message') or ''}",
                      lastTransitionTime=now_iso()) for c in conds if c["type"] == "Evicted"]
            )
            new["status"]["conditions"] = conds
            await self._update(key, wl, new)
            owner = self._owner_of_workload(new)
            if owner is not None:
                _res, okey, oraw = owner
                nraw = copy.deepcopy(oraw)
                nraw["spec"]["suspend"] = False
                await self._update(okey, oraw, nraw)
                await self._event(oraw, "Started", f"Admitted by clusterQueue {q}-cq")

    async def _deactivate(self, key: Any, wl: dict[str, Any]) -> dict[str, Any]:
        new = copy.deepcopy(wl)
        new["spec"]["active"] = False
        await self._update(key, wl, new)
        return new

    async def _evict(self, key: Any, wl: dict[str, Any], reason: str, message: str) -> None:
        new = copy.deepcopy(wl)
        conds = new["status"].get("conditions") or []
        conds = set_condition(conds, _condition("Evicted", True, reason, message))
        conds = set_condition(conds, _condition("QuotaReserved", False, "Pending", message))
        conds = set_condition(conds, _condition("Admitted", False, "NoReservation", message))
        # requeued unless deactivated (Kueue: Requeued=False reason InactiveWorkload)
        conds = set_condition(conds, _condition("Requeued", reason != "InactiveWorkload", reason, message))
        stats = new["status"].setdefault("schedulingStats", {}).setdefault("evictions", [])
        row = next((r for r in stats if r["reason"] == reason), None)
        if row is None:
            stats.append({"reason": reason, "underlyingCause": "", "count": 1})
        else:
            row["count"] += 1
        conds = [c for c in conds if c["type"] != "PodsReady"]
        new["status"]["conditions"] = conds
        new["status"].pop("admission", None)
        await self._update(key, wl, new)
        owner = self._owner_of_workload(new)
        if owner is not None:
            _res, okey, oraw = owner
            nraw = copy.deepcopy(oraw)
            nraw["spec"]["suspend"] = True
            await self._update(okey, oraw, nraw)
            await self._event(oraw, "Preempted" if reason == "Preempted" else "Evicted", message, "Warning")

    async def _track_workload(self, key: Any, wl: dict[str, Any]) -> None:
        owner = self._owner_of_workload(wl)
        if owner is None:
            return
        res, _okey, oraw = owner
        new = copy.deepcopy(wl)
        conds = new["status"].get("conditions") or []
        if res == JOBS:
            finished = has_condition(oraw, "Complete") or has_condition(oraw, "Failed")
            ready = int((oraw.get("status") or {}).get("ready") or 0) >= int(oraw["spec"].get("parallelism", 1))
        else:
            finished = has_condition(oraw, "Completed") or has_condition(oraw, "Failed")
            want = sum(ps["count"] for ps in wl["spec"]["podSets"])
            have = sum(int(s.get("ready", 0)) for s in (oraw.get("status") or {}).get("replicatedJobsStatus") or [])
            ready = have >= want
        if ready and not has_condition(wl, "PodsReady"):
            conds = set_condition(conds, _condition("PodsReady", True, "PodsReady", "All pods reached readiness"))
        if finished:
            ok = has_condition(oraw, "Complete") or has_condition(oraw, "Completed")
            conds = set_condition(
                conds, _condition("Finished", True, "Succeeded" if ok else "Failed", "Job finished")
            )
        new["status"]["conditions"] = conds
        await self._update(key, wl, new)

    # ------------------------------------------------------------------ Job controller
    async def job_controller(self) -> None:
        pods = self.api.live(PODS)
        for key, raw in self.api.live(JOBS):
            job = copy.deepcopy(raw)
            meta, spec = job["metadata"], job.setdefault("spec", {})
            ns = meta.get("namespace") or "default"
            status = job.setdefault("status", {})
            conds = status.get("conditions") or []
            mine = [
                (k, p)
                for k, p in pods
                if any(o.get("uid") == meta["uid"] for o in p["metadata"].get("ownerReferences") or [])
            ]
            if has_condition(job, "Complete") or has_condition(job, "Failed"):
                continue
            active = [(k, p) for k, p in mine if p["status"].get("phase") in ("Pending", "Running")
                      and not p["metadata"].get("deletionTimestamp")]
            succeeded = [p for _, p in mine if p["status"].get("phase") == "Succeeded"]
            # a pod the controller deleted because the Job was suspended is not a failure (its
            # tracking finalizer was removed first)
            failed = [p for _, p in mine if p["status"].get("phase") == "Failed"
                      and p["metadata"]["uid"] not in self.uncounted_pods]
            completions = int(spec.get("completions", 1) or 1)
            parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
            backoff = int(spec.get("backoffLimit", 6) if spec.get("backoffLimit") is not None else 6)
            if spec.get("suspend"):
                for pkey, pod in active:
                    await self._disrupt_pod(pkey, pod, "JobSuspended", "Job suspended", suspended=True)
                conds = set_condition(conds, _condition("Suspended", True, "JobSuspended", "Job suspended"))
                status.update(conditions=conds, active=0, ready=0)
                status.pop("startTime", None)
                await self._update(key, raw, job)
                continue
            if has_condition(job, "Suspended"):
                conds = set_condition(conds, _condition("Suspended", False, "JobResumed", "Job resumed"))
            status.setdefault("startTime", now_iso())
            # podFailurePolicy: each failed pod is Ignored (not counted, replaced), fails the Job,
            # or Counts against backoffLimit (no rule matched, or no policy)
            fail_job = None
            counted = []
            for p in failed:
                action, why = self._pod_failure_action(spec.get("podFailurePolicy"), p, ns)
                if action == "FailJob" and fail_job is None:
                    fail_job = why
                if action != "Ignore":
                    counted.append(p)
            failed = counted
            terminating = [(k, p) for k, p in mine if p["metadata"].get("deletionTimestamp")
                           and p["status"].get("phase") in ("Pending", "Running")]
            status.update(
                active=len(active),
                ready=sum(1 for _, p in active if has_condition(p, "Ready")),
                succeeded=len(succeeded),
                failed=len(failed),
                terminating=len(terminating),
            )
            if fail_job is not None:
                for pkey, pod in active:
                    await self._disrupt_pod(pkey, pod, "PodFailurePolicy", fail_job, condition=False)
                conds = set_condition(conds, _condition("FailureTarget", True, "PodFailurePolicy", fail_job))
                conds = set_condition(conds, _condition("Failed", True, "PodFailurePolicy", fail_job))
                status.update(conditions=conds, active=0)
                await self._update(key, raw, job)
                await self._event(job, "PodFailurePolicy", fail_job, "Warning")
                continue
            deadline = spec.get("activeDeadlineSeconds")
            start = _epoch(status.get("startTime"))
            if deadline is not None and start is not None and time.time() - start > float(deadline):
                for pkey, pod in active:
                    await self._disrupt_pod(pkey, pod, "DeadlineExceeded", "Job was active longer than specified deadline", condition=False)
                conds = set_condition(conds, _condition("FailureTarget", True, "DeadlineExceeded", "Job was active longer than specified deadline"))
                conds = set_condition(conds, _condition("Failed", True, "DeadlineExceeded", "Job was active longer than specified deadline"))
                status.update(conditions=conds, active=0)
                await self._update(key, raw, job)
                await self._event(job, "DeadlineExceeded", "Job was active longer than specified deadline", "Warning")
                continue
            if len(failed) > backoff:
                for pkey, pod in active:
                    await self._disrupt_pod(pkey, pod, "BackoffLimitExceeded", "Job has reached the specified backoff limit", condition=False)
                conds = set_condition(conds, _condition("FailureTarget", True, "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
                conds = set_condition(conds, _condition("Failed", True, "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
                status.update(conditions=conds, active=0)
                await self._update(key, raw, job)
                await self._event(job, "BackoffLimitExceeded", "Job has reached the specified backoff limit", "Warning")
                continue
            if len(succeeded) >= completions and not active:
                conds = set_condition(conds, _condition("SuccessCriteriaMet", True, "CompletionsReached", "Reached expected number of succeeded pods"))
                conds = set_condition(conds, _condition("Complete", True, "CompletionsReached", "Reached expected number of succeeded pods"))
                status.update(conditions=conds, completionTime=now_iso())
                await self._update(key, raw, job)
                await self._event(job, "Completed", "Job completed")
                continue
            indexed = spec.get("completionMode") == "Indexed"
            done_idx = {
                p["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index")
                for p in succeeded
            }
            busy_idx = {
                p["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index") for _, p in active
            }
            want = min(parallelism, completions - len(succeeded)) - len(active)
            if spec.get("podReplacementPolicy") == "Failed" and terminating:
                want = 0  # a replacement only once the old pod has stopped
            for i in range(completions):
                if want <= 0:
                    break
                idx = str(i) if indexed else None
                if indexed and (idx in done_idx or idx in busy_idx):
                    continue
                attempt = len(failed) + len(succeeded) + len(active)
                await self._create_pod(job, ns, idx, attempt)
                want -= 1
            status["conditions"] = conds
            await self._update(key, raw, job)

    @staticmethod
    def _pod_failure_action(policy: dict[str, Any] | None, pod: dict[str, Any], ns: str) -> tuple[str, str]:
        """The first podFailurePolicy rule that matches a failed pod: (action, message)."""
        for i, rule in enumerate((policy or {}).get("rules") or []):
            for pc in rule.get("onPodConditions") or []:
                if has_condition(pod, pc["type"], pc.get("status", "True")):
                    return rule["action"], (f"Pod {ns}/{pod['metadata']['name']} has condition {pc['type']} "
                                            f"matching {rule['action']} rule at index {i}")
            codes = rule.get("onExitCodes")
            if codes:
                for cs in pod["status"].get("containerStatuses") or []:
                    term = (cs.get("state") or {}).get("terminated")
                    if term is None or (codes.get("containerName") and cs["name"] != codes["containerName"]):
                        continue
                    hit = term.get("exitCode") in (codes.get("values") or [])
                    if hit == (codes.get("operator", "In") == "In"):
                        return rule["action"], (f"Container {cs['name']} for pod {ns}/{pod['metadata']['name']} failed "
                                                f"with exit code {term.get('exitCode')} matching {rule['action']} rule at index {i}")
        return "Count", ""

    def enforced_level(self, ns: str) -> str | None:
        """The Pod Security level namespace ``ns`` enforces: its Namespace object's label, else the
        harness's setting for it."""
        for _key, obj in self.api.live(NAMESPACES):
            if obj["metadata"]["name"] == ns:
                return (obj["metadata"].get("labels") or {}).get(ENFORCE_LABEL)
        return self.pod_security.get(ns)

    async def _create_pod(self, job: dict[str, Any], ns: str, index: str | None, attempt: int) -> None:
        meta = job["metadata"]
        tmpl = copy.deepcopy(job["spec"].get("template") or {})
        pmeta = tmpl.get("metadata") or {}
        suffix = _short_hash(meta["uid"], str(index), str(attempt), str(time.time_ns()))
        name = f"{meta['name']}-{index}-{suffix}" if index is not None else f"{meta['name']}-{suffix}"
        labels = {
            **(pmeta.get("labels") or {}),
            "job-name": meta["name"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "batch.kubernetes.io/controller-uid": meta["uid"],
        }
        annotations = dict(pmeta.get("annotations") or {})
        pspec = tmpl.get("spec") or {}
        if index is not None:
            labels["batch.kubernetes.io/job-completion-index"] = index
            annotations["batch.kubernetes.io/job-completion-index"] = index
            for c in pspec.get("containers") or []:
                c["env"] = [*(c.get("env") or []), {"name": "JOB_COMPLETION_INDEX", "value": index}]
            if pspec.get("subdomain"):
                pspec.setdefault("hostname", f"{meta['name']}-{index}")
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pspec,
            "status": {"phase": "Pending"},
        }
        level = self.enforced_level(ns)
        refused = forbidden_message(name, pspec, level) if level else None
        if refused:
            # Pod Security admission refuses the Job controller's create: no pod, a FailedCreate
            # event on the Job, and another try after a back-off (the controller's is 10 s and up)
            if time.monotonic() >= self.refused_until.get(meta["uid"], 0.0):
                self.refused_until[meta["uid"]] = time.monotonic() + 1.0
                await self._event(job, "FailedCreate", f"Error creating: {refused}", "Warning")
            return
        await self.api.put_object(PODS, ns, pod)
        await self._event(job, "SuccessfulCreate", f"Created pod: {name}")

    async def _disrupt_pod(self, key: Any, pod: dict[str, Any], reason: str, message: str,
                           *, suspended: bool = False, condition: bool = True) -> None:
        """Graceful deletion, as the kubelet does it: DisruptionTarget and a deletionTimestamp,
        the processes stopped, the pod failed, and the object removed ``grace_seconds`` later
        (its log stays readable until then).

        ``suspended``: the Job controller deleting the pods of a Job that was suspended (Kueue
        preempted it). It removes the pod's tracking finalizer before the DELETE
        (``deleteJobPods``), so the pod never counts as a failure of the Job, and a plain DELETE
        sets no DisruptionTarget: the pod just fails with the signal (143).
        ``condition=False``: any other plain DELETE of the Job or JobSet controller (the Job failed:
        its deadline, backoff limit or pod failure policy; the JobSet failed): no DisruptionTarget
        either, which only the disruptions set (the Eviction API, the scheduler's preemption, the
        taint manager, the pod GC, the kubelet): it once marked the peers of a drained gang node
        as disrupted themselves."""
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return
        new = copy.deepcopy(pod)
        new["metadata"]["deletionTimestamp"] = now_iso()
        if suspended:
            self.uncounted_pods.add(pod["metadata"]["uid"])
        elif condition:
            new["status"]["conditions"] = set_condition(
                new["status"].get("conditions") or [], _condition("DisruptionTarget", True, reason, message)
            )
        await self._update(key, pod, new)
        run = self.runs.get(pod["metadata"]["uid"])
        if run is not None:
            await self._kill(run, reason)
        self.terminating[key] = time.time() + self.grace_seconds

    async def _terminate_job_pods(self, job_name: str, ns: str) -> None:
        for key, pod in self.api.live(PODS, ns):
            if (pod["metadata"].get("labels") or {}).get("job-name") == job_name and pod["status"].get("phase") in (
                "Pending",
                "Running",
            ):
                await self._disrupt_pod(key, pod, "JobSetFailed", "JobSet failed", condition=False)

    async def _delete_with_dependents(self, key: Any) -> None:
        await self.api.remove_object(key)  # the GC removes the dependents on the next pass

    # ------------------------------------------------------------------ scheduler
    async def scheduler(self) -> None:
        pods = self.api.live(PODS)
        used: dict[str, dict[str, Decimal]] = {n.name: {} for n in self.nodes}
        for _k, p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node in used and p["status"].get("phase") in ("Pending", "Running"):
                for r, v in pod_requests(p["spec"]).items():
                    used[node][r] = used[node].get(r, Decimal(0)) + v
        # pods on nodes (pending or running): (node labels, namespace, pod labels, pod spec)
        node_labels = {n.name: {"kubernetes.io/hostname": n.name, **n.labels} for n in self.nodes}
        placed = [
            (node_labels[p["spec"]["nodeName"]], p["metadata"].get("namespace"), p["metadata"].get("labels") or {}, p["spec"])
            for _k, p in pods
            if (p.get("spec") or {}).get("nodeName") in node_labels and p["status"].get("phase") in ("Pending", "Running")
        ]
        for key, pod in pods:
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or pod["status"].get("phase") != "Pending" or pod["metadata"].get("deletionTimestamp"):
                continue
            need = pod_requests(spec)
            ns, plabels = pod["metadata"].get("namespace"), pod["metadata"].get("labels") or {}
            reasons: dict[str, int] = {}
            chosen = None
            for node in self.nodes:
                labels = {"kubernetes.io/hostname": node.name, **node.labels}
                if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()) or not _node_affinity_ok(spec, labels):
                    reasons["node(s) didn't match Pod's node affinity/selector"] = reasons.get("node(s) didn't match Pod's node affinity/selector", 0) + 1
                    continue
                # required pod anti-affinity, both ways: this pod's terms against the pods in the
                # node's topology domain, and theirs against this pod
                conflict = False
                for other_node, other_ns, other_labels, other_spec in placed:
                    for term in _anti_terms(spec):
                        tk = term.get("topologyKey", "kubernetes.io/hostname")
                        if tk in labels and other_node.get(tk) == labels[tk] and other_ns == ns and \
                                selector_matches(term.get("labelSelector"), other_labels):
                            conflict = True
                    for term in _anti_terms(other_spec):
                        tk = term.get("topologyKey", "kubernetes.io/hostname")
                        if tk in labels and other_node.get(tk) == labels[tk] and other_ns == ns and \
                                selector_matches(term.get("labelSelector"), plabels):
                            conflict = True
                if conflict:
                    msg = "node(s) didn't match pod anti-affinity rules"
                    reasons[msg] = reasons.get(msg, 0) + 1
                    continue
                untolerated = [
                    t for t in node.taints if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(spec.get("tolerations") or [], t)
                ]
                if untolerated:
                    msg = f"node(s) had untolerated taint {{{untolerated[0]['key']}: {untolerated[0].get('value', '')}}}"
                    reasons[msg] = reasons.get(msg, 0) + 1
                    continue
                free = {r: parse_quantity(v) - used[node.name].get(r, Decimal(0)) for r, v in node.capacity.items()}
                short = _fits(need, free)
                if short:
                    msg = f"Insufficient {short[0]}"
                    reasons[msg] = reasons.get(msg, 0) + 1
                    continue
                chosen = node
                break
            new = copy.deepcopy(pod)
            if chosen is None:
                detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
                msg = f"0/{len(self.nodes)} nodes are available: {detail}."
                if not any(c.get("message") == msg for c in pod["status"].get("conditions") or []):
                    new["status"]["conditions"] = set_condition(
                        new["status"].get("conditions") or [], _condition("PodScheduled", False, "Unschedulable", msg)
                    )
                    await self._update(key, pod, new)
                    await self._event(pod, "FailedScheduling", msg, "Warning")
                continue
            for r, v in need.items():
                used[chosen.name][r] = used[chosen.name].get(r, Decimal(0)) + v
            placed.append((node_labels[chosen.name], ns, plabels, spec))
            new["spec"]["nodeName"] = chosen.name
            new["status"]["conditions"] = set_condition(
                new["status"].get("conditions") or [], _condition("PodScheduled", True, "Scheduled")
            )
            new["status"].update(hostIP="127.0.0.1", podIP="127.0.0.1")
            await self._update(key, pod, new)
            await self._event(pod, "Scheduled", f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {chosen.name}")

    # ------------------------------------------------------------------ kubelet
    def image_id(self, image: str) -> str:
        repo = image.split("@", 1)[0]
        if "@sha256:" in image:
            digest = image.split("@", 1)[1]
        else:
            repo = repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo
            digest = "sha256:" + hashlib.sha256(image.encode()).hexdigest()
        return f"docker-pullable://{repo}@{digest}"

    def _unpullable(self, image: str) -> bool:
        host = image.split("/", 1)[0] if "/" in image else ""
        return image in self.unpullable or host.endswith(".invalid")

    def _pull_failure(self, image: str, run: _PodRun) -> str | None:
        """What the container runtime answers a pull of ``image`` now, as containerd words it: not
        found for good (``unpullable``), a registry's rate limit for the first ``flaky_pulls[image]``
        seconds of the pod's pulls, else None (it pulls)."""
        if self._unpullable(image):
            return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": failed to resolve '
                    f'reference "{image}": {image}: not found')
        if time.time() - run.pull_started < self.flaky_pulls.get(image, 0.0):
            return (f'rpc error: code = Unknown desc = failed to pull and unpack image "{image}": failed to copy: '
                    "httpReadSeeker: failed open: unexpected status code https://registry.example/v2/bench/manifests/"
                    "sha256:0: 429 Too Many Requests - Server message: toomanyrequests: You have reached your pull "
                    "rate limit")
        return None

    async def kubelet(self) -> None:
        live_uids = set()
        for key, pod in self.api.live(PODS):
            uid = pod["metadata"]["uid"]
            live_uids.add(uid)
            spec = pod.get("spec") or {}
            phase = pod["status"].get("phase")
            if not spec.get("nodeName") or phase not in ("Pending", "Running") or pod["metadata"].get("deletionTimestamp"):
                continue
            fault = self.pod_faults.pop(pod["metadata"]["name"], None)
            run = self.runs.get(uid)
            if fault is not None and fault[0] == "NodeLost":
                # the node is unreachable: its kubelet reports nothing more, and the taint manager deletes
                # the pod (DisruptionTarget, a deletionTimestamp), which stays Terminating, phase Running
                self.lost.add(uid)
                lost = copy.deepcopy(pod)
                lost["metadata"]["deletionTimestamp"] = now_iso()
                lost["status"]["conditions"] = set_condition(
                    lost["status"].get("conditions") or [], _condition("DisruptionTarget", True, "DeletionByTaintManager",
                                                                       fault[1]))
                await self._update(key, pod, lost)
                if run is not None:  # (its processes stop here; nothing of theirs is reported)
                    await self._kill(run, "NodeLost")
                continue
            if fault is not None and fault[0] == "OOMKilled":
                if run is not None:  # the container dies; _publish reports OOMKilled
                    await self._kill(run, "OOMKilled")
                continue
            if fault is not None:
                if fault[0] == "Evicted":
                    # the kubelet adds DisruptionTarget before it stops the containers (kill first, and the
                    # container's own exit could be published, 143 with no DisruptionTarget, before the
                    # eviction was: the launcher then read a failure, not an eviction, under load)
                    marked = copy.deepcopy(pod)
                    marked["status"]["conditions"] = set_condition(
                        marked["status"].get("conditions") or [],
                        _condition("DisruptionTarget", True, "TerminationByKubelet", fault[1]))
                    await self._update(key, pod, marked)
                    pod = marked
                if run is not None:
                    await self._kill(run, fault[0])
                new = copy.deepcopy(pod)
                new["status"].update(phase="Failed", reason=fault[0], message=fault[1])
                if fault[0] == "Evicted":
                    new["status"]["conditions"] = set_condition(
                        new["status"].get("conditions") or [], _condition("DisruptionTarget", True, "TerminationByKubelet", fault[1])
                    )
                await self._update(key, pod, new)
                continue
            if run is None:
                run = _PodRun(uid, pod["metadata"]["name"], pod["metadata"].get("namespace") or "default", self.root / "pods" / f"{pod['metadata']['name']}-{uid[:8]}")
                run.pull_started = time.time()
                self.runs[uid] = run
                # the kubelet accepts the pod: startTime is now, before the image pull (the
                # clock activeDeadlineSeconds counts on)
                new = copy.deepcopy(pod)
                new["status"]["startTime"] = now_iso()
                await self._update(key, pod, new)
                pod = new
            deadline = spec.get("activeDeadlineSeconds")
            started = _epoch(pod["status"].get("startTime"))
            if run.task is None and deadline is not None and started is not None and time.time() - started > float(deadline):
                # the deadline passed before a container started (still pulling)
                run.killed_reason = "DeadlineExceeded"
                new = copy.deepcopy(pod)
                new["status"].update(phase="Failed", reason="DeadlineExceeded",
                                     message="Pod was active on the node longer than the specified deadline")
                await self._update(key, pod, new)
                await self._event(pod, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline", "Warning")
                continue
            failures = {c["name"]: self._pull_failure(c.get("image", ""), run) for c in spec.get("containers") or []}
            bad = [c for c in spec.get("containers") or [] if failures[c["name"]]]
            if bad and run.task is None:
                reason = "ErrImagePull" if time.time() - run.pull_started < self.pull_seconds * 3 else "ImagePullBackOff"
                new = copy.deepcopy(pod)
                new["status"]["containerStatuses"] = [
                    {
                        "name": c["name"],
                        "image": c.get("image"),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "waiting": {
                                "reason": reason if c in bad else "PodInitializing",
                                # the runtime's answer on ErrImagePull; the back-off says only that it waits
                                "message": ("" if c not in bad else failures[c["name"]] if reason == "ErrImagePull"
                                            else f'Back-off pulling image "{c.get("image")}"'),
                            }
                        },
                    }
                    for c in spec.get("containers") or []
                ]
                if json.dumps(new, sort_keys=True) != json.dumps(pod, sort_keys=True):
                    await self._update(key, pod, new)
                    await self._event(pod, "Failed", f'Failed to pull image "{bad[0].get("image")}": '
                                      f'{failures[bad[0]["name"]]}', "Warning")
                    # then, as a kubelet does, the bare reason: the newest Failed event says only that
                    await self._event(pod, "Failed", f"Error: {reason}", "Warning")
                continue
            if run.task is None and time.time() - run.pull_started >= self.pull_seconds:
                run.task = asyncio.create_task(self._run_pod(key, pod, run))
            elif run.task is None:
                new = copy.deepcopy(pod)
                new["status"]["containerStatuses"] = [
                    {"name": c["name"], "image": c.get("image"), "imageID": "", "ready": False, "restartCount": 0,
                     "state": {"waiting": {"reason": "ContainerCreating"}}}
                    for c in spec.get("containers") or []
                ]
                await self._update(key, pod, new)
            deadline = spec.get("activeDeadlineSeconds")
            started = _epoch(pod["status"].get("startTime"))
            if deadline is not None and started is not None and time.time() - started > float(deadline) and not run.killed_reason:
                await self._kill(run, "DeadlineExceeded")
        for uid in list(self.runs):
            if uid not in live_uids:
                run = self.runs.pop(uid)
                await self._kill(run, "Deleted")
                async with run.changed:
                    run.changed.notify_all()

    def _volume_dirs(self, pod: dict[str, Any], run: _PodRun) -> dict[str, Path]:
        out: dict[str, Path] = {}
        ns = run.namespace
        for vol in (pod.get("spec") or {}).get("volumes") or []:
            name = vol["name"]
            if "hostPath" in vol:
                out[name] = Path(vol["hostPath"]["path"])
            elif "persistentVolumeClaim" in vol:
                out[name] = self.root / "pvcs" / ns / vol["persistentVolumeClaim"]["claimName"]
            else:
                out[name] = run.scratch / "volumes" / name
            out[name].mkdir(parents=True, exist_ok=True)
            for src_kind, res in (("configMap", CONFIGMAPS), ("secret", SECRETS)):
                if src_kind in vol:
                    ref = vol[src_kind].get("name") or vol[src_kind].get("secretName")
                    for _k, obj in self.api.live(res, ns):
                        if obj["metadata"]["name"] == ref:
                            for fname, text in (obj.get("data") or {}).items():
                                if src_kind == "secret":
                                    import base64

                                    (out[name] / fname).write_bytes(base64.b64decode(text))
                                else:
                                    (out[name] / fname).write_text(text)
                            for fname, text in (obj.get("stringData") or {}).items():
                                (out[name] / fname).write_text(text)
        return out

    @staticmethod
    def _rewrite(value: str, mounts: list[tuple[str, Path]]) -> str:
        for mount_path, host in mounts:  # longest first
            if value == mount_path:
                return str(host)
            if value.startswith(mount_path.rstrip("/") + "/"):
                return str(host) + value[len(mount_path.rstrip("/")):]
            if value.startswith(mount_path.rstrip("/") + ":") or ("=" + mount_path) in value:
                return value.replace(mount_path, str(host))
        return value

    def _env(self, pod: dict[str, Any], container: dict[str, Any], image: Image, mounts: list[tuple[str, Path]], run: _PodRun) -> dict[str, str]:
        env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")}
        env.update(self.host_env)
        env.update(image.env)
        env["HOME"] = str(run.scratch / "home")
        (run.scratch / "home").mkdir(parents=True, exist_ok=True)
        env["HOSTNAME"] = (pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"]
        for src in container.get("envFrom") or []:
            for kind, res in (("secretRef", SECRETS), ("configMapRef", CONFIGMAPS)):
                ref = (src.get(kind) or {}).get("name")
                for _k, obj in self.api.live(res, run.namespace) if ref else []:
                    if obj["metadata"]["name"] != ref:
                        continue
                    for k, v in (obj.get("data") or {}).items():
                        if kind == "secretRef":
                            import base64

                            v = base64.b64decode(v).decode()
                        env[(src.get("prefix") or "") + k] = v
                    for k, v in (obj.get("stringData") or {}).items():
                        env[(src.get("prefix") or "") + k] = v
        for e in container.get("env") or []:
            if "value" in e:  # the kubelet expands $(VAR) in values too, from what is defined before
                env[e["name"]] = self._rewrite(expand_k8s(str(e["value"]), dict(env)), mounts)
            elif "valueFrom" in e and "fieldRef" in e["valueFrom"]:
                path = e["valueFrom"]["fieldRef"]["fieldPath"]
                m = pod["metadata"]
                lookup = {
                    "metadata.name": m["name"],
                    "metadata.namespace": m.get("namespace", ""),
                    "metadata.uid": m.get("uid", ""),
                    "spec.nodeName": (pod.get("spec") or {}).get("nodeName", ""),
                    "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", "default"),
                    "status.podIP": "127.0.0.1",
                    "status.hostIP": "127.0.0.1",
                }
                if path.startswith("metadata.labels['"):
                    env[e["name"]] = (m.get("labels") or {}).get(path[len("metadata.labels['"):-2], "")
                elif path.startswith("metadata.annotations['"):
                    env[e["name"]] = (m.get("annotations") or {}).get(path[len("metadata.annotations['"):-2], "")
                else:
                    env[e["name"]] = lookup.get(path, "")
            elif "valueFrom" in e and "resourceFieldRef" in e["valueFrom"]:
                ref = e["valueFrom"]["resourceFieldRef"]
                kind, _, res = ref["resource"].partition(".")
                val = ((container.get("resources") or {}).get(kind) or {}).get(res, "")
                env[e["name"]] = str(val)
        return env

    async def _run_pod(self, key: Any, pod: dict[str, Any], run: _PodRun) -> None:
        try:
            await self._run_pod_inner(key, pod, run)
        except Exception as exc:
            import traceback

            self.errors.append("".join(traceback.format_exception(exc)))

    async def _run_pod_inner(self, key: Any, pod: dict[str, Any], run: _PodRun) -> None:
        spec = pod.get("spec") or {}
        run.scratch.mkdir(parents=True, exist_ok=True)
        vols = self._volume_dirs(pod, run)
        started_at = now_iso()
        for c in spec.get("containers") or []:
            image = self.images.get(c.get("image", ""), self.default_image)
            mounts = sorted(
                ((m["mountPath"], vols[m["name"]] / m.get("subPath", "")) for m in c.get("volumeMounts") or [] if m["name"] in vols),
                key=lambda mp: -len(mp[0]),
            )
            # the kubelet expands $(VAR) from the container's own env (and $$ to $) in command and
            # args; only then are mount paths rewritten to where the harness keeps them
            env = self._env(pod, c, image, mounts, run)
            ambient = set(self.host_env) | set(image.env) | {"PATH", "HOME", "HOSTNAME"}
            declared = {e["name"] for e in c.get("env") or []}
            refs = {k: v for k, v in env.items() if k in declared or k not in ambient}
            words = (c.get("command") or []) + (c.get("args") or [])
            argv = ([self._rewrite(a, mounts) for a in image.entrypoint or []] if not c.get("command") else []) + [
                self._rewrite(expand_k8s(a, refs), mounts) for a in words]
            cont = _Container(c["name"], image=c.get("image", ""), image_id=self.image_id(c.get("image", "")))
            run.containers[c["name"]] = cont
            (run.scratch / "logs").mkdir(parents=True, exist_ok=True)
            if c.get("workingDir"):
                cwd = Path(self._rewrite(c["workingDir"], mounts))
                if cwd == Path(c["workingDir"]):  # not under a mount: inside the pod's root
                    cwd = run.scratch / "rootfs" / c["workingDir"].lstrip("/")
            else:
                cwd = Path(image.workdir) if image.workdir else run.scratch / "rootfs"
            cwd.mkdir(parents=True, exist_ok=True)
            if not argv:
                cont.done, cont.exit_code, cont.reason = True, 128, "ContainerCannotRun"
                continue
            try:
                cont.proc = await asyncio.create_subprocess_exec(
                    *argv,
                    cwd=str(cwd),
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    limit=1 << 24,
                )
            except OSError as exc:
                cont.done, cont.exit_code, cont.reason = True, 128, "StartError"
                cont.lines.append((self._log_ts(), f"exec: {exc}\n".encode()))
                continue
            cont.started = now_iso()
        await self._publish(key, run, started_at)
        await asyncio.gather(*(self._pump(run, cont) for cont in run.containers.values() if cont.proc is not None))
        await self._publish(key, run, started_at)

    @staticmethod
    def _log_ts() -> str:
        t = time.time_ns()
        return dt.datetime.fromtimestamp(t // 1_000_000_000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{t % 1_000_000_000:09d}Z"

    async def _pump(self, run: _PodRun, cont: _Container) -> None:
        assert cont.proc is not None and cont.proc.stdout is not None
        path = run.scratch / "logs" / f"{cont.name}.log"
        logfile = path.open("ab")
        try:
            while True:
                line = await cont.proc.stdout.readline()
                if not line:
                    break
                ts = self._log_ts()
                cont.lines.append((ts, line))
                record = ts.encode() + b" " + line
                logfile.write(record)
                logfile.flush()
                cont.file_bytes += len(record)
                if self.log_max_bytes and cont.file_bytes >= self.log_max_bytes:
                    # the kubelet rotates the container log at containerLogMaxSize: the API's log
                    # endpoint serves the current file only (a follow keeps streaming across it)
                    logfile.close()
                    cont.rotations += 1
                    path.rename(path.with_name(f"{path.name}.{cont.rotations}"))
                    logfile = path.open("ab")
                    cont.rotated_at, cont.file_bytes = len(cont.lines), 0
                async with run.changed:
                    run.changed.notify_all()
            rc = await cont.proc.wait()
        finally:
            logfile.close()
        cont.exit_code = 128 - rc if rc < 0 else rc  # killed by signal N: exit code 128+N
        cont.finished = now_iso()
        if run.killed_reason == "OOMKilled":
            cont.reason = "OOMKilled"
        elif cont.reason is None:
            cont.reason = "Completed" if cont.exit_code == 0 else "Error"
        cont.done = True
        async with run.changed:
            run.changed.notify_all()

    async def _publish(self, key: Any, run: _PodRun, started_at: str) -> None:
        """Write the pod's status from its containers' state (nothing once its node is lost)."""
        if run.uid in self.lost:
            return
        async with self.api._lock:
            obj = self.api._objects[key] if key in self.api._objects else None
            if obj is None or obj.deleted or obj.raw["metadata"]["uid"] != run.uid:
                return
            pod = copy.deepcopy(obj.raw)
        statuses = []
        all_done = all(c.done for c in run.containers.values())
        for cont in run.containers.values():
            if cont.done:
                state = {
                    "terminated": {
                        "exitCode": cont.exit_code,
                        "reason": cont.reason,
                        "startedAt": cont.started or started_at,
                        "finishedAt": cont.finished or now_iso(),
                        "containerID": f"containerd://{_short_hash(run.uid, cont.name)}",
                    }
                }
            else:
                state = {"running": {"startedAt": cont.started}}
            statuses.append(
                {
                    "name": cont.name,
                    "image": cont.image,
                    "imageID": cont.image_id,
                    "containerID": f"containerd://{_short_hash(run.uid, cont.name)}",
                    "ready": not cont.done,
                    "started": not cont.done,
                    "restartCount": 0,
                    "state": state,
                }
            )
        status = pod["status"]
        old = copy.deepcopy(pod)
        status["containerStatuses"] = statuses
        status.setdefault("startTime", started_at)
        conds = status.get("conditions") or []
        if all_done:
            ok = all(c.exit_code == 0 for c in run.containers.values())
            status["phase"] = "Succeeded" if ok else "Failed"
            if run.killed_reason == "DeadlineExceeded":
                status.update(phase="Failed", reason="DeadlineExceeded", message="Pod was active on the node longer than the specified deadline")
            conds = set_condition(conds, _condition("Ready", False, "PodCompleted"))
            conds = set_condition(conds, _condition("ContainersReady", False, "PodCompleted"))
        else:
            status["phase"] = "Running"
            conds = set_condition(conds, _condition("Initialized", True))
            conds = set_condition(conds, _condition("ContainersReady", True))
            conds = set_condition(conds, _condition("Ready", True))
        status["conditions"] = conds
        await self._update(key, old, pod)
        if not all_done:
            await self._event(pod, "Started", "Started container(s)")

    async def _kill(self, run: _PodRun, reason: str) -> None:
        run.killed_reason = run.killed_reason or reason
        procs = [c.proc for c in run.containers.values() if c.proc is not None and c.proc.returncode is None]
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM if reason != "OOMKilled" else signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), timeout=3)
            except TimeoutError:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                await proc.wait()

    async def serve_log(self, ns: str, name: str, params: dict[str, str]) -> Any:
        target = None
        for _key, pod in self.api.live(PODS, ns):
            if pod["metadata"]["name"] == name:
                target = pod
        if target is None:
            raise kmock.KubernetesError(status=404, reason="NotFound", message=f'pods "{name}" not found')
        run = self.runs.get(target["metadata"]["uid"])
        containers = [c["name"] for c in (target.get("spec") or {}).get("containers") or []]
        cname = params.get("container") or (containers[0] if containers else "")
        if cname not in containers:
            raise kmock.KubernetesError(status=400, reason="BadRequest", message=f"container {cname} is not valid for pod {name}")
        cont = run.containers.get(cname) if run is not None else None
        if cont is None:
            raise kmock.KubernetesError(
                status=400, reason="BadRequest", message=f'container "{cname}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        timestamps = str(params.get("timestamps", "")).lower() in ("true", "1")
        since = float(params["sinceSeconds"]) if params.get("sinceSeconds") else None
        cutoff = time.time() - since if since is not None else None
        tail = int(params["tailLines"]) if params.get("tailLines") else None

        def render(lines: list[tuple[str, bytes]]) -> bytes:
            picked = [
                (ts, line) for ts, line in lines if cutoff is None or (_epoch(ts[:19] + "Z") or 0) >= int(cutoff)
            ]
            return b"".join((ts.encode() + b" " if timestamps else b"") + line for ts, line in picked)

        if str(params.get("follow", "")).lower() not in ("true", "1"):
            current = cont.lines[cont.rotated_at:]  # rotated files are not served
            lines = current[-tail:] if tail else current
            return render(list(lines))

        assert run is not None

        async def follow() -> Any:
            yield b""
            sent = max(cont.rotated_at, len(cont.lines) - tail) if tail else cont.rotated_at
            while True:
                if sent < len(cont.lines):
                    chunk = cont.lines[sent:]
                    sent += len(chunk)
                    yield render(chunk)
                    continue
                if cont.done or run.uid not in self.runs:
                    return
                async with run.changed:
                    try:
                        await asyncio.wait_for(run.changed.wait(), timeout=0.5)
                    except TimeoutError:
                        pass

        return follow()

    # ------------------------------------------------------------------ TTL + GC
    async def ttl_and_gc(self) -> None:
        now = time.time()
        for key, due in list(self.terminating.items()):
            if now >= due:
                del self.terminating[key]
                await self.api.remove_object(key)
        for key, job in self.api.live(JOBS):
            ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
            if ttl is None:
                continue
            done = [
                _epoch(c.get("lastTransitionTime"))
                for c in (job.get("status") or {}).get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ]
            if not done or done[0] is None:
                continue
            # The condition's time has whole seconds, so it can read up to 1 s early; like the real
            # TTL controller (which learns of the finish from a watch event, after the update), count
            # from the first tick that saw the Job finished, so Kueue marks its Workload Finished first.
            seen = self.ttl_seen.setdefault(job["metadata"]["uid"], now)
            if now - max(done[0], seen) >= float(ttl):
                self.ttl_seen.pop(job["metadata"]["uid"], None)
                await self.api.remove_object(key)
        uids = set()
        everything = [(k, o) for k, o in list(self.api._objects.items()) if not o.deleted]
        for _k, o in everything:
            uids.add(o.raw["metadata"].get("uid"))
        for k, o in everything:
            refs = o.raw["metadata"].get("ownerReferences") or []
            if refs and not any(r.get("uid") in uids for r in refs):
                run = self.runs.get(o.raw["metadata"].get("uid"))
                if run is not None:
                    await self._kill(run, "Deleted")
                await self.api.remove_object(k)
