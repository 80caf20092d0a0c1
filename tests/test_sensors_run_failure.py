"""run_failure_sensor and run_canceled_sensor: a failed (cancelled) Dagster run marks status.json Failed (Canceled)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.test_utils import create_run_for_test

from bench_assets.partitions import benchmark_run_partitions
from benchrun.submit import prepare
from sensors.run_failure import judge_cancel, judge_failure, run_canceled_sensor, run_failure_sensor
from test_automation_fixtures import spec_bytes


@dg.asset(partitions_def=benchmark_run_partitions)
def crashing_layer() -> None:
    """Stands in for a layer whose orchestration breaks (the sensor only sees the run fail)."""
    raise RuntimeError("node lost during micro layer")


def failed_run(instance: dg.DagsterInstance, job_name: str, run_id: str):
    job = dg.Definitions(
        assets=[crashing_layer],
        jobs=[dg.define_asset_job(job_name, selection=[crashing_layer])],
    ).resolve_job_def(job_name)
    instance.add_dynamic_partitions("benchmark_run", [run_id])
    result = job.execute_in_process(instance=instance, partition_key=run_id, raise_on_error=False)
    assert not result.success
    return result.dagster_run, result.get_run_failure_event()


@pytest.fixture
def instance(bench_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def pending_run(bench_home: Path) -> str:
    now = dt.datetime(2026, 9, 21, 3, 15, tzinfo=dt.timezone.utc)
    return prepare(spec_bytes("nightly-a"), source="test", home=bench_home, now=now).run_id


def status(home: Path, run_id: str) -> dict:
    return json.loads((home / "runs" / run_id / "status.json").read_text())


def failure_context(instance, run, event):
    return dg.build_run_status_sensor_context(
        sensor_name="run_failure_sensor", dagster_instance=instance, dagster_run=run, dagster_event=event
    ).for_run_failure()


def test_failed_benchmark_run_is_marked_failed_with_the_reason(instance, pending_run, bench_home) -> None:
    run, event = failed_run(instance, "benchmark_run_job", pending_run)
    assert status(bench_home, pending_run)["phase"] == "Pending"
    assert run_failure_sensor(failure_context(instance, run, event)) is None
    st = status(bench_home, pending_run)
    assert st["phase"] == "Failed"
    failed = [c for c in st["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["status"] == "True"
    assert "Dagster run failed" in failed[0]["message"] and run.run_id in failed[0]["message"]
    assert "crashing_layer" in failed[0]["message"]  # the failure event names the failed step
    # a second evaluation leaves the final phase alone and says so
    again = judge_failure(failure_context(instance, run, event))
    assert "already in a final phase" in again
    assert run_failure_sensor(failure_context(instance, run, event)) is None  # a skip never ends Dagster's tick


def test_failures_of_other_jobs_are_left_alone(instance, pending_run, bench_home) -> None:
    run, event = failed_run(instance, "some_other_job", pending_run)
    skip = judge_failure(failure_context(instance, run, event))
    assert "not benchmark_run_job" in skip
    assert status(bench_home, pending_run)["phase"] == "Pending"


def _canceled_context(instance, pending_run):
    """A started benchmark_run_job run of the partition, canceled: the canceled sensor's context."""
    instance.add_dynamic_partitions("benchmark_run", [pending_run])
    run = create_run_for_test(instance, job_name="benchmark_run_job", tags={"dagster/partition": pending_run},
                              status=dg.DagsterRunStatus.STARTED)
    instance.report_run_canceled(run)
    event = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_CANCELED)[0].dagster_event
    return dg.build_run_status_sensor_context(
        sensor_name="run_canceled_sensor", dagster_instance=instance, dagster_run=instance.get_run_by_id(run.run_id),
        dagster_event=event)


def test_cancelled_benchmark_run_is_marked_canceled(instance, pending_run, bench_home) -> None:
    context = _canceled_context(instance, pending_run)
    assert run_canceled_sensor(context) is None
    st = status(bench_home, pending_run)
    assert st["phase"] == "Canceled" and st["outcome"] == "canceled"
    assert any("cancelled" in c["message"] for c in st["conditions"] if c["type"] == "Canceled")


def test_run_without_a_run_directory_is_skipped_with_a_reason(instance, bench_home) -> None:
    run, event = failed_run(instance, "benchmark_run_job", "ghost-20260921031500-deadbeef")
    skip = judge_failure(failure_context(instance, run, event))
    assert "no run directory" in skip


