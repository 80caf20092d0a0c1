"""A minimal Kubernetes API for the controller tests: kmock's emulator on loopback, in a thread.

kmock stores objects as given, so :class:`Cluster` plays the API server's part that the
controller relies on: a ``uid`` and ``generation: 1`` on create, ``generation`` + 1 when the
spec changes, ``status`` written only through the status subresource. Everything else goes
over real HTTP through the ``kubernetes`` client, with a kubeconfig in ``$KUBECONFIG``.
(Replace with the shared tests/kharness/ harness once it lands.)
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

GROUP, VERSION, PLURAL = "benchmarking.aisp.dev", "v1alpha1", "benchmarkruns"


class Cluster:
    """The emulator, its URL and a CustomObjectsApi talking to it."""

    def __init__(self, emulator: Any, url: str, kubeconfig: Path) -> None:
        from kubernetes import client, config

        self.emulator = emulator
        self.url = url
        self.kubeconfig = kubeconfig
        self.api = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Create, or update the spec (a new generation when it changed), like ``kubectl apply``."""
        meta = doc["metadata"]
        namespace = meta.get("namespace", "default")
        current = self.get(namespace, meta["name"])
        if current is None:
            body = {**doc, "metadata": {**meta, "namespace": namespace, "uid": str(uuid.uuid4()), "generation": 1,
                                        "creationTimestamp": "2026-12-01T00:00:00Z"}}
            body.pop("status", None)
            return self.api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        if current.get("spec") == doc["spec"]:
            return current
        generation = int(current["metadata"]["generation"]) + 1
        return self.api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, meta["name"], {"spec": doc["spec"], "metadata": {"generation": generation}})

    def delete(self, namespace: str, name: str) -> None:
        self.api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def status_patches(self, name: str) -> list[dict[str, Any]]:
        """Every status written to ``name`` through the status subresource, in order."""
        return [r.data["status"] for r in list(self.emulator)
                if r.subresource == "status" and r.name == name and r.method.value == "PATCH"]


@contextmanager
def kmock_cluster(tmp: Path) -> Iterator[Cluster]:
    """Start the emulator (BenchmarkRun resource declared) and write a kubeconfig for it."""
    import kmock

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> tuple[Any, Any]:
        emulator = kmock.KubernetesEmulator()
        emulator.resources[f"{GROUP}/{VERSION}/{PLURAL}"].kind = "BenchmarkRun"
        await emulator.__aenter__()
        server = kmock.Server(emulator)
        await server.__aenter__()
        return emulator, server

    emulator, server = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    url = str(server.url).rstrip("/")
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "kmock", "user": {"token": "test"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
    }))
    try:
        yield Cluster(emulator, url, kubeconfig)
    finally:
        async def stop() -> None:
            await server.__aexit__(None, None, None)
            await emulator.__aexit__(None, None, None)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
