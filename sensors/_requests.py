"""Glue the sensors share: default statuses, and a tick outcome as one SensorResult (partitions + runs)."""

from __future__ import annotations

import logging
from typing import Any

import dagster as dg

from bench_assets.partitions import benchmark_run_partitions
from benchrun.automation.settings import JOB_NAME, starts_on
from benchrun.automation.ticks import Submission, TickOutcome


def default_status(name: str, *, on: bool) -> dg.DefaultSensorStatus:
    """The sensor's built-in default status unless BENCHRUN_AUTOMATION_ON/OFF names it."""
    return dg.DefaultSensorStatus.RUNNING if starts_on(name, on) else dg.DefaultSensorStatus.STOPPED


def has_runs(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Whether some trigger already launched a Dagster run for this benchmark partition."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=JOB_NAME, tags={"dagster/partition": run_id}), limit=1
    )
    return bool(records)


def run_request(sub: Submission) -> dg.RunRequest:
    """The run request for one submission: its partition is the run id."""
    return dg.RunRequest(run_key=sub.run_key, partition_key=sub.run_id, tags=sub.tags())


def log_outcome(log: logging.Logger | Any, outcome: TickOutcome) -> None:
    """Write the tick's decisions to the tick log (``context.log``): specs that could not be
    registered as errors, invalid specs as warnings."""
    for text in outcome.failed:
        log.error(f"not submitted: {text}")
    for bad in outcome.invalid:
        log.warning(f"invalid spec skipped (never run): {bad.describe()}")
    for note in outcome.notes:
        log.info(note)
    for sub in outcome.submissions:
        log.info(f"submitting {sub.path} as run {sub.run_id} (run key {sub.run_key})")


def sensor_result(context: dg.SensorEvaluationContext, outcome: TickOutcome) -> dg.SensorResult:
    """Requests for the fresh submissions; a skip reason (with invalid specs' errors) when none."""
    log_outcome(context.log, outcome)
    fresh: list[Submission] = []
    for sub in outcome.submissions:
        if has_runs(context.instance, sub.run_id):
            outcome.notes.append(f"{sub.path}: run {sub.run_id} already has a Dagster run")
        else:
            fresh.append(sub)
    if not fresh:
        return dg.SensorResult(skip_reason=outcome.skip_reason(), cursor=outcome.cursor)
    return dg.SensorResult(
        run_requests=[run_request(s) for s in fresh],
        dynamic_partitions_requests=[benchmark_run_partitions.build_add_request([s.run_id for s in fresh])],
        cursor=outcome.cursor,
    )
