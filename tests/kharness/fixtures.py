"""pytest fixtures for the cluster harness (imported by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .cluster import Cluster


@pytest.fixture
def kcluster_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Cluster]]:
    """Start harness clusters with your own options (``Cluster(**kwargs)``); the last one
    started is what ``$KUBECONFIG`` points at. All are stopped after the test."""
    from .cluster import Cluster

    started: list[Cluster] = []

    def make(**kwargs: Any) -> Cluster:
        cluster = Cluster(tmp_path / f"kcluster{len(started)}", **kwargs).start()
        started.append(cluster)
        monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
        return cluster

    yield make
    for cluster in reversed(started):
        cluster.stop()


@pytest.fixture
def kcluster(kcluster_factory: Callable[..., Cluster]) -> Cluster:
    """A default harness cluster (two 8-GPU nodes, LocalQueue "benchrun"); $KUBECONFIG set."""
    return kcluster_factory()
