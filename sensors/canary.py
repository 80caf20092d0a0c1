"""canary_sensor: after each new commit on the watched branch, the canary specs run once."""

from __future__ import annotations

import dagster as dg

from benchrun.automation.settings import JOB_NAME, RepoWatch
from benchrun.automation.ticks import canary_tick, prepare_register
from sensors._requests import default_status, sensor_result


@dg.sensor(
    name="canary_sensor",
    job_name=JOB_NAME,
    minimum_interval_seconds=60,
    # Off until switched on: a canary per merge belongs on a benchmark machine, not on a
    # laptop where `make ui` was started to look at results.
    default_status=default_status("canary_sensor", on=False),
    description="For each new commit on BENCHRUN_SPEC_BRANCH, submits the specs with "
    "intent.cadence canary and automation.ci.canary true, as committed in it.",
)
def canary_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    """Run key = canary + commit sha + spec path + spec digest; cursor = the last processed commit."""
    outcome = canary_tick(RepoWatch.from_env(), context.cursor, prepare_register(None))
    return sensor_result(context, outcome, "canary_sensor")
