"""``Cluster``: the harness API server (kmock over HTTP on 127.0.0.1) plus its control plane,
run in a background thread, with a kubeconfig that the real ``kubernetes`` client loads."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import kmock
import yaml

from .control import (
    CLUSTERQUEUES,
    CONFIGMAPS,
    EVENTS,
    JOBS,
    JOBSETS,
    LOCALQUEUES,
    NODES,
    PODS,
    SECRETS,
    WORKLOADPRIORITYCLASSES,
    WORKLOADS,
    ControlPlane,
    Image,
    Node,
)
from .emulator import HarnessEmulator

T = TypeVar("T")

# Short names accepted by Cluster.get/list and the resources the server declares for discovery.
KINDS: dict[str, tuple[kmock.resource, str, bool, tuple[str, ...]]] = {
    "pods": (PODS, "Pod", True, ("status", "log")),
    "events": (EVENTS, "Event", True, ()),
    "nodes": (NODES, "Node", False, ("status",)),
    "configmaps": (CONFIGMAPS, "ConfigMap", True, ()),
    "secrets": (SECRETS, "Secret", True, ()),
    "services": (kmock.resource("", "v1", "services"), "Service", True, ("status",)),
    "serviceaccounts": (kmock.resource("", "v1", "serviceaccounts"), "ServiceAccount", True, ()),
    "namespaces": (kmock.resource("", "v1", "namespaces"), "Namespace", False, ("status",)),
    "persistentvolumeclaims": (kmock.resource("", "v1", "persistentvolumeclaims"), "PersistentVolumeClaim", True, ("status",)),
    "jobs": (JOBS, "Job", True, ("status",)),
    "workloads": (WORKLOADS, "Workload", True, ("status",)),
    "localqueues": (LOCALQUEUES, "LocalQueue", True, ("status",)),
    "clusterqueues": (CLUSTERQUEUES, "ClusterQueue", False, ("status",)),
    "workloadpriorityclasses": (WORKLOADPRIORITYCLASSES, "WorkloadPriorityClass", False, ()),
    "jobsets": (JOBSETS, "JobSet", True, ("status",)),
    "leases": (kmock.resource("coordination.k8s.io", "v1", "leases"), "Lease", True, ()),
}


def _resource(kind: str) -> kmock.resource:
    if kind in KINDS:
        return KINDS[kind][0]
    return kmock.resource(kind)  # "group/version/plural"


class Cluster:
    """A pretend Kubernetes cluster for tests; see the package docstring for the tour.

    Construct, then ``start()`` (the fixtures do both); ``stop()`` kills every pod process
    and closes the server. All methods are safe to call from the test's thread.
    """

    def __init__(
        self,
        root: Path,
        *,
        namespace: str = "default",
        nodes: list[Node] | None = None,
        queues: dict[str, dict[str, str]] | None = None,
        priority_classes: dict[str, int] | None = None,
        images: dict[str, Image] | None = None,
        default_image: Image | None = None,
        unpullable: set[str] | None = None,
        host_env: dict[str, str] | None = None,
        pull_seconds: float = 0.0,
        tick: float = 0.05,
        crds: list[Path | dict[str, Any]] | None = None,
        rbac: Any = None,
        log_max_bytes: int = 10 * 1024 * 1024,
        throttle: Any = None,
        watch_window: int = 20000,
        pod_security: str | None = "restricted",
    ) -> None:
        self._log_max_bytes = log_max_bytes
        # the Pod Security level the cluster's namespace enforces (None: none), as
        # pod-security.kubernetes.io/enforce on a cluster; a Namespace object's label wins
        self._pod_security = pod_security
        self.root = Path(root)
        self.namespace = namespace
        self.nodes = nodes if nodes is not None else [Node("node-a"), Node("node-b")]
        self.queues = queues if queues is not None else {"benchrun": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "16"}}
        self.priority_classes = priority_classes if priority_classes is not None else {"low": 10, "high": 1000}
        self._images = images or {}
        self._default_image = default_image or Image()
        self._unpullable = set(unpullable or ())
        self._host_env = host_env or {}
        self._pull_seconds = pull_seconds
        self._tick = tick
        self._crds = list(crds or [])
        self._rbac = rbac
        self._throttle = throttle  # an apisemantics.Throttle: 429 above its rate
        self._watch_window = watch_window  # events kept per resource for watch resume
        self.kubeconfig = self.root / "kubeconfig.yaml"
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self.api: HarnessEmulator | None = None
        self.control: ControlPlane | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "Cluster":
        self.root.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._main, name="kharness", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._failure is not None:
            raise RuntimeError(f"kharness did not start: {self._failure!r}")
        self._write_kubeconfig(self.kubeconfig, "kharness-token", self.namespace)
        return self

    def _write_kubeconfig(self, path: Path, token: str, namespace: str) -> None:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "kharness", "cluster": {"server": self.url}}],
                    "users": [{"name": "kharness", "user": {"token": token}}],
                    "contexts": [
                        {"name": "kharness", "context": {"cluster": "kharness", "user": "kharness", "namespace": namespace}}
                    ],
                    "current-context": "kharness",
                }
            )
        )

    # ------------------------------------------------------------------ RBAC
    def kubeconfig_for(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/service_account``
        (its default namespace is the account's, as in its pod)."""
        from .rbac import sa_token

        path = self.root / f"kubeconfig-{namespace}-{service_account}.yaml"
        self._write_kubeconfig(path, sa_token(namespace, service_account), namespace)
        return path

    def calls(self, user: str | None = None) -> list[Any]:
        """Every API call received so far (``rbac.Call``), or only those of one user
        (``rbac.sa_user(ns, name)``)."""
        assert self.api is not None
        return [c for c in list(self.api.calls) if user is None or c.user == user]

    def enforce(self, policy: Any) -> None:
        """Refuse (403 Forbidden) every call ``policy`` (an ``rbac.Policy``) does not allow;
        ``None`` turns enforcement off. The harness's own token is always allowed."""
        assert self.api is not None
        self.api.policy = policy

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by start() / stop()
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with HarnessEmulator(throttle=self._throttle, watch_window=self._watch_window) as api, \
                kmock.Server(api) as server:
            self.api = api
            api.policy = self._rbac
            for _short, (res, kind, namespaced, subs) in KINDS.items():
                api.resources[res] = kmock.ResourceInfo(
                    kind=kind,
                    namespaced=namespaced,
                    singular=kind.lower(),
                    verbs={"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
                    subresources=set(subs),
                )
            for crd in self._crds:
                self._declare_crd(crd)
            self.control = ControlPlane(
                api,
                self.root,
                nodes=self.nodes,
                queues=self.queues,
                priority_classes=self.priority_classes,
                images=self._images,
                default_image=self._default_image,
                unpullable=self._unpullable,
                host_env=self._host_env,
                pull_seconds=self._pull_seconds,
                tick=self._tick,
                log_max_bytes=self._log_max_bytes,
                pod_security={self.namespace: self._pod_security} if self._pod_security else None,
            )
            self.url = str(server.url).rstrip("/")
            for lq in self.queues:
                await api.put_object(
                    LOCALQUEUES,
                    self.namespace,
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "LocalQueue",
                        "metadata": {"name": lq, "namespace": self.namespace},
                        "spec": {"clusterQueue": f"{lq}-cq"},
                    },
                )
            task = asyncio.create_task(self.control.run())
            self._ready.set()
            await self._stop.wait()
            await self.control.stop()
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ plumbing
    def call(self, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine (made by ``fn``) in the cluster's event loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(fn(), self._loop).result(30)

    def api_client(self, service_account: tuple[str, str] | None = None) -> Any:
        """A fresh ``kubernetes.client.ApiClient`` configured from this cluster's kubeconfig
        (or as ServiceAccount ``(namespace, name)``)."""
        from kubernetes import config

        path = self.kubeconfig if service_account is None else self.kubeconfig_for(*service_account)
        return config.new_client_from_config(config_file=str(path))

    def _declare_crd(self, crd: Path | dict[str, Any]) -> None:
        assert self.api is not None
        doc = yaml.safe_load(Path(crd).read_text()) if not isinstance(crd, dict) else crd
        spec = doc["spec"]
        for ver in spec.get("versions") or []:
            if not ver.get("served", True):
                continue
            res = kmock.resource(spec["group"], ver["name"], spec["names"]["plural"])
            self.api.resources[res] = kmock.ResourceInfo(
                kind=spec["names"]["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=spec["names"].get("singular"),
                shortnames=set(spec["names"].get("shortNames") or []),
                verbs={"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"},
                subresources=set((ver.get("subresources") or {}).keys()),
            )

    def register_crd(self, crd: Path | dict[str, Any]) -> None:
        """Serve a CustomResourceDefinition's resources (every served version), e.g. benchmarkruns."""
        async def go() -> None:
            self._declare_crd(crd)

        self.call(go)

    # ------------------------------------------------------------------ reading state
    def list(self, kind: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Live objects of a kind ("pods", "jobs", "workloads", ... or "group/version/plural"), copied."""
        res = _resource(kind)

        async def go() -> list[dict[str, Any]]:
            assert self.api is not None
            async with self.api._lock:
                items = [copy.deepcopy(raw) for _k, raw in self.api.live(res, namespace)]
            return [
                o for o in items if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in (labels or {}).items())
            ]

        return self.call(go)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        for obj in self.list(kind, namespace):
            if obj["metadata"]["name"] == name:
                return obj
        return None

    def history(self, kind: str, name: str, namespace: str | None = None) -> list[dict[str, Any] | None]:
        """Every stored version of one object (``None`` marks a deletion), oldest first."""
        res = _resource(kind)
        ns = namespace if namespace is not None else (self.namespace if KINDS.get(kind, (None, "", True))[2] else None)

        async def go() -> list[dict[str, Any] | None]:
            assert self.api is not None
            key = (res, ns, name)
            if key not in self.api._objects:
                return []
            return [copy.deepcopy(v.raw) if v is not None else None for v in self.api._objects[key].history]

        return self.call(go)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
        """Poll ``predicate`` until it returns something truthy; raise ``TimeoutError`` naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                errors = self.control.errors if self.control else []
                raise TimeoutError(f"kharness: timed out waiting for {what or predicate}; control-plane errors: {errors}")
            time.sleep(interval)

    @property
    def errors(self) -> list[str]:
        """Tracebacks the control plane caught (a healthy run has none)."""
        return list(self.control.errors) if self.control else []

    def scratch(self, pod_name: str) -> Path:
        """The scratch directory the kubelet ran a pod in."""
        assert self.control is not None
        for run in self.control.runs.values():
            if run.name == pod_name:
                return run.scratch
        matches = sorted((self.root / "pods").glob(f"{pod_name}-*"))
        if not matches:
            raise KeyError(pod_name)
        return matches[-1]

    def pvc_dir(self, claim: str, namespace: str | None = None) -> Path:
        """Host directory backing a PersistentVolumeClaim (shared by every pod that mounts it)."""
        path = self.root / "pvcs" / (namespace or self.namespace) / claim
        path.mkdir(parents=True, exist_ok=True)
        return path

    def bind_pvc(self, claim: str, host_dir: Path, namespace: str | None = None) -> None:
        """Back a PersistentVolumeClaim by an existing host directory (e.g. the test's
        BENCHRUN_HOME, as a ReadWriteMany volume shared with the orchestrator would be)."""
        link = self.root / "pvcs" / (namespace or self.namespace) / claim
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            if link.is_dir() and not link.is_symlink():
                link.rmdir()
            else:
                link.unlink()
        link.symlink_to(Path(host_dir).resolve(), target_is_directory=True)

    # ------------------------------------------------------------------ faults and control
    def create(self, kind: str, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create an object directly (as a controller would), e.g. a ConfigMap or a custom resource."""
        res = _resource(kind)
        namespaced = KINDS[kind][2] if kind in KINDS else True
        ns = (namespace or obj.get("metadata", {}).get("namespace") or self.namespace) if namespaced else None

        async def go() -> dict[str, Any]:
            assert self.api is not None
            return await self.api.put_object(res, ns, copy.deepcopy(obj))

        return self.call(go)

    def compact(self, kind: str) -> None:
        """Forget the watch events of a kind, as etcd compaction does: a watch that resumes
        from an earlier resourceVersion gets 410 Gone and must list again."""
        res = _resource(kind)

        async def go() -> None:
            assert self.api is not None
            async with self.api._lock:
                self.api.events.compact(res)

        self.call(go)

    def throttle(self, throttle: Any) -> None:
        """Answer 429 above ``throttle``'s rate (an ``apisemantics.Throttle``); None: never."""
        assert self.api is not None
        self.api.throttle = throttle

    def preempt(self, workload_or_owner: str, reason: str = "Preempted", message: str | None = None) -> None:
        """Evict an admitted Workload (by its name or its Job/JobSet's name) as Kueue does for
        ``reason`` (its Evicted reasons: Preempted, PodsReadyTimeout, AdmissionCheck, InactiveWorkload)."""
        def find() -> str | None:
            for wl in self.list("workloads"):
                owners = [o.get("name") for o in wl["metadata"].get("ownerReferences") or []]
                if wl["metadata"]["name"] == workload_or_owner or workload_or_owner in owners:
                    return str(wl["metadata"]["name"])
            return None

        name = self.wait_for(find, what=f"a workload for {workload_or_owner}")
        assert self.control is not None
        self.control.preempt_requests[name] = (reason, message or f"{reason} by the harness (test request)")

    def evict_pod(self, pod_name: str, message: str = "The node was low on resource: memory.") -> None:
        """Evict a running pod the way the kubelet does under node pressure (phase Failed, reason Evicted)."""
        assert self.control is not None
        self.control.pod_faults[pod_name] = ("Evicted", message)

    def drain_pod(self, pod_name: str, message: str = "Eviction API: evicting") -> None:
        """Evict a pod the way a node drain does (the Eviction API): DisruptionTarget
        (EvictionByEvictionAPI) and a graceful deletion; the object is gone ``grace_seconds`` later,
        and the Job replaces it. Unlike :meth:`evict_pod`, no Failed pod stays to be read."""
        assert self.control is not None
        control = self.control

        async def drain() -> None:
            for key, pod in control.api.live(PODS):
                if pod["metadata"]["name"] == pod_name:
                    await control._disrupt_pod(key, pod, "EvictionByEvictionAPI", message)

        self.call(drain)

    def lose_node_of(self, pod_name: str,
                     message: str = "Taint manager: deleting due to NoExecute taint node.kubernetes.io/unreachable") -> None:
        """The running pod's node becomes unreachable: the taint manager deletes the pod (DisruptionTarget
        DeletionByTaintManager, a deletionTimestamp) and no kubelet reports it again, so it stays
        Terminating in phase Running and the Job (podReplacementPolicy: Failed) makes no replacement."""
        assert self.control is not None
        self.control.pod_faults[pod_name] = ("NodeLost", message)

    def oom_kill(self, pod_name: str) -> None:
        """Kill a pod's containers as the OOM killer would (terminated reason OOMKilled, exit 137)."""
        assert self.control is not None
        self.control.pod_faults[pod_name] = ("OOMKilled", "")

    def make_unpullable(self, image: str) -> None:
        """Every later pull of ``image`` fails (ErrImagePull, then ImagePullBackOff)."""
        assert self.control is not None
        self.control.unpullable.add(image)

    def make_flaky(self, image: str, seconds: float) -> None:
        """Pulls of ``image`` fail with a registry's rate limit (429) for ``seconds`` from each pod's
        first pull, then succeed."""
        assert self.control is not None
        self.control.flaky_pulls[image] = float(seconds)

    def image_id(self, image: str) -> str:
        """The ``imageID`` the kubelet reports for ``image`` (a digest derived from its name)."""
        assert self.control is not None
        return self.control.image_id(image)
