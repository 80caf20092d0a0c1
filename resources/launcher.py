"""The launcher resource: runs a planned layer, each launch inside a Dagster Pipes session."""


from contextlib import contextmanager
from typing import Iterator, Mapping

import dagster as dg

from benchrun.execute import LayerOutcome, run_layer
from benchrun.launch.base import LaunchResult
from benchrun.launch.local import LocalLauncher
from benchrun.plan import Invocation, LayerPlan
from benchrun.rundir import RunDir


class LauncherResource(dg.ConfigurableResource):
    """Where suites run. ``local`` (the default) runs them as subprocesses of this process;
    the cluster column of ARCHITECTURE.md §4 plugs a Kubernetes launcher in here."""

    kind: str = "local"

    def _launcher(self) -> LocalLauncher:
        if self.kind != "local":
            raise dg.Failure(f"launcher kind {self.kind!r} is not available in this deployment (use 'local')")
        return LocalLauncher()

    def run_layer(self, context: dg.AssetExecutionContext, plan: LayerPlan, run_dir: RunDir) -> LayerOutcome:
        """Launch the layer; suites' Pipes logs and messages reach the Dagster run log."""

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

        return run_layer(plan, run_dir, self._launcher(), session=pipes_session, on_result=on_result)
