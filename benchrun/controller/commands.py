"""``benchrun operator``: run the BenchmarkRun operator (the Deployment in deploy/ runs this)."""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from typing import Optional

import typer

ENV_LEASE_NAMESPACE = "BENCHRUN_OPERATOR_NAMESPACE"


def operator(
    namespace: Optional[str] = typer.Option(
        None, "--namespace", help="watch one namespace (default $BENCHRUN_CR_NAMESPACE, else all namespaces)"),
    lease_namespace: Optional[str] = typer.Option(
        None, "--lease-namespace", help=f"where the leader Lease lives (default ${ENV_LEASE_NAMESPACE}, else the "
        "pod's namespace)"),
    lease_name: str = typer.Option("benchrun-operator", "--lease-name", help="the coordination.k8s.io Lease"),
    lease_seconds: int = typer.Option(15, "--lease-seconds", min=3, help="how long a leader's Lease lasts unrenewed"),
    starts_per_second: float = typer.Option(20.0, "--starts-per-second", help="at most this many runs started a second"),
    start_burst: int = typer.Option(50, "--start-burst", help="... and this many at once"),
    page_size: int = typer.Option(500, "--page-size", min=1, help="objects per page when listing"),
    home: Optional[Path] = typer.Option(None, "--home", help="BENCHRUN_HOME (run directories)"),
    heartbeat_file: Optional[Path] = typer.Option(
        None, "--heartbeat-file", help="touched on every pass of the loop; the liveness probe "
        "(python -m benchrun.controller.heartbeat FILE MAX_AGE_S) checks its age"),
) -> None:
    """Watch BenchmarkRun resources; start one Dagster run per (uid, generation), cancel it on deletion, keep the
    status current. Needs a Dagster instance with a QueuedRunCoordinator ($DAGSTER_HOME) and cluster credentials."""
    import logging

    from benchrun.controller import kube
    from benchrun.controller.dagster_runs import DagsterRuns
    from benchrun.controller.lease import LeaseElector
    from benchrun.controller.operator import Operator, Settings
    from benchrun.errors import BenchrunError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import dagster as dg

    api = kube.custom_objects_api()
    if not os.environ.get("DAGSTER_HOME"):
        raise BenchrunError("DAGSTER_HOME is not set: the operator starts runs on the deployment's Dagster instance; "
                            "set DAGSTER_HOME to the directory with its dagster.yaml")
    instance = dg.DagsterInstance.get()
    lease_ns = lease_namespace or os.environ.get(ENV_LEASE_NAMESPACE) or _pod_namespace()
    identity = f"{socket.gethostname()}_{os.getpid()}"
    elector = LeaseElector(api.api_client, lease_ns, lease_name, identity, duration_s=lease_seconds)
    settings = Settings(namespace=namespace or kube.watched_namespace(), page_size=page_size,
                        starts_per_s=starts_per_second, start_burst=start_burst, home=home,
                        heartbeat=heartbeat_file)
    op = Operator(api, DagsterRuns(instance), settings, elector=elector)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    op.run(stop)


def _pod_namespace() -> str:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return path.read_text().strip() if path.is_file() else "default"


def register(app: typer.Typer) -> None:
    app.command("operator")(operator)
