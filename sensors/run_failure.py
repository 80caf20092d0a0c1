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
def run_failure_sensor(context: dg.RunFailureSensorContext) -> None:
    """Mark the partition's run Failed with the failure event's message (:func:`judge_failure`).

    Always None: Dagster ends a run-status sensor's tick at the first run whose evaluation returns
    something (a SkipReason too), so a skipped run (another job's, one already final) held back the
    next run's failure by a tick each; what it skipped and why goes to the tick's log instead."""
    _log_skip(context, judge_failure(context))


def judge_failure(context: dg.RunFailureSensorContext) -> str | None:
    """Mark the failed run's benchmark run Failed; why it was left alone, or None.

    A run whose process was killed is failed by Dagster with a generic message; reaping first
    records why (the process is gone, which pid on which host) and ends its orphaned suites. A
    reaping that fails is logged, and the failure is recorded all the same: Dagster moves its cursor
    past this event whatever the evaluation does, so it is the one chance to record its reason.
    """
    from benchrun.liveness import reap_dead_runs

    try:
        reap_dead_runs(None, context.instance)
    except Exception as exc:  # noqa: BLE001 - the failure below is recorded whatever reaping met
        context.log.error(f"reaping dead runs failed ({type(exc).__name__}: {exc}); recording this failure anyway")
    message = context.failure_event.message or "the Dagster run failed"
    return record_orchestrator_failure(context.dagster_run, f"Dagster run failed: {message}")


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.CANCELED,
    name="run_canceled_sensor",
    minimum_interval_seconds=30,
    default_status=default_status("run_canceled_sensor", on=True),
    description="When a benchmark_run_job run is cancelled, its run's status.json gets phase Canceled.",
)
def run_canceled_sensor(context: dg.RunStatusSensorContext) -> None:
    """Mark the partition's run Canceled because its Dagster run was cancelled (:func:`judge_cancel`;
    None always, as :func:`run_failure_sensor`)."""
    _log_skip(context, judge_cancel(context))


def judge_cancel(context: dg.RunStatusSensorContext) -> str | None:
    """Mark the canceled run's benchmark run Canceled; why it was left alone, or None."""
    return record_orchestrator_failure(context.dagster_run, "Dagster run was cancelled", canceled=True)


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


def _log_skip(context: dg.RunStatusSensorContext, skip: str | None) -> None:
    if skip:
        context.log.info(f"run {context.dagster_run.run_id} left alone: {skip}")
