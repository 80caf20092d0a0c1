"""kharness: a Kubernetes cluster for tests, over HTTP, with no API server installed.

The real ``kubernetes`` client (and dagster-k8s on top of it) talks HTTP to kmock 0.8's
in-memory API server (``emulator.HarnessEmulator``), and a control plane written for the
harness (``control.ControlPlane``) plays Kueue, the Job and JobSet controllers, the
scheduler, the kubelet (pods run as local processes in per-pod scratch directories), the
TTL controller and the garbage collector. Read ``control.py``'s docstring for what each
one does and which fields it sets.

Use it through the pytest fixtures (registered in ``tests/conftest.py``)::

    def test_something(kcluster):           # default cluster; KUBECONFIG points at it
        from kubernetes import client
        api = client.BatchV1Api(kcluster.api_client())
        api.create_namespaced_job("default", job_dict)
        kcluster.wait_for(lambda: kcluster.get("jobs", "x")["status"].get("succeeded"))

    def test_custom(kcluster_factory):      # your own topology
        c = kcluster_factory(nodes=[Node("gpu-0", capacity={"nvidia.com/gpu": "8", ...},
                                         taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])],
                             queues={"benchrun": {"nvidia.com/gpu": "8"}},
                             crds=[Path("deploy/crds/benchmarkruns.yaml")])

What a cluster offers (``Cluster``):

- ``kubeconfig`` (a file; the fixtures also set ``$KUBECONFIG``), ``url``, ``namespace``
  ("default"), ``api_client()``;
- ``list(kind, namespace=None, labels=None)``, ``get(kind, name)``, ``history(kind, name)``
  (every stored version, ``None`` for a deletion), ``create(kind, obj)``, ``wait_for(pred)``,
  ``errors`` (control-plane tracebacks; assert it is empty); kinds are short names
  ("pods", "jobs", "workloads", "jobsets", "events", "nodes", "localqueues", ...) or
  "group/version/plural" for custom resources;
- custom resources: ``crds=[path or dict]`` or ``register_crd(...)`` serves every served
  version of a CustomResourceDefinition (``CustomObjectsApi`` list/watch/get/create/patch,
  ``.../status`` included; patches are JSON merge patches);
- faults: ``preempt(job_or_workload)`` (Kueue eviction, reason Preempted, then requeue),
  ``evict_pod(name)``, ``oom_kill(name)``, ``make_unpullable(image)`` (an image on a
  ``*.invalid`` registry never pulls either), an unschedulable request (more than any node
  has) stays Pending with ``PodScheduled=False``/``Unschedulable``;
- ``scratch(pod)``: the pod's directory (``logs/<container>.log``, ``volumes/<name>``,
  ``rootfs/`` for paths outside mounts); ``pvc_dir(claim)``: a PVC's shared directory;
  ``bind_pvc(claim, host_dir)``: back a PVC by an existing directory (e.g. the test's
  ``BENCHRUN_HOME``, as the shared run volume);
- ``image_id(image)``: the ``imageID`` reported for an image.

Images map to ``Image(workdir, env, entrypoint)`` (``images={...}``, ``default_image``);
a process gets PATH with this interpreter's directory first, ``host_env``, the image's env,
then the container's env. Jobs and JobSets without the Kueue queue label run as soon as
they are unsuspended, as on a cluster without Kueue.

RBAC (``rbac.py``): every API call is recorded as ``rbac.Call`` (user, verb, group, resource,
subresource, namespace, name); ``kubeconfig_for(ns, sa)`` / ``api_client((ns, sa))`` act as a
ServiceAccount; ``calls(user)`` lists what a user called; ``Cluster(rbac=Policy(docs))`` or
``enforce(policy)`` refuses what the Roles do not allow with the API server's 403;
``SubjectAccessReview``/``SelfSubjectAccessReview`` are answered by the same policy. Deleting a
Job without ``propagationPolicy`` orphans its pods, as the API does.

Measuring well: pods get ``status.qosClass``; the kubelet sets ``startTime`` before a pull of
``pull_seconds`` (``activeDeadlineSeconds`` counts the pull); container logs rotate at
``log_max_bytes`` (10 MiB; set it small to test a rotated log: reads get the newest file); the scheduler packs (first node
that fits) unless required node affinity or pod anti-affinity forbids it; the Job controller
follows ``podFailurePolicy`` and ``podReplacementPolicy: Failed``; WorkloadPriorityClass
objects are seeded from ``priority_classes``.

API-server semantics (``apisemantics.py``): a PATCH/PUT with a stale ``metadata.resourceVersion``
gets 409 Conflict; ``generation`` is bumped on a spec change; ``Cluster(throttle=Throttle(qps,
burst))`` answers 429 with ``Retry-After`` above the rate; lists honour ``limit``/``continue``;
a watch with ``resourceVersion`` replays what followed it, and one older than the kept window
(``watch_window``, or after ``compact(kind)``) gets a 410 Gone ERROR event; a Lease whose
``acquireTime``/``renewTime`` is not MicroTime (RFC 3339 with six fractional digits) gets 400.

Limits (kmock is an emulator, not an API server): no admission validation, merge
patches only (no JSON patch), no field managers; list pages are read from the live store,
not from the first page's snapshot.
"""

from typing import Any

# Lazy exports: tests/conftest.py imports the fixtures for every test session, and the
# server stack (kmock, aiohttp, kubernetes) costs about a second to import.
_EXPORTS = {
    "Cluster": "cluster",
    "KINDS": "cluster",
    "GPU": "control",
    "Image": "control",
    "Node": "control",
    "PRIORITY_LABEL": "control",
    "QUEUE_LABEL": "control",
    "has_condition": "control",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(name)


__all__ = ["Cluster", "GPU", "Image", "KINDS", "Node", "PRIORITY_LABEL", "QUEUE_LABEL", "has_condition"]
