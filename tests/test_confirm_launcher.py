"""The confirmation round runs its fresh replicates where the run's own suites ran."""

from __future__ import annotations

import dagster as dg
import numpy as np

from benchrun.stats.synthetic import lognormal_replicates, make_run


def test_the_confirmation_round_runs_on_the_deployments_launcher(kcluster, tmp_path, monkeypatch):
    """Found in review: the round always made a LocalLauncher, so on Kubernetes a suspected GPU
    regression was re-run as subprocesses of the orchestrator's pod (no GPU, no Kueue) and the
    CPU's numbers confirmed it or not. It now takes the deployment's launcher: Jobs in its
    namespace, placed as the candidate was."""
    from bench_assets.stats_assets import ConfirmRoundResource
    from benchrun.launch.kubernetes import KubernetesLauncher
    from benchrun.launch.local import LocalLauncher

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    metrics = {("gemm", "", "tflops"): (lognormal_replicates(np.random.default_rng(1), 100.0, 0.02, 5), "TFLOP/s",
                                        "higher")}
    for run_id in ("base-20261201000000-abcdef12", "cand-20261202000000-abcdef12"):
        make_run(tmp_path, run_id, metrics, status={"cadence": "nightly"})
    ctx = dg.build_asset_context(partition_key="cand-20261202000000-abcdef12")
    hook = ConfirmRoundResource().hook(ctx, "base-20261201000000-abcdef12", "cand-20261202000000-abcdef12")
    assert isinstance(hook.launcher.launcher, LocalLauncher)  # the embedded default (made when the round launches)
    monkeypatch.setenv("BENCHRUN_LAUNCHER_KIND", "kubernetes")
    monkeypatch.setenv("BENCHRUN_LAUNCHER_NAMESPACE", "default")
    hook = ConfirmRoundResource().hook(ctx, "base-20261201000000-abcdef12", "cand-20261202000000-abcdef12")
    made = hook.launcher.launcher
    assert isinstance(made, KubernetesLauncher)  # was: LocalLauncher
    assert made.namespace == "default" and made.placement.queue_name
