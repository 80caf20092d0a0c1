"""The harness API server's concurrency semantics, through the real ``kubernetes`` client:
409 on a stale resourceVersion, 429 above a rate, paginated lists, watch resume and 410 Gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

CRD = Path(__file__).resolve().parents[1] / "deploy/kustomize/base/benchmarkrun-crd.yaml"
BRUN = ("benchmarking.aisp.dev", "v1alpha1")
KIND = "benchmarking.aisp.dev/v1alpha1/benchmarkruns"


def configmap(name: str, data: dict[str, str], rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _api(kcluster: Any) -> client.CoreV1Api:
    return client.CoreV1Api(kcluster.api_client())


def test_a_patch_with_a_stale_resource_version_is_refused_with_409(kcluster: Any) -> None:
    api = _api(kcluster)
    created = api.create_namespaced_config_map("default", configmap("cm", {"a": "1"}))
    rv = created.metadata.resource_version
    first = api.patch_namespaced_config_map("cm", "default", {"metadata": {"resourceVersion": rv}, "data": {"a": "2"}})
    assert first.metadata.resource_version != rv
    with pytest.raises(ApiException) as err:  # the second writer read the same version
        api.patch_namespaced_config_map("cm", "default", {"metadata": {"resourceVersion": rv}, "data": {"a": "3"}})
    assert err.value.status == 409 and "the object has been modified" in err.value.body
    with pytest.raises(ApiException) as err:  # PUT (replace) too
        api.replace_namespaced_config_map("cm", "default", configmap("cm", {"a": "4"}, rv=rv))
    assert err.value.status == 409
    assert kcluster.get("configmaps", "cm")["data"] == {"a": "2"}
    # Without a precondition the write is unconditional (last writer wins), as on a cluster.
    api.patch_namespaced_config_map("cm", "default", {"data": {"a": "5"}})
    assert kcluster.get("configmaps", "cm")["data"] == {"a": "5"}


def test_generation_is_the_servers_and_moves_on_a_spec_change_only(kcluster_factory: Any) -> None:
    kcluster = kcluster_factory(crds=[CRD])
    api = client.CustomObjectsApi(kcluster.api_client())
    obj = {"apiVersion": "benchmarking.aisp.dev/v1alpha1", "kind": "BenchmarkRun",
           "metadata": {"name": "g"}, "spec": {"x": 1}}
    api.create_namespaced_custom_object(*BRUN, "default", "benchmarkruns", obj)
    api.patch_namespaced_custom_object(*BRUN, "default", "benchmarkruns", "g", {"metadata": {"labels": {"a": "b"}}})
    assert kcluster.get(KIND, "g", "default")["metadata"]["generation"] == 1
    api.patch_namespaced_custom_object(*BRUN, "default", "benchmarkruns", "g",
                                       {"spec": {"x": 2}, "metadata": {"generation": 7}})
    assert kcluster.get(KIND, "g", "default")["metadata"]["generation"] == 2
    api.patch_namespaced_custom_object_status(*BRUN, "default", "benchmarkruns", "g", {"status": {"phase": "Pending"}})
    assert kcluster.get(KIND, "g", "default")["metadata"]["generation"] == 2


def test_requests_above_the_rate_get_429_with_retry_after(kcluster: Any) -> None:
    from kharness.apisemantics import Throttle

    from kubernetes import config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kcluster.kubeconfig), client_configuration=cfg)
    cfg.retries = False  # the client's urllib3 otherwise waits Retry-After and retries a 429 itself
    api = client.CoreV1Api(client.ApiClient(cfg))
    throttle = Throttle(qps=0.2, burst=3)
    kcluster.throttle(throttle)
    codes = []
    for _ in range(6):
        try:
            api.list_namespaced_config_map("default")
            codes.append(200)
        except ApiException as exc:
            codes.append(exc.status)
            assert exc.headers["Retry-After"] == "5"
    assert codes[:3] == [200, 200, 200] and 429 in codes[3:]
    assert throttle.refused == codes.count(429)
    kcluster.throttle(None)
    api.list_namespaced_config_map("default")


def test_lists_are_paginated_with_limit_and_continue(kcluster: Any) -> None:
    api = _api(kcluster)
    for i in range(7):
        kcluster.create("configmaps", configmap(f"cm-{i}", {}))
    names, token, pages, versions = [], None, 0, set()
    while True:
        page = api.list_namespaced_config_map("default", limit=3, _continue=token)
        pages += 1
        names += [o.metadata.name for o in page.items]
        versions.add(page.metadata.resource_version)
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(names)
    assert pages == 3 and names == [f"cm-{i}" for i in range(7)] and len(versions) == 1
    with pytest.raises(ApiException) as err:
        api.list_namespaced_config_map("default", limit=3, _continue="not-a-token")
    assert err.value.status == 400


def test_a_watch_resumes_after_its_resource_version_and_410s_when_compacted(kcluster: Any) -> None:
    api = _api(kcluster)
    kcluster.create("configmaps", configmap("before", {}))
    rv = api.list_namespaced_config_map("default").metadata.resource_version
    kcluster.create("configmaps", configmap("after-1", {}))
    api.patch_namespaced_config_map("after-1", "default", {"data": {"k": "v"}})
    api.delete_namespaced_config_map("after-1", "default")
    seen = []
    for event in watch.Watch().stream(api.list_namespaced_config_map, "default", resource_version=rv,
                                      timeout_seconds=1):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 3:
            break
    # Only what followed the list, no synthetic ADDED for "before"; the deletion has its own version.
    assert seen == [("ADDED", "after-1"), ("MODIFIED", "after-1"), ("DELETED", "after-1")]
    kcluster.compact("configmaps")
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(api.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1))
    assert err.value.status == 410 and "too old resource version" in str(err.value.reason)


def test_the_servers_own_request_log_stays_bounded_and_a_watch_still_dispatches(kcluster: Any, monkeypatch) -> None:
    """kmock dispatches each request by scanning every request it kept: the harness keeps only the newest
    (its own ``calls`` record stays whole), so a long benchmark does not slow down with what it served."""
    from kharness import emulator

    monkeypatch.setattr(emulator, "REQUEST_LOG_KEEP", REQUEST_LOG_KEEP := 16)
    api = _api(kcluster)
    api.create_namespaced_config_map("default", configmap("cm", {"a": "0"}))
    before = len(kcluster.calls())
    for i in range(3 * REQUEST_LOG_KEEP):
        api.read_namespaced_config_map("cm", "default")
    assert len(kcluster.api._requests) <= 2 * REQUEST_LOG_KEEP + 1
    assert len(kcluster.calls()) - before >= 3 * REQUEST_LOG_KEEP
    # still served as before: a patch, and a watch that sees it
    rv = api.patch_namespaced_config_map("cm", "default", {"data": {"a": "1"}}).metadata.resource_version
    seen = [ev["object"].data for ev in watch.Watch().stream(api.list_namespaced_config_map, "default",
                                                              resource_version="0", timeout_seconds=1)]
    assert {"a": "1"} in seen and rv


def test_a_request_that_waited_while_the_log_was_cut_is_still_dispatched(kcluster: Any, monkeypatch) -> None:
    """The log is cut to its newest entries: a write that waits behind the precondition lock while more
    requests than that come and go is kept in it (it is still being handled), and is served."""
    import concurrent.futures
    import time

    from kharness import emulator

    monkeypatch.setattr(emulator, "REQUEST_LOG_KEEP", keep := 8)
    api = _api(kcluster)
    api.create_namespaced_config_map("default", configmap("cm", {"a": "0"}))
    lock = kcluster.api._precondition_lock

    async def hold() -> None:
        await lock.acquire()

    async def release() -> None:
        lock.release()

    kcluster.call(hold)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        patched = pool.submit(api.patch_namespaced_config_map, "cm", "default", {"data": {"a": "1"}})
        deadline = time.monotonic() + 10
        while not any(c.verb == "patch" for c in kcluster.calls()):
            assert time.monotonic() < deadline, "the patch never reached the server"
            time.sleep(0.01)
        for _ in range(3 * keep):  # the log is cut (at least) twice while the patch waits
            api.read_namespaced_config_map("cm", "default")
        assert len(kcluster.api._requests) <= 2 * keep + 2
        kcluster.call(release)
        assert patched.result(10).data == {"a": "1"}
