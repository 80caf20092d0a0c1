"""Two triggers that request one benchmark run: the second request runs nothing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import yaml

from helpers import tiny_spec

ROOT = Path(__file__).resolve().parents[1]


def test_a_second_trigger_request_for_a_run_runs_nothing_and_its_failure_is_not_the_runs(tmp_path, monkeypatch):
    """Found in review: the canary and spec-commit sensors both submit a commit's canary spec as the
    same run id; evaluated at once on sensor threads, each saw no Dagster run yet, and both run workers
    executed one run against one shared prefix (GPU time twice, evidence clobbered). The later request
    now fails in pinned_spec before it touches the run, tagged a duplicate, and the failure sensor
    leaves the run alone. A re-execution (its parent tagged) and a run made by hand still run."""
    from bench_assets.run_assets import pinned_spec
    from benchrun.automation.failures import DUPLICATE_TAG, earlier_request, record_orchestrator_failure
    from benchrun.rundir import RunDir
    from benchrun.submit import prepare
    from resources.launcher import LauncherResource

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    doc = yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text())
    doc["metadata"]["name"] = "dup"
    tiny_spec(doc, [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm",
                     "parameters": {"sizes": [32], "iterations": 2}}])
    run_id = prepare(yaml.safe_dump(doc, sort_keys=False).encode(), home=tmp_path).run_id
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", [run_id])
    res = {"launcher": LauncherResource()}
    first = dg.materialize([pinned_spec], instance=inst, partition_key=run_id, resources=res,
                           tags={"benchrun/trigger": "canary"})
    assert first.success
    admitted = RunDir.for_run(run_id).read_status()
    assert admitted["dagster_run_id"] == first.run_id
    second = dg.materialize([pinned_spec], instance=inst, partition_key=run_id, resources=res,
                            tags={"benchrun/trigger": "spec-commit"}, raise_on_error=False)
    assert not second.success  # was: admitted again, the first attempt set aside
    status = RunDir.for_run(run_id).read_status()
    assert status["dagster_run_id"] == first.run_id and status["phase"] == admitted["phase"]
    assert not (RunDir.for_run(run_id).path / "attempts").exists()
    dup = inst.get_run_by_id(second.run_id)
    assert dup.tags[DUPLICATE_TAG] == first.run_id
    from benchrun.automation.settings import JOB_NAME

    as_job = SimpleNamespace(job_name=JOB_NAME, run_id=dup.run_id, tags=dict(dup.tags))  # as benchmark_run_job's
    why = record_orchestrator_failure(as_job, "Dagster run failed", tmp_path)
    assert why is not None and "second request" in why
    assert RunDir.for_run(run_id).read_status()["phase"] == admitted["phase"]
    # a re-execution, or a run made by hand, is no second request
    runs = [("a", 1.0, {"benchrun/trigger": "canary"}), ("b", 2.0, {"benchrun/trigger": "canary",
                                                                     "dagster/parent_run_id": "a"}),
            ("c", 3.0, {})]
    assert earlier_request(runs, "b") is None and earlier_request(runs, "c") is None
    assert earlier_request(runs + [("d", 4.0, {"benchrun/trigger": "spec-commit"})], "d") == "a"
