"""nightly_schedule and pre_release_schedule: each tick submits that cadence's specs under specs/.

Written by hand because Dagster's partitioned-schedule helper rejects dynamic partitions.
A schedule cannot return partition requests, so each tick registers the partitions itself
through ``benchrun.submit.submit`` (the CLI's path) and returns one run request per spec.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from benchrun.automation.discovery import default_specs_dir
from benchrun.automation.failures import PARTITION_TAG, TRIGGER_TAG
from benchrun.automation.settings import (
    DEFAULT_NIGHTLY_CRON,
    DEFAULT_PRE_RELEASE_CRON,
    ENV_NIGHTLY_CRON,
    ENV_PRE_RELEASE_CRON,
    JOB_NAME,
    cron_from_env,
    starts_on,
)
from benchrun.automation.ticks import cadence_tick, submit_register, utc
from benchrun.errors import BenchrunError
from sensors._requests import log_outcome, run_request


def _status(name: str, *, on: bool) -> dg.DefaultScheduleStatus:
    running = starts_on(name, on)
    return dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED


RUN_KEY_TAG = "dagster/run_key"  # the tag Dagster's scheduler gives a run created from a keyed request
# Waiting, not in progress: a run in progress does not stop the next from queueing behind it.
WAITING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]


def _waiting_run(instance: dg.DagsterInstance, cadence: str, now: dt.datetime) -> str | None:
    """A ``benchmark_run_job`` run an earlier tick of ``cadence`` requested that has not started yet,
    described for the skip reason; None when there is none.

    Found in review: nothing checked this, so a stuck queue (or a nightly longer than a day) got a
    whole batch more every tick. A run of this very tick (its run key ends with the tick time) does
    not count: a retried tick must still request the runs its first try did not create.
    """
    this_tick = f":{utc(now):%Y%m%dT%H%M%SZ}"
    records = instance.get_run_records(
        filters=dg.RunsFilter(job_name=JOB_NAME, tags={TRIGGER_TAG: cadence}, statuses=WAITING))
    for record in records:
        run = record.dagster_run
        if not run.tags.get(RUN_KEY_TAG, "").endswith(this_tick):
            return (f"{cadence} run {run.tags.get(PARTITION_TAG, '?')} (Dagster run {run.run_id}) is still "
                    f"{run.status.value}: the {cadence} specs are not submitted again until it starts")
    return None


def _tick(context: dg.ScheduleEvaluationContext, cadence: str) -> list[dg.RunRequest] | dg.SkipReason:
    now = context.scheduled_execution_time or dt.datetime.now(dt.timezone.utc)
    waiting = _waiting_run(context.instance, cadence, now)
    if waiting:  # before submitting: a skipped tick leaves no Pending run directory behind
        context.log.info(waiting)
        return dg.SkipReason(waiting)
    outcome = cadence_tick(cadence, default_specs_dir(), now, submit_register(None, context.instance))
    log_outcome(context.log, outcome)
    if not outcome.submissions and outcome.failed:
        # Not a skip: valid specs did not run because the shared state or the disk failed.
        # The tick fails where it is seen; `benchrun cadence run` submits them once that is fixed.
        raise BenchrunError(f"{cadence} tick: {outcome.skip_reason()}; fix that, then run "
                            f"`benchrun cadence run {cadence}` to submit them now")
    if not outcome.submissions:
        return dg.SkipReason(outcome.skip_reason())
    if outcome.failed:
        # Some registered, some not: the registered ones are launched (a schedule's tick cannot both launch
        # and fail), and the tick's log says how to submit the others alone: `benchrun cadence run` mints
        # new run ids from the time it runs, so it would run the launched specs a second time.
        context.log.error(f"{cadence} tick: {len(outcome.failed)} spec(s) not submitted (above); once fixed, submit "
                          "each alone: `benchrun submit PATH` and materialize its partition, or `benchrun run PATH` "
                          f"here (not `benchrun cadence run {cadence}`: it would run the {len(outcome.submissions)} "
                          "launched now a second time)")
    return [run_request(s) for s in outcome.submissions]


@dg.schedule(
    name="nightly_schedule",
    cron_schedule=cron_from_env(ENV_NIGHTLY_CRON, DEFAULT_NIGHTLY_CRON),
    execution_timezone="UTC",
    job_name=JOB_NAME,
    # Off by default: specs/examples/ holds cluster-class specs (B200, H100) with
    # automation.ci.nightly true, which a workstation running `make ui` cannot honour.
    # Switch it on where benchmarks belong (UI toggle or BENCHRUN_AUTOMATION_ON).
    default_status=_status("nightly_schedule", on=False),
    description="Nightly (default 03:15 UTC, BENCHRUN_NIGHTLY_CRON; off by default): specs with intent.cadence "
    "nightly and automation.ci.nightly true.",
)
def nightly_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
    """Run key = nightly + spec digest + tick time."""
    return _tick(context, "nightly")


@dg.schedule(
    name="pre_release_schedule",
    cron_schedule=cron_from_env(ENV_PRE_RELEASE_CRON, DEFAULT_PRE_RELEASE_CRON),
    execution_timezone="UTC",
    job_name=JOB_NAME,
    # Off by default: publication-grade end-to-end runs are long and need dedicated nodes;
    # switch it on where a release pipeline owns the machines.
    default_status=_status("pre_release_schedule", on=False),
    description="Pre-release (BENCHRUN_PRE_RELEASE_CRON, default Saturdays 04:30 UTC; off by "
    "default): specs with intent.cadence pre_release and automation.ci.preRelease true.",
)
def pre_release_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
    """Run key = pre_release + spec digest + tick time."""
    return _tick(context, "pre_release")
