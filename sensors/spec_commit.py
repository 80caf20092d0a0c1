"""spec_commit_sensor: submits the BenchmarkRun specs each new commit on the watched branch changes."""

from __future__ import annotations

import dagster as dg

from benchrun.automation.settings import JOB_NAME, RepoWatch
from benchrun.automation.ticks import prepare_register, spec_commit_tick
from sensors._requests import default_status, sensor_result


@dg.sensor(
    name="spec_commit_sensor",
    job_name=JOB_NAME,
    minimum_interval_seconds=60,
    # Off until switched on: on the project's own checkout every edit of an example spec
    # would start a benchmark on the machine someone is working on.
    default_status=default_status("spec_commit_sensor", on=False),
    description="For each new commit on BENCHRUN_SPEC_BRANCH (default main) of BENCHRUN_SPEC_REPO "
    "(default this checkout), submits the specs under specs/ it added or changed.",
)
def spec_commit_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
    """Run key = commit sha + spec path + spec digest; cursor = the last processed commit."""
    outcome = spec_commit_tick(RepoWatch.from_env(), context.cursor, prepare_register(None))
    return sensor_result(context, outcome, "spec_commit_sensor")
