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


CLAIM_STALE_S = 600.0  # a claim no Dagster run followed in this long: its sensor never requested the run


def claim_request(run_id: str, sensor: str, *, instance: dg.DagsterInstance | None = None) -> str | None:
    """Claim the benchmark run ``run_id`` for ``sensor``'s request (``<home>/locks/requested/<run id>``,
    created once, whole, holding the sensor's name); None when the claim is this sensor's, else the
    sensor that holds it. The canary and spec-commit sensors see the same commit's canary spec as one
    run id, evaluated at once on sensor threads: each found no Dagster run yet, and the second request
    failed in pinned_spec (which still refuses it), a red run and a failed partition in the UI for a
    benchmark that succeeded (found in review). A tick of the same sensor that died after claiming
    claims again: its run key keeps Dagster from requesting twice. A claim older than
    :data:`CLAIM_STALE_S` that no Dagster run of ``run_id`` followed (its sensor stopped, its cursor
    reset) is taken over: the run would otherwise never be requested."""
    import time

    from benchrun.fsio import create_once
    from benchrun.paths import benchrun_home, validate_run_id

    folder = benchrun_home() / "locks" / "requested"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / validate_run_id(run_id)
    if create_once(path, lambda fh: fh.write(sensor.encode()), mode=0o644):
        return None
    try:
        holder = path.read_text(encoding="utf-8").strip()
        age = time.time() - path.stat().st_mtime
    except OSError:
        return "another trigger"
    if holder == sensor:
        return None
    if age > CLAIM_STALE_S and (instance is None or not has_runs(instance, run_id)):
        from benchrun.fsio import atomic_write_bytes

        atomic_write_bytes(path, sensor.encode())
        return None
    return holder or "another trigger"


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


def sensor_result(context: dg.SensorEvaluationContext, outcome: TickOutcome, sensor: str) -> dg.SensorResult:
    """Requests for the fresh submissions (each claimed for ``sensor``: :func:`claim_request`); a skip
    reason (with invalid specs' errors) when none."""
    log_outcome(context.log, outcome)
    fresh: list[Submission] = []
    for sub in outcome.submissions:
        if has_runs(context.instance, sub.run_id):
            note = f"{sub.path}: run {sub.run_id} already has a Dagster run"
        elif (holder := claim_request(sub.run_id, sensor, instance=context.instance)) is not None:
            note = f"{sub.path}: run {sub.run_id} is requested by {holder}"
        else:
            fresh.append(sub)
            continue
        outcome.notes.append(note)
        context.log.info(note)
    if not fresh:
        return dg.SensorResult(skip_reason=outcome.skip_reason(), cursor=outcome.cursor)
    return dg.SensorResult(
        run_requests=[run_request(s) for s in fresh],
        dynamic_partitions_requests=[benchmark_run_partitions.build_add_request([s.run_id for s in fresh])],
        cursor=outcome.cursor,
    )
