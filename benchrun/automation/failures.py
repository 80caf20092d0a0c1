"""Record a failed or cancelled orchestrator run in the benchmark run's status.json."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from benchrun.automation.settings import JOB_NAME
from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

PARTITION_TAG = "dagster/partition"
PARENT_TAG, ROOT_TAG = "dagster/parent_run_id", "dagster/root_run_id"  # a re-execution's (Dagster's tags)
TRIGGER_TAG = "benchrun/trigger"  # what requested the Dagster run (a sensor or schedule; Submission.tags)
# Set on a Dagster run that pinned_spec found to be a second request for a benchmark run another trigger
# already requested (the canary and spec-commit sensors on one commit): it ran nothing, and its failure
# is not the run's
DUPLICATE_TAG = "benchrun/duplicate_of"


def earlier_request(runs: list[tuple[str, float, dict[str, str]]], run_id: str) -> str | None:
    """The Dagster run that requested the same benchmark run before ``run_id`` did, when ``run_id`` is a
    trigger's request (not a re-execution, not one made by hand); ``runs`` are (Dagster run id, created
    epoch, tags) of the partition's runs. None when ``run_id`` is the first or not a trigger's."""
    mine = next((r for r in runs if r[0] == run_id), None)
    if mine is None or TRIGGER_TAG not in mine[2] or PARENT_TAG in mine[2]:
        return None
    earlier = sorted((created, rid) for rid, created, tags in runs
                     if rid != run_id and TRIGGER_TAG in tags and PARENT_TAG not in tags and created < mine[1])
    return earlier[0][1] if earlier else None


def record_orchestrator_failure(dagster_run: Any, reason: str, home: Path | None = None, *,
                                canceled: bool = False) -> str | None:
    """Set the partition's run to phase Failed (``canceled``: Canceled) with ``reason``; return
    why not, or None when done.

    ``dagster_run`` is a DagsterRun (duck-typed: ``job_name``, ``run_id``, ``tags``).
    """
    from benchrun.paths import benchrun_home
    from benchrun.runend import cancel_run, fail_run

    mark = cancel_run if canceled else fail_run
    phase = "Canceled" if canceled else "Failed"

    if dagster_run.job_name != JOB_NAME:
        return f"run {dagster_run.run_id} is of job {dagster_run.job_name}, not {JOB_NAME}"
    run_id = dagster_run.tags.get(PARTITION_TAG)
    if not run_id:
        return f"run {dagster_run.run_id} has no partition: no benchmark run to mark"
    if dagster_run.tags.get(DUPLICATE_TAG):
        return (f"run {dagster_run.run_id} was a second request for run {run_id} (Dagster run "
                f"{dagster_run.tags[DUPLICATE_TAG]} requested it first) and ran nothing; the run left as it is")
    full = f"{reason} (Dagster run {dagster_run.run_id})"
    try:
        from benchrun.paths import validate_run_id
        from benchrun.sharedstate import pull_run

        # this home's copy may be stale (the run's worker pod wrote since): which attempt is current,
        # and whether the run already ended, are read from the shared status (no-op without one)
        pull_run(validate_run_id(run_id), benchrun_home(home), status_only=True)
        current = _current_attempt(benchrun_home(home), run_id)
        # a re-execution of the current attempt that failed before its first step made itself current
        # (lifecycle.resume_attempt) is that attempt's continuation: its failure is the run's
        lineage = {dagster_run.run_id, dagster_run.tags.get(PARENT_TAG), dagster_run.tags.get(ROOT_TAG)}
        if current and current not in lineage:
            # a late event of an earlier attempt: the partition's run was started again since
            why = (f"Dagster run {dagster_run.run_id} is not run {run_id}'s current attempt (Dagster run "
                   f"{current}); its {'cancel' if canceled else 'failure'} ignored, the run left as it is")
            log.info(why)
            return why
        changed = mark(benchrun_home(home), run_id, full)
    except BenchrunError as exc:
        log.warning("cannot mark %s %s: %s", run_id, phase, exc)
        return f"cannot mark {run_id} {phase}: {exc}"
    if not changed:
        return f"run {run_id} has no run directory or is already in a final phase; left as it is"
    log.info("marked %s %s: %s", run_id, phase, full)
    return None


def _current_attempt(home: Path, run_id: str) -> str | None:
    """The Dagster run that admitted the run last (status.json's ``dagster_run_id``), or None
    (not admitted yet, or no run directory: ``mark`` says so)."""
    from benchrun.rundir import RunDir

    rd = RunDir.for_run(run_id, home)
    if not rd.exists():
        return None
    return rd.read_status().get("dagster_run_id") or None
