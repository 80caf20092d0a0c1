"""run_failure_sensor, run_canceled_sensor and run_liveness_sensor: a failed, cancelled or dead run is marked Failed."""

from __future__ import annotations

import dagster as dg

from benchrun.automation.failures import record_orchestrator_failure
from sensors._requests import default_status


@dg.run_failure_sensor(
    name="run_failure_sensor",
    minimum_interval_seconds=30,
    # On by default: it only writes status.json, and without it a crashed run looks Running.
    default_status=default_status("run_failure_sensor", on=True),
    description="When a benchmark_run_job run fails, its run's status.json gets phase Failed with the reason.",
)
def run_failure_sensor(context: dg.RunFailureSensorContext) -> dg.SkipReason | None:
    """Mark the partition's run Failed with the failure event's message.

    A run whose process was killed is failed by Dagster with a generic message; reaping first
    records why (the process is gone, which pid on which host) and ends its orphaned suites.
    """
    from benchrun.liveness import reap_dead_runs

    reap_dead_runs(None, context.instance)
    message = context.failure_event.message or "the Dagster run failed"
    return _as_skip(record_orchestrator_failure(context.dagster_run, f"Dagster run failed: {message}"))


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.CANCELED,
    name="run_canceled_sensor",
    minimum_interval_seconds=30,
    default_status=default_status("run_canceled_sensor", on=True),
    description="When a benchmark_run_job run is cancelled, its run's status.json gets phase Canceled.",
)
def run_canceled_sensor(context: dg.RunStatusSensorContext) -> dg.SkipReason | None:
    """Mark the partition's run Canceled because its Dagster run was cancelled."""
    return _as_skip(record_orchestrator_failure(context.dagster_run, "Dagster run was cancelled", canceled=True))


@dg.sensor(
    name="run_liveness_sensor",
    minimum_interval_seconds=60,
    default_status=default_status("run_liveness_sensor", on=True),
    description="A benchmark run whose process died (kill -9, OOM, a lost node) is marked Failed with the "
                "reason, and its Dagster run failed so it no longer holds the one-at-a-time queue.",
)
def run_liveness_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Fail the runs whose executor is gone (benchrun.liveness), and the submitted runs that
    nothing started before their deadline (benchrun.runctl.expire_pending)."""
    from benchrun.liveness import reap_dead_runs
    from benchrun.runctl import expire_pending

    reaped = reap_dead_runs(None, context.instance) + expire_pending(None, context.instance)
    for run_id, reason in reaped:
        context.log.warning("marked %s Failed: %s", run_id, reason)
    return dg.SkipReason(f"{len(reaped)} dead run(s) marked Failed" if reaped else "every running run is alive")


def _as_skip(skip: str | None) -> dg.SkipReason | None:
    return dg.SkipReason(skip) if skip else None
