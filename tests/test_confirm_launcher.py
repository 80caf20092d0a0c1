"""The confirmation round runs its fresh replicates where the run's own suites ran."""

from __future__ import annotations

import dagster as dg
import numpy as np
import pytest

from benchrun.stats.synthetic import lognormal_replicates, make_run
from resources.launcher import LauncherResource


def test_the_confirmation_round_runs_on_the_deployments_launcher(kcluster, tmp_path, monkeypatch):
    """Found in review: the round always made a LocalLauncher, so on Kubernetes a suspected GPU
    regression was re-run as subprocesses of the orchestrator's pod (no GPU, no Kueue) and the
    CPU's numbers confirmed it or not. It now takes the run's launcher resource: Jobs in its
    namespace, placed as the candidate was."""
    from bench_assets.stats_assets import ConfirmRoundResource
    from benchrun.launch.kubernetes import KubernetesLauncher
    from benchrun.launch.local import LocalLauncher

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    metrics = {("gemm", "", "tflops"): (lognormal_replicates(np.random.default_rng(1), 100.0, 0.02, 5), "TFLOP/s",
                                        "higher")}
    for run_id in ("base-20261201000000-abcdef12", "cand-20261202000000-abcdef12"):
        # scheduler_path_requested: as admission records it (the Jobs are placed through that path)
        make_run(tmp_path, run_id, metrics, status={"cadence": "nightly", "scheduler_path_requested": "kueue"})
    ctx = dg.build_asset_context(partition_key="cand-20261202000000-abcdef12")
    hook = ConfirmRoundResource().hook(ctx, "base-20261201000000-abcdef12", "cand-20261202000000-abcdef12",
                                       LauncherResource())
    assert isinstance(hook.launcher.launcher, LocalLauncher)  # the embedded default (made when the round launches)
    hook = ConfirmRoundResource().hook(ctx, "base-20261201000000-abcdef12", "cand-20261202000000-abcdef12",
                                       LauncherResource(kind="kubernetes", namespace="default"))
    made = hook.launcher.launcher
    assert isinstance(made, KubernetesLauncher)  # was: LocalLauncher
    assert made.namespace == "default" and made.placement.queue_name


@pytest.mark.parametrize("configured, environment", [("kubernetes", "local"), ("local", "kubernetes")])
def test_the_round_takes_the_runs_configured_launcher_not_the_environments(tmp_path, monkeypatch, configured,
                                                                            environment):
    """Found in review: baseline_comparison built the round's launcher with LauncherResource.from_env(),
    so a run whose launcher resource was configured through run config (docs/kubernetes.md: `resources:
    launcher: config: {kind: kubernetes}`) ran its layers as Jobs and its confirmation replicates as
    subprocesses of the run-worker pod. The round now runs on the launcher resource the run was given."""
    from bench_assets.stats_assets import ConfirmRoundResource, baseline_comparison, trial_statistics
    from benchrun import confirm
    from benchrun.stats.baseline import promote
    from benchrun.stats.load import replicate_table

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    monkeypatch.setenv("BENCHRUN_LAUNCHER_KIND", environment)
    monkeypatch.setenv("BENCHRUN_LAUNCHER_NAMESPACE", "from-the-environment")
    rng = np.random.default_rng(3)

    def metrics(level: float) -> dict:
        return {("serve", "c=8", "tokens_per_second"): (lognormal_replicates(rng, 100 * level, 0.02, 5), "tok/s",
                                                        "higher")}

    make_run(tmp_path, "base", metrics(1.0), sealed=True)
    promote("base", tmp_path)
    make_run(tmp_path, "cand", metrics(0.85))  # a suspected gating regression: the round launches
    fresh = {arm: make_run(tmp_path, f"fresh-{arm}", metrics(level)) for arm, level in (("b", 1.0), ("c", 0.85))}
    made = []

    def confirmation_launcher(self, candidate):  # the launch itself is stubbed: where it would run
        made.append((self.kind, self.namespace, candidate.run_id))
        return object()

    def round_(home, baseline_id, candidate_id, *, launcher, on_launch):
        def run(keys):
            assert launcher.launcher is not None  # the round's first launch makes its launcher
            return replicate_table(fresh["b"]), replicate_table(fresh["c"])
        return run

    monkeypatch.setattr(LauncherResource, "confirmation_launcher", confirmation_launcher)
    monkeypatch.setattr(confirm, "confirmation_hook", round_)
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["cand"])
    res = dg.materialize([trial_statistics, baseline_comparison], instance=inst, partition_key="cand",
                         resources={"confirm_round": ConfirmRoundResource(),
                                    "launcher": LauncherResource(kind=configured, namespace="configured")})
    assert res.success
    assert made == [(configured, "configured", "cand")]  # was: the environment's kind and namespace
