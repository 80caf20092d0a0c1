"""The Kubernetes API client for the controller: in-cluster credentials, else the kubeconfig."""

from __future__ import annotations

import os
from typing import Any

from benchrun.errors import BenchrunError

GROUP = "benchmarking.aisp.dev"
VERSION = "v1alpha1"
PLURAL = "benchmarkruns"
ENV_NAMESPACE = "BENCHRUN_CR_NAMESPACE"
# (connect, read) seconds for every call but a watch: a half-open connection (a dead load
# balancer, a lost peer) otherwise blocks the caller forever. urllib3 retries a GET that timed out
# three times, so one call gives up within 4 x (5 + 20) s.
REQUEST_TIMEOUT: tuple[float, float] = (5.0, 20.0)


def watched_namespace() -> str | None:
    """``$BENCHRUN_CR_NAMESPACE`` (one namespace), or None for every namespace."""
    value = os.environ.get(ENV_NAMESPACE, "").strip()
    return value or None


def custom_objects_api() -> Any:
    """A ``CustomObjectsApi``: the pod's service account in a cluster, else ``$KUBECONFIG``.

    Raises BenchrunError naming both sources when neither gives credentials.
    """
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            # The client reads $KUBECONFIG once, at import; read it at each call instead.
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
        except (config.ConfigException, OSError) as exc:
            raise BenchrunError(
                f"no Kubernetes credentials ({exc}): run in a pod with a service account, or set KUBECONFIG"
            ) from None
    return client.CustomObjectsApi()


def list_benchmarkruns(api: Any, namespace: str | None) -> list[dict[str, Any]]:
    """Every BenchmarkRun in ``namespace`` (None: all namespaces), as plain dicts."""
    if namespace:
        listing = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _request_timeout=REQUEST_TIMEOUT)
    else:
        listing = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, _request_timeout=REQUEST_TIMEOUT)
    return list(listing.get("items") or [])


def get_benchmarkrun(api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """One BenchmarkRun, or None when it does not exist (any more)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                _request_timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def patch_status(api: Any, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Merge-patch the ``status`` subresource (conditions are replaced as a whole list)."""
    api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": status},
                                              _request_timeout=REQUEST_TIMEOUT)


def list_page(api: Any, namespace: str | None, *, limit: int, token: str | None) -> dict[str, Any]:
    """One page of a paginated listing (``limit``/``continue``), as the API server returns it."""
    kwargs: dict[str, Any] = {"limit": limit, "_request_timeout": REQUEST_TIMEOUT}
    if token:
        kwargs["_continue"] = token
    if namespace:
        return api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **kwargs)
    return api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)


def list_all(api: Any, namespace: str | None, *, limit: int = 500) -> tuple[list[dict[str, Any]], str]:
    """Every BenchmarkRun, read page by page; returns (items, the listing's resourceVersion)."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    version = ""
    while True:
        page = list_page(api, namespace, limit=limit, token=token)
        meta = page.get("metadata") or {}
        version = version or str(meta.get("resourceVersion") or "")
        items += list(page.get("items") or [])
        token = meta.get("continue")
        if not token:
            return items, version


def patch_object(api: Any, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Merge-patch the object itself (metadata: finalizers); a ``metadata.resourceVersion`` in
    ``body`` is a precondition (409 Conflict when the object moved on)."""
    return api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body,
                                              _request_timeout=REQUEST_TIMEOUT)


def patch_status_if(api: Any, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> dict[str, Any]:
    """Merge-patch ``status`` only if the object is still at ``resource_version`` (else 409)."""
    body = {"metadata": {"resourceVersion": resource_version}, "status": status}
    return api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, body,
                                                     _request_timeout=REQUEST_TIMEOUT)