def test_failure_sensors_are_on_by_default_and_the_commit_sensors_off() -> None:
    from sensors.canary import canary_sensor
    from sensors.spec_commit import spec_commit_sensor

    assert run_failure_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert run_canceled_sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert spec_commit_sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert canary_sensor.default_status == dg.DefaultSensorStatus.STOPPED


def test_a_late_failure_of_an_earlier_attempt_leaves_the_retry_running(instance, pending_run, bench_home) -> None:
    """Attempt 1 failed; before the sensor saw it, the run was re-executed and the retry admitted
    (status.json names the retry's Dagster run). Attempt 1's failure no longer marks the running
    retry Failed (was: Failed by partition tag)."""
    from benchrun.rundir import RunDir

    old_run, event = failed_run(instance, "benchmark_run_job", pending_run)
    rd = RunDir.for_run(pending_run)
    rd.update_status(dagster_run_id="retry-dagster-run-id")
    rd.set_phase("Running")
    skip = judge_failure(failure_context(instance, old_run, event))
    assert "not run" in skip and "current attempt" in skip
    assert old_run.run_id in skip and "retry-dagster-run-id" in skip
    assert status(bench_home, pending_run)["phase"] == "Running"
    # the current attempt's failure still marks it Failed
    rd.update_status(dagster_run_id=old_run.run_id)
    assert run_failure_sensor(failure_context(instance, old_run, event)) is None
    assert status(bench_home, pending_run)["phase"] == "Failed"


def test_a_late_cancel_of_an_earlier_attempt_leaves_the_retry_running(instance, pending_run, bench_home) -> None:
    from benchrun.rundir import RunDir

    context = _canceled_context(instance, pending_run)
    RunDir.for_run(pending_run).update_status(dagster_run_id="retry-dagster-run-id")
    RunDir.for_run(pending_run).set_phase("Running")
    skip = judge_cancel(context)
    assert "cancel ignored" in skip
    assert status(bench_home, pending_run)["phase"] == "Running"


def test_a_failure_is_recorded_even_when_reaping_first_fails(instance, pending_run, bench_home, monkeypatch) -> None:
    """Review: reaping raised (a shared-state error), the sensor raised, and Dagster moved its cursor past
    the failure event all the same: the run's failure reason was lost for good."""
    from benchrun import liveness

    def broken(*_a, **_k):
        raise OSError("shared state unreachable")

    monkeypatch.setattr(liveness, "reap_dead_runs", broken)
    run, event = failed_run(instance, "benchmark_run_job", pending_run)
    assert run_failure_sensor(failure_context(instance, run, event)) is None
    assert status(bench_home, pending_run)["phase"] == "Failed"


def test_a_reexecution_from_failure_is_the_current_attempt(instance, pending_run, bench_home) -> None:
    """Dagster review: "re-execute from failure" (run B, parent A) never runs pinned_spec, so status.json kept
    naming A: B's failure was ignored as "not the current attempt", its phase stayed Failed while it ran,
    and with no liveness claim a killed B held the one-at-a-time queue for good."""
    from benchrun.lifecycle import resume_attempt
    from benchrun.liveness import liveness_path, stop_heartbeat
    from benchrun.rundir import RunDir

    rd = RunDir.for_run(pending_run)
    rd.update_status(dagster_run_id="attempt-a")
    rd.set_phase("Failed", message="Dagster run failed: node lost")
    rd.set_condition("Failed", True, "OrchestratorFailed", "node lost")
    # B's first step makes it the current attempt
    assert resume_attempt(rd, "attempt-b") and not resume_attempt(rd, "attempt-b")
    try:
        st = status(bench_home, pending_run)
        assert st["phase"] == "Running" and st["dagster_run_id"] == "attempt-b" and not st.get("message")
        assert not [c for c in st["conditions"] if c["type"] == "Failed"]
        assert [c["reason"] for c in st["conditions"] if c["type"] == "Resumed"] == ["ReExecuted"]
        assert liveness_path(bench_home, pending_run).is_file()  # claimed: the reaper finds a killed B
    finally:
        stop_heartbeat(bench_home, pending_run)
    # B failed before its first step: status.json still names A, and B (parent A) is A's continuation
    rd.update_status(dagster_run_id=None)
    run, event = failed_run(instance, "benchmark_run_job", pending_run)
    rd.update_status(dagster_run_id="attempt-a")
    rd.set_phase("Running")
    b = run.with_tags({**run.tags, "dagster/parent_run_id": "attempt-a", "dagster/root_run_id": "attempt-a"})
    assert judge_failure(failure_context(instance, b, event)) is None
    assert status(bench_home, pending_run)["phase"] == "Failed"
