"""Steps re-executed from a failure where the home is not the one that ran them (found in review,
2026-12-07): they must work from the run as sealed, never from an older copy."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from benchrun import sharedstate
from benchrun.errors import BenchrunError
from benchrun.rundir import RunDir
from test_store_helpers import s3_env  # noqa: F401  (fixture)


def test_a_step_after_run_evidence_refuses_a_copy_older_than_the_seal(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefix held the run as after its last layer (run_evidence pushed nothing): a re-executed
    analysis step in a fresh pod analysed and curated that copy and run_status finished it Succeeded,
    unsealed and unsigned. Now such a copy is refused, naming the step to re-execute from."""
    from benchrun.lifecycle import pull_sealed_if_absent

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="bench-sealed")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-sealed/p")
    worker = RunDir(tmp_path / "worker", "run-a").create()
    worker.write_status({"run_id": "run-a", "phase": "Running", "conditions": []})
    (worker.path / "structured" / "run-a_gemm_r1.json").write_text("{}")
    sharedstate.push_run(worker.path, worker.home)  # after the last layer: no manifest.json yet
    with pytest.raises(BenchrunError, match="no sealed evidence .*re-execute it from run_evidence"):
        pull_sealed_if_absent(RunDir(tmp_path / "fresh", "run-a"))
    (worker.path / "manifest.json").write_text("{}")  # sealed, and pushed as run_evidence now does
    sharedstate.push_run(worker.path, worker.home)
    pull_sealed_if_absent(RunDir(tmp_path / "fresh2", "run-a"))
    assert (tmp_path / "fresh2" / "runs" / "run-a" / "manifest.json").is_file()


def test_a_home_that_read_only_the_status_pulls_the_run_before_it_runs_a_step(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A home marked as holding the run's files older than its status (it pulled the status alone) that
    then ran a step of the run itself kept every later push status-only: the new results never reached
    the prefix. A step's pull now refreshes such a home, which clears the mark."""
    from benchrun.lifecycle import pull_if_absent

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="bench-behind")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-behind/p")
    worker = RunDir(tmp_path / "worker", "run-a").create()
    worker.write_status({"run_id": "run-a", "phase": "Pending", "conditions": []})
    sharedstate.push_run(worker.path, worker.home)
    sensor = RunDir(tmp_path / "sensor", "run-a")
    sharedstate.pull_run("run-a", sensor.home)
    (worker.path / "structured" / "run-a_gemm_r1.json").write_text("measured")
    worker.set_phase("Running")
    sharedstate.push_run(worker.path, worker.home)
    sharedstate.pull_run("run-a", sensor.home, status_only=True)
    assert sharedstate.files_behind(sensor.home, "run-a")
    assert pull_if_absent(sensor) is True  # was: False (the run is here), and the mark stayed
    assert not sharedstate.files_behind(sensor.home, "run-a")
    assert (sensor.path / "structured" / "run-a_gemm_r1.json").read_text() == "measured"


def test_run_evidence_materialized_again_gets_its_new_seal_signed(bench_home, canary_doc, write_spec) -> None:
    """record_evidence sealing a second time kept the earlier seal's envelope: the new manifest hashed it
    and provenance_attestation (which re-signs only an intact run) refused the new seal every time."""
    from benchrun import submit as sub
    from benchrun.lifecycle import load_pinned, record_evidence
    from benchrun.provenance.signing import envelope_path, sign_run, verify_run

    prepared = sub.prepare(write_spec(canary_doc))
    rd = RunDir.for_run(prepared.run_id)
    record_evidence(rd, load_pinned(rd))
    sign_run(rd.path, rd.home)
    first = envelope_path(rd.path).read_bytes()
    record_evidence(rd, load_pinned(rd))  # materialized again
    assert not envelope_path(rd.path).exists()  # the earlier seal's signature is not the new seal's
    sign_run(rd.path, rd.home)
    assert envelope_path(rd.path).read_bytes() != first
    from benchrun.provenance.keys import local_key_paths

    verify_run(rd.path, local_key_paths(rd.home)[1], home=rd.home)  # the new seal, signed and whole


def test_no_gating_regression_alone_in_a_fresh_pod_reads_the_shared_run(tmp_path: Path, s3_env: str,  # noqa: F811
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: the check read status.json before it pulled the run, so in a fresh run-worker
    pod (an empty home; the shared state holds the run) a run whose named baseline is missing
    (RegressionDetected Unknown, BaselineMissing, no comparison file) passed: nothing judged was cleared."""
    import dagster as dg
    import numpy as np

    from bench_assets.partitions import benchmark_run_partitions
    from bench_assets.stats_assets import no_gating_regression
    from benchrun.stats.synthetic import lognormal_replicates, make_run

    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket="bench-check")
    monkeypatch.setenv(sharedstate.ENV, "s3://bench-check/p")
    run_id = "cand-20261202000000-abcdef12"
    metrics = {("gemm", "", "tflops"): (lognormal_replicates(np.random.default_rng(5), 100.0, 0.02, 5), "TFLOP/s",
                                        "higher")}
    first = make_run(tmp_path / "first-pod", run_id, metrics, status={"phase": "Analyzing"}, sealed=False)
    RunDir(tmp_path / "first-pod", run_id).set_condition(
        "RegressionDetected", "Unknown", "BaselineMissing", "run gone-20260101000000-abcdef12 not found")
    sharedstate.push_run(first, tmp_path / "first-pod")
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path / "fresh-pod"))

    @dg.asset(name="baseline_comparison", partitions_def=benchmark_run_partitions)
    def baseline_comparison() -> None:
        """Stands in for the comparison that ran in the first pod: only the check runs here."""

    with dg.instance_for_test() as inst:  # (an ephemeral one failed after another file's: a dangling instance weakref)
        inst.add_dynamic_partitions("benchmark_run", [run_id])
        res = dg.materialize([baseline_comparison, no_gating_regression], instance=inst, partition_key=run_id)
    [check] = res.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR  # was: passed (no run here)
    assert check.metadata["reason"].value == "BaselineMissing" and "gone-20260101000000-abcdef12" in check.description
