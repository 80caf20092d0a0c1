"""Record a failed or cancelled orchestrator run in the benchmark run's status.json."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from benchrun.automation.settings import JOB_NAME
from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

PARTITION_TAG = "dagster/partition"


def record_orchestrator_failure(dagster_run: Any, reason: str, home: Path | None = None, *,
                                canceled: bool = False) -> str | None:
    """Set the partition's run to phase Failed (``canceled``: Canceled) with ``reason``; return
    why not, or None when done.

    ``dagster_run`` is a DagsterRun (duck-typed: ``job_name``, ``run_id``, ``tags``).
    """
    from benchrun.paths import benchrun_home
    from benchrun.rundir import mark_run_canceled, mark_run_failed

    mark = mark_run_canceled if canceled else mark_run_failed
    phase = "Canceled" if canceled else "Failed"

    if dagster_run.job_name != JOB_NAME:
        return f"run {dagster_run.run_id} is of job {dagster_run.job_name}, not {JOB_NAME}"
    run_id = dagster_run.tags.get(PARTITION_TAG)
    if not run_id:
        return f"run {dagster_run.run_id} has no partition: no benchmark run to mark"
    full = f"{reason} (Dagster run {dagster_run.run_id})"
    try:
        changed = mark(benchrun_home(home), run_id, full)
    except BenchrunError as exc:
        log.warning("cannot mark %s %s: %s", run_id, phase, exc)
        return f"cannot mark {run_id} {phase}: {exc}"
    if not changed:
        return f"run {run_id} has no run directory or is already in a final phase; left as it is"
    log.info("marked %s %s: %s", run_id, phase, full)
    return None
