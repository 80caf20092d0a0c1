"""The launcher resource: runs a planned layer, each launch inside a Dagster Pipes session.

``kind: local`` (the embedded default) runs suites as subprocesses here; ``kind: kubernetes``
runs each replicate as a pod admitted by Kueue (``queue_name``) and, when configured, placed
by Slinky's slurm-bridge scheduler — the cluster column of ARCHITECTURE.md §4.
"""

from contextlib import contextmanager
from typing import Iterator, Mapping, Optional

import dagster as dg

from benchrun.execute import LayerOutcome, run_layer
from benchrun.launch.base import Launcher, LaunchResult
from benchrun.launch.local import LocalLauncher
from benchrun.plan import Invocation, LayerPlan
from benchrun.rundir import RunDir


class LauncherResource(dg.ConfigurableResource):
    """Where suites run, and (for pods) how they are queued and placed."""

    kind: str = "local"
    namespace: str = "benchrun"
    queue_name: str = "benchrun"
    priority_class: Optional[str] = None
    gpus: int = 0
    node_selector: dict[str, str] = {}
    scheduler_name: Optional[str] = None
    slurm_partition: Optional[str] = None
    topology_label: Optional[str] = None
    topology_values: list[str] = []
    poll_s: float = 2.0

    def _launcher(self, publication_grade: bool = False) -> Launcher:
        if self.kind == "local":
            return LocalLauncher()
        if self.kind != "kubernetes":
            raise dg.Failure(f"launcher kind {self.kind!r} is unknown: use 'local' or 'kubernetes'")
        from kubernetes import client, config

        from benchrun.launch.kubernetes import KubernetesLauncher
        from benchrun.launch.podspec import Placement

        try:
            config.load_incluster_config()
        except config.ConfigException:
            try:
                config.load_kube_config()
            except (config.ConfigException, OSError) as exc:
                raise dg.Failure(f"launcher kind 'kubernetes': no cluster credentials ({exc}); "
                                 "run in-cluster or set KUBECONFIG") from None
        placement = Placement(
            queue_name=self.queue_name, priority_class=self.priority_class, gpus=self.gpus,
            node_selector=dict(self.node_selector), scheduler_name=self.scheduler_name,
            slurm_partition=self.slurm_partition, topology_label=self.topology_label,
            topology_values=tuple(self.topology_values), publication_grade=publication_grade,
        )
        return KubernetesLauncher(client.CoreV1Api(), self.namespace, placement, self.poll_s)

    def run_layer(self, context: dg.AssetExecutionContext, plan: LayerPlan, run_dir: RunDir) -> LayerOutcome:
        """Launch the layer; suites' Pipes logs and messages reach the Dagster run log."""
        granted = run_dir.read_status().get("benchmark_class_granted")
        launcher = self._launcher(publication_grade=granted == "publication_grade")
        preflight = getattr(launcher, "preflight", None)
        if preflight is not None and plan.enabled:
            preflight(plan.invocations)  # every pod manifest must build before any pod starts

        @contextmanager
        def pipes_session(inv: Invocation) -> Iterator[Mapping[str, str]]:
            with dg.open_pipes_session(
                context=context,
                context_injector=dg.PipesEnvContextInjector(),
                message_reader=dg.PipesTempFileMessageReader(),
                extras={"suite": inv.suite, "replicate": inv.replicate, "layer": inv.layer},
            ) as session:
                yield session.get_bootstrap_env_vars()

        def on_result(res: LaunchResult) -> None:
            level = context.log.info if res.status != "failed" else context.log.warning
            level(f"{res.layer}/{res.suite} r{res.replicate}: {res.status}"
                  + (f" ({res.reason})" if res.reason else "") + f" in {res.wall_s:.2f}s; log {res.log}")

        return run_layer(plan, run_dir, launcher, session=pipes_session, on_result=on_result)
